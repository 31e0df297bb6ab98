"""A batch's records as the frames the rules see.

A frame is one segment's part of a batch (:class:`~trainwatch.rules.engine.base.Frame`): the points of
every series a rule reads, each with the global record index it came from (alerts are sorted by
it), and the events among the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.rules.engine.base import Frame, Points

NO_ROWS = np.empty(0, dtype=np.int64)


def event_rows(batch: RecordBatch) -> np.ndarray:
    """The record row of each event, in order (-1: not placed).

    Events carry no row, but they are the records that no series and no note covers (as are
    records with no usable value, rarely): when the counts agree they map one to one; else each
    event takes the next such record with its step and time."""
    free = np.ones(batch.n_records, dtype=bool)
    for row, _f in batch.notes:
        free[row] = False
    for ch in batch.series.values():
        free[ch.rows] = False
    cand = np.flatnonzero(free)
    if cand.shape[0] == len(batch.events):
        return cand
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
    return np.asarray(rows, dtype=np.int64)


def frame_of(batch: RecordBatch, lo: int, hi: int, wanted: Iterable[str],
             roles: Mapping[str, str], ev_rows: np.ndarray, losses: tuple[str, ...] = ()
             ) -> Frame:
    """Records ``lo:hi`` of the batch (one segment) as the frame the rules see: the series
    named in ``wanted`` that have points there, ``roles`` as resolved so far. ``ev_rows``: what
    :func:`event_rows` returned for the batch; ``losses``: the run's loss series
    (``Frame.losses``)."""
    base = batch.first_record
    whole = lo == 0 and hi == batch.n_records  # (one segment: the usual batch)
    series: dict[str, Points] = {}
    positions: dict[int, np.ndarray] = {}
    """Global record indices by rows array: series logged on the same records share one."""
    for name in wanted:
        ch = batch.series.get(name)
        if ch is None or not len(ch.rows):
            continue
        a, b = (0, len(ch.rows)) if whole else np.searchsorted(ch.rows, (lo, hi)).tolist()
        if a < b:
            pos = positions.get(id(ch.rows))
            if pos is None:
                pos = positions[id(ch.rows)] = ch.rows.astype(np.int64) + base
            series[name] = Points(name, ch.steps[a:b], ch.values[a:b], ch.times[a:b], pos[a:b])
    inside = (ev_rows >= lo) & (ev_rows < hi)
    is_event = np.zeros(hi - lo, dtype=bool)
    is_event[ev_rows[inside] - lo] = True
    events = tuple(ev for ev, k in zip(batch.events, inside.tolist()) if k)
    return Frame(int(batch.segments[lo]), roles, series, events, batch.steps[lo:hi],
                 batch.times[lo:hi], np.arange(base + lo, base + hi, dtype=np.int64), is_event,
                 losses)
