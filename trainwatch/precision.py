"""A series' logging precision: the rounding its writer applied before it reached the file.

HF Trainer rounds the loss to 4 decimals, mmcv rounds every value to 4, scripts print ``%.4f``
or ``%.3g``. A loss that falls by less than 5e-5 per record then repeats the same value, and a
rule that reads "the same value many times" as a stalled run is wrong: the run is at the floor
of what its log can say. :func:`logging_precision` finds the rounding (fixed decimals, or
significant digits), :func:`at_precision_floor` says whether a run of equal values is explained
by it.

Values are tested as multiples of the quantum within the error of how they were stored: a
decimal read as a float64, or (TensorBoard keeps float32) a float32. A rounding is only reported
when values that were not rounded would fit it by chance less than once in a million (each value
fits by chance with odds twice its tolerance, in quanta): float noise never reads as rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_DECIMALS = 6
"""Finest fixed rounding looked for (``%.6f``); float32 values printed in full would read as
8 decimals, and no one rounds a metric to 8."""
MAX_SIGNIFICANT = 6
"""Most significant digits looked for (``%.6g``)."""
NEAR_ZERO_QUANTA = 3.0
"""A value within this many quanta of zero is at the floor (a loss of 0.0001 logged at 1e-4)."""
_STORAGE_ERROR = (4 * 2.0**-52, 4 * 2.0**-23)
"""Relative error of a rounded decimal stored as a float64, then as a float32."""
CHANCE = 1e-6
"""The most that unrounded values may have to fit a rounding by chance for it to be reported."""


@dataclass(frozen=True)
class Precision:
    """How a series' values were rounded: to ``decimals`` places, or ``significant`` digits."""

    decimals: int | None = None
    significant: int | None = None

    def quantum(self, value: float) -> float:
        """The rounding step at ``value`` (the same everywhere for fixed decimals)."""
        if self.decimals is not None:
            return 10.0 ** -self.decimals
        assert self.significant is not None
        v = abs(value)
        if v == 0 or not math.isfinite(v):
            return 0.0
        return 10.0 ** (math.floor(math.log10(v)) - self.significant + 1)


def _fits(x: np.ndarray, scale: np.ndarray | float) -> bool:
    """Whether every ``x * scale`` is an integer within what storing it may have cost."""
    y = x * scale
    r = np.abs(y - np.rint(y))
    for rel in _STORAGE_ERROR:
        tol = rel * np.abs(y) + 1e-9
        if bool(np.all(r <= tol)):
            chance = float(np.sum(np.log10(np.minimum(2 * tol, 1.0))))
            return chance <= math.log10(CHANCE)
    return False


def _exponents(x: np.ndarray) -> np.ndarray:
    return np.floor(np.log10(np.abs(x))).astype(np.int64)


def logging_precision(values: np.ndarray) -> Precision | None:
    """The rounding of ``values`` (NaN, inf and zeros are ignored), or None when they are not
    rounded (or there is no non-zero finite value to tell).

    Fixed decimals and significant digits may both explain a series; significant digits are
    taken when they need at least one digit a value fewer in all (``%.3g`` values spanning
    1e-4..1 also fit 6 decimals, but 6 decimals would show 7 digits of 1.23; ``%.4f`` values,
    and the integers 1..10, fit both about as well: decimals).
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x) & (x != 0)]
    if x.size == 0:
        return None
    k = next((k for k in range(MAX_DECIMALS + 1) if _fits(x, 10.0**k)), None)
    e = _exponents(x)
    s = next((s for s in range(1, MAX_SIGNIFICANT + 1)
              if _fits(x, 10.0 ** (s - 1 - e).astype(np.float64))), None)
    if k is None and s is None:
        return None
    if s is None:
        return Precision(decimals=k)
    if k is None:
        return Precision(significant=s)
    digits_fixed = int(np.maximum(k + e + 1, 1).sum())
    if digits_fixed >= (s + 1) * x.size:
        return Precision(significant=s)
    return Precision(decimals=k)


def quantum(values: np.ndarray) -> float | None:
    """The rounding step of ``values`` (1e-4 for HF's loss), at their last non-zero finite
    value when it depends on the value (significant digits); None when not rounded."""
    p = logging_precision(values)
    if p is None:
        return None
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x) & (x != 0)]
    return p.quantum(float(x[-1]))


def at_precision_floor(value: float, values: np.ndarray,
                       precision: Precision | None = None) -> bool:
    """Whether a run of points all equal to ``value`` is explained by the series' rounding.

    ``values``: the series (its recent window, the run included). True when the series is
    rounded and either ``value`` is within :data:`NEAR_ZERO_QUANTA` quanta of zero, or the
    series moves by one quantum at a time when it moves (the median of its non-zero changes
    is one quantum: its real change per point is below what the log shows). A series that
    never moves, or moves by many quanta and then stops, is not at the floor: it stopped.
    """
    p = precision if precision is not None else logging_precision(values)
    if p is None or not math.isfinite(value):
        return False
    q = p.quantum(value)
    if q == 0.0:  # an exact zero with significant-digit rounding: nothing is below it
        return True
    if abs(value) <= NEAR_ZERO_QUANTA * q * (1 + 1e-9):
        return True
    x = np.asarray(values, dtype=np.float64)
    d = np.abs(np.diff(x[np.isfinite(x)]))
    d = d[d > q * 1e-6]
    return d.size > 0 and float(np.median(d)) <= q * (1 + 1e-6)
