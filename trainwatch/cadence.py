"""How often a series is logged: its step interval, and whether it is logged once per epoch.

A rule that counts points of a per-step stream ("the last 200 points") means 200 steps on a
loss logged every step, 20,000 on a val loss logged every 100, and 200 epochs on a Keras val
loss. Knowing a series' cadence lets a window be said in evaluations (as Keras' patience is) or
in steps, whichever the rule means.

Pure functions of numpy arrays; no state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPOCH_TOLERANCE = 0.05
"""How far from exactly one epoch a step between two records may be and still count as one
(HF logs ``epoch`` as a float that drifts by a few hundredths from whole numbers)."""


@dataclass(frozen=True)
class Cadence:
    """A series' logging cadence."""

    interval: int | None
    """Typical steps between two points (None with fewer than two distinct steps)."""
    per_epoch: bool
    """One point per epoch: the step is the epoch number, or the epoch advances by one."""


def logging_interval(steps: np.ndarray) -> int | None:
    """The median gap between consecutive steps, of the gaps that move forward.

    A resumed run's rewind (a negative gap) and a step logged twice (a zero gap) are not
    gaps; a first evaluation off the grid (steps 24, 50, 75, 100 of an every-25 cadence) is
    one gap among many, so the median does not see it. The lower median: a gap that happened.
    """
    s = np.asarray(steps, dtype=np.int64)
    if s.size < 2:
        return None
    gaps = np.diff(s)
    gaps = gaps[gaps > 0]
    if gaps.size == 0:
        return None
    return int(np.partition(gaps, (gaps.size - 1) // 2)[(gaps.size - 1) // 2])


def epochs_at(steps: np.ndarray, epoch_steps: np.ndarray, epoch_values: np.ndarray) -> np.ndarray:
    """The epoch at each of ``steps``: the value of the last ``epoch`` point at or before it
    (NaN before the first). ``epoch_steps`` must not go down (one segment of a run)."""
    s = np.asarray(steps, dtype=np.int64)
    es = np.asarray(epoch_steps, dtype=np.int64)
    ev = np.asarray(epoch_values, dtype=np.float64)
    if es.size == 0:
        return np.full(s.shape, np.nan)
    i = np.searchsorted(es, s, side="right") - 1
    out = ev[np.clip(i, 0, None)]
    return np.where(i >= 0, out, np.nan)


def is_per_epoch(steps: np.ndarray, epochs: np.ndarray | None = None, *,
                 step_is_epoch: bool = False) -> bool:
    """Whether a series has one point per epoch.

    ``step_is_epoch``: the format says its step is the epoch (Keras' CSVLogger). ``epochs``:
    the epoch at each point (:func:`epochs_at`), when the run logs one. Then a series is per
    epoch when its steps are the epoch numbers (0- or 1-based), or when the epoch advances by
    one from each point to the next (an evaluation at the end of every epoch), in the median.
    """
    if step_is_epoch:
        return True
    if epochs is None:
        return False
    s = np.asarray(steps, dtype=np.float64)
    e = np.asarray(epochs, dtype=np.float64)
    ok = np.isfinite(e)
    if np.count_nonzero(ok) < 2:
        return False
    s, e = s[ok], e[ok]
    if np.all(np.abs(s - e) <= EPOCH_TOLERANCE) or np.all(np.abs(s - (e + 1)) <= EPOCH_TOLERANCE):
        return True
    d = np.diff(e)
    d = d[d >= 0]  # a rewind is no step of the cadence (a repeated epoch is: per-step series)
    return d.size > 0 and abs(float(np.median(d)) - 1.0) <= EPOCH_TOLERANCE


def cadence(steps: np.ndarray, epochs: np.ndarray | None = None, *,
            step_is_epoch: bool = False) -> Cadence:
    """Interval and per-epoch flag of a series (see :func:`logging_interval`,
    :func:`is_per_epoch`)."""
    return Cadence(logging_interval(steps), is_per_epoch(steps, epochs, step_is_epoch=step_is_epoch))
