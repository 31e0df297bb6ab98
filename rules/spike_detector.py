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
  ``(x - median) / (1.4826 MAD)`` is at least ``z_threshold``. Optionally (grad norm) a value at
  least ``early_max_ratio`` times the early maximum is anomalous on its own.
* ``rebase_points`` anomalous points in a row make the new level the normal one (the baseline
  restarts).

Cost: O(1) amortised per point. Between anomalies the stream is processed in vectorised passes
that assume every point is accepted; the first anomalous point ends the pass, the run of anomalous
points after it is handled against the (then fixed) baseline in one step, and the next pass
starts after it. Rolling medians are taken only at refresh boundaries, from sorted windows
(``np.sort`` on short rows), and a MAD only for the rare windows that have a candidate point.
The same class run with ``vectorized=False`` is the point-by-point reference the tests compare
against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.episode import Episode
from trainwatch.rules.models import SpikeConfig
from trainwatch.rules.stats import (
    MAD_TO_SIGMA,
    mad_sorted,
    median_sorted,
    sliding_max,
    strided_windows,
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
                anomalous = z >= cfg.z_threshold
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
        if cfg.early_max_fires:
            anom |= severe
        return anom, severe

    def _vpass(self, x: np.ndarray, steps: np.ndarray, base: int, events: list[SpikeEvent],
               flagged: list[np.ndarray]) -> int:
        """One optimistic pass (see the module doc). Returns the number of points consumed.

        The points are laid out as rows of ``refresh`` slots, one row per baseline they are
        tested against (row 0: the current one; row r: the one refreshed at the r-th boundary),
        so each row's median and tail bar broadcast over it instead of being gathered per point.
        The slots before the first point and after the last hold the row's median (a relative
        deviation of exactly 0: they change no maximum, and candidates there are dropped).
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
            rows = np.sort(strided_windows(A, W, R + off + K * g0 - W, K, nb_all - g0), axis=1)
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
        P = np.empty((n_rows, K))
        flat = P.reshape(-1)
        flat[:pad] = med_r[0]
        flat[pad:pad + m] = x
        flat[pad + m:] = med_r[-1]
        den = np.abs(med_r)
        den[den == 0] = 1.0
        e = (P - med_r[:, None]) / den[:, None]
        if n_bad:
            e[:n_bad] = 0.0
        e_pos = np.abs(e)  # the tail guard learns both tails (a falling loss hides the upper)
        e_flat = e_pos.reshape(-1)
        if nb_all:
            bm = e_pos[:nb_all].max(axis=1)
            bm[0] = max(self.blk_e, float(bm[0]))
        else:
            bm = _EMPTY
        # early maximum: fixed once the first early_points accepted points are in
        need = max(0, cfg.early_points - self.early_n)
        head_max = float(x[:need].max()) if need and m else -math.inf
        early_max = max(self.early_max, head_max)
        jstar = m
        E = None
        # every bar is at least r1: below it nowhere (the common case), no point is a candidate
        # and the tail bars of the rows need not be known
        if float(e.max()) >= self.r1:
            E = sliding_max(self.e_hist, bm, self.Lb) if nb_all else _EMPTY
            thr = np.empty(n_rows)
            thr[0] = self.emax
            thr[1:] = E[: n_rows - 1]
            thr = np.maximum(self.r1, cfg.tail_guard * thr)
            if n_bad:
                thr[:n_bad] = np.inf
            cand = e >= thr[:, None]
        if E is not None and np.count_nonzero(cand):
            ci = cand.reshape(-1).nonzero()[0] - pad
            ci = ci[(ci >= 0) & (ci < m)]
            if ci.shape[0]:
                ri = (ci + pad) // K
                scale = np.full(n_rows, np.nan)
                for r in sorted(set(ri.tolist())):
                    if r == 0:
                        scale[0] = self._scale(self.med, self.mad)
                    else:
                        scale[r] = self._scale(float(meds[r - 1]),
                                               mad_sorted(win(r - 1), meds[r - 1]))
                z = (x[ci] - med_r[ri]) / scale[ri]
                hit = (z >= cfg.z_threshold).nonzero()[0]
                if hit.shape[0]:
                    jstar = int(ci[hit[0]])
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
            self.e_hist = np.concatenate((self.e_hist, bm[:nr]))[-self.Lb:]
            # the bar of the last boundary: the largest of the last Lb block maxima (>= 0)
            self.emax = float(E[g]) if E is not None else float(self.e_hist.max())
            lo = off + g * K
            self.blk_e = float(e_flat[pad + lo:pad + jstar].max()) if jstar > lo else 0.0
        elif jstar:
            self.blk_e = max(self.blk_e, float(e_flat[pad:pad + jstar].max()))
        if jstar:
            self.episode.normal(jstar)
            self.flag_run = 0
        if jstar == m:
            return m

        # the run of anomalous points from jstar, against the now fixed baseline
        rest = x[jstar:]
        anom_r, severe_r = self._anomalous_fixed(rest)
        off_r = np.flatnonzero(~anom_r)
        r = int(off_r[0]) if off_r.shape[0] else int(rest.shape[0])
        r = max(r, 1)  # x[jstar] is anomalous by construction; never stall on a rounding doubt
        taken = self._flag_run_of(rest[:r], steps[jstar:jstar + r], severe_r[:r], base + jstar,
                                  events, flagged)
        return jstar + taken


_EMPTY = np.empty(0)
_EMPTY_ROWS = np.empty((0, 0))
