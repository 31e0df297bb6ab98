"""One run stored as many small appended text files, one per series (MLflow's ``mlruns/``
metric files, DVCLive's TSVs), polled for new lines.

Each file is followed by a :class:`~trainwatch.tailer.FileTailer` in text mode, the tailing every
appended file gets (byte offset, a partial last line held until its newline, truncation and
replacement seen), so a poll costs one ``stat`` per unchanged file. New files are looked for on
every poll (a series first logged late). A file that was truncated or replaced means the run
was written again from the start (DVCLive starts its files afresh in a new run): every file is
read again, and the batch is a ``reset``. A format says which files are series and what a line
is (:meth:`TextFilesSource.series_files`, :meth:`TextFilesSource.parse`); their points join into
records by step (:mod:`~trainwatch.formats._points`).
"""

from __future__ import annotations

import os
import time as _time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState
from trainwatch.formats._points import Point, StepMerger
from trainwatch.tailer import FileTailer, TailStatus, TextChunk

MAX_FILES = 4096
"""Series files followed at most (a run logging more is cut there, and says so)."""


class TextFilesSource:
    """What every many-files run source holds; a format fills in the hooks."""

    format = ""

    def __init__(self, root: Path, run_id: str, *,
                 clock: Callable[[], float] = _time.time) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.name = f"{root}#{run_id}" if run_id else str(root)
        self.clock = clock
        self.state = StreamState()
        self.merger = StepMerger()
        self.has_more = False
        self._files: dict[str, FileTailer] = {}
        self._too_many = False
        self._meta_sent = False

    @property
    def holding(self) -> bool:
        return self.merger.holding

    def watch_paths(self) -> Sequence[Path]:
        """The series files known so far (a file that appears is found by the next poll: the
        follower's backstop, or an event on a known file)."""
        return [t.path for t in self._files.values()] or [self.root]

    def last_written(self) -> float | None:
        return self.state.last_time

    def poll(self, *, final: bool = False) -> list[RecordBatch]:
        if not self.root.is_dir():
            raise FileNotFoundError(2, "no such folder (waiting for it to come back)",
                                    str(self.root))
        self.before_read()
        builder = BatchBuilder(self.name, self.state, self.format, self.clock)
        points, reset = self._read(builder, final)
        if reset:
            self.restart()
            builder = BatchBuilder(self.name, self.state, self.format, self.clock)
            points, _ = self._read(builder, final)
        self.add(builder, points, final=final and not self.has_more)
        meta = None if self._meta_sent else self.meta()
        self._meta_sent = True
        batch = builder.build(reset=reset, meta=meta)
        return [] if batch.is_empty() and not batch.meta else [batch]

    def restart(self) -> None:
        self._files.clear()
        self.state.reset()
        self.merger.reset()
        self._meta_sent = False

    def _read(self, builder: BatchBuilder, final: bool) -> tuple[list[Point], bool]:
        """New points of every file, each file's in its order; and whether a file was reset."""
        self._scan(builder)
        points: list[Point] = []
        self.has_more = False
        for key, tailer in self._files.items():
            items = tailer.read()
            if final and not tailer.has_more:
                items += tailer.flush(final=True)
            self.has_more |= tailer.has_more
            for item in items:
                if isinstance(item, TailStatus):
                    if item.state == "reset":
                        return [], True
                    continue  # waiting / error: the follower's backstop tries again
                if isinstance(item, TextChunk):
                    points += self._points(builder, key, item)
        return points, False

    def _points(self, builder: BatchBuilder, key: str, chunk: TextChunk) -> Iterator[Point]:
        for i, text in enumerate(chunk.lines):
            line = chunk.first_line + i
            if not text.strip():
                continue
            try:
                point = self.parse(key, line, text)
            except ValueError as e:
                builder.add_malformed(line, f"{key}: line {line}: {e}; skipped")
                continue
            if point is not None:
                yield point

    def _scan(self, builder: BatchBuilder) -> None:
        for key, path in self.series_files():
            if key in self._files:
                continue
            if len(self._files) >= MAX_FILES:
                if not self._too_many:
                    builder.add_malformed(0, f"{self.root}: more than {MAX_FILES} series files; "
                                          "the others are not read")
                    self._too_many = True
                return
            self._files[key] = FileTailer(path, text=True)

    # ------------------------------------------------------------------ the format's part
    def before_read(self) -> None:
        """Read what must not be newer than the lines read next (a run's status: read after
        them, an end written meanwhile would come before its last lines)."""

    def series_files(self) -> Iterator[tuple[str, Path]]:
        """(series name, file) of every series file there is now."""
        raise NotImplementedError

    def parse(self, key: str, line: int, text: str) -> Point | None:
        """The point a line holds (None: a header); ValueError for a bad line."""
        raise NotImplementedError

    def add(self, builder: BatchBuilder, points: list[Point], *, final: bool) -> None:
        """Records of the points read (and any events)."""
        self.merger.push(points, final=final).add_to(builder)

    def meta(self) -> dict[str, Any] | None:
        """Facts for the first batch (DVCLive's params)."""
        return None


def walk_files(root: Path, suffix: str = "") -> Iterator[tuple[str, Path]]:
    """(path relative to ``root`` with ``/``, without ``suffix``; path) of every file below
    ``root`` ending in ``suffix``, sorted; hidden names are skipped."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if name.startswith(".") or not name.endswith(suffix):
                continue
            stem = name[: len(name) - len(suffix)] if suffix else name
            key = stem if rel == "." else f"{rel.replace(os.sep, '/')}/{stem}"
            yield key, Path(dirpath) / name

