"""Live following of files: every record once, none lost, whatever the writer or the events do.

:class:`FileTailer` follows one path. It keeps a byte offset, the partial last line and the
number of the next line, and each :meth:`FileTailer.read` reads at most ``chunk_bytes`` of new
bytes, so a 1 GB backlog streams as many bounded batches. A truncated, replaced or re-created
file is read again from the top and the next batch has ``reset=True``. Replacement is detected by
``(st_dev, st_ino)`` and, because a re-created file often gets the freed inode back, by a
fingerprint: the first :data:`HEAD_BYTES` of the file and the :data:`MARK_BYTES` just before the
offset must still be what we read there. A file truncated and regrown past the old offset
between two polls is therefore caught unless it holds the same bytes at both places, and then
reading on from the offset yields exactly the new content anyway.

:class:`Follower` owns one thread that follows a set of files and hands what is new to
callbacks. Files are opened read-only for one read and closed at once: a writer is never blocked
and can rename or delete the file at any moment (on Windows an open handle would stop it).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainwatch.batch import RecordBatch
from trainwatch.formats.base import Reader
from trainwatch.watch import DirWatcher, NoWake, WakeSource

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20
"""Bytes read per step: bounds both the memory a reader sees and the work between checks."""
MAX_LINE_BYTES = 4 << 20
"""A line without a newline after this many bytes is handed on as it is and the rest skipped."""
HEAD_BYTES = 1024
MARK_BYTES = 64

StatusState = Literal["waiting", "appeared", "reset", "error", "notice"]
ReaderFactory = Callable[[Path], Reader]


@dataclass(frozen=True, slots=True)
class TailStatus:
    """A change in how a followed file can be read; sent once per change, not per poll."""

    path: str
    """The path as given to ``follow``; "" for a notice about the follower itself."""
    state: StatusState
    """``waiting`` (missing or deleted), ``appeared`` (readable again), ``reset`` (read again from
    the top: drop what came from it), ``error`` (cannot read, or a reader or callback failed on
    some data; still followed), ``notice`` (e.g. file events unavailable: polling instead)."""
    message: str
    """One line for a person: the file, what happened, what to do."""


@dataclass(frozen=True, slots=True)
class TextChunk:
    """Whole lines of a text file (``console.log``), decoded, as a terminal would show them."""

    path: str
    lines: tuple[str, ...]
    first_line: int
    """1-based number of ``lines[0]`` in the file."""


@dataclass(frozen=True, slots=True)
class ReadProgress:
    """How far a file has been read, for a progress indicator while a backlog loads."""

    bytes_read: int
    size: int

    @property
    def fraction(self) -> float:
        return 1.0 if self.size <= 0 else min(1.0, self.bytes_read / self.size)


TailItem = RecordBatch | TextChunk | TailStatus


def _open_ro(path: Path) -> int:
    """Open read-only without locking (module level so tests can make it fail)."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))


def _pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows
    return os.read(fd, n)


def terminal_text(line: bytes) -> str:
    """What a terminal shows for one line: ``\\r`` returns to column 0, so the last non-empty
    ``\\r`` segment wins (tqdm redraws its bar that way); bad bytes become U+FFFD."""
    segs = line.rstrip(b"\r\n").split(b"\r")
    for seg in reversed(segs):
        if seg:
            return seg.decode("utf-8", errors="replace")
    return ""


def _drop_overwritten(partial: bytes) -> bytes:
    """Forget the part of an unfinished text line that a later ``\\r`` overwrote, so a tqdm bar
    redrawn for hours without a newline keeps only its current text in memory."""
    i = len(partial) - 1
    while i > 0:
        i = partial.rfind(b"\r", 0, i)
        if i < 0:
            break
        if partial[i + 1 : i + 2] not in (b"\r", b""):
            return partial[i + 1 :]
    return partial


class FileTailer:
    """Follows one file; :meth:`read` returns what is new as batches, text chunks and statuses.

    Give either a ``reader`` (an instance of a reader of ``trainwatch.formats.base`` or a
    factory called with the path) or ``text=True``. Not thread-safe: one thread calls it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        reader: Reader | ReaderFactory | None = None,
        *,
        text: bool = False,
        chunk_bytes: int = CHUNK_BYTES,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        if (reader is None) != text:
            raise ValueError("FileTailer needs either a reader or text=True, not both")
        self.path = Path(path)
        self.name = str(path)
        """The path as given: the key callbacks receive."""
        if reader is not None and (isinstance(reader, type) or not hasattr(reader, "kind")):
            reader = reader(self.path)  # a factory
        self.reader: Reader | None = reader
        self.kind = "text" if reader is None else reader.kind
        self.chunk_bytes = chunk_bytes
        self.max_line_bytes = max_line_bytes
        self.has_more = True
        """True when the last read stopped before the end of the file (read again at once)."""
        self.wants_retry = False
        """True when a snapshot was half-written: read again soon even if nothing changed."""
        self.progress = ReadProgress(0, 0)
        self._ident: tuple[int, int] | None = None
        self._seen: tuple[int, int, int, int] | None = None  # dev, ino, size, mtime_ns
        self._offset = 0
        self._partial = b""
        self._next_line = 1
        self._head = b""
        self._mark = b""
        self._skipping = False  # discarding the rest of an over-long line
        self._pending_reset = False
        self._gone = False  # we read it, then it disappeared: its return is a reset
        self._state: StatusState | None = None
        self._message = ""

    # ------------------------------------------------------------------ reading
    def read(self) -> list[TailItem]:
        """Read at most ``chunk_bytes`` of new data. Never raises: problems become statuses."""
        out: list[TailItem] = []
        self.has_more = False
        try:
            self._read(out)
        except Exception as e:  # noqa: BLE001 - a reader bug or odd file must not kill the worker
            self._status(out, "error", f"{self.name}: cannot read ({type(e).__name__}: {e}); "
                         "retrying, report this if it persists")
        return out

    def flush(self, *, final: bool = True) -> list[TailItem]:
        """Hand on a last line that has no newline. Only when the writer is done (``final``):
        a line still being written would be cut in two."""
        out: list[TailItem] = []
        if not final or not self._partial or self._skipping:
            return out
        data, self._partial = self._partial, b""
        self._hand_lines(out, data + b"\n")  # reader failures become statuses there
        return out

    def _read(self, out: list[TailItem]) -> None:
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            self._missing(out)
            return
        except PermissionError:
            self._status(out, "error", f"{self.name}: permission denied on its directory; "
                         "make it searchable (chmod a+x) or run as its owner; retrying")
            return
        if not stat.S_ISREG(st.st_mode):
            self._status(out, "error", f"{self.name}: not a regular file; point trainwatch at "
                         "the file itself; retrying")
            return
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._seen and not self.wants_retry and not self._gone:
            self._status(out, "appeared", "")
            return  # nothing changed: idle cost is this one stat
        try:
            fd = _open_ro(self.path)
        except FileNotFoundError:
            self._missing(out)
            return
        except PermissionError:
            self._status(out, "error", f"{self.name}: permission denied; make it readable "
                         f"(chmod a+r {self.name}) or run trainwatch as its owner; retrying")
            return
        try:
            st = os.fstat(fd)  # the file we actually opened, whatever the path points at now
            self._status(out, "appeared", "")
            if self.kind == "snapshot":
                self._read_snapshot(out, fd, st)
            else:
                self._check_identity(out, fd, st)
                self._read_chunk(out, fd, st)
        finally:
            os.close(fd)

    def _missing(self, out: list[TailItem]) -> None:
        if self._ident is not None or self._offset:
            self._gone = True
            msg = (f"{self.name}: file was deleted or moved away; keeping what was read and "
                   "waiting for it to come back")
        elif not self.path.parent.is_dir():
            msg = (f"{self.name}: waiting for the file (its directory {self.path.parent} does "
                   "not exist yet)")
        else:
            msg = f"{self.name}: waiting for the file to be created"
        self._status(out, "waiting", msg)

    def _check_identity(self, out: list[TailItem], fd: int, st: os.stat_result) -> None:
        ident = (st.st_dev, st.st_ino)
        why = None
        if self._gone:
            why = "was re-created"
        elif self._ident is not None and ident != self._ident:
            why = "was replaced by a new file"
        elif st.st_size < self._offset:
            why = f"was truncated ({st.st_size:,} bytes < {self._offset:,} already read)"
        elif self._offset and (
            _pread(fd, len(self._head), 0) != self._head
            or _pread(fd, len(self._mark), self._offset - len(self._mark)) != self._mark
        ):
            why = "was rewritten (its content before the read position changed)"
        self._ident = ident
        self._gone = False
        if why is None:
            return
        self._offset, self._partial, self._next_line = 0, b"", 1
        self._head, self._mark, self._skipping = b"", b"", False
        self._pending_reset = True
        self._state = None  # a reset is always reported, even twice in a row
        self._status(out, "reset", f"{self.name}: {why}; reading it again from the top")

    def _read_chunk(self, out: list[TailItem], fd: int, st: os.stat_result) -> None:
        data = _pread(fd, self.chunk_bytes, self._offset)
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        self._offset += len(data)
        self._mark = (self._mark + data[-MARK_BYTES:])[-MARK_BYTES:]
        size = max(st.st_size, self._offset)
        self.progress = ReadProgress(self._offset, size)
        self.has_more = self._offset < size
        # remember the state only once caught up, so an unchanged stat means "nothing new"
        self._seen = None if self.has_more else (st.st_dev, st.st_ino, size, st.st_mtime_ns)
        if self.kind != "stream":
            self._split_lines(out, data)
        elif data or self._pending_reset:
            reset, self._pending_reset = self._pending_reset, False
            try:
                self._emit(out, self.reader.feed(data, reset=reset))  # type: ignore[union-attr]
            except Exception as e:  # noqa: BLE001 - a reader bug: report, skip, go on
                self._failed(out, f"{self.name}: the {self.reader.format} reader failed "  # type: ignore[union-attr]
                             f"on bytes {self._offset - len(data):,}-{self._offset:,} "
                             f"({type(e).__name__}: {e}); those bytes were skipped")

    def _split_lines(self, out: list[TailItem], data: bytes) -> None:
        buf = self._partial + data
        if self._skipping:
            nl = buf.find(b"\n")
            if nl < 0:
                self._partial = b""
                return
            buf, self._skipping = buf[nl + 1 :], False
        cut = buf.rfind(b"\n") + 1
        whole, partial = buf[:cut], buf[cut:]
        if self.kind == "text":
            partial = _drop_overwritten(partial)
        if len(partial) > self.max_line_bytes:
            # hand it on as one line (the reader reports it as too long), skip to its newline
            whole, partial, self._skipping = whole + partial + b"\n", b"", True
        self._partial = partial
        if whole or (self._pending_reset and self.kind != "text"):
            self._hand_lines(out, whole)

    def _hand_lines(self, out: list[TailItem], whole: bytes) -> None:
        first, n = self._next_line, whole.count(b"\n")
        self._next_line += n
        reset, self._pending_reset = self._pending_reset, False
        if self.kind == "text":
            lines = tuple(terminal_text(ln) for ln in whole.split(b"\n")[:n])
            if lines:
                out.append(TextChunk(self.name, lines, first))
            return
        try:
            batch = self.reader.parse(whole, first, reset=reset)  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 - a reader bug: report, skip, go on
            self._failed(out, f"{self.name}:{first}-{first + max(n - 1, 0)}: the "
                         f"{self.reader.format} reader failed ({type(e).__name__}: {e}); "  # type: ignore[union-attr]
                         "these lines were skipped")
            return
        self._emit(out, batch)

    def _read_snapshot(self, out: list[TailItem], fd: int, st: os.stat_result) -> None:
        chunks, n = [], 0
        while chunk := _pread(fd, self.chunk_bytes, n):
            chunks.append(chunk)
            n += len(chunk)
        data = b"".join(chunks)
        self._ident, self._gone = (st.st_dev, st.st_ino), False
        self.progress = ReadProgress(len(data), len(data))
        batch = self.reader.parse_snapshot(data)  # type: ignore[union-attr]
        self.wants_retry = batch is None
        self._seen = None if batch is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if batch is not None:
            self._emit(out, batch)

    def _emit(self, out: list[TailItem], batch: RecordBatch) -> None:
        if not batch.is_empty():
            out.append(batch)

    def _failed(self, out: list[TailItem], message: str) -> None:
        """A reader failed on some data: reported once, and the file's state is unchanged."""
        out.append(TailStatus(self.name, "error", message))

    def _status(self, out: list[TailItem], state: StatusState, message: str) -> None:
        """Report a state once when it changes. Reaching ``appeared`` is only reported after
        ``waiting`` or ``error`` (a file there from the start needs no news)."""
        prev, self._state = self._state, state
        if state == "appeared":
            if prev == "waiting":
                out.append(TailStatus(self.name, state, f"{self.name}: file appeared; reading it"))
            elif prev == "error":
                out.append(TailStatus(self.name, state, f"{self.name}: readable again; resuming"))
            return
        if prev != state or message != self._message:
            self._message = message
            out.append(TailStatus(self.name, state, message))


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
        self._tailers: dict[str, FileTailer] = {}
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

    def _add(self, tailer: FileTailer) -> str:
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
            paths = [t.path for t in self._tailers.values()]
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
