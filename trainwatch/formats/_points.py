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

    def push(self, points: Iterable[Point], *, final: bool = False) -> list[dict[str, Any]]:
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
            return []
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


def _records(keyed: list[tuple[tuple[int, int], Point]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    rec: dict[str, Any] = {}
    at: tuple[int, int] | None = None
    for k, (name, step, t, value) in keyed:
        key = f"{name}_value" if name in RESERVED else name
        if k != at or key in rec:
            rec = {"step": step, "time": t}
            out.append(rec)
            at = k
        elif t < rec["time"]:
            rec["time"] = t
        rec[key] = value
    return out
