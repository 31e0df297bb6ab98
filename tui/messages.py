"""Messages from the ingest thread to the UI thread.

They are posted with ``App.post_message`` (thread-safe, never blocks the ingest thread) and carry
only immutable values. Data messages never replace each other, so no record is lost however busy
the UI is; status messages (progress, a file's state) may replace an older pending one of the
same kind and source, since only the newest matters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from textual.message import Message

from trainwatch.batch import RecordBatch
from trainwatch.rules.engine.alert import Alert
from trainwatch.tui.target import RunSpec, WatchTarget


@dataclass
class Preview(Message):
    """The end of each metric file, read first so the newest data is on screen at once."""

    run_id: str
    batches: tuple[RecordBatch, ...]


@dataclass
class BatchArrived(Message):
    """New records of one file of one run, and what the rules made of them."""

    run_id: str
    path: str
    batch: RecordBatch
    alerts: tuple[Alert, ...]
    main: bool
    """From the run's main stream (else a rank stream: rules only, not charted)."""
    history: bool
    """Read while catching up with what the file already held (its alerts do not ring)."""
    read_at: float = field(default_factory=time.monotonic)
    """When the ingest thread handed it on (for latency measurements)."""


@dataclass
class ConsoleLines(Message):
    """New lines of the run's text log."""

    run_id: str
    lines: tuple[str, ...]
    first_line: int
    alerts: tuple[Alert, ...] = ()
    history: bool = False


@dataclass
class AlertsRaised(Message):
    """Alerts that came from the clock, not from data (a stalled run)."""

    run_id: str
    alerts: tuple[Alert, ...]


@dataclass
class HistoryLoaded(Message):
    """Every file of the run has been read up to where it ended when we started."""

    run_id: str


@dataclass
class LoadProgress(Message):
    """How much of a run's backlog has been read (0..1)."""

    run_id: str
    fraction: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress) and message.run_id == self.run_id


@dataclass
class SourceStatus(Message):
    """A file of a run changed state: waiting, appeared, reset, error, or a notice."""

    run_id: str
    path: str
    state: str
    text: str

    def can_replace(self, message: Message) -> bool:
        # a newer state of the same file supersedes an unhandled older one, except a reset,
        # which tells the UI to drop data and must be seen
        return (
            isinstance(message, SourceStatus)
            and message.path == self.path
            and message.run_id == self.run_id
            and message.state != "reset"
        )


@dataclass
class TargetFound(Message):
    """What PATH turned out to be (posted before any data)."""

    target: WatchTarget


@dataclass
class RunsFound(Message):
    """A rescan of a folder of runs found runs that were not followed yet."""

    runs: tuple[RunSpec, ...]


@dataclass
class IngestFailed(Message):
    """Something in the ingest thread failed; the text is one line for the user."""

    run_id: str
    text: str


@dataclass
class SuperviseStep(Message):
    """Progress of stopping or restarting a supervised run (one line for a toast)."""

    run_id: str
    text: str
    error: bool = False
