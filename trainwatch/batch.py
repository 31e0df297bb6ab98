"""Immutable values that carry parsed records from a reader to the store, the rules and the UI.

A reader turns bytes into a :class:`RecordBatch`: per-record arrays (step, time, segment) plus
one :class:`SeriesChunk` per metric that appeared in the batch. Batches are frozen so they can
cross from the ingest thread into the UI thread without copies or locks.

:func:`join_batches` concatenates consecutive batches of one source: a consumer with a fixed cost
per batch (the rule engine) then pays it once for a backlog read in many chunks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
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


def joinable(prev: RecordBatch, nxt: RecordBatch) -> bool:
    """Whether ``nxt`` continues ``prev`` record for record: same source, rank and format, no
    reset, and its first record right after ``prev``'s last."""
    return (
        not nxt.reset
        and nxt.source == prev.source
        and nxt.rank == prev.rank
        and nxt.format == prev.format
        and nxt.first_record == prev.first_record + prev.n_records
    )


def join_batches(batches: Iterable[RecordBatch], max_records: int | None = None
                 ) -> list[RecordBatch]:
    """Consecutive batches joined into as few as possible, in order.

    A batch that does not continue the one before (see :func:`joinable`: a ``reset``, another
    source, a gap in the records) starts a new group, and so does one that would take a group
    past ``max_records`` records. A group of one batch is that batch itself.
    """
    return list(iter_joined(batches, max_records))


def iter_joined(batches: Iterable[RecordBatch], max_records: int | None = None
                ) -> Iterator[RecordBatch]:
    """:func:`join_batches` one group at a time: a consumer holds one joined copy at once."""
    group: list[RecordBatch] = []
    n = 0
    for b in batches:
        if group and (not joinable(group[-1], b)
                      or (max_records is not None and n + b.n_records > max_records)):
            yield concat_batches(group)
            group, n = [], 0
        group.append(b)
        n += b.n_records
    if group:
        yield concat_batches(group)


def concat_batches(group: Sequence[RecordBatch]) -> RecordBatch:
    """One batch holding ``group`` (batches that each continue the one before): records and
    series concatenated, series rows and note rows shifted by the records before them; events,
    notes, malformed lines and rewinds in order; ``reset`` and ``first_record`` of the first
    batch, ``meta`` merged with later batches winning."""
    if not group:
        raise ValueError("concat_batches: no batches")
    first = group[0]
    if len(group) == 1:
        return first
    for prev, nxt in itertools.pairwise(group):
        if not joinable(prev, nxt):
            raise ValueError(
                f"concat_batches: batch at record {nxt.first_record} of {nxt.source!r} does not "
                f"continue the one at record {prev.first_record} of {prev.source!r}")
    offsets = list(itertools.accumulate((b.n_records for b in group[:-1]), initial=0))
    names: dict[str, None] = {}
    for b in group:
        names.update(dict.fromkeys(b.series))
    # Every joined column is a view into one buffer per dtype, filled by one np.concatenate: a
    # backlog of a few batches of ten metrics took some sixty small concatenations (about 0.1
    # ms, a tenth of the rule engine's whole cost on a short file). Each buffer holds the
    # records' own column, then that column of every joined series in turn.
    joined: list[str] = []
    parts: list[SeriesChunk] = []
    part_off: list[int] = []
    """Records before each part's batch (what its rows are shifted by)."""
    sizes: list[int] = []
    """Points of each joined series."""
    series: dict[str, SeriesChunk] = {}
    for name in names:
        mine = [(off, b.series[name]) for off, b in zip(offsets, group) if name in b.series]
        if len(mine) == 1 and mine[0][0] == 0:
            series[name] = mine[0][1]
            continue
        joined.append(name)
        sizes.append(sum(ch.values.shape[0] for _o, ch in mine))
        part_off.extend(off for off, _ch in mine)
        parts.extend(ch for _o, ch in mine)
    total = offsets[-1] + group[-1].n_records
    fbuf = np.concatenate([b.times for b in group] + [ch.values for ch in parts]
                          + [ch.times for ch in parts])
    ibuf = np.concatenate([b.steps for b in group] + [ch.steps for ch in parts])
    sbuf = np.concatenate([b.segments for b in group] + [ch.rows for ch in parts]
                          + [ch.segments for ch in parts]).astype(np.int32, copy=False)
    n_pts = sum(sizes)
    if n_pts:  # rows count from the start of the joined batch
        sbuf[total:total + n_pts] += np.repeat(
            np.asarray(part_off, dtype=np.int32), [ch.rows.shape[0] for ch in parts])
    at = total
    for name, n in zip(joined, sizes):
        series[name] = SeriesChunk(
            rows=sbuf[at:at + n], steps=ibuf[at:at + n], values=fbuf[at:at + n],
            times=fbuf[at + n_pts:at + n_pts + n], segments=sbuf[at + n_pts:at + n_pts + n])
        at += n
    meta: dict[str, Any] = {}
    for b in group:
        meta.update(b.meta)
    return RecordBatch(
        source=first.source,
        first_record=first.first_record,
        steps=ibuf[:total],
        times=fbuf[:total],
        segments=sbuf[:total],
        series=series,
        events=tuple(itertools.chain.from_iterable(b.events for b in group)),
        notes=tuple((row + off, f) for off, b in zip(offsets, group) for row, f in b.notes),
        malformed=tuple(itertools.chain.from_iterable(b.malformed for b in group)),
        rewinds=tuple(itertools.chain.from_iterable(b.rewinds for b in group)),
        rank=first.rank,
        reset=first.reset,
        format=first.format,
        meta=meta,
    )
