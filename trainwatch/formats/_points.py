"""Series stored apart, one point at a time, joined into records by step.

MLflow (its ``metrics`` table, or one file per metric) and DVCLive (one TSV per metric) store
``loss`` at step 10 and ``lr`` at step 10 as two rows or two lines of two files. A record is
what one step logged, so the points of one step join into one record, in step order.

The choices made here:

* A series whose own step goes down has started over (a resumed run logging into the same run):
  its later points belong to the next *segment* (a series first seen then starts in it), and
  records are ordered by (segment, step), so the rewind is kept and reported as in any format.
  Equal steps are not a rewind.
* A series that logs twice at one step (MLflow's ``log_metric`` without a step logs at step 0)
  gets one record per value, in the order they were written.
* A record's time is the earliest of its points' times.
* A series named like a reserved key (``step``, ``time``, ``event``, ``rank``) is renamed
  ``<name>_value``, as TensorBoard tags are.
* Live, the newest step is held back: another series may still be written at it (a script that
  logs ``loss`` and ``lr`` in two calls, read between them). It is handed on once a later step
  arrives, once a read brings nothing new (the writer is between steps), or at the end
  (``final``). Without that, ``lr`` at step 10 read after ``loss`` at step 11 would look like a
  rewind.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwatch.builder import BatchBuilder
from trainwatch.record_values import RESERVED

Point = tuple[str, int, float, float]
"""(series name, step, unix time, value)."""


@dataclass
class StepMerger:
    """Turns points, as they are read, into records (dicts for the batch builder)."""

    _last: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Series -> (segment, step) of its last point."""
    _held: list[tuple[tuple[int, int], Point]] = field(default_factory=list)
    """Points of the newest (segment, step), not yet handed on."""
    _segment: int = 0
    """The newest segment any series is in (where a series first seen now starts)."""

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def reset(self) -> None:
        self._last.clear()
        self._held.clear()
        self._segment = 0

    def push(self, points: Iterable[Point], *, final: bool = False) -> Records:
        """Records of ``points`` (in the order each series wrote them) and of what was held."""
        keyed = list(self._held)
        new = 0
        for p in points:
            name, step = p[0], p[1]
            seg, last = self._last.get(name, (self._segment, step))
            if step < last:
                seg += 1
                self._segment = max(self._segment, seg)
            self._last[name] = (seg, step)
            keyed.append(((seg, step), p))
            new += 1
        if not keyed:
            return Records()
        keyed.sort(key=lambda kp: kp[0])  # stable: one series' points stay in written order
        top = keyed[-1][0]
        if final or not new:  # the end, or nothing new: the writer is done with that step
            self._held = []
        else:
            cut = len(keyed)
            while cut and keyed[cut - 1][0] == top:
                cut -= 1
            keyed, self._held = keyed[:cut], keyed[cut:]
        return _records(keyed)


@dataclass
class Records:
    """Records as columns: the step and time of each, and each series' points (record index,
    value). Added to a batch through the builder's column path: a backlog of a million points
    would cost seconds record by record."""

    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    """The earliest of each record's points' times (NaN: none given)."""
    series: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.steps)

    def add_to(self, builder: BatchBuilder) -> None:
        """Add the records to ``builder`` after what it holds (events added later follow them)."""
        n = len(self.steps)
        if not n:
            return
        pos = np.arange(builder.next_pos, builder.next_pos + n, dtype=np.int64)
        columns = {"step": np.asarray(self.steps, dtype=np.float64),
                   "time": np.asarray(self.times, dtype=np.float64)}
        present = {}
        for key, (rows, values) in self.series.items():
            col = np.full(n, np.nan)
            col[rows] = values
            mask = np.zeros(n, dtype=bool)
            mask[rows] = True
            columns[key], present[key] = col, mask
        builder.add_columns(pos, np.zeros(n, dtype=np.int64), columns, present)

    def as_dicts(self) -> list[dict[str, Any]]:
        """The records as dicts (for tests and small reads)."""
        out: list[dict[str, Any]] = [{"step": s, "time": t} for s, t in zip(self.steps, self.times)]
        for key, (rows, values) in self.series.items():
            for r, v in zip(rows, values):
                out[r][key] = v
        return out


def _records(keyed: list[tuple[tuple[int, int], Point]]) -> Records:
    recs = Records()
    steps, times, series = recs.steps, recs.times, recs.series
    in_rec: set[str] = set()
    at: tuple[int, int] | None = None
    i = -1
    for k, (name, step, t, value) in keyed:
        key = f"{name}_value" if name in RESERVED else name
        if k != at or key in in_rec:
            steps.append(step)
            times.append(t)
            in_rec = set()
            at = k
            i += 1
        elif t < times[i]:
            times[i] = t
        in_rec.add(key)
        col = series.get(key)
        if col is None:
            col = series[key] = ([], [])
        col[0].append(i)
        col[1].append(value)
    return recs
