"""What a user at a small terminal (80x24, over SSH) must still be able to read and do.

Found by driving the real TUI in tmux: at 80 columns the footer cut off ``? Help`` and ``q Quit``
(the app's keys came last), and the alert detail cut each cause and fix at the screen edge, so the
fix itself was unreadable. Each test builds the app through the same factory as the CLI.
"""

from __future__ import annotations

import re

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from trainwatch.rules.engine.alert import Alert, Cause
from trainwatch.tui.alert_detail import AlertDetailScreen
from trainwatch.tui.app import AppConfig, make_app
from trainwatch.tui.chart_screen import ChartScreen
from trainwatch.tui.help_screen import HelpScreen
from trainwatch.tui.metrics_table import MetricsTable
from trainwatch.tui.new_run_screen import NewRunScreen
from trainwatch.tui.once import screen_text
from trainwatch.tui.run_model import AlertEntry
from trainwatch.tui.testing import FakeEngine, wait_for, write_run

SMALL = (80, 24)

LONG_FIX = ("Log the sample ids of the batch at step 200 and inspect them for corrupt or "
            "mislabelled examples before changing any hyperparameter")
LONG_CAUSE = "the learning rate is too high for this batch size and the warmup is too short"


def _app(tmp_path):
    write_run(tmp_path / "run", range(1, 30))
    return make_app(AppConfig(path=tmp_path / "run", engine_factory=FakeEngine, bell=False,
                              notify=False))


def _words(text: str) -> list[str]:
    """The words of ``text``, box borders dropped, so a sentence wrapped over lines reads whole."""
    return re.findall(r"\S+", text.replace("│", " "))


def _shown_footer_actions(app) -> list[str]:
    """The actions of the footer keys that fit on screen, left to right."""
    footer = app.screen.query_one(Footer)
    keys = [k for k in footer.query(FooterKey).results(FooterKey)
            if not k.has_class("-command-palette")]
    right_edge = footer.region.right - 14  # the "^p palette" key docked on the right
    return [k.action for k in sorted(keys, key=lambda k: k.region.x)
            if k.region.width and k.region.right <= right_edge]


async def test_footer_keeps_help_and_quit_at_80_columns(tmp_path):
    app = _app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        await wait_for(pilot, lambda: "help" in _shown_footer_actions(app), what="footer")
        shown = _shown_footer_actions(app)
        assert "help" in shown and "quit" in shown, shown
        app.screen.query_one(MetricsTable).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ChartScreen), what="chart screen")
        await wait_for(pilot, lambda: "help" in _shown_footer_actions(app), what="chart footer")
        shown = _shown_footer_actions(app)
        assert "help" in shown and "quit" in shown, shown


async def test_alert_detail_wraps_causes_and_fixes_at_80_columns(tmp_path):
    app = _app(tmp_path)
    alert = Alert("loss_spike", "error", 200, 0.0, "loss",
                  "The loss spiked to 40 at step 200 (29x the median 1.4 of the last 128 points)",
                  evidence={"value": 40.0}, causes=(Cause(LONG_CAUSE, 0.4),), fixes=(LONG_FIX,))
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        app.push_screen(AlertDetailScreen(AlertEntry(alert, "run", 1, True)))
        await wait_for(pilot, lambda: isinstance(app.screen, AlertDetailScreen))
        await pilot.pause(0.05)
        shown = _words(screen_text(app))
        text = " ".join(shown)
        assert "…" not in text, text
        for sentence in (LONG_FIX, LONG_CAUSE, alert.message):
            assert " ".join(_words(sentence)) in text, sentence


async def test_question_mark_opens_help_from_the_new_run_dialog(tmp_path):
    app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, NewRunScreen), what="new run")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, NewRunScreen), what="back")


async def test_question_mark_opens_help_from_the_alert_detail(tmp_path):
    # a dialog hides the app's bindings (Textual stops the chain at a modal screen)
    app = _app(tmp_path)
    alert = Alert("nan_inf", "error", 3, 0.0, "loss", "loss is nan", fixes=("lower the lr",))
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        app.push_screen(AlertDetailScreen(AlertEntry(alert, "run", 1, True)))
        await wait_for(pilot, lambda: isinstance(app.screen, AlertDetailScreen))
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, AlertDetailScreen), what="back")


def test_y_axis_labels_never_repeat_on_a_narrow_range():
    # tokens/s between 12.3k and 12.7k: ticks every 50 read "12.6k" twice at 3 digits
    import numpy as np

    from trainwatch.humanize import fmt_num
    from trainwatch.tui.chart_render import ChartSpec, Trace, as_text, render

    xs = np.arange(400, dtype=float)
    for lo, hi in ((12_300.0, 12_700.0), (0.1001, 0.1009), (1.0e6, 1.004e6)):
        spec = ChartSpec((Trace(xs, np.linspace(lo, hi, 400), "t"),), fmt_y=fmt_num)
        labels = [r.split("┤")[0].strip() for r in as_text(render(spec, 50, 20)) if "┤" in r]
        assert len(labels) >= 3, labels
        assert len(set(labels)) == len(labels), labels


async def test_console_follows_the_tail_when_it_first_overflows(tmp_path):
    # console.log appears after the app started, fits the pane, then grows past it: the newest
    # lines must be in view (they were not: the scroll was refused while no scrollbar existed)
    from trainwatch.tui.console_pane import ConsolePane

    app = _app(tmp_path)
    console = tmp_path / "run" / "console.log"
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        console.write_text("".join(f"line {i}\n" for i in range(1, 4)))
        pane = app.screen.query_one(ConsolePane)
        await wait_for(pilot, lambda: len(pane.lines) == 3, what="first lines")
        await pilot.pause(0.1)
        with console.open("a") as f:
            f.write("".join(f"line {i}\n" for i in range(4, 13)))
        await wait_for(pilot, lambda: len(pane.lines) == 12, what="more lines")
        await wait_for(pilot, lambda: "line 12" in screen_text(app), what="newest line shown")
        # and the scrollbar's thumb says so too (it is not told about a forced scroll)
        await wait_for(pilot, lambda: pane.vertical_scrollbar.position == pane.scroll_y > 0,
                       what="scrollbar at the end")


def test_a_run_not_yet_read_is_loading_not_waiting_for_its_file(tmp_path):
    # the runs list showed every run "waiting for file" while their files were being read
    from trainwatch.tui.run_model import RunModel
    from trainwatch.tui.run_state import run_state
    from trainwatch.tui.target import RunSpec

    metrics = write_run(tmp_path / "run", range(1, 5))
    model = RunModel(RunSpec("run", tmp_path / "run", (metrics,), None))
    assert run_state(model, now=0.0) == "loading"
    model.finish_loading()
    assert run_state(model, now=0.0) == "waiting for file"  # loaded and still nothing: waiting


async def test_mute_with_no_alert_says_why_nothing_happened(tmp_path):
    # "m Mute" is in the footer: with no alert to mute it did nothing at all
    app = _app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        await pilot.press("m")
        await wait_for(pilot, lambda: any("alert" in n.message for n in app._notifications),
                       what="a one-line answer")
        assert not app.muted


def test_alert_evidence_mappings_read_as_key_value_pairs():
    # nan_inf's evidence {"nonfinite": {"loss": "NaN"}} was shown as a Python dict repr
    from rich.console import Console

    from trainwatch.tui.alert_detail import detail_renderable

    alert = Alert("nan_inf", "error", 3, 0.0, "loss", "loss is nan",
                  evidence={"nonfinite": {"loss": "NaN", "[b]x[/b]": "inf"}, "ratio": 1234567.0})
    console = Console(width=100, record=True, color_system=None)
    console.print(detail_renderable(AlertEntry(alert, "run", 1, True)))
    text = console.export_text()
    assert "loss=NaN" in text and "[b]x[/b]=inf" in text, text
    assert "{'" not in text and "1.235M" in text, text


async def test_keys_typed_after_quit_open_nothing(tmp_path):
    # "q n" typed fast in a real terminal: n pushed the new-run dialog into an app that was
    # shutting down, which crashed with a traceback (NoMatches '#new-run') and exit code 1
    app = _app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        app.exit()
        for action in ("new_run", "runs", "help"):
            await app.run_action(action)
        assert len(app.screen_stack) == 1, app.screen_stack
    assert app.return_code == 0


async def test_malformed_line_notice_names_the_file_and_line(tmp_path):
    # the header said only "1 malformed line skipped": which file, which line, what to do?
    from trainwatch.tui.header import HeaderBar  # noqa: F401  (the header is what is read)

    path = write_run(tmp_path / "run", range(1, 5))
    with path.open("a") as f:
        f.write("not json at all\n")
    app = make_app(AppConfig(path=tmp_path / "run", engine_factory=FakeEngine, bell=False,
                             notify=False))
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        await wait_for(pilot, lambda: "malformed" in screen_text(app), what="notice")
        line = next(ln for ln in screen_text(app).splitlines() if "malformed" in ln)
        assert "metrics.jsonl line 6" in line and "trainwatch inspect" in line, line
