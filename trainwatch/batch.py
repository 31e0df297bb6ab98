"""Immutable values that carry parsed records from a reader to the store, the rules and the UI.

A reader turns bytes into a :class:`RecordBatch`: per-record arrays (step, time, segment) plus
one :class:`SeriesChunk` per metric that appeared in the batch. Batches are frozen so they can
cross from the ingest thread into the UI thread without copies or locks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EMPTY_I64 = np.empty(0, dtype=np.int64)
EMPTY_F64 = np.empty(0, dtype=np.float64)
EMPTY_I32 = np.empty(0, dtype=np.int32)


@dataclass(frozen=True, slots=True)
class Event:
    """A record with an ``event`` key: ``run_start``, ``checkpoint``, ``eval``, ``run_end``..."""

    name: str
    step: int
    time: float
    line: int
    """1-based line number in the source (0 when the format has no lines)."""
    fields: Mapping[str, Any]
    """Every other key of the record, unflattened (``config`` stays a dict)."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """A line that could not be used; it is counted and skipped, never fatal."""

    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class Rewind:
    """A record whose step is lower than the previous one: a resumed or appended run."""

    line: int
    from_step: int
    to_step: int
    segment: int
    """Index of the segment this record starts."""


@dataclass(frozen=True, slots=True)
class SeriesChunk:
    """The points of one metric inside one batch, in record order."""

    rows: np.ndarray
    """int32 indices of the records (within the batch) that carry this metric."""
    steps: np.ndarray
    """int64 step of each point."""
    values: np.ndarray
    """float64 value; NaN and +-inf are real values (non-finite), never "missing"."""
    times: np.ndarray
    """float64 unix seconds of each point."""
    segments: np.ndarray
    """int32 segment of each point (0 until the first rewind)."""

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def nonfinite(self) -> int:
        return int(np.count_nonzero(~np.isfinite(self.values)))


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Everything parsed from one read of one source."""

    source: str
    """Path (or stream name) the records came from."""
    first_record: int
    """Global index (in this source, since its last reset) of the batch's first record."""
    steps: np.ndarray
    """int64 step of each record (metric records and events alike)."""
    times: np.ndarray
    """float64 unix seconds of each record."""
    segments: np.ndarray
    """int32 segment of each record."""
    series: Mapping[str, SeriesChunk]
    events: tuple[Event, ...] = ()
    notes: tuple[tuple[int, Mapping[str, Any]], ...] = ()
    """(row, fields) for records that carried strings or lists: kept, but not series."""
    malformed: tuple[Malformed, ...] = ()
    rewinds: tuple[Rewind, ...] = ()
    rank: int | None = None
    """Distributed rank of the stream (from ``metrics.rank{N}.jsonl`` or a ``rank`` key)."""
    reset: bool = False
    """True when the source was truncated or replaced: this batch starts the stream again."""
    format: str = "jsonl"
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Format-specific facts (e.g. mmcv's run meta line, HF's ``max_steps``)."""

    @property
    def n_records(self) -> int:
        return int(self.steps.shape[0])

    @property
    def last_step(self) -> int | None:
        return int(self.steps[-1]) if self.steps.shape[0] else None

    def is_empty(self) -> bool:
        return (
            not self.n_records
            and not self.malformed
            and not self.events
            and not self.reset
        )


def empty_batch(source: str, first_record: int = 0, **kw: Any) -> RecordBatch:
    """A batch with no records (still useful to carry malformed lines or a reset)."""
    return RecordBatch(
        source=source,
        first_record=first_record,
        steps=EMPTY_I64,
        times=EMPTY_F64,
        segments=EMPTY_I32,
        series={},
        **kw,
    )
