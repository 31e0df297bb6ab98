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

Files are opened read-only for one read and closed at once: a writer is never blocked and can
rename or delete the file at any moment (on Windows an open handle would stop it). Following many
files on a worker thread is :class:`trainwatch.follower.Follower`'s job (re-exported here).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainwatch.batch import RecordBatch
from trainwatch.formats.base import Reader

if TYPE_CHECKING:
    from trainwatch.follower import Follower  # noqa: F401 - re-exported lazily: see __getattr__

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


def drop_overwritten(partial: bytes) -> bytes:
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
                self._stream_text(out)
            except Exception as e:  # noqa: BLE001 - a reader bug: report, skip, go on
                self._failed(out, f"{self.name}: the {self.reader.format} reader failed "  # type: ignore[union-attr]
                             f"on bytes {self._offset - len(data):,}-{self._offset:,} "
                             f"({type(e).__name__}: {e}); those bytes were skipped")

    def _stream_text(self, out: list[TailItem]) -> None:
        """Console lines a stream carries (a W&B log's output records), after its batch: they
        go where a ``console.log``'s lines go."""
        take_text = getattr(self.reader, "take_text", None)
        got = take_text() if take_text is not None else None
        if got is not None:
            out.append(TextChunk(self.name, tuple(got[0]), got[1]))

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
            partial = drop_overwritten(partial)
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


def __getattr__(name: str) -> object:
    # ``Follower`` moved to trainwatch.follower, which imports this module: importing it back at
    # load time would be a cycle, so ``from trainwatch.tailer import Follower`` resolves it here,
    # on first use (PEP 562, as ``trainwatch.RunWriter`` does).
    if name == "Follower":
        from trainwatch.follower import Follower

        return Follower
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
