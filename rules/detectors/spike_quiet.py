"""The spike detector's quiet-frame path: a few dozen points that provably cannot be anomalous.

A live frame holds a handful of points (one per record of a 2 KiB read), nearly always all of
them normal. The optimistic pass (:mod:`trainwatch.rules.detectors.spike_pass`) would decide that with a
few dozen numpy calls whatever the frame's length; here the same decision, and the same state
once the points are accepted, comes from Python floats: the points are taken segment by
segment (the points up to the next refresh boundary, then the boundary itself, which is where
the baseline may change), and a segment is accepted whole when its largest point is below the
bar of the baseline it is tested against (``x -> (x - median) / den`` is monotone in IEEE
arithmetic, so no point of the segment reaches a bar its largest point does not reach) and,
where the early maximum fires, below the early bar. A segment that may hold an anomalous point
stops the path: the points from there on go the usual way, from the state committed so far.

The accepting is :meth:`SpikeDetector._point`'s for each point of the segment, folded: the same
values, hence the same bits (the largest deviation either way of a segment is its largest or
its smallest point's; an early maximum kept point by point is the segment head's maximum).
As in the pass, the tail guard's bookkeeping is skipped when it is off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the detector imports this module: a run-time import would be circular
    from trainwatch.rules.detectors.spike_detector import SpikeDetector


def accept_quiet(det: SpikeDetector, xs: list[float]) -> int:
    """Accept the leading segments of ``xs`` that cannot hold an anomalous point (see the module
    doc) into ``det``'s state; returns how many points were accepted (all: ``len(xs)``)."""
    cfg = det.cfg
    K, m, i = det.K, len(xs), 0
    fires, track = cfg.early_max_fires, det.track_tail
    while i < m:
        seg = xs[i:i + K - det.n_acc % K]
        n = len(seg)
        need = cfg.early_points - det.early_n
        early_max = det.early_max
        if need > 0:  # the segment's first `need` points are still counted into it
            early_max = max(early_max, max(seg[:need]))
        # from the early_points-th accepted point on, a point at ratio x the early maximum is
        # severe (and, where that fires, anomalous on its own)
        if (fires and need < n and early_max > 0
                and max(seg[need:] if need > 0 else seg) >= cfg.early_max_ratio * early_max):
            break
        if det.ok:
            med = det.med
            den = abs(med) or 1.0
            e_hi = (max(seg) - med) / den
            if e_hi >= det.r1 and e_hi >= cfg.tail_guard * det.emax:
                break  # a candidate: the exact test is the pass's (or the reference's)
            if track:
                det.blk_e = max(det.blk_e, abs(e_hi), abs((min(seg) - med) / den))
        det._tail += seg
        det.n_acc += n
        if need > 0:
            det.early_max = early_max
            det.early_n += min(need, n)
        i += n
        if det.n_acc % K == 0:
            det._refresh(track)
    if i:
        det.episode.normal(i)
        det.flag_run = 0
    return i
