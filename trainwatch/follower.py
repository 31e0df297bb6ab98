"""Following a set of files on one worker thread, handing what is new to callbacks.

:class:`Follower` owns one thread that follows a set of files (each with a
:class:`~trainwatch.tailer.FileTailer`) and hands what is new to callbacks. Files are opened
read-only for one read and closed at once: a writer is never blocked and can rename or delete the
file at any moment (on Windows an open handle would stop it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainwatch.batch import RecordBatch
from trainwatch.formats.base import Reader
from trainwatch.run_stores import RunSource
from trainwatch.source_tailer import SourceTailer
from trainwatch.tailer import (
    CHUNK_BYTES,
    FileTailer,
    ReaderFactory,
    ReadProgress,
    TailItem,
    TailStatus,
    TextChunk,
)
from trainwatch.watch import DirWatcher, NoWake, WakeSource

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger(__name__)


BatchCallback = Callable[[str, RecordBatch], None]
"""(path as given to ``follow``, batch)."""
TextCallback = Callable[[str, list[str], int], None]
"""(path, decoded lines, 1-based number of the first)."""
StatusCallback = Callable[[TailStatus], None]

BACKSTOP_S = 2.0
BATCH_INTERVAL_S = 0.05
RETRY_S = 0.25


class Follower:
    """Follows a set of files on one thread and hands what is new to callbacks.

    File events only set a flag (on watchdog's thread); this worker does every read. Reads that
    are asked for close together are merged: at most one pass every ``batch_interval`` seconds
    while busy, so a writer logging 1000 lines/s costs ~20 reads/s, not 1000. With no events,
    every file is still read every ``backstop`` seconds, or every ``poll_interval`` seconds in
    pure polling mode (no watchdog: network file systems). Callbacks run on the worker thread
    (or on the caller's, in :meth:`poll_now`), one file's items in file order; a callback that
    raises is reported as an ``error`` status and the worker goes on. After a ``reset`` status,
    what came from that file before is void (text callbacks restart at line 1).
    """

    def __init__(
        self,
        *,
        on_batch: BatchCallback | None = None,
        on_text: TextCallback | None = None,
        on_status: StatusCallback | None = None,
        poll_interval: float | None = None,
        backstop: float = BACKSTOP_S,
        batch_interval: float = BATCH_INTERVAL_S,
        chunk_bytes: int = CHUNK_BYTES,
        name: str = "trainwatch-tail",
        wake_source: WakeSource | None = None,
    ) -> None:
        self.on_batch = on_batch
        self.on_text = on_text
        self.on_status = on_status
        if poll_interval is not None and poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval}")
        self.interval = poll_interval if poll_interval is not None else backstop
        """Seconds between forced reads when nothing wakes the worker."""
        self.batch_interval = batch_interval
        self.chunk_bytes = chunk_bytes
        self.name = name
        self.passes = 0
        """Read passes done so far (each reads every file once or more): shows the merging."""
        self._watcher: WakeSource = wake_source or (
            NoWake() if poll_interval is not None else DirWatcher(self.wake)
        )
        self._tailers: dict[str, FileTailer | SourceTailer] = {}
        self._finish: set[str] = set()
        self._lock = threading.Lock()  # guards _tailers and _finish
        self._read_lock = threading.Lock()  # one reading pass at a time (worker or poll_now)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch_problem: str | None = None

    # ------------------------------------------------------------------ setup (any thread)
    def follow(self, path: str | os.PathLike[str], reader: Reader | ReaderFactory) -> str:
        """Follow a file with a reader (instance, or factory called with the path)."""
        return self._add(FileTailer(path, reader, chunk_bytes=self.chunk_bytes))

    def follow_text(self, path: str | os.PathLike[str]) -> str:
        """Follow a plain text file (``console.log``): lines go to ``on_text``."""
        return self._add(FileTailer(path, text=True, chunk_bytes=self.chunk_bytes))

    def follow_source(self, source: RunSource) -> str:
        """Follow a run of a store (polled; its files' events wake the worker): its batches go
        to ``on_batch`` under ``source.name``."""
        return self._add(SourceTailer(source))

    def _add(self, tailer: FileTailer | SourceTailer) -> str:
        with self._lock:
            if tailer.name in self._tailers:
                raise ValueError(f"{tailer.name}: already followed")
            self._tailers[tailer.name] = tailer
        self.wake()
        return tailer.name

    def unfollow(self, path: str | os.PathLike[str]) -> None:
        with self._lock:
            self._tailers.pop(str(path), None)

    @property
    def paths(self) -> list[str]:
        with self._lock:
            return list(self._tailers)

    def last_written(self, name: str) -> float | None:
        """When what ``name`` holds was last written: a file's mtime, a store run's newest
        record time; None when not known."""
        with self._lock:
            t = self._tailers.get(name)
        if isinstance(t, SourceTailer):
            return t.last_written()
        try:
            return os.stat(t.path if t is not None else name).st_mtime
        except OSError:
            return None

    def progress(self) -> dict[str, ReadProgress]:
        """Bytes read and file size per path (safe from any thread)."""
        with self._lock:
            return {name: t.progress for name, t in self._tailers.items()}

    def wake(self) -> None:
        """A hint that files may have changed (thread-safe, cheap, may be called any number of
        times: it never causes a record to be read twice)."""
        self._wake.set()

    def finish(self, path: str | os.PathLike[str] | None = None) -> None:
        """The writer of ``path`` (or of every file) is done: on the next pass, read to the end
        and hand on a last line that has no newline. Safe from a callback."""
        with self._lock:
            self._finish.update([str(path)] if path is not None else self._tailers)
        self.wake()

    # ------------------------------------------------------------------ running
    def start(self) -> Follower:
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: already started")
        self._stop.clear()
        self._watcher.start()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the worker and the file watcher and join their threads."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        deadline = time.monotonic() + timeout
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("%s: worker still busy in a callback after %.1f s", self.name, timeout)
        self._watcher.stop(max(0.1, deadline - time.monotonic()))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def poll_now(self, *, final: bool = False) -> int:
        """Read every file to its end now, on this thread; ``final`` also hands on last lines
        without a newline (``--once`` mode). Returns the number of items handed on.
        Not from a callback (it would wait for itself): use :meth:`wake` or :meth:`finish`."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("poll_now() called from a tail callback; use wake() or finish()")
        return self._pass(final=final, interruptible=False)

    def read_once(self) -> int:
        """Read whatever the files hold, as if the run were over (``--once``)."""
        return self.poll_now(final=True)

    def _run(self) -> None:
        last = float("-inf")
        while not self._stop.is_set():
            self._sync_watches()
            self._wake.wait(self._timeout())
            if self._stop.is_set():
                break
            # merge wake-ups that come close together into one pass
            gap = self.batch_interval - (time.monotonic() - last)
            if gap > 0 and self._stop.wait(gap):
                break
            self._wake.clear()  # before reading: a write during the pass wakes us again
            last = time.monotonic()
            try:
                self._pass(final=False, interruptible=True)
            except Exception:  # never let the worker die; _pass already guards each file
                log.exception("%s: read pass failed", self.name)

    def _timeout(self) -> float:
        with self._lock:
            retry = any(t.wants_retry for t in self._tailers.values())
        return min(self.interval, RETRY_S) if retry else self.interval

    def _sync_watches(self) -> None:
        with self._lock:
            tailers = list(self._tailers.values())
        paths = [p for t in tailers
                 for p in (t.watch_paths() if isinstance(t, SourceTailer) else (t.path,))]
        try:
            problem = self._watcher.update(paths)
        except Exception as e:  # noqa: BLE001 - events are only hints: fall back to the backstop
            problem = f"file watching failed ({e}); polling every {self.interval:g} s"
        if problem and problem != self._watch_problem:
            self._send_status(TailStatus("", "notice", problem))
        self._watch_problem = problem

    def _pass(self, *, final: bool, interruptible: bool) -> int:
        with self._read_lock:
            with self._lock:
                tailers = list(self._tailers.values())
                finish, self._finish = self._finish, set()
            self.passes += 1
            n = 0
            # round-robin, one chunk per file per round: a 1 GB backlog in one file does not
            # hold back the others, and a stop request is seen between chunks
            pending = tailers
            while pending:
                if interruptible and self._stop.is_set():
                    return n
                for t in pending:
                    n += self._dispatch(t.name, t.read())
                pending = [t for t in pending if t.has_more]
            for t in tailers:
                if final or t.name in finish:
                    n += self._dispatch(t.name, t.flush(final=True))
            return n

    def _dispatch(self, name: str, items: list[TailItem]) -> int:
        for item in items:
            try:
                if isinstance(item, TailStatus):
                    self._send_status(item)
                elif isinstance(item, TextChunk):
                    if self.on_text is not None:
                        self.on_text(name, list(item.lines), item.first_line)
                elif self.on_batch is not None:
                    self.on_batch(name, item)
            except Exception as e:
                log.exception("%s: callback failed", name)
                self._send_status(TailStatus(name, "error", f"{name}: handling new data failed "
                                             f"({type(e).__name__}: {e}); that part was dropped"))
        return len(items)

    def _send_status(self, status: TailStatus) -> None:
        if self.on_status is None:
            return
        try:
            self.on_status(status)
        except Exception:
            log.exception("%s: status callback failed", status.path)
