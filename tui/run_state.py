"""A run's state in one word, from what its files (and its supervisor) say. Pure functions.

The evidence, strongest first: the supervisor's ``process.json`` (its exit code is the last word
on how a run ended), the stream's ``run_end`` event, and activity: records arriving while we
watch. Records that were already in the file when we opened it prove nothing about now (an old
log looks exactly like a live one until the next line arrives), so a run is only ever called
"running" on live evidence: a record that arrived while we watched, or a live supervised process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch.tui.run_model import RunModel

STALL_MIN_S = 60.0
"""Never call a run stalled before a minute without records."""
STALL_FACTOR = 20.0
"""...or before 20 of its usual intervals between records."""

LIVE_STATES = frozenset({"running", "stalled"})
"""States in which the clock still runs for the run (elapsed time grows, an ETA means something)."""

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


def state_style(label: str) -> str:
    """The style of a state or of a label built on one (``"crashed (exit 1)"``)."""
    if label in STATE_STYLE:
        return STATE_STYLE[label]
    return STATE_STYLE.get(label.split(" (", 1)[0], "bold")


def stall_after(model: RunModel) -> float:
    interval = model.median_interval()
    return max(STALL_MIN_S, STALL_FACTOR * interval) if interval else STALL_MIN_S


def _process_status(process: Any) -> str:
    return process.status() if hasattr(process, "status") else str(process)


def run_state(model: RunModel, now: float, process: Any = None) -> str:
    """running / finished / crashed / stalled / waiting for file / loading / stopped / ended / idle.

    ``process`` is the supervisor's :class:`~trainwatch.trainer.process.ProcessInfo` when the
    run was started by trainwatch; its exit code is the most reliable word on how a run ended.
    """
    has_data = model.last_step is not None
    if not has_data:
        # no file reported yet: it is being opened and read, unless the reading is over
        if any(f.state == "waiting" for f in model.files.values()) or not model.files:
            return "waiting for file" if model.loaded else "loading"
        return "loading" if not model.loaded else "waiting for file"
    alive = False
    if process is not None:
        status = _process_status(process)
        if status == "exited":
            return "finished" if process.exit_code == 0 else "crashed"
        if status in ("killed", "failed", "lost"):
            return "crashed"
        alive = status == "running"
    if model.end is not None:
        return _end_state(model.end)
    if model.last_arrival is None and not alive:
        # nothing new since we opened the file: an old run, however recent its timestamps
        return "idle"
    ref = model.last_arrival if model.last_arrival is not None else model.last_time
    if ref is None:
        return "running"
    return "stalled" if now - ref > stall_after(model) else "running"


def _end_state(end: Mapping[str, Any]) -> str:
    status = str(end.get("status", "ended"))
    code = end.get("exit_code")
    failed = isinstance(code, int) and not isinstance(code, bool) and code != 0
    if status == "finished" and not failed:
        return "finished"
    if status == "interrupted":
        return "stopped"
    if status == "crashed" or failed:
        return "crashed"
    return "ended"


def state_label(model: RunModel, state: str, process: Any = None) -> str:
    """``state`` with how the run ended when that is known: ``"crashed (exit 3)"``,
    ``"crashed (SIGKILL)"``, ``"stopped (exit 130)"``."""
    if state not in ("crashed", "stopped", "ended", "finished"):
        return state
    how: str | None = None
    if process is not None and _process_status(process) in ("exited", "killed", "failed", "lost"):
        status = _process_status(process)
        code = getattr(process, "exit_code", None)
        if status == "killed" and getattr(process, "signal_name", None):
            how = str(process.signal_name)
        elif status == "lost":
            how = "process lost"
        elif isinstance(code, int) and code != 0:
            how = f"exit {code}"
    elif model.end is not None:
        code = model.end.get("exit_code")
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            how = f"exit {code}"
    return f"{state} ({how})" if how else state
