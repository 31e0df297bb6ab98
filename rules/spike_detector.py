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
    window_medians,
)

_MAX_SPAN = 4096


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
        """The last ``window`` accepted values."""
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
        idx = np.concatenate(flagged) if flagged else np.empty(0, dtype=np.int64)
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
        self.ring = np.append(self.ring, x)[-self.W:]
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
        """One optimistic pass (see the module doc). Returns the number of points consumed."""
        cfg, K, W = self.cfg, self.K, self.W
        m = int(x.shape[0])
        c0 = self.n_acc
        R = int(self.ring.shape[0])
        off = K - (c0 % K)
        """Accepted points still needed to reach the next refresh boundary."""
        nb_all = 0 if off > m else (m - off) // K + 1
        """Boundaries reached if every point were accepted (the last may sit after x[-1])."""
        nb = 0 if off > m - 1 else (m - 1 - off) // K + 1
        """Boundaries that apply to some point of x."""
        A = np.concatenate([self.ring, x])
        # boundary g closes after accepting x[off + g K - 1]; its window is A[hi - W : hi]
        g_idx = np.arange(nb_all)
        his = R + off + K * g_idx
        ok_b = (c0 + off + K * g_idx) >= cfg.min_points
        g0 = min(nb_all, max(0, -(-(W - R - off) // K)))
        """Boundaries before g0 have fewer than W accepted points behind them (warm-up)."""
        partial = {g: np.sort(A[:his[g]]) for g in range(g0)}
        meds = np.empty(nb_all)
        for g, row in partial.items():
            meds[g] = median_sorted(row)
        rows = None
        if g0 < nb_all:
            rows, meds[g0:] = window_medians(A, W, his[g0:] - W)
        meds[~ok_b] = np.nan

        def win(g: int) -> np.ndarray:
            return partial[g] if g < g0 else rows[g - g0]  # type: ignore[index]

        # per point: the baseline it is tested against (0 = the current one)
        bi = np.zeros(m, dtype=np.int64)
        if nb:
            bi[off:] = np.arange(m - off) // K + 1
        med_all = np.empty(nb + 1)
        med_all[0] = self.med if self.ok else np.nan
        med_all[1:] = meds[:nb]
        med_j = med_all[bi]
        ok_j = ~np.isnan(med_j)
        den = np.abs(med_j)
        den[~(den > 0)] = 1.0
        e = (x - med_j) / den
        e[~ok_j] = 0.0
        e_pos = np.abs(e)  # the tail guard learns both tails (a falling loss hides the upper)
        if nb_all:
            bm = np.empty(nb_all)
            bm[0] = max(self.blk_e, float(e_pos[:off].max()))
            if nb_all > 1:
                bm[1:] = e_pos[off:off + (nb_all - 1) * K].reshape(nb_all - 1, K).max(axis=1)
            E = sliding_max(self.e_hist, bm, self.Lb)
        else:
            bm = E = np.empty(0)
        emax_all = np.empty(nb + 1)
        emax_all[0] = self.emax
        emax_all[1:] = E[:nb]
        emax_j = emax_all[bi]
        # early maximum: fixed once the first early_points accepted points are in
        need = max(0, cfg.early_points - self.early_n)
        early_max = max(self.early_max, float(x[:need].max())) if need and m else self.early_max
        if early_max > 0:
            severe = x >= cfg.early_max_ratio * early_max
            if need:
                severe[:need] = False
        else:
            severe = np.zeros(m, dtype=bool)
        cand = ok_j & (e >= self.r1) & (e >= cfg.tail_guard * emax_j)
        anom = np.zeros(m, dtype=bool)
        ci = np.flatnonzero(cand)
        if ci.shape[0]:
            scale = np.full(nb + 1, np.nan)
            for b in np.unique(bi[ci]).tolist():
                if b == 0:
                    scale[0] = self._scale(self.med, self.mad)
                else:
                    scale[b] = self._scale(float(meds[b - 1]), mad_sorted(win(b - 1), meds[b - 1]))
            z = (x[ci] - med_j[ci]) / scale[bi[ci]]
            anom[ci] = z >= cfg.z_threshold
        if cfg.early_max_fires:
            anom |= severe
        hits = np.flatnonzero(anom)
        jstar = int(hits[0]) if hits.shape[0] else m

        # commit the accepted points x[:jstar]
        self.ring = A[max(0, R + jstar - W):R + jstar]
        self.n_acc = c0 + jstar
        if self.early_n < cfg.early_points and jstar:
            take = min(jstar, need)
            self.early_max = max(self.early_max, float(x[:take].max()))
            self.early_n += take
        nr = 0 if jstar < off else (jstar - off) // K + 1
        if nr:
            g = nr - 1
            if ok_b[g]:
                self.ok = True
                self.win = win(g)
                self.med = float(meds[g])
                self._mad = None
            self.e_hist = np.concatenate([self.e_hist, bm[:nr]])[-self.Lb:]
            self.emax = float(E[g])
            lo = off + g * K
            self.blk_e = float(e_pos[lo:jstar].max()) if jstar > lo else 0.0
        elif jstar:
            self.blk_e = max(self.blk_e, float(e_pos[:jstar].max()))
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
