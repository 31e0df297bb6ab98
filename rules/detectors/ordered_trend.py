"""The trend of a window in step order: :func:`trainwatch.rules.detectors.stats.trend`, bit for bit, for
less.

The growth rules test trends over windows of one series (x = the steps, integers in increasing
order) many times per frame, and ``stats.trend`` costs ~15 us of numpy calls on 30 points and
~170 us on 200. Two facts give the same numbers cheaper:

- Spearman: with x in order its ranks are 1..n, and every sum in rho is of products of
  half-integer (centred) ranks, which float64 adds exactly in any order. So rho needs only the
  sort order of y (and its tie groups): one argsort instead of two rankings.
- Theil-Sen: the median of the pairwise slopes is one or two order statistics, which
  ``np.partition`` finds exactly, ~3x faster than sorting n(n-1)/2 slopes. On a long window
  the slopes come from two strided views (:func:`_circular_diffs`: no pair tables, no
  gathers); on a short one from cached pair tables, where for evenly spaced integer steps the
  pairwise step differences are a cached table times the spacing (exact: integers below 2**53).

Anything else (steps not strictly increasing) goes to the general functions of ``stats``.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import numpy as np

from trainwatch.rules.detectors.stats import relative_growth, spearman, theil_sen, windows


@lru_cache(maxsize=16)
def _centred_ranks(n: int) -> tuple[np.ndarray, float]:
    """Ranks 1..n minus their mean (as ``stats.spearman`` centres them), and their sum of
    squares."""
    r = np.arange(1.0, n + 1.0) - (n + 1) * 0.5
    return r, float(np.dot(r, r))


@lru_cache(maxsize=16)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, j - i as floats) of every pair i < j, in ``stats.theil_sen``'s order."""
    i, j = np.triu_indices(n, 1)
    return i, j, (j - i).astype(np.float64)


def spearman_in_order(x: np.ndarray, y: np.ndarray) -> float:
    """``stats.spearman(x, y)`` (bit-identical) for finite ``y``; fast when ``x`` is strictly
    increasing."""
    n = x.shape[0]
    if n < 3:
        return 0.0
    if not bool((x[1:] > x[:-1]).all()):
        return spearman(x, y)
    rx, sxx = _centred_ranks(n)
    order = np.argsort(y)
    sy = y[order]
    tied = sy[1:] == sy[:-1]
    if not tied.any():
        # y's centred rank at sorted position m is rx[m]: sum_i rx_i ry_i = sum_m rx[order[m]] rx[m]
        num, syy = float(np.dot(rx[order], rx)), sxx
    else:
        # ties share the mean of the ranks they span (as stats.rankdata): in sorted order, the
        # value at lo..hi-1 has the mean rank (lo + 1 + hi) / 2, centred (lo + hi - n) / 2
        span = sy.searchsorted(sy, "left")
        span += sy.searchsorted(sy, "right")
        span -= n
        ry = span * 0.5
        num, syy = float(np.dot(rx[order], ry)), float(np.dot(ry, ry))
    den = math.sqrt(sxx * syy)
    return num / den if den > 0 else 0.0


def spearman_rows(rows: np.ndarray) -> np.ndarray:
    """``stats.spearman(x, row)`` (bit-identical) of each row of finite values against any ``x``
    in strictly increasing order: many windows of a series in one vectorised pass."""
    m, n = rows.shape
    if n < 3:
        return np.zeros(m)
    rx, sxx = _centred_ranks(n)
    order = rows.argsort(axis=1)
    sy = np.sort(rows, axis=1)  # (cheaper than gathering by order)
    rxo = rx[order]
    if bool((sy[:, 1:] != sy[:, :-1]).all()):
        return (rxo @ rx) / math.sqrt(sxx * sxx)  # (exact sums, as in spearman_in_order)
    # tie groups, over the rows laid end to end (a row's start starts a group): each value's
    # mean rank, centred, is (lo + hi - n) / 2 with lo..hi-1 its group's positions in its row
    flat = sy.ravel()
    brk = np.empty(m * n, dtype=bool)
    brk[0] = True
    np.not_equal(flat[1:], flat[:-1], out=brk[1:])
    brk[::n] = True
    lo = brk.nonzero()[0]
    hi = np.empty_like(lo)  # (the next group's start: np.append's copy, without its wrapper)
    hi[:-1] = lo[1:]
    hi[-1] = m * n
    ry = np.repeat((lo + hi - 2 * n * (lo // n) - n) * 0.5, hi - lo).reshape(m, n)
    num = np.einsum("ij,ij->i", rxo, ry)
    den = np.sqrt(sxx * np.einsum("ij,ij->i", ry, ry))
    if bool((den > 0).all()):  # (only a window of one repeated value has none)
        return num / den
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, 0.0)


def theil_sen_in_order(x: np.ndarray, y: np.ndarray) -> float:
    """``stats.theil_sen(x, y)`` (bit-identical) for finite ``y`` and ``x`` holding integers below
    2**53 (steps); fast when ``x`` is strictly increasing, faster when also evenly spaced."""
    n = x.shape[0]
    if n < 2:
        return 0.0
    dx = x[1:] - x[:-1]
    if not bool((dx > 0).all()):
        return theil_sen(x, y)  # pairs with equal steps are left out there
    if n >= _CIRCULAR_FROM:
        num, den = _scratch(n)
        slopes = _circular_diffs(y, num)
        slopes /= _circular_diffs(x, den)
        med = _median(slopes)
        if med != 0.0:
            return med
        # (a zero median may be -0.0 here, where half the pairs are divided by negated
        # differences: the pairwise form below says which zero stats.theil_sen gives)
    return _pairwise_median(x, y, dx)


_CIRCULAR_FROM = 64
"""Windows from this many points take :func:`_circular_diffs` (200 points: ~4x faster, and no
pair tables to read through a cold cache); shorter ones the cached pair tables (two fewer
numpy calls, which matter more there)."""


def _pairwise_median(x: np.ndarray, y: np.ndarray, dx: np.ndarray) -> float:
    """The median of the pairwise slopes from the cached pair tables (``dx``: the steps'
    differences, all positive)."""
    i, j, dji = _pairs(x.shape[0])
    slopes = y.take(j) - y.take(i)
    d = float(dx[0])
    if bool((dx == d).all()):
        slopes /= dji if d == 1.0 else dji * d  # = x[j] - x[i], exactly, for integer steps
    else:
        slopes /= x.take(j) - x.take(i)
    return _median(slopes)


def _circular_diffs(v: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``v[(t + L) % n] - v[t]`` for lags L = 1..n//2 and t = 0..n-1, row after row, cut to the
    n(n-1)/2 values that hold every pair once (written into ``out``, see :func:`_scratch`): row
    L holds the pairs L apart (t < n - L) and, wrapped round, those n - L apart, negated (for
    even n the last row's second half repeats its first: it is cut off). Pairs negated on both
    sides of a slope's division give the same slope bit for bit (IEEE negation is exact), so
    ``circ(y) / circ(x)`` holds the pairwise slopes of ``stats.theil_sen`` (in another order)
    from two strided views of ``v`` twice over: no index tables, no gathers."""
    n = v.shape[0]
    np.subtract(windows(np.concatenate((v, v)), n)[1:n // 2 + 1], v, out=out)
    return out.reshape(-1)[:n * (n - 1) // 2]


_SCRATCH = threading.local()


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two ``(n // 2, n)`` float buffers of this thread's, reused from call to call: fresh
    arrays of 200 x 100 floats come from the system's page allocator every time, and their page
    faults cost ~3x the arithmetic (one pair per thread: engines may run in several)."""
    size = (n // 2) * n
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None or bufs.shape[1] < size:
        bufs = np.empty((2, size))
        if size <= _SCRATCH_KEPT:  # (a rare long span, read across two series' rates: not kept)
            _SCRATCH.bufs = bufs
    return bufs[0, :size].reshape(n // 2, n), bufs[1, :size].reshape(n // 2, n)


_SCRATCH_KEPT = 256 * 512
"""Largest buffer kept per thread (2 MB for the pair: windows up to 512 points); a longer window
(a step-time span read by a memory window, up to 3,200 points: 80 MB) gets fresh ones."""


def _median(a: np.ndarray) -> float:
    """``stats.median(a)`` (bit-identical: the same order statistics) for finite values, which
    it may reorder."""
    m = a.shape[0]
    k = m // 2
    a.partition(k)
    hi = float(a[k])
    lo = hi if m % 2 else float(a[:k].max())
    return (lo + hi) * 0.5


def trend_in_order(x: np.ndarray, y: np.ndarray, min_rho: float = -1.0,
                   rho: float | None = None) -> tuple[float, float, float]:
    """``stats.trend(x, y, min_rho)`` (bit-identical) for finite ``y`` and integer steps ``x``;
    ``rho``: its Spearman rho when already known (from :func:`spearman_rows`)."""
    if rho is None:
        rho = spearman_in_order(x, y)
    if rho < min_rho:
        return math.nan, rho, math.nan
    slope = theil_sen_in_order(x, y)
    return slope, rho, relative_growth(slope, x, y)
