"""The live app shows ``run_crashed``: a run that ends crashed while watched gets its alert in
the alerts pane, with the diagnosis of its error; one cause in the console and the end is one
alert there too. The real rule engine, built by the app's factory as the CLI builds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.tui.alerts_pane import AlertsPane
from trainwatch.tui.app import AppConfig, TrainwatchApp, make_app
from trainwatch.tui.testing import append, wait_for, write_run

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"
TRACEBACK = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
             f"torch.OutOfMemoryError: {OOM}\n")


class TickedEngine(RuleEngine):
    """The real engine, counting the clock ticks the app gives it."""

    ticks = 0

    def tick(self, now: float) -> list:
        self.ticks += 1
        return super().tick(now)


def app_for(run_dir: Path, engines: list[TickedEngine] | None = None) -> TrainwatchApp:
    def factory() -> TickedEngine:
        engine = TickedEngine(load_rules_config(None), live=True)
        if engines is not None:
            engines.append(engine)
        return engine

    return make_app(AppConfig(path=run_dir, engine_factory=factory, bell=False, notify=False))


def end_line(**fields: object) -> str:
    return json.dumps({"event": "run_end", "time": 1.7e9 + 100, **fields}) + "\n"


def crash_alerts(app: TrainwatchApp) -> list:
    return [e.alert for e in app.visible_alerts()
            if e.alert.rule in ("run_crashed", "console_error")]


async def test_a_run_that_ends_crashed_shows_its_diagnosis(tmp_path):
    path = write_run(tmp_path / "run", range(1, 60))
    app = app_for(tmp_path / "run")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        append(path, end_line(status="crashed", exit_code=1, error=f"OutOfMemoryError: {OOM}"))
        await wait_for(pilot, lambda: crash_alerts(app), what="the crash's alert")
        [a] = crash_alerts(app)
        assert (a.rule, a.severity, a.evidence["kind"]) == ("run_crashed", "error", "cuda_oom")
        pane = app.screen.query_one(AlertsPane)
        await wait_for(pilot, lambda: pane.option_count >= 1, what="the alert drawn")
        shown = str(pane.get_option_at_index(0).prompt)
        assert "run_crashed" in shown and "The GPU ran out of memory" in shown


@pytest.mark.parametrize("end", [{"status": "crashed", "exit_code": 1},
                                 {"status": "crashed", "exit_code": 1,
                                  "error": f"OutOfMemoryError: {OOM}"}], ids=["bare", "told"])
async def test_the_console_and_the_end_of_one_oom_are_one_alert(tmp_path, end):
    """The console's traceback comes first (as it does live), then the run's end, without an
    error text (W&B's exit record) or with it: one alert."""
    path = write_run(tmp_path / "run", range(1, 60), console="epoch 1\n")
    engines: list[TickedEngine] = []
    app = app_for(tmp_path / "run", engines)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        append(tmp_path / "run" / "console.log", TRACEBACK)
        await wait_for(pilot, lambda: crash_alerts(app), what="the console's alert")
        append(path, end_line(**end))
        await wait_for(pilot, lambda: app.current_model().end is not None,
                       what="the run's end read")
        seen = engines[0].ticks
        # (an end without text is told at the clock's next tick)
        await wait_for(pilot, lambda: engines[0].ticks >= seen + 2, timeout=6, what="two ticks")
        assert [(a.rule, a.evidence["kind"]) for a in crash_alerts(app)] == [
            ("console_error", "cuda_oom")]


async def test_an_end_without_text_is_told_at_the_next_tick(tmp_path):
    path = write_run(tmp_path / "run", range(1, 60))
    app = app_for(tmp_path / "run")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        append(path, end_line(status="crashed", exit_code=137))
        await wait_for(pilot, lambda: crash_alerts(app), what="the crash's alert")
        [a] = crash_alerts(app)
        assert (a.rule, a.evidence["kind"]) == ("run_crashed", "signal_sigkill")  # (at once)
    bare = tmp_path / "bare"
    write_run(bare, range(1, 60))
    app = app_for(bare)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        append(bare / "metrics.jsonl", end_line(status="crashed", exit_code=1))
        await wait_for(pilot, lambda: crash_alerts(app), what="the bare end's alert at a tick")
        [a] = crash_alerts(app)
        assert (a.rule, a.evidence["kind"]) == ("run_crashed", "unsaid")
