"""The spike detector's optimistic vectorised pass: many points against the definition at once.

The definition (and the point-by-point reference) is :mod:`trainwatch.rules.spike_detector`;
this module only finds, for a stretch of new points, where that definition first flags one, and
what the detector's state is once every point before it is accepted.

Cost: O(1) amortised per point. Between anomalies the stream is processed in vectorised passes
that assume every point is accepted; the first anomalous point ends the pass, the run of anomalous
points after it is handled against the (then fixed) baseline in one step, and the next pass
starts after it. Rolling medians are taken only at refresh boundaries, from sorted windows
(``np.sort`` on short rows); between two boundaries only the largest and smallest point are
looked at unless one reaches the bar, and a MAD and a recent level are taken only for the rare
windows and points that are candidates. With no tail guard (``step_time_outlier``) its
bookkeeping is skipped.

The row layout: the points of a pass fall into rows, one per baseline they are tested against
(row 0: the detector's current one; row r: the one refreshed at the r-th boundary the pass
reaches). Row 0 holds the points before the first boundary, row r the ``refresh`` points after
the r-th.

:func:`optimistic_pass` reads the detector and changes none of its state (its MAD, computed
lazily, may be cached on the way): it returns a :class:`PassOutcome`, which the detector commits
before it handles the run of anomalous points that ended the pass. The robust scale and the jump
test are the detector's own (``_scale``, ``_jumps``), called here so that both paths compute
them with the same expressions and agree to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainwatch.rules.stats import (
    mad_sorted,
    median_sorted,
    min_max,
    sliding_max,
    small_median,
    strided_windows,
    windows,
)

if TYPE_CHECKING:  # the detector imports this module: a run-time import would be circular
    from trainwatch.rules.spike_detector import SpikeDetector

_EMPTY = np.empty(0)
_FEW_JUMPS = 8
"""Points of a row given the jump test one by one before the rest are tested together, as
arrays when there are more than this many of them (see _first_in_row)."""
_FEW_ROWS = 8
"""Up to this many rows reaching ``r1``, their bars are taken one by one (see _row_bar)."""
_EMPTY_ROWS = np.empty((0, 0))


@dataclass(slots=True)
class PassOutcome:
    """What a pass decided: ``x[:accepted]`` are accepted, and the detector's state after them.

    Each state field holds the detector's own value where accepting those points leaves it as it
    was."""

    accepted: int
    """Points accepted from the start of the pass: all of them, or up to the first anomalous."""
    ring: np.ndarray
    """The last ``window`` accepted values."""
    n_acc: int
    """Accepted points since the baseline (re)started."""
    early_n: int
    early_max: float
    baseline: tuple[np.ndarray, float, float | None] | None
    """Sorted window, median and MAD (``None``: not taken yet) of the last refresh boundary
    reached with ``min_points`` behind it; ``None`` when the pass reached no such boundary (the
    baseline stays). The pass that ends at a spike has taken the MAD of the spike's baseline to
    test it: the alert reads it again."""
    e_hist: list[float]
    """Largest relative deviation of each of the last ``tail_window`` refresh blocks."""
    emax: float
    """The tail guard's reference: the largest of ``e_hist``."""
    blk_e: float
    """Largest relative deviation among accepted points since the last refresh."""


def optimistic_pass(det: SpikeDetector, x: np.ndarray) -> PassOutcome:
    """One optimistic pass over ``x`` (see the module doc), against ``det``'s state; ``det``'s
    accepted points must all be in its ``ring`` (see ``SpikeDetector._fold``).

    A row's largest and smallest point give its largest deviations, which is all the tail guard
    keeps and all it takes to know that no point of the row reaches the bar (the common case);
    only then are the points' own deviations computed (:func:`_first_spike`).
    """
    cfg, K, W = det.cfg, det.K, det.W
    m = int(x.shape[0])
    c0 = det.n_acc
    R = int(det.ring.shape[0])
    off = K - (c0 % K)
    """Accepted points still needed to reach the next refresh boundary."""
    nb_all = 0 if off > m else (m - off) // K + 1
    """Boundaries reached if every point were accepted (the last may sit after x[-1])."""
    n_rows = 1 if off >= m else (m - off - 1) // K + 2
    """Rows of the layout: 1 + the boundaries that apply to some point of x."""
    A = np.concatenate((det.ring, x)) if R else x
    # boundary g closes after accepting x[off + g K - 1]; its window is A[hi - W : hi] with
    # hi = R + off + g K, from boundary g_ok on it has min_points behind it
    g_ok = max(0, -(-(cfg.min_points - c0 - off) // K))
    g0 = min(nb_all, max(0, -(-(W - R - off) // K)))
    """Boundaries before g0 have fewer than W accepted points behind them (warm-up)."""
    # boundaries before g_ok have no baseline (NaN median): their windows are never read
    partial = [np.sort(A[: R + off + K * g]) if g >= g_ok else _EMPTY for g in range(g0)]
    rows = _EMPTY_ROWS
    if g0 < nb_all:
        rows = strided_windows(A, W, R + off + K * g0 - W, K, nb_all - g0).copy()
        rows.sort(axis=1)  # (np.sort's own copy of the overlapping view is slower)
    # the rows' medians: row 0's is the detector's, row g + 1's boundary g's (NaN where the
    # baseline is not warm: see n_bad); the last boundary may have no row (it sits after x[-1])
    med_all = np.empty(nb_all + 1)
    med_all[0] = det.med if det.ok else math.nan
    meds = med_all[1:]
    if g_ok:
        meds[:g_ok] = math.nan
    for g in range(g_ok, g0):
        meds[g] = median_sorted(partial[g])
    if g0 < nb_all:
        mid = meds[g0:]
        np.add(rows[:, (W - 1) // 2], rows[:, W // 2], out=mid)
        mid *= 0.5  # = median_sorted(rows)

    def win(g: int) -> np.ndarray:
        return partial[g] if g < g0 else rows[g - g0]

    mads: dict[int, float] = {}

    def mad(g: int) -> float:
        """The MAD of boundary ``g``'s window (taken once: see ``PassOutcome.baseline``)."""
        v = mads.get(g)
        if v is None:
            v = mads[g] = mad_sorted(win(g), meds[g])
        return v

    med_r = med_all[:n_rows]
    n_bad = 0 if det.ok else min(n_rows, g_ok + 1)
    """Leading rows without a warm baseline (their deviations count as 0): their medians are
    NaN, so are their deviations, and no test on those is ever true."""
    den = np.abs(med_r)
    if np.count_nonzero(den) < n_rows:  # (NaN counts as non-zero)
        den[den == 0] = 1.0
    # Each row's largest deviation each way, from its largest and smallest point: x -> (x -
    # median) / den is monotone, so these equal the maxima of the points' own deviations,
    # which are only computed (below) when some row reaches the bar.
    rs = np.arange(off - K, m, K)
    rs[0] = 0  # row r holds x[off + (r-1) K : off + r K] (row 0: the points before `off`)
    up = np.maximum.reduceat(x, rs)
    up -= med_r
    up /= den
    track = det.track_tail
    bm = _EMPTY
    """Each boundary's block maximum of the deviations (the tail guard's; only when it is on)."""
    if track:
        dev = np.minimum.reduceat(x, rs)
        np.subtract(med_r, dev, out=dev)
        dev /= den
        np.maximum(dev, up, out=dev)  # the tail guard learns both tails (a falling loss
        # hides the upper)
        if n_bad:
            dev[:n_bad] = 0.0
        bm = dev[:nb_all]
        if nb_all and det.blk_e > 0.0:  # (a deviation is >= 0: max with 0 changes nothing)
            bm[0] = max(det.blk_e, float(bm[0]))
    # early maximum: fixed once the first early_points accepted points are in
    need = max(0, cfg.early_points - det.early_n)
    head_max = float(np.maximum.reduce(x[:need])) if need and m else -math.inf
    early_max = max(det.early_max, head_max)
    jstar = m
    r1 = det.r1
    # every bar is at least r1: below it nowhere (the common case), no point is a candidate
    # and the tail bars of the rows need not be known; above it, the bars of the rows that
    # reach r1 are taken one by one (on Python floats: see _row_bar) up to the first candidate
    # (fmax: the NaN deviations of rows without a baseline are skipped)
    if np.fmax.reduce(up) >= r1:
        over = (up >= r1).nonzero()[0]
        if track and over.shape[0] > _FEW_ROWS:  # (a climb): every row's bar in one go
            thr = _row_bars(det, bm, n_rows)
            c = over[up[over] >= thr[over]]
            cands = zip(c.tolist(), thr[c].tolist())
        else:
            blocks = det.e_hist + bm.tolist() if track else []
            cands = _candidates(det, over.tolist(), up[over].tolist(), blocks)
        first = next(cands, None)
        if first is not None:
            jstar = _first_spike(det, x, A, R, off, first, cands, med_r, den, meds, mad,
                                 lambda: _row_bars(det, bm, n_rows))
    if cfg.early_max_fires and early_max > 0 and need < jstar:
        bar = cfg.early_max_ratio * early_max
        j = need + int((x[need:jstar] >= bar).argmax())
        if j < jstar and x[j] >= bar:  # (argmax of no true is 0)
            jstar = j

    # the state once x[:jstar] are accepted
    early_n, new_early_max = det.early_n, det.early_max
    if det.early_n < cfg.early_points and jstar:
        take = min(jstar, need)
        new_early_max = max(det.early_max,
                            head_max if take == min(m, need) else float(x[:take].max()))
        early_n += take
    baseline = None
    e_hist, emax, blk_e = det.e_hist, det.emax, det.blk_e
    nr = 0 if jstar < off else (jstar - off) // K + 1
    """Boundaries reached by the accepted points."""
    if nr:
        g = nr - 1
        if g >= g_ok:
            baseline = (win(g), float(meds[g]), mads.get(g))
        if track:
            e_hist = (det.e_hist + bm[max(0, nr - det.Lb):nr].tolist())[-det.Lb:]
            # the bar of the last boundary: the largest of the last Lb block maxima (>= 0)
            emax = max(e_hist)
            blk_e = _dev(x, off + g * K, jstar, g + 1, med_r, den, dev, n_bad)
    elif jstar and track:
        blk_e = max(det.blk_e, _dev(x, 0, jstar, 0, med_r, den, dev, n_bad))
    return PassOutcome(
        accepted=jstar, ring=A[max(0, R + jstar - W):R + jstar], n_acc=c0 + jstar,
        early_n=early_n, early_max=new_early_max, baseline=baseline,
        e_hist=e_hist, emax=emax, blk_e=blk_e,
    )


def _candidates(det: SpikeDetector, over: list[int], ups: list[float],
                blocks: list[float]) -> Iterator[tuple[int, float]]:
    """The candidate rows and their bars, in order, among the rows ``over`` whose largest
    deviation (``ups``) reaches ``r1``: each bar taken when the search reaches its row."""
    for r, u in zip(over, ups):
        t = _row_bar(det, blocks, r)
        if u >= t:
            yield r, t


def _row_bar(det: SpikeDetector, blocks: list[float], r: int) -> float:
    """Row ``r``'s bar: ``r1``, or ``tail_guard`` times the largest of the last ``Lb`` block
    maxima before it (row 0: the detector's ``emax``; row ``r``: those up to boundary ``r - 1``),
    the element of :func:`_row_bars` in the same IEEE operations. ``blocks`` holds the
    detector's block maxima, then this pass's."""
    if not det.track_tail:
        return det.r1
    if r == 0:
        e = det.emax
    else:  # boundary r - 1 sits at blocks[h + r - 1]
        h = len(det.e_hist)
        e = max(blocks[max(0, h + r - det.Lb):h + r])
    return max(det.r1, det.cfg.tail_guard * e)


def _row_bars(det: SpikeDetector, bm: np.ndarray, n_rows: int) -> np.ndarray:
    """Every row's bar as an array (missing history counts as 0: deviations are >= 0)."""
    if not det.track_tail:
        return np.full(n_rows, det.r1)
    thr = np.empty(n_rows)
    thr[0] = det.emax
    thr[1:] = sliding_max(np.asarray(det.e_hist), bm, det.Lb)[: n_rows - 1]
    return np.maximum(det.r1, det.cfg.tail_guard * thr)


def _dev(x: np.ndarray, lo: int, hi: int, row: int, med_r: np.ndarray, den: np.ndarray,
         dev: np.ndarray, n_bad: int) -> float:
    """Largest relative deviation (either side) of ``x[lo:hi]``, all in ``row``: the row's own
    when the span reaches its end (``hi`` is then the end of ``x``), else from the span's
    extremes (0 for a row without a warm baseline, or an empty span)."""
    if hi <= lo or row < n_bad:
        return 0.0
    if hi == x.shape[0]:
        return float(dev[row])
    lo_v, hi_v = min_max(x[lo:hi])
    med, d = float(med_r[row]), float(den[row])
    return max((hi_v - med) / d, (med - lo_v) / d)


def _first_spike(det: SpikeDetector, x: np.ndarray, A: np.ndarray, R: int, off: int,
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
