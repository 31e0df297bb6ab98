"""The spike detector's search for the first anomalous point of a pass among its candidate rows.

The optimistic pass (:mod:`trainwatch.rules.detectors.spike_pass`) knows, from each row's largest point,
which rows may hold a point that reaches their bar (the candidates); this module finds the first
point of those rows that the definition (:mod:`trainwatch.rules.detectors.spike_detector`) flags: it
reaches the bar and the z threshold, and it jumps from the recent level. Every test is taken in
the same IEEE operations as the point-by-point reference's, hence the same bits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from trainwatch.rules.detectors.stats import median_sorted, small_median, windows

if TYPE_CHECKING:  # the detector imports the pass, which imports this module
    from trainwatch.rules.detectors.spike_detector import SpikeDetector

_FEW_JUMPS = 8
"""Points of a row given the jump test one by one before the rest are tested together, as
arrays when there are more than this many of them (see _first_in_row)."""


def first_spike(det: SpikeDetector, x: np.ndarray, A: np.ndarray, R: int, off: int,
                 first: tuple[int, float], later: Iterator[tuple[int, float]],
                 med_r: np.ndarray, den: np.ndarray, meds: np.ndarray,
                 mad: Callable[[int], float], bars: Callable[[], np.ndarray]) -> int:
    """Index of the first anomalous point of a pass (``len(x)`` if none), given the candidate
    rows, whose largest point reaches their bar (``first``, then ``later``: (row, bar), in
    order), the rows' medians, and every row's bar as an array on demand (``bars``).

    The first spike is nearly always in the first candidate row, which holds at most
    ``refresh`` points: they are looked at one by one as Python floats (the same IEEE operations
    as the reference's, hence the same bits), a MAD and a recent level taken only for a point
    that reaches the bar. The later candidate rows are looked at together, as arrays: a smooth
    climb can make many rows candidates whose points all fail the jump test."""
    j = _first_in_row(det, x, A, R, off, *first, med_r, den, mad)
    if j >= 0:
        return j
    nxt = next(later, None)
    if nxt is None:
        return int(x.shape[0])
    return _first_in_rows(det, x, A, R, off, nxt[0], med_r, den, bars(), meds, mad)


def _first_in_row(det: SpikeDetector, x: np.ndarray, A: np.ndarray, R: int, off: int, r: int,
                  t: float, med_r: np.ndarray, den: np.ndarray,
                  mad: Callable[[int], float]) -> int:
    """The first anomalous point of row ``r`` (whose bar is ``t``); -1 if none.

    The points are looked at one by one as Python floats; of those that reach the bar and the
    z threshold, the first few are given the jump test at once (a spike, or the first point of
    a step, passes it), the others, if the search reaches them (a climb whose points all fail
    it), together as arrays (:func:`_first_jump`)."""
    K = det.K
    cfg = det.cfg
    zt, js, k = cfg.z_threshold, cfg.jump_share, cfg.recent_points
    lo = 0 if r == 0 else off + (r - 1) * K
    med, d = float(med_r[r]), float(den[r])
    sc = 0.0
    tried = 0
    rest: list[int] = []
    for j, v in enumerate(x[lo:min(int(x.shape[0]), off + r * K)].tolist(), lo):
        if (v - med) / d < t:
            continue
        if not sc:
            sc = det._scale(det.med, det.mad) if r == 0 else det._scale(med, mad(r - 1))
        if (v - med) / sc < zt:
            continue
        if tried == _FEW_JUMPS:
            rest.append(j)
            continue
        tried += 1
        # (the detector's _jumps, written out: a method call per point costs more than it)
        if v - _recent_at(A, R + j, k) >= js * (v - med):
            return j
    return _first_jump(det, x, A, R, rest, med) if rest else -1


def _first_jump(det: SpikeDetector, x: np.ndarray, A: np.ndarray, R: int, pts: list[int],
                med: float) -> int:
    """The first of the points ``pts`` (indices in ``x``, in order) that passes the jump test
    against ``med``; -1 if none. A few are tested one by one, more as arrays, in the same IEEE
    operations as the point by point test."""
    k, js = det.cfg.recent_points, det.cfg.jump_share
    if len(pts) <= _FEW_JUMPS:
        for j, v in zip(pts, x[pts].tolist()):
            if v - _recent_at(A, R + j, k) >= js * (v - med):
                return j
        return -1
    cj = np.array(pts)
    hit = det._jumps(x[cj], _recent_levels(A, R, cj, k), med).nonzero()[0]
    return int(cj[hit[0]]) if hit.shape[0] else -1


def _recent_at(A: np.ndarray, a: int, k: int) -> float:
    """The recent level of the point at ``A[a]``, every point before it taken as accepted: the
    median of the ``k`` values before it (fewer at the start of the baseline)."""
    return small_median(A[max(0, a - k):a].tolist())


def _recent_levels(A: np.ndarray, R: int, cj: np.ndarray, k: int) -> np.ndarray:
    """:func:`_recent_at` of the points ``x[cj]`` (at ``A[R + cj]``), as one array."""
    st = R + cj - k
    if int(st[0]) >= 0:
        return median_sorted(np.sort(windows(A, k)[st], axis=1))
    # fewer accepted points than that (a recent_points above min_points)
    return np.array([small_median(A[max(0, a):a + k].tolist()) for a in st.tolist()])


def _first_in_rows(det: SpikeDetector, x: np.ndarray, A: np.ndarray, R: int, off: int,
                   r0: int, med_r: np.ndarray, den: np.ndarray, thr: np.ndarray,
                   meds: np.ndarray, mad: Callable[[int], float]) -> int:
    """The first anomalous point in rows ``r0`` on (``len(x)`` if none), as arrays: the points'
    deviations laid out as rows of ``refresh`` slots, so each row's median and bar broadcast
    over it instead of being gathered per point. The slots after the last point hold the last
    row's median (a deviation of exactly 0: candidates there are dropped)."""
    K = det.K
    m = int(x.shape[0])
    pad = K - off
    n_rows = int(med_r.shape[0])
    P = np.empty((n_rows - r0, K))
    flat = P.reshape(-1)
    at = r0 * K - pad  # the index in x of row r0's first point (r0 >= 1: at >= 0)
    flat[:m - at] = x[at:]
    flat[m - at:] = med_r[-1]
    P -= med_r[r0:, None]
    P /= den[r0:, None]
    ci = (P >= thr[r0:, None]).reshape(-1).nonzero()[0] + at
    ci = ci[(ci >= 0) & (ci < m)]
    if not ci.shape[0]:
        return m
    ri = (ci + pad) // K
    # (r0 >= 1: row 0 is never among them)
    scale = {r: det._scale(float(meds[r - 1]), mad(r - 1)) for r in set(ri.tolist())}
    sc = np.array([scale[r] for r in ri.tolist()])
    z = (x[ci] - med_r[ri]) / sc
    pz = (z >= det.cfg.z_threshold).nonzero()[0]
    if not pz.shape[0]:
        return m
    cj = ci[pz]
    hit = det._jumps(x[cj], _recent_levels(A, R, cj, det.cfg.recent_points),
                     med_r[ri[pz]]).nonzero()[0]
    return int(cj[hit[0]]) if hit.shape[0] else m
