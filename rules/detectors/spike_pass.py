"""The spike detector's optimistic vectorised pass: many points against the definition at once.

The definition (and the point-by-point reference) is :mod:`trainwatch.rules.detectors.spike_detector`;
this module only finds, for a stretch of new points, where that definition first flags one, and
what the detector's state is once every point before it is accepted.

Cost: O(1) amortised per point. Between anomalies the stream is processed in vectorised passes
that assume every point is accepted; the first anomalous point ends the pass, the run of anomalous
points after it is handled against the (then fixed) baseline in one step, and the next pass
starts after it. Rolling medians are taken only at refresh boundaries, from sorted windows
(``np.sort`` on short rows); between two boundaries only the largest and smallest point are
looked at unless one reaches the bar, and a MAD and a recent level are taken only for the rare
windows and points that are candidates (the search among those is
:mod:`trainwatch.rules.detectors.spike_first`). With no tail guard (``step_time_outlier``) its
bookkeeping is skipped; with one, the block that closes warm-up records the warm-up window's
deviation (:func:`warm_deviation`, which the point-by-point reference calls too), so the
search's bars start from it.

The row layout: the points of a pass fall into rows, one per baseline they are tested against
(row 0: the detector's current one; row r: the one refreshed at the r-th boundary the pass
reaches). Row 0 holds the points before the first boundary, row r the ``refresh`` points after
the r-th.

:func:`optimistic_pass` reads the detector and changes none of its state (its MAD, computed
lazily, may be cached on the way): it returns a :class:`PassOutcome`, which the detector commits
before it handles the run of anomalous points that ended the pass. The robust scale and the jump
test are the detector's own (``_scale``, ``_jumps``), called by the search so that both paths
compute them with the same expressions and agree to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainwatch.rules.detectors.spike_first import first_spike
from trainwatch.rules.detectors.stats import (
    mad_sorted,
    median_sorted_float,
    min_max,
    sliding_max,
    strided_rows,
)

if TYPE_CHECKING:  # the detector imports this module: a run-time import would be circular
    from trainwatch.rules.detectors.spike_detector import SpikeDetector

_EMPTY = np.empty(0)
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
    only then are the points' own deviations computed
    (:func:`~trainwatch.rules.detectors.spike_first.first_spike`).
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
    partial = [_sorted(A[: R + off + K * g]) if g >= g_ok else _EMPTY
               for g in range(g0)] if g0 else []
    rows = _EMPTY_ROWS
    if g0 < nb_all:
        rows = strided_rows(A, W, R + off + K * g0 - W, K, nb_all - g0)
        rows.sort(axis=1)  # (np.sort's own copy of the overlapping view is slower)
    # the rows' medians: row 0's is the detector's, row g + 1's boundary g's (NaN where the
    # baseline is not warm: see n_bad); the last boundary may have no row (it sits after x[-1])
    med_all = np.empty(nb_all + 1)
    if det.ok:  # (then g_ok is 0: a warm baseline has min_points behind it)
        med_all[0] = det.med
        if g_ok:
            med_all[1:g_ok + 1] = math.nan
    else:
        med_all[:g_ok + 1] = math.nan
    meds = med_all[1:]
    for g in range(g_ok, g0):
        meds[g] = median_sorted_float(partial[g])
    if g0 < nb_all:
        mid = meds[g0:]
        np.add(rows[:, (W - 1) // 2], rows[:, W // 2], out=mid)
        mid *= 0.5  # = median_sorted(rows)

    mads: dict[int, float] = {}
    """The MADs taken (by a candidate's test, or the tail guard's start), by boundary (see
    ``PassOutcome.baseline``)."""

    def mad(g: int) -> float:
        """The MAD of boundary ``g``'s window (taken once)."""
        v = mads.get(g)
        if v is None:
            v = mads[g] = mad_sorted(partial[g] if g < g0 else rows[g - g0], meds[g])
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
    # row r holds x[off + (r-1) K : off + r K] (row 0: the points before `off`)
    if off == K:  # (row 0 is a whole block: at a boundary, as on a detector's first frame)
        rs = np.arange(0, m, K)
    else:
        rs = np.arange(off - K, m, K)
        rs[0] = 0
    top = np.maximum.reduceat(x, rs)
    up = top - med_r
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
        if not det.ok and g_ok < nb_all:
            # the baseline's first boundary: its block (warm-up, 0) records the warm-up window's
            # newest half's largest deviation instead (as SpikeDetector._refresh does); dev[g_ok]
            # is never read as a row's own (_dev: row g_ok has no baseline)
            hi = R + off + K * g_ok
            bm[g_ok] = max(float(bm[g_ok]), warm_deviation(det, A[max(0, hi - W):hi],
                                                           float(meds[g_ok]), lambda: mad(g_ok)))
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
            jstar = first_spike(det, x, A, R, off, first, cands, med_r, den, meds, mad,
                                 lambda: _row_bars(det, bm, n_rows))
    if cfg.early_max_fires and early_max > 0 and need < jstar:
        bar = cfg.early_max_ratio * early_max
        if np.maximum.reduce(top) >= bar:  # (nearly never: no row's largest point reaches it)
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
            baseline = (partial[g] if g < g0 else rows[g - g0], float(meds[g]),
                        mads.get(g) if mads else None)
        if track:
            e_hist = (det.e_hist + bm[max(0, nr - det.Lb):nr].tolist())[-det.Lb:]
            # the bar of the last boundary: the largest of the last Lb block maxima (>= 0)
            emax = max(e_hist)
            blk_e = _dev(x, off + g * K, jstar, g + 1, med_r, den, dev, n_bad)
    elif jstar and track:
        blk_e = max(det.blk_e, _dev(x, 0, jstar, 0, med_r, den, dev, n_bad))
    # (positional, in the fields' order: keywords cost a third of its construction)
    return PassOutcome(jstar, A[max(0, R + jstar - W):R + jstar], c0 + jstar, early_n,
                       new_early_max, baseline, e_hist, emax, blk_e)


def warm_deviation(det: SpikeDetector, window: np.ndarray, med: float,
                   mad: Callable[[], float]) -> float:
    """The tail guard's start when a baseline becomes warm: the largest relative deviation,
    either side, against the first baseline (median ``med``, MAD ``mad()``) of the points of the
    newest half of its window (``window``: the accepted points in arrival order) that this
    baseline accepts, recorded as the block that closes warm-up.

    The newest half only: the median sits at the window's middle, so a level still moving
    (a loss falling from its first steps, a grad norm settling) puts the older half far from
    it, a deviation the guard never sees once warm (it measures each point against a median of
    older points) and one that would blind it for a whole ``tail_window`` (on the bench, loss
    spikes of 2x the median after ~1000 steps went unseen). The newest half holds what it does
    see: the lag behind a moving level, and the noise's tail. The points this baseline flags
    (``r1`` and the z threshold above the median; the jump test left out) are left out, as the
    guard leaves out anomalous points: a spike in warm-up would blind it too.

    The flagged points are the half's top ones (the tests are monotone in the point): nearly
    always its largest point is accepted, and the MAD (``mad``, taken on demand) is needed only
    when it reaches ``r1``. Every test and deviation is a point's own IEEE operations: the same
    bits in every path."""
    n = int(window.shape[0])
    lo, hi = min_max(window[n - n // 2:], few=0)  # (dozens of values: reductions beat a list)
    den = abs(med) or 1.0
    r1 = det.r1
    e_lo = abs((lo - med) / den)
    e = (hi - med) / den
    if e < r1:
        return max(abs(e), e_lo)
    sc, zt = det._scale(med, mad()), det.cfg.z_threshold
    if (hi - med) / sc < zt:
        return max(abs(e), e_lo)
    # (rare: the half's top points are flagged) the largest accepted one, if any
    half = window[n - n // 2:].tolist()
    half.sort(reverse=True)
    for v in half[1:]:
        e = (v - med) / den
        if e < r1 or (v - med) / sc < zt:  # accepted (then so is every lower point)
            return max(abs(e), e_lo)
    return 0.0


def _sorted(a: np.ndarray) -> np.ndarray:
    """A sorted copy of ``a`` (``np.sort`` without its Python wrapper)."""
    s = a.copy()
    s.sort()
    return s


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
