"""A streaming spike detector: robust z against a rolling median/MAD, with episodes.

Definition, point by point (finite values only):

* The baseline is the median (and MAD) of the last ``window`` *accepted* points, recomputed every
  ``refresh`` accepted points. A point is accepted when it is not anomalous, so spikes never
  inflate the baseline.
* A point is anomalous when the baseline is warm (``min_points`` accepted), its excess over the
  median is at least ``min_ratio - 1`` times ``|median|``, at least ``tail_guard`` times the
  largest relative deviation (either side: while the loss falls fast its points sit below the
  median and would hide the noise) among the last ``tail_window`` accepted points (heavy-tailed
  noise raises the bar by itself; on Gaussian noise the guard stays near the z bar; when the
  baseline becomes warm, the guard starts from the largest deviation of the points of the newest
  half of the warm-up window that the first baseline accepts, so that the first points judged
  face a learnt bar), and its robust z ``(x - median) / (1.4826 MAD)`` is at least
  ``z_threshold``, and it is a *jump*: its excess over the recent level (the median of the last
  ``recent_points`` accepted points) is at least ``jump_share`` of its excess over the window
  median. The window median lags a smooth ramp by half a window (a grad norm growing with the
  LR during warm-up on a healthy run); against the recent level the ramp's next point is no
  jump, while a spike or a step up jumps from both. Optionally (grad norm) a value at least
  ``early_max_ratio`` times the early maximum is anomalous on its own.
* ``rebase_points`` anomalous points in a row make the new level the normal one (the baseline
  restarts).

The vectorised path (:mod:`trainwatch.rules.detectors.spike_pass`) applies this definition to many points
at once, and a live frame of a few dozen points first goes through the quiet-frame path
(:mod:`trainwatch.rules.detectors.spike_quiet`), which accepts on Python floats what cannot be anomalous;
the same class run with ``vectorized=False`` is the point-by-point reference the tests compare
against.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from trainwatch.rules.config.models import SpikeConfig
from trainwatch.rules.detectors.episode import Episode
from trainwatch.rules.detectors.spike_pass import PassOutcome, optimistic_pass, warm_deviation
from trainwatch.rules.detectors.spike_quiet import accept_quiet
from trainwatch.rules.detectors.stats import (
    MAD_TO_SIGMA,
    mad_sorted,
    median_sorted_float,
    small_median,
)

_MAX_SPAN = 4096
"""The most points one vectorised pass is given."""
_SHORT_SPAN = 256
"""The points of a pass that follows a short one (anomalies coming thick and fast)."""
_POINTWISE = 8
"""Up to this many points, an update goes point by point (no fixed cost of a pass)."""
_QUIET = 64
"""Up to this many points, an update first accepts what cannot be anomalous on Python floats
(:func:`~trainwatch.rules.detectors.spike_quiet.accept_quiet`): a live frame, quiet nearly always."""
_RUN_HEAD = 16
"""Points of an anomalous run looked at one by one before the rest is tested as an array."""
_NO_INDEX = np.empty(0, dtype=np.int64)
_NONE = np.empty(0)
"""The empty ring and window of a fresh baseline: one read-only array shared by every detector
(three per run), as the state is replaced, never written in place."""
_NONE.flags.writeable = False
_NO_INDEX.flags.writeable = False


class SpikeEvent(NamedTuple):
    """An anomalous point that starts or escalates an episode: what the alert reports.

    An immutable value (a named tuple: a third of a frozen dataclass's cost to build, and
    ``_replace`` for a copy with other fields)."""

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
    """The definition (see the module doc) and its state for one series: the baseline, the
    early maximum, the episodes. :meth:`update` feeds it; :meth:`rewind` starts a new segment.

    With ``vectorized`` (the default) long batches go through the optimistic pass of
    :mod:`trainwatch.rules.detectors.spike_pass`, which reads this state and returns what it decided;
    without it every point goes through :meth:`_point`, the reference."""

    def __init__(self, cfg: SpikeConfig, *, vectorized: bool = True) -> None:
        self.cfg = cfg
        self.vectorized = vectorized
        self.W = cfg.window
        self.K = cfg.refresh
        self.Lb = max(1, math.ceil(cfg.tail_window / cfg.refresh))
        """Refresh blocks the tail guard looks back over (``tail_window`` in blocks)."""
        self.r1 = cfg.min_ratio - 1.0
        """The lowest bar on a point's relative excess over the median."""
        self.track_tail = cfg.tail_guard > 0
        """Whether the tail guard's bar can matter (without it, its bookkeeping is skipped)."""
        self.episode = Episode(cfg.rearm_points, cfg.cooldown_steps, cfg.persist_points)
        self.early_n = 0
        """Accepted points counted into the early maximum (up to ``early_points``)."""
        self.early_max = -math.inf
        self.flag_run = 0
        """Anomalous points in a row so far (``rebase_points`` of them restart the baseline)."""
        self._reset_baseline()

    # ------------------------------------------------------------------ state
    def _reset_baseline(self) -> None:
        self.ring = _NONE
        """The last ``window`` accepted values (with ``_tail`` after them)."""
        self._tail: list[float] = []
        """Values accepted point by point since ``ring`` was last brought up to date."""
        self.n_acc = 0
        """Accepted points since the baseline (re)started."""
        self.ok = False
        """Whether the baseline is warm (``min_points`` accepted)."""
        self.med = math.nan
        self.win = _NONE
        """The sorted window the current median (and MAD) were taken from."""
        self._mad: float | None = None
        self.blk_e = 0.0
        """Largest relative deviation among accepted points since the last refresh."""
        self.e_hist: list[float] = []
        """Largest relative deviation of each of the last refresh blocks (a few dozen at most: a
        Python list, replaced, never changed in place)."""
        self.emax = 0.0
        """The tail guard's reference: the largest of ``e_hist``."""

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
        """The robust z's denominator: ``1.4826 MAD``, floored so that a flat window (MAD 0)
        gives no infinite z."""
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
        """The jump test (elementwise on arrays)."""
        return x - recent >= self.cfg.jump_share * (x - med)

    # ------------------------------------------------------------------ feeding
    def update(self, values: np.ndarray, steps: np.ndarray) -> tuple[list[SpikeEvent], np.ndarray]:
        """Feed finite values in order; returns the alerts' points and the anomalous indices."""
        events: list[SpikeEvent] = []
        flagged: list[np.ndarray] = []
        i, m = 0, int(values.shape[0])
        if self.vectorized and m <= _QUIET:
            # a live frame: nearly always nothing in it can be anomalous, which Python floats
            # tell sooner than a pass (spike_quiet); the rest, if any, goes the usual way
            xs = values.tolist()
            i = accept_quiet(self, xs)
            if i == m:
                return events, _NO_INDEX
        if not self.vectorized or m - i <= _POINTWISE:
            # the definition itself: for a few points (a live tail) cheaper than a pass
            for j, (x, step) in enumerate(zip(values[i:].tolist(), steps[i:].tolist()), i):
                self._point(x, step, j, events, flagged)
            m = 0
        span = _MAX_SPAN
        while i < m:
            if self.vectorized:
                if span < _MAX_SPAN and m - i < 2 * span:
                    span = m - i  # (a short pass would leave a tail worth a pass of its own)
                used = self._pass(values[i:i + span], steps[i:i + span], i, events, flagged)
                # a pass costs the same few dozen array operations however long: after an
                # anomaly the next one covers the rest again, unless anomalies come thick and fast
                span = _MAX_SPAN if used >= 128 else _SHORT_SPAN
                i += used
            else:
                self._point(float(values[i]), int(steps[i]), i, events, flagged)
                i += 1
        idx = (flagged[0] if len(flagged) == 1 else np.concatenate(flagged)) if flagged else _NO_INDEX
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
            self._flag_run_of(np.asarray([x]), np.asarray([step]), [severe], i, events, flagged)
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
            self._refresh(track=True)
        self.episode.normal(1)
        self.flag_run = 0

    def _refresh(self, track: bool) -> None:
        """A refresh boundary reached by accepted points: with ``min_points`` behind it the
        baseline is taken from the ring, and the block's largest deviation joins the tail guard's
        history (``track``: the vectorised paths skip it when the guard is off); at the
        baseline's first boundary, the warm-up window's
        (:func:`~trainwatch.rules.detectors.spike_pass.warm_deviation`)."""
        blk = self.blk_e
        if self.n_acc >= self.cfg.min_points:
            # the baseline's first boundary: the guard has learnt nothing yet (warm-up's blocks
            # record 0), so the first judged points would face r1 alone and a heavy tail's
            # first large normal value would be a spike (kept out of the guard, so would the
            # next be); it starts from the warm-up window's (its newest half's) instead
            warming = not self.ok and self.track_tail
            self.ok = True
            self._fold()
            win = self.win = self.ring.copy()
            win.sort()  # (np.sort's own, without its Python wrapper)
            self.med = median_sorted_float(win)  # (the same bits as median_sorted's)
            self._mad = None
            if warming:
                blk = max(blk, warm_deviation(self, self.ring, self.med, lambda: self.mad))
        if track:
            self.e_hist = (self.e_hist + [blk])[-self.Lb:]
            self.emax = max(self.e_hist)
            self.blk_e = 0.0

    def _flag_run_of(self, x: np.ndarray, steps: np.ndarray, severe: list[bool], base: int,
                     events: list[SpikeEvent], flagged: list[np.ndarray]) -> int:
        """Consecutive anomalous points (against the current, fixed baseline), with their severe
        flags as a Python list (the episode decides on it without array operations). Returns how
        many were taken (fewer than given when the run reaches ``rebase_points``)."""
        r = len(severe)
        rebase = False
        if self.flag_run + r >= self.cfg.rebase_points:
            r = self.cfg.rebase_points - self.flag_run
            rebase = True
            steps, severe = steps[:r], severe[:r]
        for k, kind in self.episode.run_list(steps, severe):
            xv = float(x[k])
            med, mad = (self.med, self.mad) if self.ok else (math.nan, math.nan)
            z = (xv - med) / self._scale(med, mad) if self.ok else math.nan
            events.append(SpikeEvent(base + k, kind, xv, med, mad, z, self.early_max, severe[k],
                                     self.episode.count - (r - 1 - k)))
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
        anom = None
        if self.ok:
            d = x - self.med
            # (both bars at once: e >= a and e >= b is e >= max(a, b), e being finite)
            cand = d / (abs(self.med) or 1.0) >= max(self.r1, cfg.tail_guard * self.emax)
            if cand.any():
                cand &= d / self._scale(self.med, self.mad) >= cfg.z_threshold
                # no point of the run is accepted: the recent level is fixed too (_jumps, with
                # the excess over the median already taken)
                cand &= x - self._recent() >= cfg.jump_share * d
                anom = cand
        if cfg.early_max_fires:
            anom = severe.copy() if anom is None else anom | severe
        elif anom is None:
            anom = np.zeros(x.shape[0], dtype=bool)
        return anom, severe

    def _anomalous_run(self, x: np.ndarray) -> tuple[int, list[bool]]:
        """The run of anomalous points that starts at ``x[0]``, against the current baseline:
        its length (at least 1: ``x[0]`` is anomalous by construction; never stall on a rounding
        doubt) and severe mask. A run is usually a point or a few, while ``x`` may be the
        thousands of points left in a pass: the first ``_RUN_HEAD`` are looked at one by one as
        Python floats (:meth:`_run_head`), the rest, if the run reaches them, in one array test."""
        n = int(x.shape[0])
        head = x[:_RUN_HEAD].tolist()
        severe = self._run_head(head)
        r = len(severe)
        if r < len(head) or r == n:
            if not r:
                severe = [head[0] >= self._early_thr()]
                r = 1
            return r, severe
        anom, sev = self._anomalous_fixed(x[r:])
        more = n - r if anom.all() else int(anom.argmin())
        return r + more, severe + sev[:more].tolist()

    def _run_head(self, xs: list[float]) -> list[bool]:
        """Severe flags of the leading anomalous points of ``xs`` against the current baseline:
        :meth:`_anomalous_fixed`'s test, point by point in Python floats (the same IEEE
        operations, hence the same bits), stopping at the first normal point."""
        cfg = self.cfg
        early = self._early_thr()
        fires = cfg.early_max_fires
        ok = self.ok
        med, den, bar = self.med, abs(self.med) or 1.0, cfg.tail_guard * self.emax
        r1, zt, js = self.r1, cfg.z_threshold, cfg.jump_share
        sc = recent = 0.0
        out: list[bool] = []
        for v in xs:
            severe = v >= early
            anom = False
            if ok:
                e = (v - med) / den
                if e >= r1 and e >= bar:
                    if not sc:  # not yet known (a scale is > 0): the MAD and recent level are lazy
                        sc, recent = self._scale(med, self.mad), self._recent()
                    # (:meth:`_jumps`, written out: a method call per point costs more than it)
                    anom = (v - med) / sc >= zt and v - recent >= js * (v - med)
            if not (anom or (fires and severe)):
                break
            out.append(severe)
        return out

    def _pass(self, x: np.ndarray, steps: np.ndarray, base: int, events: list[SpikeEvent],
              flagged: list[np.ndarray]) -> int:
        """One optimistic pass (:func:`~trainwatch.rules.detectors.spike_pass.optimistic_pass`), committed,
        then the run of anomalous points that ended it. Returns the number of points consumed."""
        self._fold()
        outcome = optimistic_pass(self, x)
        self._accept(outcome)
        jstar, m = outcome.accepted, int(x.shape[0])
        if jstar == m:
            return m
        # the run of anomalous points from jstar, against the now fixed baseline
        rest = x[jstar:]
        r, severe_r = self._anomalous_run(rest)
        taken = self._flag_run_of(rest[:r], steps[jstar:jstar + r], severe_r, base + jstar,
                                  events, flagged)
        return jstar + taken

    def _accept(self, outcome: PassOutcome) -> None:
        """Commit the points a pass accepted: the state it computed for after them."""
        self.ring = outcome.ring
        self.n_acc = outcome.n_acc
        self.early_n, self.early_max = outcome.early_n, outcome.early_max
        if outcome.baseline is not None:
            self.ok = True
            self.win, self.med, self._mad = outcome.baseline
        self.e_hist, self.emax, self.blk_e = outcome.e_hist, outcome.emax, outcome.blk_e
        if outcome.accepted:
            self.episode.normal(outcome.accepted)
            self.flag_run = 0
