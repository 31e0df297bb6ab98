"""Snapshots of the main screens at 80x24 and 120x40, with canned data and a fixed clock.

They are plain text (what a person reads; colours are checked by the other tests), compared
with ``tests/snapshots/*.txt``. After an intended change of the layout, regenerate them with
``TRAINWATCH_UPDATE_SNAPSHOTS=1 pytest tests/test_tui_snapshots.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import math
import os
from pathlib import Path

import pytest

from trainwatch.tui.alerts_pane import AlertsPane
from trainwatch.tui.app import AppConfig, TrainwatchApp, make_app
from trainwatch.tui.once import screen_text
from trainwatch.tui.runs_screen import RunsScreen
from trainwatch.tui.testing import FakeEngine, append, lines, record, wait_for, write_run

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("TRAINWATCH_UPDATE_SNAPSHOTS") == "1"
NOW = 1.7e9 + 400 * 0.1 + 5.0
"""The fixed clock: five seconds after the canned run's last record."""
CONSOLE = "".join(f"step {s}: loss ok\n" for s in range(0, 400, 50)) + "Traceback (most recent call last):\nRuntimeError: boom\n"


def canned_run(root: Path) -> Path:
    path = write_run(root, range(1, 390), console=CONSOLE)
    append(path, lines([record(390, loss=math.nan, lr=1e-4, grad_norm=3.0)]))
    append(path, lines([record(s, loss=0.4, lr=1e-4, grad_norm=1.0) for s in range(391, 401)]))
    return path


def check(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"{path} is missing: run with TRAINWATCH_UPDATE_SNAPSHOTS=1 to create it")
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"{name} (expected)", f"{name} (now)"))
        pytest.fail(f"screen differs from {path}:\n{diff}")


def app_for(path: Path) -> TrainwatchApp:
    return make_app(AppConfig(path=path, engine_factory=FakeEngine, clock=lambda: NOW,
                              read_only=False))


async def settled(pilot, app: TrainwatchApp) -> None:
    await wait_for(pilot, lambda: app.frames and app.settled(), what="everything drawn")
    await pilot.pause()  # one more refresh: the last changes reach the screen


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_dashboard(tmp_path, size):
    canned_run(tmp_path / "exp1")
    app = app_for(tmp_path / "exp1")
    async with app.run_test(size=size) as pilot:
        await settled(pilot, app)
        check(f"dashboard_{size[0]}x{size[1]}", screen_text(app))


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_alert_detail(tmp_path, size):
    canned_run(tmp_path / "exp1")
    app = app_for(tmp_path / "exp1")
    async with app.run_test(size=size) as pilot:
        await settled(pilot, app)
        pane = app.screen.query_one(AlertsPane)
        pane.focus()
        rules = [pane.entry(pane.get_option_at_index(i).id).alert.rule
                 for i in range(pane.option_count)]
        pane.highlighted = rules.index("nan_inf")  # the console crash may come first or second
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Evidence" in screen_text(app))
        check(f"alert_detail_{size[0]}x{size[1]}", screen_text(app))


async def test_runs_list(tmp_path):
    for i, name in enumerate(("lr-1e-3", "lr-3e-3", "lr-1e-2")):
        path = write_run(tmp_path / "sweep" / name, range(1, 100 * (i + 1)))
        os.utime(path, (1.7e9 + i, 1.7e9 + i))
    app = app_for(tmp_path / "sweep")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot, app)
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
        await pilot.press("down", "space")
        await wait_for(pilot, lambda: "✓" in screen_text(app).split("Run")[1])
        check("runs_120x40", screen_text(app))


async def test_help(tmp_path):
    canned_run(tmp_path / "exp1")
    app = app_for(tmp_path / "exp1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: "Show every key" in screen_text(app))
        check("help_80x24", screen_text(app))
