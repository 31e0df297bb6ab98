"""A supervised run's process record, ``RUN_DIR/process.json``, and liveness checks. Stdlib only.

The monitor of :mod:`trainwatch.trainer.supervise` is the only writer of ``process.json``
(atomically: temp file + rename); anyone may read it. A pid alone is never trusted: it is
paired with the process's start time, so a pid the system has since reused is not mistaken for
the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROCESS_FILE = "process.json"
CONSOLE_FILE = "console.log"
RUN_DIR_ENV = "TRAINWATCH_RUN_DIR"
MARK = "trainwatch"
"""``process.json``'s ``started_by``: only such runs are ever signalled."""

STATE_RUNNING = "running"
STATE_EXITED = "exited"
STATE_KILLED = "killed"
"""Ended by a signal (``signal`` holds its number and ``signal_name`` its name)."""
STATE_FAILED = "failed"
"""The command could not be started at all (``error`` says why)."""
STATE_LOST = "lost"
"""Derived, never written: recorded as running but the process is gone with no end recorded."""


@dataclass(frozen=True)
class ProcessInfo:
    """What ``process.json`` says about a run, as written by the monitor."""

    pid: int | None
    command: tuple[str, ...]
    cwd: str
    start_time: float
    state: str
    started_by: str = ""
    pgid: int | None = None
    monitor_pid: int | None = None
    proc_start: str | None = None
    """Start-time token of ``pid`` (from /proc or ps): ties the pid to this very process."""
    monitor_start: str | None = None
    """The same for ``monitor_pid``."""
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    end_time: float | None = None
    error: str | None = None
    host: str = ""

    @property
    def ours(self) -> bool:
        return self.started_by == MARK

    @property
    def ended(self) -> bool:
        return self.state in (STATE_EXITED, STATE_KILLED, STATE_FAILED)

    def alive(self) -> bool:
        """The recorded process is still running (same pid *and* same start time)."""
        return (
            not self.ended
            and self.pid is not None
            and is_alive(self.pid)
            and (self.proc_start is None or proc_start_token(self.pid) == self.proc_start)
        )

    def monitor_alive(self) -> bool:
        """The monitor that will record the end is still there."""
        return (
            self.monitor_pid is not None
            and is_alive(self.monitor_pid)
            and (self.monitor_start is None
                 or proc_start_token(self.monitor_pid) == self.monitor_start)
        )

    def status(self) -> str:
        """running / exited / killed / failed, or lost when the process and its monitor are
        both gone with no end recorded (a reboot, a kill -9 of the monitor)."""
        if self.state == STATE_RUNNING and not self.alive() and not self.monitor_alive():
            return STATE_LOST
        return self.state


# ---------------------------------------------------------------------------- processes


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    stat = _proc_stat(pid)
    return not (stat is not None and stat[0] in ("Z", "X"))


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0]); None without /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def proc_start_token(pid: int) -> str | None:
    """A string that changes when ``pid`` is reused: its start time since boot (Linux), else
    the start time ``ps`` prints. None when the process does not exist."""
    stat = _proc_stat(pid)
    if stat is not None:
        return f"proc:{stat[19]}"  # field 22 (starttime), counted after "pid (comm)"
    if Path("/proc").is_dir():
        return None
    try:
        out = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)], check=False, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"ps:{out}" if out else None


# ---------------------------------------------------------------------------- process.json


def read_process(run_dir: str | os.PathLike[str]) -> ProcessInfo | None:
    """The run's ``process.json``, or None when there is none (or it is unreadable)."""
    path = Path(run_dir) / PROCESS_FILE
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict):
        return None
    known = {f for f in ProcessInfo.__dataclass_fields__}
    kw = {k: v for k, v in d.items() if k in known}
    kw["command"] = tuple(str(c) for c in kw.get("command", ()))
    kw.setdefault("pid", None)
    kw.setdefault("cwd", "")
    kw.setdefault("start_time", 0.0)
    kw.setdefault("state", STATE_RUNNING)
    try:
        return ProcessInfo(**kw)
    except TypeError:
        return None


def write_process(run_dir: Path, info: ProcessInfo) -> None:
    data = asdict(info)
    data["command"] = list(info.command)
    tmp = run_dir / f".{PROCESS_FILE}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, run_dir / PROCESS_FILE)  # readers see the old or the new file, whole


def wait_ended(run_dir: str | os.PathLike[str], timeout: float | None = None,
               poll: float = 0.05) -> ProcessInfo | None:
    """Poll ``process.json`` until it records an end (None on timeout)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        info = read_process(run_dir)
        if info is not None and (info.ended or info.status() == STATE_LOST):
            return info
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(poll)  # polling a file another process writes, bounded by the deadline


def replace_info(info: ProcessInfo, **changes: Any) -> ProcessInfo:
    d = asdict(info)
    d.update(changes)
    d["command"] = tuple(d["command"])
    return ProcessInfo(**d)
