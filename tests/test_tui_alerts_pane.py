"""The alerts pane in the live app: rows built once per alert, two lines each, stable selection."""

from __future__ import annotations

import math
from pathlib import Path

from trainwatch.rules.engine.alert import Alert
from trainwatch.tui.alerts_pane import MAX_SHOWN, AlertsPane, alert_line
from trainwatch.tui.app import AppConfig, TrainwatchApp, make_app
from trainwatch.tui.once import screen_text
from trainwatch.tui.run_model import AlertEntry
from trainwatch.tui.testing import FakeEngine, append, lines, record, wait_for, write_run


def app_for(path: Path) -> TrainwatchApp:
    return make_app(AppConfig(path=path, engine_factory=FakeEngine))


async def loaded(pilot, app: TrainwatchApp) -> None:
    await wait_for(pilot, app.loaded.is_set, what="history loaded")
    await wait_for(pilot, lambda: app.frames, what="first frame")


def nans(steps: range) -> str:
    return lines(record(s, loss=math.nan) for s in steps)


async def test_one_new_alert_builds_one_row_and_shows_first(tmp_path):
    path = write_run(tmp_path / "run", range(1, 10))
    app = app_for(tmp_path / "run")
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        pane = app.screen.query_one(AlertsPane)
        append(path, nans(range(10, 310)))
        await wait_for(pilot, lambda: len(app.visible_alerts()) == 300, what="300 alerts")
        await wait_for(pilot, lambda: pane.option_count == MAX_SHOWN + 1, what="300 drawn")
        assert "+100 older" in str(pane.get_option_at_index(MAX_SHOWN).prompt)
        assert "step 309" in str(pane.get_option_at_index(0).prompt)
        before_built = pane.rows_built
        kept = [pane.get_option_at_index(i) for i in range(MAX_SHOWN - 1)]
        append(path, nans(range(310, 311)))
        await wait_for(pilot, lambda: "step 310" in str(pane.get_option_at_index(0).prompt),
                       what="the new alert on top")
        assert pane.rows_built - before_built == 1
        # the other rows are the very same objects, one place further down
        assert all(pane.get_option_at_index(i + 1) is row for i, row in enumerate(kept))
        assert "+101 older" in str(pane.get_option_at_index(MAX_SHOWN).prompt)
        assert pane.border_subtitle == "301 alerts"


async def test_two_lines_at_80_columns_show_rule_and_message(tmp_path):
    path = write_run(tmp_path / "run", range(1, 10))
    app = app_for(tmp_path / "run")
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        append(path, lines([record(700, loss=math.nan)]))
        pane = app.screen.query_one(AlertsPane)
        await wait_for(pilot, lambda: pane.option_count == 1, what="the alert")
        await pilot.pause()
        text = screen_text(app)
        rows = text.splitlines()
        head = next(i for i, r in enumerate(rows) if "nan_inf step 700" in r)
        assert "loss is nan" in rows[head + 1]


async def test_selection_stays_on_the_same_alert(tmp_path):
    path = write_run(tmp_path / "run", range(1, 10))
    app = app_for(tmp_path / "run")
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        pane = app.screen.query_one(AlertsPane)
        append(path, nans(range(10, 15)))
        await wait_for(pilot, lambda: pane.option_count == 5, what="5 alerts")
        pane.focus()
        await pilot.press("down", "down")
        chosen = pane.highlighted_entry()
        assert chosen is not None and chosen.alert.step == 12
        append(path, nans(range(15, 18)))
        await wait_for(pilot, lambda: pane.option_count == 8, what="3 more")
        assert pane.highlighted_entry() is chosen
        assert pane.highlighted == 5


def test_untrusted_text_is_cleaned():
    a = Alert("r[bold]x", "warning", 3, 0.0, "m\x1b]52;c;AAAA\x07et", "bad\x1b[2Jmsg\nnext")
    text = alert_line(AlertEntry(a, "run", 0, True))
    first, second = text.plain.split("\n")
    assert "r[bold]x" in first and "\x1b" not in text.plain and "met" in first
    assert second.strip() == "badmsg⏎next"
