"""A run's state in one word, from what its files (and its supervisor) say. Pure functions."""

from __future__ import annotations

from typing import Any

from trainwatch.tui.run_model import RunModel

STALL_MIN_S = 60.0
"""Never call a run stalled before a minute without records."""
STALL_FACTOR = 20.0
"""...or before 20 of its usual intervals between records."""
IDLE_AFTER_S = 6 * 3600.0
"""Silent longer than this with no end recorded: an old run, not a live stall."""

STATE_STYLE = {
    "running": "bold green",
    "finished": "bold blue",
    "crashed": "bold white on red",
    "stalled": "bold black on yellow",
    "waiting for file": "bold cyan",
    "loading": "bold cyan",
    "stopped": "bold yellow",
    "idle": "dim",
    "ended": "bold blue",
}


def stall_after(model: RunModel) -> float:
    interval = model.median_interval()
    return max(STALL_MIN_S, STALL_FACTOR * interval) if interval else STALL_MIN_S


def run_state(model: RunModel, now: float, process: Any = None) -> str:
    """running / finished / crashed / stalled / waiting for file / loading / stopped / idle.

    ``process`` is the supervisor's :class:`~trainwatch.trainer.supervise.ProcessInfo` when the
    run was started by trainwatch; its exit code is the most reliable word on how a run ended.
    """
    has_data = model.last_step is not None
    if not has_data:
        if any(f.state == "waiting" for f in model.files.values()) or not model.files:
            return "waiting for file" if model.loaded or not model.files else "loading"
        return "loading" if not model.loaded else "waiting for file"
    if process is not None:
        status = process.status() if hasattr(process, "status") else str(process)
        if status == "exited":
            return "finished" if process.exit_code == 0 else "crashed"
        if status in ("killed", "failed", "lost"):
            return "crashed"
    if model.end is not None:
        status = str(model.end.get("status", "ended"))
        code = model.end.get("exit_code")
        if status == "finished" and code in (0, None):
            return "finished"
        if status == "interrupted":
            return "stopped"
        if status == "crashed" or (isinstance(code, int) and code != 0):
            return "crashed"
        return "ended"
    if model.last_time is None:
        return "running"
    age = now - (model.last_arrival if model.last_arrival is not None else model.last_time)
    if age > IDLE_AFTER_S and model.last_arrival is None:
        return "idle"
    if age > stall_after(model):
        return "stalled"
    return "running"
