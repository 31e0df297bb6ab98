"""Everything the app is built from, in one typed value: the CLI and the tests build the same app.

:func:`trainwatch.tui.app.make_app` takes an :class:`AppConfig`; nothing inside the app reads the
environment, argv or a global setting. Tests inject a fake clock, a rule engine, a wake source or
pure polling through the same fields the CLI fills from its flags.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainwatch.rules.engine.alert import Alert


class Engine(Protocol):
    """What the app needs from a rule engine (``trainwatch.rules.RuleEngine`` is one)."""

    def feed(self, batch: Any, now: float | None = None) -> list[Alert]:
        """``now``: when the batch arrived, on the clock :meth:`tick` is given (None: offline)."""
        ...

    def feed_rank(self, rank: int, batch: Any, now: float | None = None) -> list[Alert]: ...

    def feed_console(self, lines: list[str], first_line: int) -> list[Alert]: ...

    def tick(self, now: float) -> list[Alert]: ...

    def mute(self, rule_id: str) -> None: ...


EngineFactory = Callable[[], Engine]
"""Called once per run (on the ingest thread's side): each run gets its own engine."""


@dataclass(frozen=True)
class AppConfig:
    """How to build a :class:`~trainwatch.tui.app.TrainwatchApp`."""

    path: Path
    """A run directory, a folder of runs, a single metrics file, or a path that does not exist
    yet (the app waits for it)."""
    run: str | None = None
    """``--run``: the one run of a store to watch (by name or id); None: every run it holds."""
    poll_interval: float | None = None
    """None: file events wake the reader (plus a 2 s backstop poll). A number: poll every that
    many seconds and use no file events (network file systems)."""
    rules: Any = None
    """The rules config (``trainwatch.rules.load_rules_config(--rules)``); None: the defaults."""
    engine_factory: EngineFactory | None = None
    """Overrides ``rules``: builds each run's rule engine (tests inject one here)."""
    clock: Callable[[], float] = time.time
    """Wall clock for "last record 3 s ago", elapsed time and the stall check."""
    bell: bool = True
    """Ring the terminal bell when a live error alert fires."""
    notify: bool = True
    """Send an OSC 9 / OSC 777 desktop notification when a live error alert fires."""
    max_fps: float = 10.0
    """Redraws per second at most, however fast data arrives."""
    tail_bytes: int = 256 << 10
    """How much of each file's end is read first, so the newest data shows at once."""
    recent_points: int = 8192
    """Full-resolution points kept per series (older history is kept as min/max buckets)."""
    console_lines: int = 2000
    """Console lines kept on screen."""
    read_only: bool | None = None
    """Show the read-only marker; None decides from file ownership and permissions."""
    wake_source: Any = None
    """A ``trainwatch.watch.WakeSource`` replacing the file-event watcher (tests)."""
    rescan_interval: float = 5.0
    """Seconds between looks for new runs in a folder of runs (or for a missing PATH)."""
    once: bool = False
    """Read what the files hold and stop following (``--once``)."""
    theme: str = "textual-dark"

    def __post_init__(self) -> None:
        if self.poll_interval is not None and not self.poll_interval > 0:
            raise ValueError(f"--poll must be a positive number of seconds, got {self.poll_interval}")
        if not self.max_fps > 0:
            raise ValueError(f"max_fps must be positive, got {self.max_fps}")
