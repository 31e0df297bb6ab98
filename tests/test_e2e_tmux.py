"""End to end: the real `trainwatch PATH` in a real terminal (tmux), read and typed at as a person
would.

Starts the app in a detached tmux session of 120x40 on a private tmux server, appends to the
metrics file, and reads the screen with ``capture-pane``. Skips when tmux is not installed
(``apt-get install -y tmux``); CI installs it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainwatch.tui.testing import lines, record, write_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed (apt-get install -y tmux); CI installs it"),
]

# The real command line: `python -m trainwatch` is the `trainwatch` script without relying on
# the venv's bin/ being on PATH inside tmux.
COMMAND = [sys.executable, "-m", "trainwatch"]


class Tmux:
    def __init__(self, tmp: Path) -> None:
        self.socket = f"trainwatch-e2e-{os.getpid()}"
        self.session = "tw"
        self.tmp = tmp

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=10, check=check)

    def start(self, command: str) -> None:
        self.run("-f", "/dev/null", "new-session", "-d", "-s", self.session, "-x", "120",
                 "-y", "40", command)

    def screen(self) -> str:
        out = self.run("capture-pane", "-p", "-t", self.session, check=False)
        return out.stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.session, check=False).returncode == 0

    def wait_for(self, what: str, cond, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if cond(screen):
                return screen
            time.sleep(0.05)  # polling the terminal, bounded by the deadline
        raise AssertionError(f"timed out waiting for {what}; the screen was:\n{screen}")

    def kill(self) -> None:
        self.run("kill-server", check=False)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def test_watch_a_run_live_in_tmux(tmp_path, tmux):
    run = tmp_path / "run"
    path = write_run(run, range(1, 101), console="warming up\n")
    # COLUMNS/LINES from the test runner would override the pane size the app detects
    env = f"-u COLUMNS -u LINES TERM=xterm-256color PYTHONPATH={shlex.quote(os.getcwd())}"
    cmd = " ".join(shlex.quote(c) for c in [*COMMAND, str(run), "--no-notify"])
    tmux.start(f"env {env} {cmd}")

    want = ("step 100", "Metrics", "Alerts", "grad_norm", "warming up")
    screen = tmux.wait_for("the dashboard", lambda s: all(w in s for w in want))
    assert "\x1b" not in screen

    with path.open("a") as f:
        f.write(lines([record(101, loss=math.nan, lr=1e-3), record(102, loss=0.9, lr=1e-3)]))
        f.write(json.dumps(record(103, loss=0.8, lr=1e-3)) + "\n")
    screen = tmux.wait_for("the NaN alert", lambda s: "nan_inf" in s and "step 103" in s)
    assert "✖" in screen  # an error, in the alerts pane

    tmux.keys("?")
    tmux.wait_for("the help screen", lambda s: "Show every key" in s)
    tmux.keys("Escape")
    tmux.wait_for("the dashboard again", lambda s: "Show every key" not in s)
    tmux.keys("q")
    deadline = time.monotonic() + 10
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the process to exit, bounded by the deadline
    assert not tmux.alive(), "q did not quit"
