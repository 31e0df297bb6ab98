"""``lr_exhausted``'s proofs that a frame cannot fire, taken before its full pass.

Most frames see the LR well above its floor and above ~0, or decaying towards its floor too
briefly for a run there to count: a few comparisons against the bars of the frame's highest
peak settle them (and set the state the full pass would leave), where the full pass of
:class:`~trainwatch.rules.builtin.lr_exhausted.LrExhaustedRule` takes some 50 array operations. Tests run the rule
with ``fast = False`` as the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwatch.rules.config.models import LrConfig
from trainwatch.rules.engine.base import Points

FEW = 64
"""Most points a check takes in Python floats: past it, array operations are the cheaper."""


class CalmFrames:
    """The frame shortcuts of :class:`~trainwatch.rules.builtin.lr_exhausted.LrExhaustedRule` (a mixin: they read
    and set its run state)."""

    cfg: Any
    n: int
    """LR points before this frame."""
    peak: float
    zrun: int
    zfired: bool
    zrun_start: int
    frun: int
    ffired: bool
    frun_start: int

    def _clear(self, v: np.ndarray, vmin: float, vmax: float,
               seen: list[Any] | None = None) -> bool:
        """:meth:`_quiet` without the running peak of every point (``vmin``, ``vmax``: the
        frame's lowest and highest point).

        A point can only be under its bars if it is under the bars of the highest peak of the
        frame (no running peak is higher): the lowest point clears most frames, and otherwise
        only those candidates are held to their running peak, computed up to the last of them
        (an LR warming up from ~0: a few first points, in Python floats). ``seen`` gets the bar,
        the candidates and :meth:`_top` for :meth:`_calm`."""
        cfg: LrConfig = self.cfg
        c = max(cfg.floor_ratio, cfg.zero_ratio)
        bar = max(cfg.zero, c * max(self.peak, vmax))
        if vmin > bar:
            return True
        cand = (v <= bar).nonzero()[0]
        top = self._top(v, vmax)
        if seen is not None:
            seen[:] = [bar, cand, top]
        if top < 0 or int(cand[-1]) > top:
            return False  # (a candidate where the running peak is the highest: under its bar)
        hi = int(cand[-1]) + 1
        if hi > FEW:
            peak_c = np.maximum.accumulate(v[:hi])[cand]
            np.maximum(peak_c, self.peak, out=peak_c)
            return self._quiet(v[cand], peak_c)
        # (a point that is no candidate is above the bars of any running peak: checking it too
        # changes nothing)
        peak, zero = self.peak, cfg.zero
        for x in v[:hi].tolist():
            peak = max(peak, x)
            if x <= max(peak * c, zero):
                return False
        return True

    def _top(self, v: np.ndarray, vmax: float) -> int:
        """Where the running peak reaches the frame's highest point (its first index), or -1
        when a peak from before is as high: from there on every running peak is the highest."""
        return int(v.argmax()) if vmax > self.peak else -1

    def _calm(self, f: Points, vmin: float, vmax: float, seen: list[Any] | None = None) -> bool:
        """Whether no point of the frame can fire (a run at the floor or ~0 too short for it),
        told from how many points are under the floor bar of the frame's highest peak; if so,
        the runs' state at the end is set from the last points, as the full pass would.

        (The LR decaying to its floor at the end of a run: the full pass takes some 50 array
        operations, this one a handful.)"""
        cfg: LrConfig = self.cfg
        v = f.values
        m, n0 = v.shape[0], self.n
        peak = max(self.peak, vmax)
        fbar, zbar = cfg.floor_ratio * peak, max(cfg.zero, cfg.zero_ratio * peak)
        if not (peak > 0 and cfg.floor_ratio < 1 and zbar < fbar):
            return False  # (a bar at or above the peak: the highest point could be under it)
        if self.frun and self.frun >= max(cfg.min_points, cfg.floor_fraction * n0):
            return False  # a block before the first LR point may fire on the carried run
        # every point at the floor or ~0 is under the bar of the highest peak (no running peak
        # is higher): the candidates
        if seen and seen[0] == fbar:  # (:meth:`_clear` took them: its bar is the floor's)
            cand, top = seen[1], [seen[2]]
        else:
            cand, top = (v <= fbar).nonzero()[0], []  # (:meth:`_top`, once asked)
        cnt = cand.shape[0]
        if not self._short_runs(cand, self.frun, cfg.floor_fraction, v, top):
            return False
        if not self._short_runs(cand, self.zrun, cfg.zero_fraction, v, top):
            zc = (v <= zbar).nonzero()[0]  # (an LR at its floor for long, ~0 only at the end)
            if not self._short_runs(zc, self.zrun, cfg.zero_fraction, v, top):
                return False
        # the runs at the end: the last candidates in a row. The highest point, where the
        # running peak reaches ``peak``, is no candidate (``peak`` is above its bars), so they
        # all come after it: their bars are ``peak``'s.
        t = 0
        if cnt and int(cand[-1]) == m - 1:
            lo, hi = 0, cnt - 1  # the first k from which cand[k] == m - cnt + k
            while lo < hi:
                mid = (lo + hi) // 2
                if int(cand[mid]) - mid == m - cnt:
                    hi = mid
                else:
                    lo = mid + 1
            t = cnt - lo
        tz = tf = 0
        if t:
            tail = v[m - t:]
            if float(v[-1]) <= zbar:  # ~0 at the end: the ~0 points in a row
                other = (tail > zbar).nonzero()[0]
                tz = t - 1 - int(other[-1]) if other.shape[0] else t
            else:  # at the floor at the end
                other = (tail <= zbar).nonzero()[0]
                tf = t - 1 - int(other[-1]) if other.shape[0] else t
        self.zrun, self.zfired, self.zrun_start = self._run_at_end(
            f, tz, self.zrun, self.zfired, self.zrun_start)
        self.frun, self.ffired, self.frun_start = self._run_at_end(
            f, tf, self.frun, self.ffired, self.frun_start)
        return True

    def _short_runs(self, cand: np.ndarray, carried: int, fraction: float, v: np.ndarray,
                    top: list[int]) -> bool:
        """Whether no run of the points ``cand`` (indices, in order) can reach ``max(min_points,
        fraction x the points so far)`` (see :func:`_too_short`).

        The frame's highest point, above the running peak before it, is in no run: the runs on
        either side of it are bounded apart when together they are not (a warm-up from ~0 at a
        frame's start and a decay at its end). ``top`` keeps the highest point's index."""
        cfg: LrConfig = self.cfg
        m, cnt, n0 = v.shape[0], cand.shape[0], self.n
        c0 = int(cand[0]) if cnt else m
        carried = carried if c0 == 0 else 0
        if too_short(carried, cnt, n0 + c0, cfg.min_points, fraction):
            return True
        if not top:
            top.append(self._top(v, float(v.max())))
        j = int(cand.searchsorted(top[0]))
        return 0 < j < cnt and (
            too_short(carried, j, n0 + c0, cfg.min_points, fraction)
            and too_short(0, cnt - j, n0 + int(cand[j]), cfg.min_points, fraction))

    @staticmethod
    def _run_at_end(f: Points, trail: int, carried: int, fired: bool,
                    start: int) -> tuple[int, bool, int]:
        """(length, fired, first step) of the run at the frame's end, from its last ``trail``
        points, when none of the frame's points fired."""
        m = len(f)
        if trail == 0:
            return 0, False, start
        if trail == m and carried > 0:  # the carried run goes on
            return carried + m, fired, start
        return trail, False, int(f.steps[m - trail])

    def _quiet(self, v: np.ndarray, peak_i: np.ndarray) -> bool:
        """Every point is above its floor and above ~0 (``peak_i``: the running peak at each
        point): no run of either starts here."""
        cfg: LrConfig = self.cfg
        thr = peak_i * max(cfg.floor_ratio, cfg.zero_ratio)
        np.maximum(thr, cfg.zero, out=thr)
        return not np.count_nonzero(v <= thr)


def too_short(carried: int, cnt: int, before: int, min_points: int, fraction: float) -> bool:
    """Whether no run made of at most ``cnt`` of a frame's points (plus ``carried`` points from
    before the frame), none of them before the LR's point number ``before + 1``, can reach
    ``max(min_points, fraction x the LR points so far)`` at any of its points.

    A run's slack (its length less the bar) grows along it when ``fraction <= 1``, so the
    longest run that ends last bounds them all; the margin of 1 covers the rounding of
    ``fraction x points``."""
    longest = carried + cnt
    return longest < min_points or (fraction <= 1 and longest + 1 <= fraction * (before + cnt))
