"""One run of a SQLite store (MLflow's ``mlflow.db``, a trackio project), polled for new rows.

A poll asks the file system first (:func:`~trainwatch.formats._sqlite.stamp`: the database and
its ``-wal`` file), then reads, in one read-only transaction, the run's rows after the last rowid
read (at most :data:`ROWS_PER_POLL`: a large backlog comes in steps, the rest on the next poll
at once) and whatever the format reads beside them (a status, the params). A table whose
largest rowid went below the last one read was replaced or cleaned: the run is read again from
the start, as a ``reset`` batch. The formats say what a row means (:meth:`SqliteRunSource.rows`,
:meth:`SqliteRunSource.add`).
"""

from __future__ import annotations

import sqlite3
import time as _time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState
from trainwatch.formats._sqlite import read_only, stamp, watch_paths

ROWS_PER_POLL = 100_000


class SqliteRunSource:
    """What every SQLite run source holds; a format fills in :attr:`table` and the hooks."""

    format = ""
    table = ""
    """The table of the run's rows (its rowid orders them)."""

    def __init__(self, db: Path, run_id: str, *, clock: Callable[[], float] = _time.time) -> None:
        self.db = Path(db)
        self.run_id = run_id
        self.name = f"{db}#{run_id}"
        self.clock = clock
        self.state = StreamState()
        self.has_more = False
        self._after = 0
        """Rowid of the last row read."""
        self._stamp: tuple[int, ...] | None = None
        self._meta_sent = False

    @property
    def holding(self) -> bool:
        return False

    def watch_paths(self) -> Sequence[Path]:
        return watch_paths(self.db)

    def last_written(self) -> float | None:
        return self.state.last_time

    def poll(self, *, final: bool = False) -> list[RecordBatch]:
        seen = stamp(self.db)  # before reading: a write during the read changes it again
        if seen == self._stamp and not (self.has_more or self.holding or final):
            return []
        if not self.db.is_file():
            raise FileNotFoundError(2, "no such file (waiting for it to come back)", str(self.db))
        try:
            with read_only(self.db) as conn:
                top = conn.execute(f"SELECT max(rowid) FROM {self.table}").fetchone()[0] or 0
                reset = top < self._after
                if reset:
                    self.restart()
                rows = self.rows(conn, self._after, ROWS_PER_POLL)
                extra = self.read_more(conn)
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                return []  # a long write: the next poll reads it
            raise
        self.has_more = len(rows) >= ROWS_PER_POLL
        if rows:
            self._after = int(rows[-1][0])
        self._stamp = None if self.has_more else seen
        builder = BatchBuilder(self.name, self.state, self.format, self.clock)
        self.add(builder, rows, extra, final=final and not self.has_more)
        meta = None if self._meta_sent else self.meta()
        self._meta_sent = True
        batch = builder.build(reset=reset, meta=meta)
        return [] if batch.is_empty() and not batch.meta else [batch]

    # ------------------------------------------------------------------ the format's part
    def restart(self) -> None:
        """Forget what was read: the next rows are the run's first again."""
        self.state.reset()
        self._after = 0
        self._meta_sent = False

    def rows(self, conn: sqlite3.Connection, after: int, limit: int) -> list[Sequence[Any]]:
        """The run's rows with a rowid above ``after``, rowid first, in rowid order."""
        raise NotImplementedError

    def read_more(self, conn: sqlite3.Connection) -> Any:
        """Anything else read in the same transaction (a status, params)."""
        return None

    def add(self, builder: BatchBuilder, rows: list[Sequence[Any]], extra: Any, *,
            final: bool) -> None:
        """Turn rows (and ``extra``) into records and events."""
        raise NotImplementedError

    def meta(self) -> dict[str, Any] | None:
        """Facts for the first batch (a trackio config's ``max_steps``)."""
        return None
