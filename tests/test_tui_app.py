"""The live TUI driven by Pilot, built through the same factory as the CLI (``make_app``).

Each test writes real files, appends to them while the app runs, and waits on widget state with a
deadline (never a fixed sleep). File events are on (inotify where available) with the 2 s backstop.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.content import Content

from trainwatch.tui.alert_detail import AlertDetailScreen
from trainwatch.tui.alerts_pane import AlertsPane
from trainwatch.tui.app import AppConfig, TrainwatchApp, make_app
from trainwatch.tui.chart import ChartPanel
from trainwatch.tui.chart_render import ChartSpec
from trainwatch.tui.chart_screen import ChartScreen
from trainwatch.tui.console_pane import ConsolePane
from trainwatch.tui.header import HeaderBar
from trainwatch.tui.help_screen import HelpScreen
from trainwatch.tui.metrics_table import MetricsTable
from trainwatch.tui.once import render_once, screen_text
from trainwatch.tui.runs_screen import RunsScreen
from trainwatch.tui.testing import (
    FakeEngine,
    append,
    lines,
    record,
    train_record,
    wait_for,
    write_run,
)

SIZE = (120, 40)


def app_for(path: Path, **kw) -> tuple[TrainwatchApp, list[FakeEngine]]:
    engines: list[FakeEngine] = []

    def factory() -> FakeEngine:
        engines.append(FakeEngine())
        return engines[-1]

    return make_app(AppConfig(path=path, engine_factory=factory, **kw)), engines


def charts(app: TrainwatchApp) -> list[ChartPanel]:
    return list(app.screen.query(ChartPanel).results(ChartPanel))


def chart_for(app: TrainwatchApp, key: str) -> ChartPanel:
    return next(c for c in charts(app) if c.key == key)


async def drawn(pilot, app: TrainwatchApp, key: str, cond: Callable[[ChartSpec], object],
                what: str, timeout: float = 5.0) -> ChartSpec:
    """The spec chart ``key`` shows once ``cond`` holds for it. A key press or an append changes
    the app's state at once but the chart only on its next (throttled) frame, so a test reads
    points from the spec it waited for, never from the state it changed."""

    def spec() -> ChartSpec | None:
        chart = next((c for c in charts(app) if c.key == key), None)
        return chart.spec if chart is not None else None

    await wait_for(pilot, lambda: (s := spec()) is not None and cond(s), timeout, what)
    shown = spec()
    assert shown is not None
    return shown


async def loaded(pilot, app: TrainwatchApp) -> None:
    await wait_for(pilot, app.loaded.is_set, what="history loaded")
    await wait_for(pilot, lambda: app.frames, what="first frame")


async def test_live_append_shows_new_records(tmp_path):
    path = write_run(tmp_path / "run", range(1, 101), console="starting\n")
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        assert app.current_model().last_step == 100
        table = app.screen.query_one(MetricsTable)
        assert table.names[:4] == ["loss", "grad_norm", "lr", "throughput"]
        append(path, lines(train_record(s) for s in range(101, 111)))
        append(tmp_path / "run" / "console.log", "epoch 2 done\n")
        await wait_for(pilot, lambda: any(s == 110 for _t, s in app.frames), what="step 110 drawn")
        await wait_for(pilot, lambda: "epoch 2 done" in app.screen.query_one(ConsolePane).lines)
        text = screen_text(app)
        assert "step 110" in text and "/1,000" in text
        await drawn(pilot, app, "loss", lambda s: s.traces[0].xs[-1] == 110,
                    "the loss chart drawn to step 110")
        assert app.state_of(app.current) == "running"


async def test_nan_arriving_live_alerts_rings_and_is_drawn_as_a_gap(tmp_path):
    path = write_run(tmp_path / "run", range(1, 60))
    app, engines = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        assert app.bells == 0  # nothing in history
        append(path, lines([record(60, loss=math.nan, lr=1e-3), record(61, loss=0.5, lr=1e-3)]))
        pane = app.screen.query_one(AlertsPane)
        await wait_for(pilot, lambda: pane.option_count == 1, what="the NaN alert")
        assert "nan_inf" in str(pane.get_option_at_index(0).prompt)
        assert app.bells == 1 and app.sent_notifications == ["nan_inf at step 60: loss is nan"]
        await drawn(pilot, app, "loss", lambda s: s.traces[0].xs[-1] == 61 and s.marks,
                    "the loss chart drawn to step 61 with the alert's mark")
        text = "\n".join(chart_for(app, "loss").text_lines())
        assert "×" in text and "▼" in text  # NaN mark and alert mark
        table = app.screen.query_one(MetricsTable)  # the table follows at 2 Hz
        await wait_for(pilot, lambda: table.get_row("loss")[0].plain.endswith("×"))
        assert engines[0].fed >= 61


async def test_view_keys_change_the_charts(tmp_path):
    write_run(tmp_path / "run", range(1, 3001))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        # the history is read, but the chart may still be drawn from the tail-first preview
        await drawn(pilot, app, "loss",
                    lambda s: s.traces[0].xs[0] <= 1 and s.traces[0].xs[-1] == 3000,
                    "the whole history drawn")
        loss = chart_for(app, "loss")
        assert chart_for(app, "grad_norm").spec.log_y and not loss.spec.log_y
        await pilot.press("y")  # the focused chart is the loss chart
        await drawn(pilot, app, "loss", lambda s: s.log_y, "log loss")
        assert chart_for(app, "grad_norm").spec.log_y
        await pilot.press("s")
        spec = await drawn(pilot, app, "loss", lambda s: len(s.traces) == 2,
                           "the smoothed line beside the raw one")
        raw, smooth = spec.traces
        assert app.view.smoothing == 0.6 and "smooth 0.6" in str(loss.border_subtitle)
        assert raw.style.startswith("dim") and abs(smooth.ys[-1] - raw.ys[-1]) < 0.2
        rough = lambda y: abs(y[1:] - y[:-1]).mean()
        assert rough(smooth.ys) < rough(raw.ys)
        await pilot.press("z")
        await drawn(pilot, app, "loss", lambda s: s.traces[0].xs[0] >= 2000,
                    "the last steps zoomed")
        await pilot.press("z", "x")
        await wait_for(pilot, lambda: app.view.x_mode == "relative")
        # the view changes at once; the chart follows on its next (throttled) frame, and the
        # frame after "z" alone (whole run, in steps) may come before the one after "x"
        await drawn(
            pilot, app, "loss",
            lambda s: s.traces[0].xs[-1] == pytest.approx(300.0),
            "the chart redrawn in relative time over the whole run",
        )
        xs = chart_for(app, "loss").spec.traces[0].xs
        assert xs[0] == pytest.approx(0.1) and xs[-1] == pytest.approx(300.0)
        await pilot.press("o")
        await drawn(pilot, app, "loss", lambda s: s.robust, "outliers clipped")


async def test_filter_narrows_table_and_charts(tmp_path):
    write_run(tmp_path / "run", range(1, 50))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("slash", *"grad|^lr")
        table = app.screen.query_one(MetricsTable)
        await wait_for(pilot, lambda: table.names == ["grad_norm", "lr"], what="filtered rows")
        await wait_for(pilot, lambda: [c.key for c in charts(app) if c.spec]
                       == ["series:grad_norm", "series:lr"], what="filtered charts")
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(table.names) == 4, what="filter cleared")
        await pilot.press("slash", "(")  # a bad regex keeps the last good filter and says why
        await wait_for(pilot, lambda: app.view.filter_error is not None)
        assert "bad regex" in str(table.border_subtitle)


async def test_enter_on_a_metric_opens_its_chart(tmp_path):
    write_run(tmp_path / "run", range(1, 50))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        table = app.screen.query_one(MetricsTable)
        table.focus()
        await pilot.press("down", "down", "enter")  # loss, grad_norm, lr
        await wait_for(pilot, lambda: isinstance(app.screen, ChartScreen))
        big = app.screen.query_one(ChartPanel)
        await wait_for(pilot, lambda: big.spec is not None and big.key == "series:lr")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChartScreen))


async def test_alert_detail_and_mute(tmp_path):
    path = write_run(tmp_path / "run", range(1, 20))
    app, engines = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        append(path, lines([record(20, loss=math.inf)]))
        pane = app.screen.query_one(AlertsPane)
        await wait_for(pilot, lambda: pane.option_count == 1)
        pane.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, AlertDetailScreen))
        text = screen_text(app)
        for expected in ("loss is inf", "Evidence", "last_finite", "70%",
                         "learning rate too high", "lower the learning rate"):
            assert expected in text, expected
        await pilot.press("m")
        await wait_for(pilot, lambda: "nan_inf" in app.muted and pane.option_count == 0)
        append(path, lines([record(21, loss=math.nan)]))
        await wait_for(pilot, lambda: app.current_model().last_step == 21)
        await wait_for(pilot, lambda: "nan_inf" in engines[0].muted, what="engine muted")
        assert pane.option_count == 0 and app.bells == 1


async def test_runs_list_open_and_overlay(tmp_path):
    for i, name in enumerate(("a", "b", "c")):
        write_run(tmp_path / "sweep" / name, range(1, 30 + 10 * i))
    app, _ = app_for(tmp_path / "sweep")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs list")
        await wait_for(pilot, app.loaded.is_set)
        await wait_for(pilot, lambda: "finished" not in screen_text(app) and "49" in screen_text(app))
        assert set(app.models) == {"a", "b", "c"}
        first = next(iter(app.models))
        await pilot.press("space", "down", "space")
        assert len(app.marked) == 2 and first in app.marked
        await pilot.press("enter")  # opens the second run; the first is overlaid
        await wait_for(pilot, lambda: not isinstance(app.screen, RunsScreen))
        second = list(app.models)[1]
        assert app.current == second
        # the chart drawn before enter (the first run alone) is there until the next frame
        await drawn(pilot, app, "loss", lambda s: len(s.traces) == 2,
                    "this run's loss and the overlaid run's loss")
        await wait_for(pilot, lambda: "+1" in screen_text(app), what="the overlay in the header")


async def test_a_sweep_gains_a_run_while_watched(tmp_path):
    write_run(tmp_path / "sweep" / "a", range(1, 20))
    write_run(tmp_path / "sweep" / "b", range(1, 20))
    app, _ = app_for(tmp_path / "sweep", rescan_interval=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.loaded.is_set())
        write_run(tmp_path / "sweep" / "c", range(1, 42))
        await wait_for(pilot, lambda: "c" in app.models and app.models["c"].last_step == 41,
                       what="the new run's data")
        await wait_for(pilot, lambda: "41" in screen_text(app), what="the new run listed")


async def test_real_rule_engine_through_the_cli_factory(tmp_path):
    from trainwatch.rules import load_rules_config

    path = write_run(tmp_path / "run", range(1, 150))
    app = make_app(AppConfig(path=tmp_path / "run", rules=load_rules_config(None)))
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        append(path, lines([record(150, loss=math.nan, lr=1e-3, grad_norm=1.0)]))
        pane = app.screen.query_one(AlertsPane)
        await wait_for(pilot, lambda: any("nan_inf" in str(pane.get_option_at_index(i).prompt)
                                          for i in range(pane.option_count)),
                       what="nan_inf from the real rules")
        entry = next(e for e in app.current_model().alerts if e.alert.rule == "nan_inf")
        assert entry.live and entry.alert.step == 150 and entry.alert.fixes


async def test_a_rotated_file_starts_over(tmp_path):
    path = write_run(tmp_path / "run", range(1, 200))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        assert app.current_model().last_step == 199
        new = tmp_path / "run" / "metrics.jsonl.new"
        new.write_text(lines(train_record(s) for s in range(1, 11)))
        os.replace(new, path)  # logrotate / a restarted run writing a fresh file
        await wait_for(pilot, lambda: app.current_model().store.get("loss").count == 10,
                       what="store rebuilt from the new file")
        await drawn(pilot, app, "loss", lambda s: s.traces[0].xs[-1] == 10,
                    "the chart redrawn from the new file")


async def test_waits_for_a_directory_that_does_not_exist_yet(tmp_path):
    run = tmp_path / "later" / "run"
    app, _ = app_for(run)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "waiting for file" in screen_text(app))
        write_run(run, range(1, 11))
        await wait_for(pilot, lambda: app.current_model().last_step == 10, timeout=8,
                       what="data from the new directory")
        await wait_for(pilot, lambda: "waiting for file" not in screen_text(app))


async def test_untrusted_text_never_reaches_the_terminal_raw(tmp_path):
    evil = "\x1b[31m[bold]loss\x1b]0;pwned\x07"
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text(lines([record(1, **{evil: 1.0}), record(2, **{evil: 2.0})]))
    (tmp_path / "run" / "console.log").write_text("ok \x1b[2J\x1b]52;c;eA==\x07[red]boom[/red]\n")
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await wait_for(pilot, lambda: "[red]boom[/red]" in screen_text(app))
        text = screen_text(app)
        assert "[bold]loss" in text  # shown literally, not as markup
        assert "\x1b" not in text and "\x07" not in text and "pwned" not in text


async def test_help_palette_and_quit(tmp_path):
    write_run(tmp_path / "run", range(1, 10))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "Log / linear y-axis" in screen_text(app)
        await pilot.press("escape")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("Smooth (s)", "Zoom (z)", "Mute (m)", "Runs (r)", "Quit (q)"):
            assert t in titles
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_a_flushed_print_inside_the_running_app_is_harmless(tmp_path):
    """While the app runs, Textual captures stdout/stderr and a flush calls ``App._flush``: a
    library printing with ``flush=True`` must neither fail nor trigger the app's redraw."""
    write_run(tmp_path / "run", range(1, 10))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        print("a library says hello", flush=True)
        sys.stderr.write("and warns\n")
        sys.stderr.flush()
        assert app.is_running


async def test_idle_app_does_no_drawing_work(tmp_path):
    write_run(tmp_path / "run", range(1, 500))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.pause(0.3)
        before = [c.renders for c in charts(app)]
        frames = len(app.frames)
        await pilot.pause(1.5)  # the clock ticks: the header ages, the charts stay as they are
        assert [c.renders for c in charts(app)] == before
        assert len(app.frames) == frames


def test_render_once_prints_a_screen(tmp_path):
    write_run(tmp_path / "run", range(1, 300))
    text = render_once(AppConfig(path=tmp_path / "run", engine_factory=FakeEngine), 100, 30)
    rows = text.splitlines()
    assert len(rows) == 30 and max(len(r) for r in rows) <= 100
    assert "step 299" in text and "loss" in text and "\x1b" not in text


async def test_stop_and_restart_a_supervised_run(tmp_path):
    from trainwatch.trainer.supervise import read_process, start_run, stop_run
    from trainwatch.tui.confirm import ConfirmScreen

    run = tmp_path / "run"
    script = ("import json, time\n"
              "with open('metrics.jsonl', 'a', buffering=1) as f:\n"
              "    for i in range(1, 3000):\n"
              "        f.write(json.dumps({'step': i, 'time': time.time(), 'loss': 1 / i}) + '\\n')\n"
              "        time.sleep(0.05)\n")
    start_run([sys.executable, "-c", script], run, cwd=run)
    try:
        app, _ = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: (app.current_model() or 0) and
                           (app.current_model().last_step or 0) > 2, timeout=10)
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert "Stop run" in screen_text(app)
            await pilot.press("y")
            await wait_for(pilot, lambda: not read_process(run).alive(), timeout=15,
                           what="the run to stop")
            await pilot.press("R")
            await wait_for(pilot, lambda: read_process(run).alive(), timeout=15,
                           what="the run to start again")
    finally:
        stop_run(run, grace=2.0)


async def test_an_old_run_stays_idle_once_its_history_is_loaded(tmp_path):
    """Records written long ago, nothing new: idle before and after the history loads, "last"
    from the newest record's own time, elapsed from the first record to the last."""
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text(lines(record(s, loss=1.0 / s, lr=1e-3) for s in range(1, 20_001)))
    app, engines = app_for(tmp_path / "run", tail_bytes=4096)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        ticks = engines[0].ticks
        await wait_for(pilot, lambda: engines[0].ticks >= ticks + 2, what="two clock ticks")
        header = app.screen.query_one(HeaderBar)
        header.show(app.header_for(app.current_model()))
        assert app.state_of(app.current) == "idle" and app.current_model().last_arrival is None
        assert " idle " in header.text and "d ago" in header.text and "running" not in header.text
        assert app.header_for(app.current_model()).elapsed == pytest.approx(19_999 * 0.1)
        assert "console.log" not in header.text  # an optional file that is missing is no news


async def test_console_pane_appears_with_the_first_console_line(tmp_path):
    path = write_run(tmp_path / "run", range(1, 50))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        pane = app.screen.query_one(ConsolePane)
        assert not pane.display and "waiting" not in screen_text(app)
        (tmp_path / "run" / "console.log").write_text("epoch 1 starting\n")
        append(path, lines([train_record(50)]))
        await wait_for(pilot, lambda: pane.display and "epoch 1 starting" in screen_text(app),
                       what="the console pane with its first line")


async def test_chart_titles_keep_the_value_of_a_long_marked_up_name(tmp_path):
    name = "[bold]x_very_long_metric_name/with/slashes/and[red]markup[/red]"
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text(lines(record(s, **{name: 0.25 * s, "loss": 1.0}) for s in range(1, 40)))
    app, _ = app_for(tmp_path / "run")
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press("slash", *"markup", "enter")
        await wait_for(pilot, lambda: [c.key for c in charts(app) if c.spec] == [f"series:{name}"])
        chart = chart_for(app, f"series:{name}")
        await wait_for(pilot, lambda: "9.75" in screen_text(app).splitlines()[1],
                       what="the last value in the chart's title")
        title = Content.from_markup(str(chart.border_title)).plain
        assert title.startswith("━ [bold]x") and title.endswith(" 9.75") and "…" in title
        assert len(title) <= chart.outer_size.width - 6  # fits inside the border: nothing cut
