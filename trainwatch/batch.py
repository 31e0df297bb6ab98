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
    """Event records, in order. They carry no metric values: no series has a point on one (the
    join and the rule engine count on it)."""
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
    batch, ``meta`` merged with later batches winning.

    Joined series on the same records (the usual case: every metric on every record but the
    events) share one rows, steps, times and segments array, as the points of one record share
    its step, time and segment."""
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
    # Every joined column is a view into one buffer per dtype, filled by one np.concatenate: a
    # backlog of a few batches of ten metrics took some sixty small concatenations (about 0.1
    # ms, a tenth of the rule engine's whole cost on a short file). Each buffer holds the
    # records' own column, then that column of every joined series in turn. (Plain loops and
    # lists below: on a short file the bookkeeping cost as much as the copies.)
    by_name: dict[str, list[tuple[int, int, SeriesChunk]]] = {}
    """Each series' parts: (batch index, records before its batch, chunk), in order."""
    off = 0
    for i, b in enumerate(group):
        for name, ch in b.series.items():
            mine = by_name.get(name)
            if mine is None:
                by_name[name] = [(i, off, ch)]
            else:
                mine.append((i, off, ch))
        off += b.n_records
    total = off
    series: dict[str, SeriesChunk] = {}
    same: list[list[np.ndarray]] = [[] for _b in group]
    """Distinct rows arrays of each batch's parts so far (a part on the same records as an
    earlier one of its batch is known by the index of that one's rows; -1: on every record but
    the events, which carry no metric values: no need to compare those)."""
    n_metric = [b.n_records - len(b.events) for b in group]
    joined: list[tuple[str, int, int]] = []
    """(name, points, index of its records in ``places``) of each series made of parts."""
    places: dict[tuple[int, ...], int] = {}
    """The distinct record sets of the joined series (each as its parts' rows indices)."""
    parts: list[list[tuple[int, SeriesChunk]]] = []
    """(records before its batch, chunk) of each part of each distinct record set."""
    values: list[np.ndarray] = []
    for name, mine in by_name.items():
        if len(mine) == 1 and mine[0][1] == 0:
            series[name] = mine[0][2]
            continue
        key: list[int] = []
        n = 0
        for i, _o, ch in mine:
            rows = ch.rows
            j = -1
            if rows.shape[0] != n_metric[i]:
                known = same[i]
                for j, r in enumerate(known):  # (j: the match, if one)
                    if r is rows or (r.shape[0] == rows.shape[0] and np.array_equal(r, rows)):
                        break
                else:
                    j = len(known)
                    known.append(rows)
            key += (j, i)
            values.append(ch.values)
            n += rows.shape[0]
        at = places.setdefault(tuple(key), len(places))
        if at == len(parts):
            parts.append([(o, ch) for _i, o, ch in mine])
        joined.append((name, n, at))
    times = [b.times for b in group]
    steps = [b.steps for b in group]
    segs = [b.segments for b in group]
    ptimes, rows_l, psegs, shifts, counts = [], [], [], [], []
    for mine in parts:
        for o, ch in mine:
            ptimes.append(ch.times)
            steps.append(ch.steps)
            rows_l.append(ch.rows)
            psegs.append(ch.segments)
            shifts.append(o)
            counts.append(ch.rows.shape[0])
    fbuf = np.concatenate(times + values + ptimes)
    ibuf = np.concatenate(steps)
    sbuf = np.concatenate(segs + rows_l + psegs).astype(np.int32, copy=False)
    n_pts = sum(counts)
    """Points of the distinct record sets."""
    if n_pts:  # rows count from the start of the joined batch
        sbuf[total:total + n_pts] += np.repeat(np.asarray(shifts, dtype=np.int32), counts)
    starts = list(itertools.accumulate((sum(ch.rows.shape[0] for _o, ch in mine)
                                        for mine in parts), initial=total))
    t0 = fbuf.shape[0] - n_pts - total
    """Where the distinct record sets' times start in ``fbuf``, after the values."""
    cols: list[tuple[np.ndarray, ...] | None] = [None] * len(parts)
    """The rows, steps, times and segments of each distinct record set (one view each)."""
    new = object.__new__
    v = total
    for name, n, at in joined:
        c = cols[at]
        if c is None:
            a = starts[at]
            c = cols[at] = (sbuf[a:a + n], ibuf[a:a + n], fbuf[t0 + a:t0 + a + n],
                            sbuf[n_pts + a:n_pts + a + n])
        # (a frozen dataclass's __init__ costs a microsecond a chunk: its fields set directly)
        ch = new(SeriesChunk)
        _set(ch, "rows", c[0])
        _set(ch, "steps", c[1])
        _set(ch, "values", fbuf[v:v + n])
        _set(ch, "times", c[2])
        _set(ch, "segments", c[3])
        series[name] = ch
        v += n
    meta: dict[str, Any] = {}
    events: list[Event] = []
    notes: list[tuple[int, Mapping[str, Any]]] = []
    malformed: list[Malformed] = []
    rewinds: list[Rewind] = []
    off = 0
    for b in group:
        if b.meta:
            meta.update(b.meta)
        events += b.events
        if b.notes:
            notes += [(row + off, f) for row, f in b.notes]
        malformed += b.malformed
        rewinds += b.rewinds
        off += b.n_records
    return RecordBatch(
        source=first.source,
        first_record=first.first_record,
        steps=ibuf[:total],
        times=fbuf[:total],
        segments=sbuf[:total],
        series=series,
        events=tuple(events),
        notes=tuple(notes),
        malformed=tuple(malformed),
        rewinds=tuple(rewinds),
        rank=first.rank,
        reset=first.reset,
        format=first.format,
        meta=meta,
    )


_set = object.__setattr__
