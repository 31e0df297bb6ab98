"""Load a finished (or in-progress) run in one go: what ``inspect``, ``check`` and ``report`` read.

A PATH is either a file of any supported format or a run directory (``metrics.jsonl``,
``metrics.rank{N}.jsonl``, ``console.log``, or a framework's output folder). A W&B log carries
its run's console itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainwatch.batch import RecordBatch

CONSOLE_NAMES = ("console.log", "stdout.log", "train.log", "output.log")
MAX_CONSOLE_LINES = 200_000
"""Enough for every known error text; a runaway log is read from its end."""
MAX_CONSOLE_BYTES = 32 << 20
"""The most of a console log decoded: 200,000 lines of 160 bytes."""
_RANK_FILE = re.compile(r"metrics\.rank(\d+)\.jsonl$")


class LoadError(Exception):
    """Bad input for a command; the message is one line that names the path and what to do."""


@dataclass
class LoadedRun:
    path: Path
    format: str
    main: list[RecordBatch] = field(default_factory=list)
    """Batches of the main metric stream, in order."""
    ranks: dict[int, list[RecordBatch]] = field(default_factory=dict)
    """Per-rank streams of a distributed run (``metrics.rank{N}.jsonl``)."""
    console: list[str] = field(default_factory=list)
    """Lines of ``console.log`` (captured stdout/stderr), if the run has one."""
    console_first_line: int = 1
    files: list[Path] = field(default_factory=list)
    """Every file that was read."""

    @property
    def records(self) -> int:
        return sum(b.n_records for b in self.main)


def rank_of(path: Path) -> int | None:
    m = _RANK_FILE.search(path.name)
    return int(m.group(1)) if m else None


def load_run(path: Path | str) -> LoadedRun:
    """Read everything a run has written so far.

    Raises :class:`LoadError` with a one-line message for a missing, unreadable or unsupported
    path; malformed lines inside a file are not errors (they are counted in the batches).
    """
    from trainwatch.formats.detect import find_metric_files, read_file

    p = Path(path)
    if not p.exists():
        raise LoadError(f"{p}: no such file or directory (check the path)")
    if not os.access(p, os.R_OK):
        raise LoadError(f"{p}: permission denied (make it readable, e.g. chmod +r)")
    if not p.is_dir() and not p.is_file():
        # a FIFO or a device would block the read (or never end): say so instead of hanging
        raise LoadError(f"{p}: not a regular file or directory (give a metrics file or run directory)")
    try:
        if p.is_dir():
            files = find_metric_files(p)
            if not files:
                raise LoadError(_no_run_here(p))
        else:
            files = [p]
        run = LoadedRun(path=p, format="")
        main_file = next((f for f in files if rank_of(f) is None), None)
        console = _ConsoleLines()
        for f in files:
            r = rank_of(f)
            batches = read_file(f, on_text=console.add if f == main_file else None)
            if r is None and f == main_file:
                run.main = batches
                run.format = batches[0].format if batches else "jsonl"
            elif r is not None:
                run.ranks[r] = batches
            run.files.append(f)
        if main_file is None and run.ranks:
            # only rank streams: rank 0 (or the lowest) is the main stream
            first = min(run.ranks)
            run.main = run.ranks[first]
            run.format = "jsonl"
        run.console, run.console_first_line = console.result()
        console_dir = p if p.is_dir() and not run.console else None
        if console_dir is not None:
            for name in CONSOLE_NAMES:
                c = console_dir / name
                if c.is_file() and c not in files:
                    run.console, run.console_first_line = read_console(c)
                    run.files.append(c)
                    break
        return run
    except PermissionError as e:
        raise LoadError(f"{e.filename or p}: permission denied (make it readable)") from None
    except FileNotFoundError as e:
        raise LoadError(f"{e.filename or p}: disappeared while reading (try again)") from None
    except IsADirectoryError as e:
        raise LoadError(f"{e.filename or p}: is a directory, expected a file") from None
    except ValueError as e:  # unsupported format: the reader's message names the file
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise LoadError(msg if msg.startswith(str(p)) else f"{p}: {msg}") from None


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


def _no_run_here(folder: Path) -> str:
    """The one-line error for a folder that is not one run: the runs it holds, if any, and how
    to pick one (the TUI watches a folder of runs; the one-run commands take one of them)."""
    runs = _runs_below(folder)
    if not runs:
        return (f"{folder}: no metrics file found (expected metrics.jsonl or a supported "
                "framework log; see docs/format.md)")
    shown = ", ".join(str(r) for r in runs[:5])
    more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
    latest = folder / "latest-run"
    newest = f"; {latest} is W&B's newest" if latest.is_symlink() and latest.is_dir() else ""
    return (f"{folder}: a folder of {len(runs)} run{'s' if len(runs) > 1 else ''}, not one run; "
            f"give one of them: {shown}{more}{newest}")


def _runs_below(folder: Path, most: int = 50) -> list[Path]:
    """Run directories one level down (a folder of runs, which the TUI watches but the
    one-run commands do not take), in name order; at most ``most`` children looked at. A link
    to a run beside it (W&B's ``latest-run``) is not a run of its own."""
    from trainwatch.formats.detect import find_metric_files

    try:
        children = sorted(c for c in folder.iterdir() if c.is_dir() and not is_sibling_link(c))
    except OSError:
        return []
    children = children[:most]
    out = []
    for c in children:
        try:
            if find_metric_files(c):
                out.append(c)
        except OSError:
            continue
    return out


def is_sibling_link(path: Path) -> bool:
    """``path`` is a link to a folder beside it (W&B's ``wandb/latest-run``): a second name
    for a run that a listing of the folder already holds."""
    if not path.is_symlink():
        return False
    try:
        return path.resolve().parent == path.parent.resolve()
    except OSError:
        return False


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
