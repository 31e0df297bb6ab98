"""A streaming spike detector: robust z against a rolling median/MAD, with episodes.

Definition, point by point (finite values only):

* The baseline is the median (and MAD) of the last ``window`` *accepted* points, recomputed every
  ``refresh`` accepted points. A point is accepted when it is not anomalous, so spikes never
  inflate the baseline.
* A point is anomalous when the baseline is warm (``min_points`` accepted), its excess over the
  median is at least ``min_ratio - 1`` times ``|median|``, at least ``tail_guard`` times the
  largest relative deviation (either side: while the loss falls fast its points sit below the
  median and would hide the noise) among the last ``tail_window`` accepted points (heavy-tailed
  noise raises the bar by itself; on Gaussian noise the guard stays near the z bar), and its robust z
  ``(x - median) / (1.4826 MAD)`` is at least ``z_threshold``, and it is a *jump*: its excess over
  the recent level (the median of the last ``recent_points`` accepted points) is at least
  ``jump_share`` of its excess over the window median. The window median lags a smooth ramp by
  half a window (a grad norm growing with the LR during warm-up on a healthy run); against the
  recent level the ramp's next point is no jump, while a spike or a step up jumps from both.
  Optionally (grad norm) a value at least ``early_max_ratio`` times the early maximum is anomalous
  on its own.
* ``rebase_points`` anomalous points in a row make the new level the normal one (the baseline
  restarts).

Cost: O(1) amortised per point. Between anomalies the stream is processed in vectorised passes
that assume every point is accepted; the first anomalous point ends the pass, the run of anomalous
points after it is handled against the (then fixed) baseline in one step, and the next pass
starts after it. Rolling medians are taken only at refresh boundaries, from sorted windows
(``np.sort`` on short rows); between two boundaries only the largest and smallest point are
looked at unless one reaches the bar, and a MAD and a recent level are taken only for the rare
windows and points that are candidates. With no tail guard (``step_time_outlier``) its
bookkeeping is skipped. The same class run with ``vectorized=False`` is the point-by-point reference the tests compare
against.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.episode import Episode
from trainwatch.rules.models import SpikeConfig
from trainwatch.rules.stats import (
    MAD_TO_SIGMA,
    mad_sorted,
    median_sorted,
    sliding_max,
    small_median,
    strided_windows,
    windows,
)

_MAX_SPAN = 4096
_POINTWISE = 8
"""Up to this many points, an update goes point by point (no fixed cost of a pass)."""
_NO_INDEX = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class SpikeEvent:
    index: int
    """Index of the point in the values passed to :meth:`SpikeDetector.update`."""
    kind: str
    """Episode kind: start, escalate or start_escalated."""
    value: float
    median: float
    mad: float
    z: float
    early_max: float
    severe: bool
    """At least ``early_max_ratio`` times the early maximum."""
    episode_points: int
    """Anomalous points in the episode so far (persistence)."""


class SpikeDetector:
    def __init__(self, cfg: SpikeConfig, *, vectorized: bool = True) -> None:
        self.cfg = cfg
        self.vectorized = vectorized
        self.W = cfg.window
        self.K = cfg.refresh
        self.Lb = max(1, math.ceil(cfg.tail_window / cfg.refresh))
        self.r1 = cfg.min_ratio - 1.0
        self.track_tail = cfg.tail_guard > 0
        """Whether the tail guard's bar can matter (without it, its bookkeeping is skipped)."""
        self.episode = Episode(cfg.rearm_points, cfg.cooldown_steps, cfg.persist_points)
        self.early_n = 0
        self.early_max = -math.inf
        self.flag_run = 0
        self._reset_baseline()

    # ------------------------------------------------------------------ state
    def _reset_baseline(self) -> None:
        self.ring = np.empty(0)
        """The last ``window`` accepted values (with ``_tail`` after them)."""
        self._tail: list[float] = []
        """Values accepted point by point since ``ring`` was last brought up to date."""
        self.n_acc = 0
        self.ok = False
        self.med = math.nan
        self.win = np.empty(0)
        self._mad: float | None = None
        self.blk_e = 0.0
        """Largest relative deviation among accepted points since the last refresh."""
        self.e_hist = np.empty(0)
        """Largest relative deviation of each of the last refresh blocks."""
        self.emax = 0.0

    def rewind(self) -> None:
        """A new segment. A resumed run replays steps from an earlier checkpoint, where the level
        was higher than where the old segment ended: the baseline restarts (the early maximum,
        a run-level fact, stays), and so do episodes and cooldowns."""
        self.episode.reset()
        self.flag_run = 0
        self._reset_baseline()

    def _fold(self) -> None:
        """Bring ``ring`` up to date with the points accepted one by one."""
        if self._tail:
            self.ring = np.concatenate((self.ring, self._tail))[-self.W:]
            self._tail = []

    @property
    def mad(self) -> float:
        if self._mad is None:
            self._mad = mad_sorted(self.win, self.med)
        return self._mad

    def _scale(self, med: float, mad: float) -> float:
        return max(MAD_TO_SIGMA * mad, 1e-3 * abs(med), 1e-12)

    def _early_thr(self) -> float:
        if self.early_n < self.cfg.early_points or self.early_max <= 0:
            return math.inf
        return self.cfg.early_max_ratio * self.early_max

    def _recent(self) -> float:
        """The recent level: median of the last ``recent_points`` accepted points."""
        k = self.cfg.recent_points
        tail = self._tail[-k:]
        need = k - len(tail)
        if need > 0 and self.ring.shape[0]:
            tail = self.ring[-need:].tolist() + tail
        return small_median(tail) if tail else self.med

    def _jumps(self, x: float | np.ndarray, recent: float | np.ndarray,
               med: float | np.ndarray) -> bool | np.ndarray:
        return x - recent >= self.cfg.jump_share * (x - med)

    # ------------------------------------------------------------------ feeding
    def update(self, values: np.ndarray, steps: np.ndarray) -> tuple[list[SpikeEvent], np.ndarray]:
        """Feed finite values in order; returns the alerts' points and the anomalous indices."""
        events: list[SpikeEvent] = []
        flagged: list[np.ndarray] = []
        i, m = 0, int(values.shape[0])
        if not self.vectorized or m <= _POINTWISE:
            # the definition itself: for a few points (a live tail) cheaper than a pass
            for i, (x, step) in enumerate(zip(values.tolist(), steps.tolist())):
                self._point(x, step, i, events, flagged)
            m = 0
        span = _MAX_SPAN
        while i < m:
            if self.vectorized:
                used = self._vpass(values[i:i + span], steps[i:i + span], i, events, flagged)
                # a pass costs the same few dozen array operations however long: after an
                # anomaly the next one covers the rest again, unless anomalies come thick and fast
                span = _MAX_SPAN if used >= 128 else 256
                i += used
            else:
                self._point(float(values[i]), int(steps[i]), i, events, flagged)
                i += 1
        idx = np.concatenate(flagged) if flagged else _NO_INDEX
        return events, idx

    def _point(self, x: float, step: int, i: int, events: list[SpikeEvent],
               flagged: list[np.ndarray]) -> None:
        """The definition, one point at a time (warm-up, and the reference)."""
        cfg = self.cfg
        e = 0.0
        anomalous = False
        if self.ok:
            den = abs(self.med) or 1.0
            e = (x - self.med) / den
            if e >= self.r1 and e >= cfg.tail_guard * self.emax:
                z = (x - self.med) / self._scale(self.med, self.mad)
                anomalous = z >= cfg.z_threshold and bool(self._jumps(x, self._recent(), self.med))
        severe = x >= self._early_thr()
        if cfg.early_max_fires and severe:
            anomalous = True
        if anomalous:
            self._flag_run_of(np.asarray([x]), np.asarray([step]), np.asarray([severe]), i,
                              events, flagged)
            return
        # accepted
        self._tail.append(x)
        self.n_acc += 1
        if self.ok:
            self.blk_e = max(self.blk_e, abs(e))
        if self.early_n < cfg.early_points:
            self.early_max = max(self.early_max, x)
            self.early_n += 1
        if self.n_acc % self.K == 0:
            self.e_hist = np.append(self.e_hist, self.blk_e)[-self.Lb:]
            self.emax = float(self.e_hist.max())
            self.blk_e = 0.0
            if self.n_acc >= cfg.min_points:
                self.ok = True
                self._fold()
                self.win = np.sort(self.ring)
                self.med = float(median_sorted(self.win))
                self._mad = None
        self.episode.normal(1)
        self.flag_run = 0

    def _flag_run_of(self, x: np.ndarray, steps: np.ndarray, severe: np.ndarray, base: int,
                     events: list[SpikeEvent], flagged: list[np.ndarray]) -> int:
        """Consecutive anomalous points (against the current, fixed baseline). Returns how many
        were taken (fewer than given when the run reaches ``rebase_points``)."""
        r = int(x.shape[0])
        rebase = False
        if self.flag_run + r >= self.cfg.rebase_points:
            r = self.cfg.rebase_points - self.flag_run
            rebase = True
        for k, kind in self.episode.run(steps[:r], severe[:r]):
            xv = float(x[k])
            med, mad = (self.med, self.mad) if self.ok else (math.nan, math.nan)
            z = (xv - med) / self._scale(med, mad) if self.ok else math.nan
            events.append(SpikeEvent(
                index=base + k, kind=kind, value=xv, median=med, mad=mad, z=z,
                early_max=self.early_max, severe=bool(severe[k]),
                episode_points=self.episode.count - (r - 1 - k),
            ))
        flagged.append(np.arange(base, base + r, dtype=np.int64))
        self.flag_run += r
        if rebase:
            self._reset_baseline()
            self.flag_run = 0
        return r

    def _anomalous_fixed(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Anomalous mask (and severe mask) of ``x`` against the current baseline."""
        cfg = self.cfg
        severe = x >= self._early_thr()
        anom = np.zeros(x.shape[0], dtype=bool)
        if self.ok:
            den = abs(self.med) or 1.0
            e = (x - self.med) / den
            cand = (e >= self.r1) & (e >= cfg.tail_guard * self.emax)
            if cand.any():
                anom = cand & ((x - self.med) / self._scale(self.med, self.mad) >= cfg.z_threshold)
                # no point of the run is accepted: the recent level is fixed too
                anom &= self._jumps(x, self._recent(), self.med)
        if cfg.early_max_fires:
            anom |= severe
        return anom, severe

    def _anomalous_run(self, x: np.ndarray) -> tuple[int, np.ndarray]:
        """The run of anomalous points that starts at ``x[0]``, against the current baseline:
        its length (at least 1: ``x[0]`` is anomalous by construction; never stall on a rounding
        doubt) and severe mask. The first few points are looked at first: a run is usually a
        point or a few, while ``x`` may be the thousands of points left in a pass."""
        n = int(x.shape[0])
        lo, severe = 0, []
        r = n
        for hi in (min(n, 16), n):
            if hi <= lo:
                break
            anom, sev = self._anomalous_fixed(x[lo:hi])
            severe.append(sev)
            if not anom.all():
                r = lo + int(anom.argmin())
                break
            lo = hi
        r = max(r, 1)
        sv = severe[0] if len(severe) == 1 else np.concatenate(severe)
        return r, sv[:r]

    @staticmethod
    def _dev(x: np.ndarray, lo: int, hi: int, row: int, med_r: np.ndarray, den: np.ndarray,
             dev: np.ndarray, n_bad: int) -> float:
        """Largest relative deviation (either side) of ``x[lo:hi]``, all in ``row``: the row's
        own when the span reaches its end (``hi`` is then the end of ``x``), else from the span's
        extremes (0 for a row without a warm baseline, or an empty span)."""
        if hi <= lo or row < n_bad:
            return 0.0
        if hi == x.shape[0]:
            return float(dev[row])
        seg = x[lo:hi]
        med, d = float(med_r[row]), float(den[row])
        return max((float(seg.max()) - med) / d, (med - float(seg.min())) / d)

    def _first_spike(self, x: np.ndarray, A: np.ndarray, R: int, off: int, pad: int,
                     med_r: np.ndarray, den: np.ndarray, thr: np.ndarray, meds: np.ndarray,
                     win: Callable[[int], np.ndarray]) -> int:
        """Index of the first anomalous point of a pass (``len(x)`` if none), given the rows'
        medians and bars: the points' deviations laid out as rows of ``refresh`` slots, so each
        row's median and bar broadcast over it instead of being gathered per point. The slots
        before the first point and after the last hold the row's median (a deviation of exactly
        0: candidates there are dropped)."""
        K = self.K
        m = int(x.shape[0])
        n_rows = int(med_r.shape[0])
        P = np.empty((n_rows, K))
        flat = P.reshape(-1)
        flat[:pad] = med_r[0]
        flat[pad:pad + m] = x
        flat[pad + m:] = med_r[-1]
        P -= med_r[:, None]
        P /= den[:, None]  # rows without a warm baseline have an infinite bar: no candidates
        ci = (P >= thr[:, None]).reshape(-1).nonzero()[0] - pad
        ci = ci[(ci >= 0) & (ci < m)]
        if not ci.shape[0]:
            return m
        ri = (ci + pad) // K
        # the first candidate row on its own first: the first spike is usually there, and the
        # later rows' MADs and the recent levels of their candidates are then never needed
        split = int(np.searchsorted(ri, ri[0], side="right"))
        for lo, hi in ((0, split), (split, ci.shape[0])):
            if lo < hi:
                j = self._first_hit(x, A, R, ci[lo:hi], ri[lo:hi], med_r, meds, win)
                if j >= 0:
                    return j
        return m

    def _first_hit(self, x: np.ndarray, A: np.ndarray, R: int, ci: np.ndarray, ri: np.ndarray,
                   med_r: np.ndarray, meds: np.ndarray, win: Callable[[int], np.ndarray]) -> int:
        """The first of the candidates ``ci`` (in rows ``ri``) that passes the robust z and the
        jump test; -1 if none does."""
        scale = {}
        for r in sorted(set(ri.tolist())):
            if r == 0:
                scale[0] = self._scale(self.med, self.mad)
            else:
                scale[r] = self._scale(float(meds[r - 1]), mad_sorted(win(r - 1), meds[r - 1]))
        if len(scale) == 1:
            sc: float | np.ndarray = next(iter(scale.values()))
        else:
            sc = np.array([scale[r] for r in ri.tolist()])
        z = (x[ci] - med_r[ri]) / sc
        pz = (z >= self.cfg.z_threshold).nonzero()[0]
        if not pz.shape[0]:
            return -1
        # every point before x[j] taken as accepted: its recent level is the median of the
        # recent_points values before it in A
        k = self.cfg.recent_points
        cj = ci[pz]
        at = R + cj - k
        if int(at[0]) >= 0:
            recent = median_sorted(np.sort(windows(A, k)[at], axis=1))
        else:  # fewer accepted points than that (a recent_points above min_points)
            recent = np.array([small_median(A[max(0, a):a + k].tolist()) for a in at.tolist()])
        hit = self._jumps(x[cj], recent, med_r[ri[pz]]).nonzero()[0]
        return int(cj[hit[0]]) if hit.shape[0] else -1

    def _vpass(self, x: np.ndarray, steps: np.ndarray, base: int, events: list[SpikeEvent],
               flagged: list[np.ndarray]) -> int:
        """One optimistic pass (see the module doc). Returns the number of points consumed.

        The points fall into rows, one per baseline they are tested against (row 0: the current
        one; row r: the one refreshed at the r-th boundary). A row's largest and smallest point
        give its largest deviations, which is all the tail guard keeps and all it takes to know
        that no point of the row reaches the bar (the common case); only then are the points'
        own deviations computed (:meth:`_first_spike`).
        """
        cfg, K, W = self.cfg, self.K, self.W
        self._fold()
        m = int(x.shape[0])
        c0 = self.n_acc
        R = int(self.ring.shape[0])
        off = K - (c0 % K)
        """Accepted points still needed to reach the next refresh boundary."""
        nb_all = 0 if off > m else (m - off) // K + 1
        """Boundaries reached if every point were accepted (the last may sit after x[-1])."""
        n_rows = 1 if off >= m else (m - off - 1) // K + 2
        """Rows of the layout: 1 + the boundaries that apply to some point of x."""
        pad = K - off
        A = np.concatenate((self.ring, x)) if R else x
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
        if g0 == 0 and g_ok == 0 and nb_all:  # warm (the common case)
            meds = rows[:, (W - 1) // 2] + rows[:, W // 2]
            meds *= 0.5  # = median_sorted(rows)
        else:
            meds = np.empty(nb_all)
            for g in range(g_ok, g0):
                meds[g] = median_sorted(partial[g])
            if g0 < nb_all:
                meds[g0:] = median_sorted(rows)
            if g_ok:
                meds[:g_ok] = np.nan

        def win(g: int) -> np.ndarray:
            return partial[g] if g < g0 else rows[g - g0]

        med_r = np.concatenate(((self.med if self.ok else np.nan,), meds[: n_rows - 1]))
        n_bad = 0 if self.ok else min(n_rows, g_ok + 1)
        """Leading rows without a warm baseline (their deviations count as 0)."""
        den = np.abs(med_r)
        den[den == 0] = 1.0
        # Each row's largest deviation each way, from its largest and smallest point: x -> (x -
        # median) / den is monotone, so these equal the maxima of the points' own deviations,
        # which are only computed (below) when some row reaches the bar.
        rs = np.arange(off - K, m, K)
        rs[0] = 0  # row r holds x[off + (r-1) K : off + r K] (row 0: the points before `off`)
        up = np.maximum.reduceat(x, rs)
        up -= med_r
        up /= den
        track = self.track_tail
        if track:
            dev = np.minimum.reduceat(x, rs)
            np.subtract(med_r, dev, out=dev)
            dev /= den
            np.maximum(dev, up, out=dev)  # the tail guard learns both tails (a falling loss
            # hides the upper)
            if n_bad:
                dev[:n_bad] = 0.0
            bm = dev[:nb_all]
            if nb_all:
                bm[0] = max(self.blk_e, float(bm[0]))
        if n_bad:
            up[:n_bad] = -math.inf
        # early maximum: fixed once the first early_points accepted points are in
        need = max(0, cfg.early_points - self.early_n)
        head_max = float(x[:need].max()) if need and m else -math.inf
        early_max = max(self.early_max, head_max)
        jstar = m
        E = None
        # every bar is at least r1: below it nowhere (the common case), no point is a candidate
        # and the tail bars of the rows need not be known
        if float(np.maximum.reduce(up)) >= self.r1:
            if track:
                E = sliding_max(self.e_hist, bm, self.Lb) if nb_all else _EMPTY
                thr = np.empty(n_rows)
                thr[0] = self.emax
                thr[1:] = E[: n_rows - 1]
                thr = np.maximum(self.r1, cfg.tail_guard * thr)
            else:
                thr = np.full(n_rows, self.r1)
            if n_bad:
                thr[:n_bad] = np.inf
            if (up >= thr).any():
                jstar = self._first_spike(x, A, R, off, pad, med_r, den, thr, meds, win)
        if cfg.early_max_fires and early_max > 0:
            severe = x[need:jstar] >= cfg.early_max_ratio * early_max
            if np.count_nonzero(severe):
                jstar = need + int(severe.argmax())

        # commit the accepted points x[:jstar]
        self.ring = A[max(0, R + jstar - W):R + jstar]
        self.n_acc = c0 + jstar
        if self.early_n < cfg.early_points and jstar:
            take = min(jstar, need)
            self.early_max = max(self.early_max,
                                 head_max if take == min(m, need) else float(x[:take].max()))
            self.early_n += take
        nr = 0 if jstar < off else (jstar - off) // K + 1
        if nr:
            g = nr - 1
            if g >= g_ok:
                self.ok = True
                self.win = win(g)
                self.med = float(meds[g])
                self._mad = None
            if track:
                self.e_hist = np.concatenate((self.e_hist, bm[:nr]))[-self.Lb:]
                # the bar of the last boundary: the largest of the last Lb block maxima (>= 0)
                self.emax = float(E[g]) if E is not None else float(self.e_hist.max())
                lo = off + g * K
                self.blk_e = self._dev(x, lo, jstar, g + 1, med_r, den, dev, n_bad)
        elif jstar and track:
            self.blk_e = max(self.blk_e, self._dev(x, 0, jstar, 0, med_r, den, dev, n_bad))
        if jstar:
            self.episode.normal(jstar)
            self.flag_run = 0
        if jstar == m:
            return m

        # the run of anomalous points from jstar, against the now fixed baseline
        rest = x[jstar:]
        r, severe_r = self._anomalous_run(rest)
        taken = self._flag_run_of(rest[:r], steps[jstar:jstar + r], severe_r, base + jstar,
                                  events, flagged)
        return jstar + taken


_EMPTY = np.empty(0)
_EMPTY_ROWS = np.empty((0, 0))
