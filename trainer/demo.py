"""``trainwatch demo``: start the LSTM trainer with a visible fault, supervised, and return its
run directory for the TUI to open. Stdlib only (the trainer runs in its own process).

The packaged ``demo`` config trains normally (the first records arrive within a few seconds),
then stops detaching the LSTM state at step 15000 (about 15 to 30 seconds in on a 2-core CPU):
the state probe fires ``state_detach`` at once, and step time, memory and the graph size ramp
up from there. The run ends by itself 1000 steps later; the TUI can stop it sooner.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

from trainwatch.trainer.supervise import SuperviseError, start_run

DEMO_CONFIG = "demo"


class DemoError(RuntimeError):
    """The demo cannot start; the message is one line saying what to do."""


def demo_command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "trainwatch.trainer", DEMO_CONFIG, "--run-dir", str(run_dir)]


def default_run_dir() -> Path:
    """``./runs/demo-YYYYmmdd-HHMMSS``, or a temporary directory when ``.`` is not writable."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs = Path.cwd() / "runs"
    try:
        runs.mkdir(exist_ok=True)
        if os.access(runs, os.W_OK):
            d = runs / f"demo-{stamp}"
            n = 1
            while d.exists():
                n += 1
                d = runs / f"demo-{stamp}-{n}"
            return d
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix=f"trainwatch-demo-{stamp}-"))


def launch_demo(run_dir: Path | None = None) -> Path:
    """Start the demo run in the background (it outlives the caller) and return its directory."""
    if importlib.util.find_spec("torch") is None:
        raise DemoError("the demo trains a model and needs PyTorch: pip install 'trainwatch[train]'")
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir()
    try:
        start_run(demo_command(run_dir.absolute()), run_dir)
    except SuperviseError as e:
        raise DemoError(str(e)) from e
    return run_dir
