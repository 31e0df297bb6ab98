"""A store's run, followed live beside files: a :class:`~trainwatch.run_stores.RunSource` seen by
the :class:`~trainwatch.follower.Follower` as one more tailer.

The follower reads every tailer on its one thread, when a file event hints at a change and on
its backstop timer; this adapter polls the source then. Its files' events (a database and its
``-wal``, a run's metric files) are only hints: a poll decides what is new (by rowid, by byte
offset), and polling a source that did not change costs a ``stat`` per file. While the source
holds back the newest step (another series may still add to it) it asks to be read again soon
(``wants_retry``), so that step shows within a fraction of a second once the writer is quiet.
Problems become statuses, reported once per change, as for files.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from trainwatch.run_stores import RunSource
from trainwatch.tailer import ReadProgress, StatusState, TailItem, TailStatus


class SourceTailer:
    """Follows one run source; :meth:`read` returns what is new as batches and statuses."""

    def __init__(self, source: RunSource) -> None:
        self.source = source
        self.name = source.name
        self.kind = "source"
        self.has_more = False
        self.wants_retry = False
        self.progress = ReadProgress(0, 1)
        self._state: StatusState | None = None
        self._message = ""

    @property
    def path(self) -> Path:
        """The first file to watch (what a single-path caller stats)."""
        return Path(self.watch_paths()[0])

    def watch_paths(self) -> Sequence[Path]:
        return self.source.watch_paths()

    def last_written(self) -> float | None:
        return self.source.last_written()

    def read(self) -> list[TailItem]:
        return self._poll(final=False)

    def flush(self, *, final: bool = True) -> list[TailItem]:
        """The writer is done (or ``--once``): hand on the step held back too."""
        return self._poll(final=True) if final else []

    def _poll(self, *, final: bool) -> list[TailItem]:
        out: list[TailItem] = []
        try:
            batches = self.source.poll(final=final)
        except FileNotFoundError as e:
            self.has_more = False
            self.progress = ReadProgress(1, 1)  # nothing to load: the run is loaded as it is
            self._status(out, "waiting", f"{e.filename or self.name}: waiting for it to be "
                         "created (or to come back)")
            return out
        except (OSError, sqlite3.Error) as e:
            self.has_more = False
            self.wants_retry = True
            self._status(out, "error", f"{self.name}: cannot read ({type(e).__name__}: "
                         f"{e}); retrying")
            return out
        except Exception as e:  # noqa: BLE001 - a reader bug must not kill the worker
            self.has_more = False
            self._status(out, "error", f"{self.name}: the reader failed ({type(e).__name__}: "
                         f"{e}); retrying, report this if it persists")
            return out
        if self._state == "waiting":
            out.append(TailStatus(self.name, "appeared", f"{self.name}: appeared; reading it"))
        elif self._state == "error":
            out.append(TailStatus(self.name, "appeared", f"{self.name}: readable again; resuming"))
        self._state = "appeared"
        self.has_more = self.source.has_more
        self.wants_retry = self.source.holding
        if not self.has_more:
            self.progress = ReadProgress(1, 1)
        for b in batches:
            if b.reset:
                out.append(TailStatus(self.name, "reset", f"{self.name}: the store was "
                                      "rewritten; reading the run again from the start"))
            out.append(b)
        return out

    def _status(self, out: list[TailItem], state: StatusState, message: str) -> None:
        if state != self._state or message != self._message:
            self._state, self._message = state, message
            out.append(TailStatus(self.name, state, message))

