"""Pure statistics the rules share: robust location/scale, trend tests, block medians.

Every function here is a plain function of its arrays (no state), so each rule's maths can be
tested against a direct reference. Medians are taken from *sorted* rows through
:func:`median_sorted`, the one place that defines the even-length median, so that the streaming
(vectorised) and the point-by-point paths of a rule compute bit-identical numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MAD_TO_SIGMA = 1.4826
"""MAD of a normal sample times this estimates its standard deviation."""


def windows(a: np.ndarray, width: int) -> np.ndarray:
    """Read-only sliding windows of a 1-D array, ``(len - width + 1, width)``.

    ``sliding_window_view`` costs ~7 us of Python checks per call, which adds up when a rule runs
    on every small batch of a live stream; a contiguous array gets the same view for ~1 us.
    """
    n = a.shape[0] - width + 1
    if n <= 0:
        return np.empty((0, width), dtype=a.dtype)
    if not a.flags.c_contiguous:
        return sliding_window_view(a, width)
    st = a.strides[0]
    v = np.ndarray((n, width), dtype=a.dtype, buffer=a, strides=(st, st))
    v.flags.writeable = False
    return v


def strided_windows(a: np.ndarray, width: int, start: int, step: int, count: int) -> np.ndarray:
    """Read-only windows ``a[start + i*step : start + i*step + width]`` for ``i < count``, as a
    view (no copy, no fancy index): ``(count, width)``."""
    if count <= 0:
        return np.empty((0, width), dtype=a.dtype)
    if not a.flags.c_contiguous:
        return windows(a, width)[start:start + (count - 1) * step + 1:step]
    st = a.strides[0]
    v = np.ndarray((count, width), dtype=a.dtype, buffer=a, offset=start * st,
                   strides=(step * st, st))
    v.flags.writeable = False
    return v


def strided_rows(a: np.ndarray, width: int, start: int, step: int, count: int) -> np.ndarray:
    """:func:`strided_windows` as a new, writable array (to sort in place): the copy made
    straight from the view, without its read-only flag."""
    if count <= 0 or not a.flags.c_contiguous:
        return strided_windows(a, width, start, step, count).copy()
    st = a.strides[0]
    return np.ndarray((count, width), dtype=a.dtype, buffer=a, offset=start * st,
                      strides=(step * st, st)).copy()


def median_sorted(rows: np.ndarray) -> np.ndarray | float:
    """Median of each row of an already sorted array (or of a sorted 1-D array)."""
    n = rows.shape[-1]
    if rows.ndim == 1:  # (a plain index: the Ellipsis one costs a third more)
        return (rows[(n - 1) // 2] + rows[n // 2]) * 0.5
    lo = rows[..., (n - 1) // 2]
    hi = rows[..., n // 2]
    return (lo + hi) * 0.5



def small_median(xs: Sequence[float]) -> float:
    """Median of a short Python sequence (a few values): no numpy call overhead."""
    v = sorted(xs)
    n = len(v)
    if n % 2:
        return float(v[n // 2])  # (= (x + x) * 0.5 for every x that does not overflow doubled)
    return (v[n // 2 - 1] + v[n // 2]) * 0.5


def median(x: np.ndarray) -> float:
    """Median of a 1-D array (sorting it), consistent with :func:`median_sorted`."""
    return float(median_sorted(np.sort(x)))


def min_max(v: np.ndarray, few: int = 64) -> tuple[float, float]:
    """(lowest, highest) of a non-empty 1-D array: on Python floats up to ``few`` values (a live
    frame of a few points: two array reductions cost more than the list), else two reductions."""
    if v.shape[0] > few:  # (the ufuncs' own reductions: ndarray.min/max add a Python wrapper)
        return float(np.minimum.reduce(v)), float(np.maximum.reduce(v))
    vals = v.tolist()
    return min(vals), max(vals)


def distinct(x: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array: ``np.unique`` without its first call's import
    of ``numpy.ma`` (7-10 ms on ``check`` and ``report``, which call it once)."""
    s = np.sort(x)
    if s.shape[0] < 2:
        return s
    keep = np.empty(s.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]







def rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as scipy's ``rankdata``)."""
    n = a.shape[0]
    if n > 1 and bool((a[1:] > a[:-1]).all()):  # steps, usually: already in order, no ties
        return np.arange(1.0, n + 1.0)
    order = np.argsort(a, kind="mergesort")
    sa = a[order]
    ranks = np.empty(n, dtype=np.float64)
    # each run of equal values shares the mean of the ranks it spans
    new = np.empty(n, dtype=bool)
    new[:1] = True
    new[1:] = sa[1:] != sa[:-1]
    if new.all():  # no ties: the ranks are the positions in sorted order
        ranks[order] = np.arange(1.0, n + 1.0)
        return ranks
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n)
    mean_rank = (starts + ends + 1) * 0.5
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson on average ranks); 0 when either side is constant."""
    if x.shape[0] < 3:
        return 0.0
    rx = rankdata(x) - (x.shape[0] + 1) * 0.5
    ry = rankdata(y) - (y.shape[0] + 1) * 0.5
    den = float(np.sqrt(np.dot(rx, rx) * np.dot(ry, ry)))
    return float(np.dot(rx, ry) / den) if den > 0 else 0.0


@lru_cache(maxsize=32)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, 1)




def relative_growth(slope: float, x: np.ndarray, y: np.ndarray) -> float:
    """``slope`` times the window's x-span, over the window's median level (a rise from a level
    of 0 is infinite growth)."""
    level = abs(median(y))
    span = float(x[-1] - x[0]) if x.shape[0] else 0.0
    return float(slope * span / level if level > 0 else (math.inf if slope > 0 else 0.0))


def improving(values: Sequence[float], min_tau: float, min_drop: float) -> bool:
    """Whether a short series still trends down: Kendall's tau against time at or below
    ``-min_tau`` and a Theil-Sen drop over its span of at least ``min_drop`` of its level.

    A noisy loss that improves slowly never beats its (noise-lowered) best by a margin, yet it
    is not on a plateau: its trend says so. Both statistics come from the same pairwise slopes.
    """
    n = len(values)
    if n < 4:
        return False
    y = np.asarray(values, dtype=np.float64)
    if n > 64:  # the pairwise statistics are O(n^2): a long series is thinned evenly
        y = y[:: -(-n // 64)]
        n = y.shape[0]
    i, j = _pairs(n)
    dy = y[j] - y[i]
    tau = float(np.sign(dy).sum()) / dy.shape[0]
    if tau > -min_tau:
        return False
    level = abs(float(median(y)))
    drop = -median(dy / (j - i)) * (n - 1)
    return level > 0 and drop >= min_drop * level


@lru_cache(maxsize=64)
def _quad_residual_maker(n: int) -> np.ndarray:
    """I - H for a least-squares quadratic on n equally spaced points (H: the hat matrix)."""
    x = np.linspace(-1.0, 1.0, n)
    X = np.stack([np.ones(n), x, x * x], axis=1)
    return np.eye(n) - X @ np.linalg.pinv(X)


def noise_sd(values: Sequence[float]) -> float:
    """Relative noise of a short smooth-ish series: 1.4826 x the MAD of its residuals from a
    least-squares quadratic, over its median level (a trend, or the bend of a decaying loss
    curve, does not count as noise). One small matrix product: cheap enough per evaluation."""
    n = len(values)
    if n < 6:
        return 0.0
    res = (_quad_residual_maker(n) @ np.asarray(values, dtype=np.float64)).tolist()
    level = abs(small_median(values))
    if level <= 0:
        return 0.0
    mid = small_median(res)
    return MAD_TO_SIGMA * small_median([abs(r - mid) for r in res]) / level



def true_runs(cond: np.ndarray, carried: int) -> tuple[np.ndarray, np.ndarray]:
    """(length of the run of True ending at each point (0 where False), run index per point).

    The run index counts runs started in this array (0 = the carried one)."""
    n = cond.shape[0]
    idx = np.arange(n)
    last_false = np.maximum.accumulate(np.where(~cond, idx, -1))
    length = np.where(last_false < 0, carried + idx + 1, idx - last_false)
    length = np.where(cond, length, 0)
    prev = np.concatenate(([carried > 0], cond[:-1]))
    starts = cond & ~prev
    return length, np.cumsum(starts)
