"""The file under a :class:`~trainwatch.writer.RunWriter`: whole lines appended, outages survived.

The writer decides *what* to write and when; this decides how it reaches the disk:

* The file is opened unbuffered in append mode and a batch of lines goes out in one ``write``
  call (looped only when the OS cuts a write short), so a record is never split by us. A write the
  OS cut short (a full disk) leaves a torn last line: the next write starts with a newline, so the
  damage is one malformed line, not two records. A file that an earlier writer left torn is
  ended the same way.
* An error never raises: the lines are counted as dropped, one line on stderr says what failed
  and what to do, and the file is reopened after ``retry_s`` (a fresh, empty file first gets the
  run's header line again, so a reader still sees ``run_start``).
* A file deleted or replaced under the writer (its directory removed, log rotation) is noticed by
  its inode, and the path is opened again instead of writing into an orphan.

stdlib only, like the writer.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

_monotonic = time.monotonic


def open_append(path: Path) -> BinaryIO:
    """Open ``path`` unbuffered for appending: each ``write`` is one ``os.write``.

    Module-level so tests can replace it (a file whose ``write`` fails like a full disk).
    """
    return open(path, "ab", buffering=0)


def say(msg: str) -> None:
    """One line on stderr; never raises (stderr may be closed or None)."""
    err = sys.stderr
    if err is not None:
        with suppress(Exception):  # a closed or broken stderr must not reach training
            err.write(msg + "\n")
            err.flush()


def reason(e: BaseException) -> str:
    """An exception as a short phrase for a one-line message."""
    if isinstance(e, OSError) and e.strerror:
        return f"[Errno {e.errno}] {e.strerror}" if e.errno else e.strerror
    return one_line(type(e), e)


def one_line(exc_type: type[BaseException], exc: BaseException | None) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    try:
        msg = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else ""
    except Exception:  # noqa: BLE001 - a broken __str__ must not mask the exception itself
        msg = ""
    text = f"{exc_type.__name__}: {msg}" if msg else exc_type.__name__
    return text[:300]


class AppendFile:
    """One metrics file, appended to in whole lines (see the module doc). Not thread-safe: the
    writer calls it under its I/O lock."""

    def __init__(self, path: Path, retry_s: float, say_once: Callable[[str, str], None],
                 on_recover: Callable[[], None], say: Callable[[str], None] = say) -> None:
        """``say_once(key, message)``: a message the writer prints once per key;
        ``on_recover()``: called when a write succeeds after a reported outage;
        ``say(message)``: where the outage is reported."""
        self.path = path
        self.retry_s = retry_s
        """Seconds between attempts to reopen the file after an error."""
        self.header: str | None = None
        """The line a fresh (empty) file starts with (the run's ``run_start``), once known."""
        self._say_once = say_once
        self._on_recover = on_recover
        self._say = say
        self._fh: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None  # (dev, inode) of the open file
        self._torn = False  # the file ends in a partial line: start the next write with \n
        self._needs_header = False  # a reopened empty file first gets the header
        self._failing = False  # in an outage that has been reported
        self._retry_at = 0.0

    def open(self, failure: str | None = None) -> bool:
        """(Re)open the file; False (reported once per outage) when it cannot be."""
        try:
            fh = open_append(self.path)
        except OSError as e:
            self.defer()
            self.outage(f"{failure or f'cannot open {self.path}'} ({reason(e)})")
            return False
        self._fh = fh
        self._ident = None
        try:
            st = os.fstat(fh.fileno())
            self._ident = (st.st_dev, st.st_ino)
            size = st.st_size
        except (OSError, AttributeError, ValueError):
            size = -1
        self._needs_header = size == 0 and self.header is not None
        if size == 0:
            self._torn = False
        elif size > 0:  # this or an earlier writer may have died mid-line
            try:
                with open(self.path, "rb") as r:
                    r.seek(-1, os.SEEK_END)
                    self._torn = r.read(1) != b"\n"
            except OSError:
                pass
        return True

    def write(self, lines: list[str]) -> int:
        """Append ``lines`` (ASCII, no newlines) with one write call; returns how many of them
        were lost (all of them while the file cannot be opened, those past a short write)."""
        if self._fh is not None and not self._same_file():
            # the file or its directory was deleted (writes would go to an orphan inode) or
            # replaced: open the path again, which starts a new file if the directory exists
            self.close()
            gone = f"{self.path} was deleted or replaced during the run"
            if self.open(failure=f"{gone} and cannot be created again"):
                self._say_once("gone", f"trainwatch: {gone}; writing a new file there")
        elif self._fh is None and _monotonic() >= self._retry_at:
            self.open()
        fh = self._fh
        if fh is None:
            return len(lines)
        prefix = b"\n" if self._torn else b""
        if self._needs_header and self.header is not None:
            prefix += self.header.encode("ascii") + b"\n"
        data = ("\n".join(lines) + "\n").encode("ascii")  # ASCII: the encoder escapes the rest
        if prefix:
            data = prefix + data
        view = memoryview(data)
        try:
            while view:
                n = fh.write(view)
                if not n:  # None is for non-blocking files; 0 would loop forever
                    raise OSError(errno.EIO, "write made no progress")
                view = view[n:]
        except OSError as e:
            written = len(data) - len(view)
            whole = data[:written].count(b"\n") - prefix.count(b"\n")
            if written:
                self._torn = data[written - 1 : written] != b"\n"
            self.close()
            self.defer()
            self.outage(f"cannot write {self.path} ({reason(e)})")
            return len(lines) - max(0, whole)
        self._torn = False
        self._needs_header = False
        if self._failing:
            self._failing = False
            self._on_recover()
        return 0

    def defer(self) -> None:
        """No new attempt to open the file for ``retry_s``."""
        self._retry_at = _monotonic() + self.retry_s

    def retry_now(self) -> None:
        """The next write tries to open the file whatever the delay (a last try at close)."""
        self._retry_at = 0.0

    def outage(self, what: str) -> None:
        """Report a failure, once per outage."""
        if not self._failing:
            self._failing = True
            self._say(
                f"trainwatch: {what}; dropping metric records (see RunWriter.dropped) and retrying"
                f" every {self.retry_s:g} s: free disk space or restore the directory"
                " and its permissions"
            )

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with suppress(Exception):  # closing flushes nothing (unbuffered); errors are moot
                fh.close()

    def forget(self) -> None:
        """In a forked child: let go of the inherited descriptor without touching the file (it
        is closed when the object is collected)."""
        self._fh = None

    def _same_file(self) -> bool:
        if self._ident is None:
            return True
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._ident
