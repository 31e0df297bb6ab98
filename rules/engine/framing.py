"""A batch's records as the frames the rules see.

A frame is one segment's part of a batch (:class:`~trainwatch.rules.engine.base.Frame`): the points of
every series a rule reads, each with the global record index it came from (alerts are sorted by
it), and the events among the records. Building it is the engine's fixed cost per frame, so the
arrays are shared wherever they can be: series on the same records share one positions array,
a series on every record shares the frame's, and when every event is placed exactly the mask
of uncovered records is the event mask.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from trainwatch.batch import Event, RecordBatch
from trainwatch.rules.engine.base import Frame, Points

NO_ROWS = np.empty(0, dtype=np.int64)


def event_rows(batch: RecordBatch) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The record row of each event, in order (-1: not placed); when every event is placed
    exactly, the batch's mask of event records (else None); and the rows of the series on most
    records, as int64 (None when the batch has no series).

    Events carry no row, but they are the records that no series and no note covers (as are
    records with no usable value, rarely): when the counts agree they map one to one, and the
    uncovered records' mask is the event mask; else each event takes the next such record with
    its step and time."""
    n_ev = len(batch.events)
    free = np.empty(batch.n_records, dtype=bool)
    free.fill(True)  # (np.ones is a Python function doing the same: a cold frame per batch)
    for row, _f in batch.notes:
        free[row] = False
    # the series on most records usually leaves exactly the events uncovered: events are never
    # covered, so when the counts agree the others need not be marked (indices as int64: numpy
    # converts int32 ones first, and slower)
    chunks = list(batch.series.values())
    widest = None
    if chunks:
        widest = max(chunks, key=lambda ch: ch.rows.shape[0]).rows.astype(np.int64)
        free[widest] = False
    cand = free.nonzero()[0]
    if cand.shape[0] != n_ev and len(chunks) > 1:
        for ch in chunks:
            free[ch.rows] = False
        cand = free.nonzero()[0]
    if cand.shape[0] == n_ev:
        return cand, free, widest
    rows: list[int] = []
    j, c = 0, cand.tolist()
    for ev in batch.events:
        while j < len(c) and not (int(batch.steps[c[j]]) == ev.step
                                  and float(batch.times[c[j]]) == ev.time):
            j += 1
        if j == len(c):
            rows.append(-1)  # cannot place it (should not happen): it is left out of frames
            continue
        rows.append(c[j])
        j += 1
    return np.asarray(rows, dtype=np.int64), None, widest


def frame_of(batch: RecordBatch, lo: int, hi: int, wanted: Iterable[str], roles: Mapping[str, str],
             ev_rows: np.ndarray, ev_mask: np.ndarray | None, widest: np.ndarray | None) -> Frame:
    """Records ``lo:hi`` of the batch (one segment) as the frame the rules see: the series
    named in ``wanted`` that have points there, ``roles`` as resolved so far. ``ev_rows``,
    ``ev_mask``, ``widest``: what :func:`event_rows` returned for the batch."""
    whole = lo == 0 and hi == batch.n_records
    base = batch.first_record
    rec_pos = np.arange(base + lo, base + hi, dtype=np.int64)
    rec_pos.setflags(write=False)  # (shared with the series on every record, below)
    series: dict[str, Points] = {}
    got = batch.series
    made: dict[tuple[int, int], np.ndarray] = {}
    """Positions by (rows array, first point taken): series on the same records often share
    one rows array (a metric on every record shares the batch's), and their points then
    share one positions array. (The arrays are the batch's: their ids hold while it does.)"""
    n_metric = -1
    """Records that are not events, when the events are placed exactly (a metric on every
    one of them has them as its rows: events never carry metric values)."""
    pos_metric: np.ndarray | None = None
    if whole and ev_mask is not None:
        n_metric = hi - len(batch.events)
    for name in wanted:
        ch = got.get(name)
        if ch is None:
            continue
        rows, steps, values, times = ch.rows, ch.steps, ch.values, ch.times
        key = (id(rows), 0)
        if not whole:
            a, b = np.searchsorted(rows, (lo, hi)).tolist()
            key = (id(rows), a)
            if a == b:
                continue
            rows, steps, values, times = rows[a:b], steps[a:b], values[a:b], times[a:b]
        elif rows.shape[0] == hi:  # (distinct sorted rows, as many as the records: all)
            series[name] = Points(name, steps, values, times, rec_pos)
            continue
        elif rows.shape[0] == n_metric:  # on every record but the events
            if pos_metric is None:
                if widest is not None and widest.shape[0] == n_metric:  # (the same rows)
                    pos_metric = widest + base if base else widest
                else:
                    pos_metric = rec_pos[~ev_mask]  # type: ignore[operator]
                pos_metric.setflags(write=False)  # (shared by those series)
            series[name] = Points(name, steps, values, times, pos_metric)
            continue
        pos = made.get(key)
        if pos is None:
            pos = made[key] = rows.astype(np.int64)  # (cheaper than np.add with a dtype)
            if base:
                pos += base
        series[name] = Points(name, steps, values, times, pos)
    events: tuple[Event, ...] = ()
    if whole and ev_mask is not None:  # every event placed, all inside
        is_event = ev_mask
        events = batch.events
    else:
        is_event = np.zeros(hi - lo, dtype=bool)
        if ev_rows.shape[0]:
            inside = [(r, ev) for r, ev in zip(ev_rows.tolist(), batch.events)
                      if lo <= r < hi]
            for r, _ev in inside:
                is_event[r - lo] = True
            events = tuple(ev for _r, ev in inside)
    if whole:
        return Frame(int(batch.segments[0]), roles, series, events, batch.steps,
                     batch.times, rec_pos, is_event)
    return Frame(int(batch.segments[lo]), roles, series, events, batch.steps[lo:hi],
                 batch.times[lo:hi], rec_pos, is_event)
