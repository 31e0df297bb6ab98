"""A cross-entropy at ln(number of classes): the loss of a model that predicts every class with
the same probability (ln 2 = 0.6931 for a binary task, ln 10 = 2.3026 for ten classes, ln 32000
= 10.3735 for a 32k vocabulary). A loss *flat* there, never below it, is a model at chance.

:func:`classes_at` finds the number of classes ``k`` (2 up to :data:`MAX_CLASSES`) whose
``ln k`` is within a tolerance of a level; where several fit (``ln k`` and ``ln(k + 1)`` are
``1 / k`` apart: at a vocabulary's size every level fits some ``k``), the roundest (most
trailing zeros, then the highest power of two as a factor) is said, as "about".
:func:`chance_level` decides whether a series sits at such a level: its median within the
tolerance of ``ln k``, and its smoothed level never clearly below it (a loss that falls
*through* ln 2 is learning).

    >>> classes_at(0.6931, 5e-5)
    (2, True)
    >>> classes_at(10.3735, 5e-5)
    (32000, False)
    >>> classes_at(1.5, 0.01) is None
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.detectors.stats import MAD_TO_SIGMA, median

MAX_CLASSES = 1_000_000
"""The largest number of classes looked for (the biggest vocabularies are ~256k)."""
SE_MEDIAN = 1.2533
"""A median's standard error is 1.2533 sigma / sqrt(n) for normal data."""
REL_SLACK = 0.002
"""A level within this fraction of ln k still reads as it (a model a hair off uniform)."""
SMOOTH = 5
"""Points of the rolling median whose lowest value must not be clearly below ln k."""


def _roundness(k: int) -> tuple[int, int]:
    tens = 0
    while k % 10 == 0:
        k //= 10
        tens += 1
    twos = 0
    while k % 2 == 0:
        k //= 2
        twos += 1
    return tens, twos


def classes_at(level: float, tol: float) -> tuple[int, bool] | None:
    """(k, exact) for the ``k`` whose ``ln k`` is within ``tol`` of ``level`` (``exact``: the
    only one), or None."""
    if not math.isfinite(level) or level < math.log(2) - tol or level > math.log(MAX_CLASSES):
        return None
    lo = max(2, math.ceil(math.exp(level - tol) - 1e-9))
    hi = min(MAX_CLASSES, math.floor(math.exp(level + tol) + 1e-9))
    if hi < lo:
        return None
    if hi == lo:
        return lo, True
    near = round(math.exp(level))
    # the roundest of the candidates; ties: the nearest to exp(level)
    best = max(range(lo, hi + 1) if hi - lo < 10_000 else (near,),
               key=lambda k: (*_roundness(k), -abs(k - near)))
    return best, False


@dataclass(frozen=True)
class ChanceLevel:
    """A series at the loss of a uniform prediction over ``classes`` classes."""

    classes: int
    exact: bool
    """The only ``k`` that fits (else the roundest of several: "about")."""
    level: float
    """The series' median."""
    tol: float


def tolerance(values: np.ndarray, quantum: float = 0.0) -> float:
    """How far a series' median may sit from ln k: 3 standard errors of the median, half its
    logging quantum, or :data:`REL_SLACK` of its level, whichever is most."""
    m = median(values)
    se = SE_MEDIAN * MAD_TO_SIGMA * median(np.abs(values - m)) / math.sqrt(values.shape[0])
    return max(3.0 * se, 0.5 * quantum * (1 + 1e-6), REL_SLACK * abs(m))


def chance_level(values: np.ndarray, quantum: float = 0.0) -> ChanceLevel | None:
    """Whether ``values`` (finite, a series so far) sit flat at ln k: the median within
    :func:`tolerance` of ln k, as are the medians of its first and last thirds (each within its
    own tolerance: a loss falling through ln k is not flat at it), and no rolling median of
    :data:`SMOOTH` points below ln k by more than the tolerance plus the noise of one such
    median."""
    x = np.asarray(values, dtype=np.float64)
    if x.shape[0] < max(SMOOTH, 6):
        return None
    tol = tolerance(x, quantum)
    m = median(x)
    found = classes_at(m, tol)
    if found is None:
        return None
    k, exact = found
    third = x.shape[0] // 3
    for part in (x[:third], x[-third:]):
        if abs(median(part) - math.log(k)) > max(tol, tolerance(part, quantum)):
            return None
    # the lowest smoothed level: a model at chance never does clearly better than chance
    n = x.shape[0] - SMOOTH + 1
    rolling = np.sort(np.lib.stride_tricks.sliding_window_view(x, SMOOTH), axis=1)[:, SMOOTH // 2]
    spread = MAD_TO_SIGMA * median(np.abs(x - m))
    floor = math.log(k) - tol - 3.0 * SE_MEDIAN * spread / math.sqrt(SMOOTH)
    if n and float(rolling.min()) < floor:
        return None
    return ChanceLevel(k, exact, m, tol)
