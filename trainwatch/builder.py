"""Turn records (dicts, or columns from a fast decoder) into a :class:`RecordBatch`.

Every reader ends here, so the format rules of docs/format.md live in one place: what counts as a
series, steps and segments, events and malformed lines; what each reserved key and value means
is :mod:`~trainwatch.record_values`'.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwatch.batch import Event, Malformed, RecordBatch, Rewind, SeriesChunk
from trainwatch.record_values import (
    MAX_KEYS_PER_RECORD,
    RESERVED,
    coerce_step,
    coerce_time,
    fill_times,
    finite_or_nan,
    flatten,
    numeric_value,
    step_or_nan,
)


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays, made read-only: a batch is shared between threads and its series share these."""
    for a in arrays:
        a.flags.writeable = False
    return arrays


@dataclass
class StreamState:
    """What a source's parsing carries from one batch to the next."""

    next_record: int = 0
    """Global index of the next record (the step of a record without one)."""
    last_step: int | None = None
    """Step of the last metric record, to detect rewinds."""
    segment: int = 0
    rank: int | None = None
    last_time: float | None = None
    """Time of the last record that gave its own (what a later record without one takes)."""

    def reset(self) -> None:
        self.next_record = 0
        self.last_step = None
        self.segment = 0
        self.last_time = None


class BatchBuilder:
    """Collects records in order and builds one batch.

    Records may be added one by one (:meth:`add_record`, the generic path every reader can use)
    or as whole columns (:meth:`add_columns`, the JSONL fast path). Each record has a *position*;
    the batch orders records by position, so a fast block and slow lines can interleave.
    """

    def __init__(
        self,
        source: str,
        state: StreamState,
        fmt: str = "jsonl",
        clock: Callable[[], float] = _time.time,
    ) -> None:
        self.source = source
        self.state = state
        self.fmt = fmt
        self.clock = clock
        self._pos: list[np.ndarray] = []
        self._line: list[np.ndarray] = []
        self._step: list[np.ndarray] = []  # float, NaN = absent
        self._time: list[np.ndarray] = []  # float, NaN = absent
        self._is_event: list[np.ndarray] = []
        # generic records accumulate in Python lists, turned into arrays once in build()
        self._g_pos: list[int] = []
        self._g_line: list[int] = []
        self._g_step: list[float] = []
        self._g_time: list[float] = []
        self._g_event: list[bool] = []
        self._g_cols: dict[str, tuple[list[int], list[float]]] = {}
        self._blocks: list[tuple[int, dict[str, tuple[np.ndarray, np.ndarray]]]] = []
        self._n_records = 0
        self._events: list[tuple[int, str, float | None, float | None, int, dict[str, Any]]] = []
        self._notes: list[tuple[int, dict[str, Any]]] = []
        self.malformed: list[Malformed] = []
        self._next_pos = 0
        self.seen_keys: dict[str, None] = {}
        """Plain numeric top-level keys seen by the generic path, in the order first seen (the
        fast path learns from it)."""

    @property
    def next_pos(self) -> int:
        """The position the next record added without one takes (after all added so far)."""
        return self._next_pos

    # ------------------------------------------------------------------ adding
    def add_malformed(self, line: int, reason: str) -> None:
        self.malformed.append(Malformed(line, reason))

    def add_record(self, record: Any, line: int = 0, pos: int | None = None) -> bool:
        """Add one decoded JSON value. Returns False (and records why) if it is not an object."""
        if pos is None:
            pos = self._next_pos
        self._next_pos = max(self._next_pos, pos + 1)
        if type(record) is not dict:
            self.add_malformed(line, f"expected a JSON object, got {type(record).__name__}; line skipped")
            return False
        gi = len(self._g_pos)
        step = coerce_step(record.get("step"))
        t = coerce_time(record.get("time"))
        self._g_pos.append(pos)
        self._g_line.append(line)
        self._g_step.append(math.nan if step is None else float(step))
        self._g_time.append(math.nan if t is None else t)
        event = record.get("event")
        if event is not None:
            self._g_event.append(True)
            fields = {k: v for k, v in record.items() if k not in ("event", "step", "time")}
            self._events.append((gi, str(event), None, None, line, fields))
            return True
        self._g_event.append(False)
        rank = record.get("rank")
        if type(rank) is int and self.state.rank is None:
            self.state.rank = rank
        notes: dict[str, Any] | None = None
        flat = flatten(record) if any(type(v) is dict for v in record.values()) else record
        if len(flat) > MAX_KEYS_PER_RECORD:
            self.add_malformed(line, f"record has {len(flat)} keys (limit {MAX_KEYS_PER_RECORD})")
            return False
        cols = self._g_cols
        for k, v in flat.items():
            if k in RESERVED:
                continue
            x = numeric_value(v)
            if x is None:
                if v is not None and type(v) is not bool:
                    if notes is None:
                        notes = {}
                    notes[k] = v
                continue
            col = cols.get(k)
            if col is None:
                col = cols[k] = ([], [])
                if type(v) in (int, float) and "/" not in k:
                    self.seen_keys[k] = None
            col[0].append(gi)
            col[1].append(x)
        if notes:
            self._notes.append((gi, notes))
        return True

    def add_columns(
        self,
        pos: np.ndarray,
        lines: np.ndarray,
        columns: Mapping[str, np.ndarray],
        present: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Add a block of plain metric records decoded column-wise.

        ``columns`` maps key -> float64 array aligned with ``pos``; NaN means the key was absent,
        except in a column that ``present`` gives a mask for (where the key was in the record):
        there a NaN inside the mask is a real NaN value (a bare ``NaN`` token).
        ``step`` and ``time`` columns, if present, are the reserved keys; a non-finite one counts
        as absent and a fractional step is truncated, as in :func:`coerce_step` and
        :func:`coerce_time`.
        """
        n = int(pos.shape[0])
        if not n:
            return
        nan = np.full(n, np.nan)
        self._pos.append(pos.astype(np.int64, copy=False))
        self._line.append(lines.astype(np.int64, copy=False))
        self._step.append(step_or_nan(columns["step"]) if "step" in columns else nan)
        self._time.append(finite_or_nan(columns["time"]) if "time" in columns else nan)
        self._is_event.append(np.zeros(n, dtype=bool))
        offset = self._n_records
        block: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for k, col in columns.items():
            if k in RESERVED:
                continue
            mask = present.get(k) if present else None
            if mask is None:
                mask = ~np.isnan(col)
            if mask.all():
                block[k] = (np.arange(offset, offset + n), col)
            elif mask.any():
                idx = np.flatnonzero(mask)
                block[k] = (idx + offset, col[idx])
        self._blocks.append((offset, block))
        self._n_records += n
        self._next_pos = max(self._next_pos, int(pos[-1]) + 1)

    # ------------------------------------------------------------------ building
    def build(self, *, reset: bool = False, meta: Mapping[str, Any] | None = None) -> RecordBatch:
        st = self.state
        g_off = self._n_records  # generic records sit after the fast blocks before ordering
        pos = np.concatenate(self._pos + [np.asarray(self._g_pos, dtype=np.int64)])
        line = np.concatenate(self._line + [np.asarray(self._g_line, dtype=np.int64)])
        step_f = np.concatenate(self._step + [np.asarray(self._g_step, dtype=np.float64)])
        time_f = np.concatenate(self._time + [np.asarray(self._g_time, dtype=np.float64)])
        is_event = np.concatenate(self._is_event + [np.asarray(self._g_event, dtype=bool)])
        n = int(pos.shape[0])

        # order records by position: fast blocks and generic lines interleave, and the JSONL
        # parser adds a chunk's token lines after its clean lines, whichever path those took
        if n > 1 and not np.all(pos[1:] >= pos[:-1]):
            order = np.argsort(pos, kind="stable")
            rank_of = np.empty(n, dtype=np.int64)
            rank_of[order] = np.arange(n)
            line, step_f, time_f, is_event = line[order], step_f[order], time_f[order], is_event[order]
        else:
            rank_of = None

        # steps: own step, else the global record index (metric records);
        # events without a step take the step of the metric record before them
        steps = step_f.copy()
        absent = np.isnan(steps)
        if absent.any():
            rec_index = st.next_record + np.arange(n, dtype=np.float64)
            fill = absent & ~is_event
            steps[fill] = rec_index[fill]
            ev_absent = np.flatnonzero(absent & is_event)
            if ev_absent.size:
                last = -1.0 if st.last_step is None else float(st.last_step)
                metric_idx = np.flatnonzero(~is_event)
                for i in ev_absent:
                    j = np.searchsorted(metric_idx, i) - 1
                    steps[i] = steps[metric_idx[j]] if j >= 0 else max(last, 0.0)
        steps_i = steps.astype(np.int64)

        times = time_f
        if n and np.isnan(times).any():
            times = fill_times(times, st.last_time, self.clock)
            own = time_f[~np.isnan(time_f)]
            if own.size:
                st.last_time = float(own[-1])
        elif n:
            st.last_time = float(times[-1])

        # segments: a metric record whose step is lower than the previous metric record's
        segments = np.full(n, st.segment, dtype=np.int32)
        rewinds: list[Rewind] = []
        metric_rows = np.flatnonzero(~is_event)
        if metric_rows.size:
            ms = steps_i[metric_rows]
            prev = np.empty_like(ms)
            prev[0] = ms[0] if st.last_step is None else st.last_step
            prev[1:] = ms[:-1]
            back = np.flatnonzero(ms < prev)
            inc = np.zeros(n, dtype=np.int32)
            for b in back:
                r = int(metric_rows[b])
                inc[r] = 1
                rewinds.append(Rewind(int(line[r]), int(prev[b]), int(ms[b]), 0))
            if back.size:
                segments = st.segment + np.cumsum(inc, dtype=np.int32)
                rewinds = [
                    Rewind(rw.line, rw.from_step, rw.to_step, int(segments[metric_rows[b]]))
                    for rw, b in zip(rewinds, back)
                ]
            st.last_step = int(ms[-1])
            st.segment = int(segments[-1]) if n else st.segment

        steps_i, times, segments = _read_only(steps_i, times, segments)
        every: np.ndarray | None = None  # the rows of a metric on every record: 0..n-1

        def remap(rows: np.ndarray) -> np.ndarray:
            return rows if rank_of is None else rank_of[rows]

        # columns: fast blocks and generic lists, remapped to final rows
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for _off, block in self._blocks:
            for k, (rows, vals) in block.items():
                parts.setdefault(k, []).append((rows, vals))
        for k, (rows_l, vals_l) in self._g_cols.items():
            parts.setdefault(k, []).append(
                (np.asarray(rows_l, dtype=np.int64) + g_off, np.asarray(vals_l, dtype=np.float64))
            )
        series: dict[str, SeriesChunk] = {}
        for k, plist in parts.items():
            if len(plist) == 1:
                rows, vals = plist[0]
            else:
                rows = np.concatenate([p[0] for p in plist])
                vals = np.concatenate([p[1] for p in plist])
            rows = remap(rows)
            if rows.shape[0] > 1 and not np.all(rows[1:] > rows[:-1]):
                o = np.argsort(rows, kind="stable")
                rows, vals = rows[o], vals[o]
            if n and rows.shape[0] == n and rows[0] == 0 and rows[-1] == n - 1:
                # n distinct sorted rows in [0, n): the metric is on every record (the common
                # case), so its steps, times and segments are the batch's own, shared read-only
                # instead of gathered into one copy per series.
                if every is None:
                    (every,) = _read_only(np.arange(n, dtype=np.int32))
                series[k] = SeriesChunk(
                    rows=every, steps=steps_i, values=vals, times=times, segments=segments
                )
                continue
            rows32 = rows.astype(np.int32)
            series[k] = SeriesChunk(
                rows=rows32,
                steps=steps_i[rows],
                values=vals,
                times=times[rows],
                segments=segments[rows],
            )

        # events and notes in record order too: the generic records were not added in it
        events: list[tuple[int, Event]] = []
        for gi, name, _s, _t, ln, fields in self._events:
            r = int(remap(np.asarray([gi + g_off]))[0])
            events.append((r, Event(name, int(steps_i[r]), float(times[r]), ln, fields)))
        if rank_of is not None:
            events.sort(key=lambda e: e[0])
        notes = [(int(remap(np.asarray([gi + g_off]))[0]), f) for gi, f in self._notes]
        if rank_of is not None:
            notes.sort(key=lambda nt: nt[0])

        batch = RecordBatch(
            source=self.source,
            first_record=st.next_record,
            steps=steps_i,
            times=times,
            segments=segments,
            series=series,
            events=tuple(e for _, e in events),
            notes=tuple(notes),
            malformed=tuple(sorted(self.malformed, key=lambda m: m.line)),
            rewinds=tuple(rewinds),
            rank=st.rank,
            reset=reset,
            format=self.fmt,
            meta=dict(meta or {}),
        )
        st.next_record += n
        return batch
