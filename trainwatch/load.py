"""Open a finished (or in-progress) run: what ``inspect``, ``check`` and ``report`` read.

A PATH is a file of any supported format, a run directory (``metrics.jsonl``,
``metrics.rank{N}.jsonl``, ``console.log``, or a framework's output folder), or a store of runs
(:mod:`trainwatch.run_stores`: an MLflow or trackio database, ``mlruns/``, a DVCLive folder, a
folder of run directories), of which one run is read: the one ``run`` names, or the only one.

The metric streams are not held: a :class:`FileBatches` reads its file chunk by chunk each time
it is walked, so a command holds one read chunk's batch at a time however long the run (#15), and
one that walks a stream twice reads the file twice; a store's run is read through a fresh source
on each walk (:class:`StoredBatches`). A W&B log carries its run's console itself: the console
is the run's once the log has been walked.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainwatch.batch import RecordBatch
from trainwatch.run_stores import SelectError, StoredRun, open_store, select_run

CONSOLE_NAMES = ("console.log", "stdout.log", "train.log", "output.log")
MAX_CONSOLE_LINES = 200_000
"""Enough for every known error text; a runaway log is read from its end."""
MAX_CONSOLE_BYTES = 32 << 20
"""The most of a console log decoded: 200,000 lines of 160 bytes."""
_RANK_FILE = re.compile(r"metrics\.rank(\d+)\.jsonl$")
READ_CHUNK = 1 << 20
"""Bytes a command's walk of a stream reads at a time. Parsing a chunk of JSON lines needs ~12x
its size for a moment (the decoded records): 1 MiB reads as fast as 4 MiB, with a sixth of the
peak (#15)."""


class LoadError(Exception):
    """Bad input for a command; the message is one line that names the path and what to do."""


class RunChoiceError(LoadError):
    """A store's run could not be chosen (several and no ``--run``, or no match): the message
    says how to pick; ``runs`` are the runs to list for it."""

    def __init__(self, message: str, runs: tuple[StoredRun, ...]) -> None:
        super().__init__(message)
        self.runs = runs


class FileBatches:
    """The batches of one metrics file, read chunk by chunk each time they are iterated.

    The format is detected once, when made (an unknown one raises ``ValueError`` then); each walk
    reads the file with a fresh reader. A read that fails raises :class:`LoadError`, one line
    naming the file.
    """

    def __init__(self, path: Path) -> None:
        from trainwatch.formats.detect import detect_format, read_head

        self.path = path
        self.format = detect_format(path, read_head(path))
        """The reader's format (one of ``trainwatch.formats.detect.FORMATS``)."""
        self.on_console: Callable[[list[str], int], None] | None = None
        """For a stream that carries the run's console (a W&B log): given the console's lines
        (the last :data:`MAX_CONSOLE_LINES`) and the number of the first, at the end of a walk."""

    def __iter__(self) -> Iterator[RecordBatch]:
        from trainwatch.formats.read import iter_file

        console = _ConsoleLines() if self.on_console is not None else None
        try:
            yield from iter_file(self.path, fmt=self.format, chunk_bytes=READ_CHUNK,
                                 on_text=console.add if console is not None else None)
        except (OSError, ValueError) as e:
            raise load_error(e, self.path) from None
        if console is not None and self.on_console is not None:
            self.on_console(*console.result())

    def first_format(self) -> str:
        """The format the first batch carries ("jsonl" for a file with none), from the file's
        first 64 KiB (a snapshot file is parsed whole: a bad one fails here, when opened)."""
        from trainwatch.formats.read import iter_file

        for b in iter_file(self.path, fmt=self.format, chunk_bytes=64 << 10):
            return b.format
        return "jsonl"


@dataclass
class LoadedRun:
    path: Path
    format: str
    main: Iterable[RecordBatch] = field(default_factory=list)
    """Batches of the main metric stream, in order: a list, or a :class:`FileBatches` that reads
    the file again on each walk (walk it as few times as the work allows)."""
    ranks: dict[int, Iterable[RecordBatch]] = field(default_factory=dict)
    """Per-rank streams of a distributed run (``metrics.rank{N}.jsonl``), like ``main``."""
    console: list[str] = field(default_factory=list)
    """Lines of ``console.log`` (captured stdout/stderr), if the run has one."""
    console_first_line: int = 1
    files: list[Path] = field(default_factory=list)
    """Every file that was read."""
    run_id: str | None = None
    """The run's id in its store (None for a file or run directory given as such)."""
    run_name: str | None = None

    def take_console(self, lines: list[str], first_line: int) -> None:
        """The console a metrics stream carried (a W&B log's), once a walk of it has ended."""
        self.console, self.console_first_line = lines, first_line

    @property
    def records(self) -> int:
        """Records of the main stream (a walk of it)."""
        return sum(b.n_records for b in self.main)


def rank_of(path: Path) -> int | None:
    m = _RANK_FILE.search(path.name)
    return int(m.group(1)) if m else None


def load_run(path: Path | str, run: str | None = None) -> LoadedRun:
    """Read everything a run has written so far (``run``: which run of a store, by name or id).

    Raises :class:`LoadError` with a one-line message for a missing, unreadable or unsupported
    path (:class:`RunChoiceError` when a store's run cannot be chosen); malformed lines inside
    a file are not errors (they are counted in the batches).
    """
    p = Path(path)
    if not p.exists():
        raise LoadError(f"{p}: no such file or directory (check the path)")
    if not os.access(p, os.R_OK):
        raise LoadError(f"{p}: permission denied (make it readable, e.g. chmod +r)")
    if not p.is_dir() and not p.is_file():
        # a FIFO or a device would block the read (or never end): say so instead of hanging
        raise LoadError(f"{p}: not a regular file or directory (give a metrics file or run directory)")
    try:
        store = open_store(p)
    except (OSError, sqlite3.Error) as e:
        raise LoadError(f"{p}: cannot read it ({_reason(e)})") from None
    if store is None:
        if run is not None:
            raise LoadError(f"{p}: holds one run, not several; --run picks a run of a store "
                            "(an MLflow or trackio database, mlruns/, a folder of runs)")
        return _load_path(p)
    try:
        chosen = select_run(store, run)
    except SelectError as e:
        raise RunChoiceError(str(e), e.runs) from None
    if chosen.directory is not None:
        loaded = _load_path(chosen.directory)
    else:
        loaded = _load_stored(chosen)
    loaded.run_id, loaded.run_name = chosen.run_id, chosen.name
    return loaded


def _load_stored(stored: StoredRun) -> LoadedRun:
    """A store's run, read through its source to the end."""
    assert stored.source is not None
    run = LoadedRun(path=stored.store, format=stored.format)
    try:
        run.files = [f for f in stored.source().watch_paths() if f.is_file()]
    except (OSError, sqlite3.Error) as e:
        raise LoadError(f"{stored.store}: cannot read run {stored.run_id} ({_reason(e)})") from None
    run.main = StoredBatches(stored)
    return run


class StoredBatches:
    """A store's run, read through a fresh source each time it is walked (as
    :class:`FileBatches` reads a file: one poll's batches held at a time)."""

    def __init__(self, stored: StoredRun) -> None:
        assert stored.source is not None
        self.stored = stored

    def __iter__(self) -> Iterator[RecordBatch]:
        stored = self.stored
        try:
            source = stored.source()  # type: ignore[misc]
            while True:
                yield from source.poll(final=True)
                if not source.has_more:
                    break
        except (OSError, sqlite3.Error) as e:
            raise LoadError(f"{stored.store}: cannot read run {stored.run_id} "
                            f"({_reason(e)})") from None


def _reason(e: BaseException) -> str:
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).splitlines()[0]


def _load_path(p: Path) -> LoadedRun:
    """A metrics file or a run directory."""
    from trainwatch.formats.detect import find_metric_files

    try:
        if p.is_dir():
            files = find_metric_files(p)
            if not files:
                raise LoadError(f"{p}: no metrics file found (expected metrics.jsonl or a "
                                "supported framework log; see docs/format.md)")
        else:
            files = [p]
        run = LoadedRun(path=p, format="")
        main_file = next((f for f in files if rank_of(f) is None), None)
        carries_console = False
        for f in files:
            r = rank_of(f)
            batches = FileBatches(f)
            if r is None and f == main_file:
                if batches.format == "wandb":  # its console comes with its records
                    batches.on_console = run.take_console
                    carries_console = True
                run.main = batches
                run.format = batches.first_format()
            elif r is not None:
                run.ranks[r] = batches
            run.files.append(f)
        if main_file is None and run.ranks:
            # only rank streams: rank 0 (or the lowest) is the main stream
            first = min(run.ranks)
            run.main = run.ranks[first]
            run.format = "jsonl"
        console_dir = p if p.is_dir() and not carries_console else None
        if console_dir is not None:
            for name in CONSOLE_NAMES:
                c = console_dir / name
                if c.is_file() and c not in files:
                    run.console, run.console_first_line = read_console(c)
                    run.files.append(c)
                    break
        return run
    except (PermissionError, FileNotFoundError, IsADirectoryError, ValueError) as e:
        raise load_error(e, p) from None


def load_error(e: OSError | ValueError, p: Path) -> LoadError | OSError:
    """A reading error of the run at ``p`` as one line that names the file and what to do."""
    if isinstance(e, PermissionError):
        return LoadError(f"{e.filename or p}: permission denied (make it readable)")
    if isinstance(e, FileNotFoundError):
        return LoadError(f"{e.filename or p}: disappeared while reading (try again)")
    if isinstance(e, IsADirectoryError):
        return LoadError(f"{e.filename or p}: is a directory, expected a file")
    if isinstance(e, ValueError):  # unsupported format: the reader's message names the file
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return LoadError(msg if msg.startswith(str(p)) else f"{p}: {msg}")
    return e  # another OSError (a disk error): as it was


class _ConsoleLines:
    """Console lines a metrics stream carries (W&B), at most :data:`MAX_CONSOLE_LINES`: the
    last ones, numbered as in the whole console, as :func:`read_console` keeps a log's."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.first = 1

    def add(self, lines: Sequence[str], first_line: int) -> None:
        if not self.lines:
            self.first = first_line
        self.lines.extend(lines)
        if len(self.lines) > 2 * MAX_CONSOLE_LINES:  # trimmed now and then, not per call
            self._trim()

    def _trim(self) -> None:
        drop = len(self.lines) - MAX_CONSOLE_LINES
        if drop > 0:
            del self.lines[:drop]
            self.first += drop

    def result(self) -> tuple[list[str], int]:
        self._trim()
        return self.lines, self.first


def read_console(
    path: Path, limit: int = MAX_CONSOLE_LINES, max_bytes: int = MAX_CONSOLE_BYTES
) -> tuple[list[str], int]:
    """Console text as lines; tqdm's carriage-return redraws keep only their last state.

    Returns (lines, number of the first returned line) so messages can cite line numbers. Only
    the last ``max_bytes`` are decoded (the whole lines among them): a runaway log of gigabytes
    would otherwise be held in memory whole. The lines before are counted, not kept, so the
    numbers stay those of the file.
    """
    first = 1
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        f.seek(0)
        ends_line = True  # the skipped part ends with a newline: the tail starts a whole line
        left = start
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            first += chunk.count(b"\n")
            ends_line = chunk.endswith(b"\n")
            left -= len(chunk)
        data = f.read()
    if not ends_line:  # the tail begins inside a line: that piece is no line of its own
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""
        first += 1
    text = data.decode("utf-8", errors="replace")
    lines = [_last_redraw(ln) for ln in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > limit:
        first += len(lines) - limit
        lines = lines[-limit:]
    return lines, first


def _last_redraw(line: str) -> str:
    """``"a\\rb\\rc"`` -> ``"c"``: a progress bar redrawn in place shows its last state."""
    line = line.rstrip("\r")
    return line.rsplit("\r", 1)[-1] if "\r" in line else line
