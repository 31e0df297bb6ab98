"""``plateau``: the smoothed train loss (or val_loss) stops improving.

The loss is smoothed into block medians of ``window`` points (shared with other rules, see
:func:`~trainwatch.rules.blocks.shared_blocks`). The patience restarts when a block beats the best
so far by ``min_delta`` (raised to ``noise_factor`` standard errors of a block median for noisy
losses); after ``patience`` windows without that, the rule fires unless the loss still trends down
slowly (Kendall tau and a Theil-Sen drop since the best). The diagnosis reads the LR (at its
floor: the schedule is over, a note) and the grad norm (healthy: LR too low; tiny: vanishing).
Evaluations get the same treatment with ``val_patience``. Runs of quiet blocks are taken in one
vectorised step; the per-block loop is the reference.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from trainwatch.rules.base import Context, Frame, Hit, Points, Rule, fmt, fmt3, pct, r6
from trainwatch.rules.blocks import Blocks, drive, shared_blocks
from trainwatch.rules.models import PlateauConfig
from trainwatch.rules.stats import improving, median, noise_sd


class LrPeak:
    """The highest LR seen so far (at or before a record)."""

    def __init__(self) -> None:
        self.peak = 0.0

    def at(self, frame: Frame, pos: int) -> float:
        pts = frame.role("lr")
        if pts is None or not len(pts):
            return self.peak
        k = int(np.searchsorted(pts.pos, pos, side="right"))
        v = pts.values[:k]
        v = v[np.isfinite(v)]
        return max(self.peak, float(v.max())) if v.shape[0] else self.peak

    def end_frame(self, frame: Frame) -> None:
        pts = frame.role("lr")
        if pts is not None and len(pts):
            v = pts.finite().values
            if v.shape[0]:
                self.peak = max(self.peak, float(v.max()))


_TREND_WINDOWS = 400
"""Most window medians the plateau's trend test looks back over."""


class PlateauRule(Rule):
    fast = True
    """Take runs of quiet blocks in one vectorised step (tests turn it off to compare)."""
    id = "plateau"

    def __init__(self, cfg: PlateauConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.lr = LrPeak()
        self.rewind()

    def rewind(self) -> None:
        cfg: PlateauConfig = self.cfg
        self.nblk = 0
        self.recent: deque[float] = deque(maxlen=_TREND_WINDOWS)
        """The last window medians (for the trend test over twice the patience)."""
        self.fired = 0
        """Plateau alerts in this segment (repeats are notes: the user has been told)."""
        self.best: float | None = None
        self.best_step = 0
        self.ref, self.ref_step = math.nan, 0
        """The loss when the patience last restarted (a clear improvement)."""
        self.wait = 0
        self.fired_at: float | None = None
        """Best loss when the rule fired; it re-arms after a clear improvement below it."""
        self.v_recent: deque[float] = deque(maxlen=max(cfg.val_patience, 16))
        self._v_noise: float | tuple[float, ...] = 0.0
        """The evaluations' noise, or the evaluations it is to be computed from (when needed)."""
        self.v_count = 0
        self.v_best: float | None = None
        self.v_best_step = 0
        self.v_wait = 0
        self.v_fired_at: float | None = None

    def update(self, frame: Frame) -> list[Hit]:
        hits: list[Hit] = []
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window)
        if len(b):
            hits.extend(self._train(frame, b))
        val = frame.role("val_loss")
        if val is not None and len(val):
            hits.extend(self._val(frame, val.finite()))
        self.lr.end_frame(frame)
        return hits

    def _rearmed(self, fired_at: float | None, x: float) -> bool:
        return fired_at is None or x < fired_at - self.cfg.rearm_delta * abs(fired_at)

    def _ready(self) -> bool:
        """Whether the state allows :meth:`_quiet_prefix` (checked without numpy work)."""
        return self.fast and self.best is not None and self.nblk >= self.cfg.warmup_windows

    def _quiet_prefix(self, b: Blocks, i: int) -> int:
        """Take in one step the blocks from ``i`` on that cannot fire or re-arm (the common
        case): the same state changes as :meth:`_block`, vectorised. Returns how many were
        taken."""
        cfg: PlateauConfig = self.cfg
        med = b.med[i:]
        n = med.shape[0]
        bprev = np.minimum.accumulate(np.concatenate(([self.best], med)))[:-1]
        delta = np.maximum(cfg.min_delta, cfg.noise_factor * b.noise[i:])
        improved = med < bprev - delta * np.abs(bprev)
        idx = np.arange(n)
        last = np.maximum.accumulate(np.where(improved, idx, -1))
        wait = np.where(last >= 0, idx - last, self.wait + idx + 1)
        if self.fired_at is None:
            patience = np.maximum(cfg.patience,
                                  (cfg.patience_fraction * (self.nblk + idx + 1)).astype(np.int64))
            # past the patience, only every max(4, patience/4)-th block runs the trend test
            bad = ~improved & (wait >= patience) & (
                (wait - patience) % np.maximum(4, patience // 4) == 0)
        else:
            bad = med < self.fired_at - cfg.rearm_delta * abs(self.fired_at)
        hit = np.flatnonzero(bad)
        k = int(hit[0]) if hit.shape[0] else n
        if k:
            self.recent.extend(med[:k].tolist())
            self.nblk += k
            j = int(np.argmin(med[:k]))
            if med[j] < self.best:  # type: ignore[operator]
                self.best, self.best_step = float(med[j]), int(b.step[i + j])
            self.wait = int(wait[k - 1])
            li = int(last[k - 1])
            if li >= 0:
                self.ref, self.ref_step = float(med[li]), int(b.step[i + li])
        return k

    def _train(self, frame: Frame, b: Blocks) -> list[Hit]:
        hits: list[Hit] = []
        meds, noises = b.med.tolist(), b.noise.tolist()

        def slow(i: int) -> None:
            hit = self._block(frame, b, i, meds[i], noises[i])
            if hit is not None:
                hits.append(hit)

        drive(len(b), self._ready, lambda i: self._quiet_prefix(b, i), slow)
        return hits

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float) -> Hit | None:
        """One block of the train loss, the reference."""
        cfg: PlateauConfig = self.cfg
        self.nblk += 1
        self.recent.append(med)
        delta = max(cfg.min_delta, cfg.noise_factor * noise)
        if self._rearmed(self.fired_at, med):
            self.fired_at = None
        # the best is the running minimum; only a clear improvement on it resets the
        # patience (a slow improvement is told apart by the trend test below)
        if self.best is None or med < self.best - delta * abs(self.best):
            self.best, self.best_step, self.wait = med, int(b.step[i]), 0
            self.ref, self.ref_step = med, int(b.step[i])
            return None
        if med < self.best:
            self.best, self.best_step = med, int(b.step[i])
        if self.nblk <= cfg.warmup_windows:
            return None
        self.wait += 1
        # late in a long run, progress is slower: the patience grows with the run
        patience = max(cfg.patience, int(cfg.patience_fraction * self.nblk))
        if self.wait < patience or self.fired_at is not None:
            return None
        # a slow, steady improvement since the best is not a plateau (re-tested every
        # patience/4 windows while it lasts: the test costs a Theil-Sen fit)
        if (self.wait - patience) % max(4, patience // 4):
            return None
        since_best = list(self.recent)[-min(self.wait, 2 * patience, _TREND_WINDOWS):]
        if improving(since_best, cfg.improving_tau, cfg.min_delta / 2):
            return None
        self.fired_at = min(self.best, med)
        self.fired += 1
        return self._fire(frame, int(b.pos[i]), int(b.step[i]), float(b.time[i]), "train", med,
                          self.ref, self.ref_step, delta, self.wait * cfg.window,
                          "info" if self.fired > 1 else None)

    def _val(self, frame: Frame, pts: Points) -> list[Hit]:
        cfg: PlateauConfig = self.cfg
        hits: list[Hit] = []
        for i, (x, step, pos) in enumerate(zip(pts.values.tolist(), pts.steps.tolist(),
                                               pts.pos.tolist())):
            self.v_recent.append(x)
            self.v_count += 1
            if self.v_count % 4 == 1:  # the noise estimate is refreshed every 4 evaluations
                self._v_noise = tuple(self.v_recent)  # (computed if a decision needs it)
            if self.v_fired_at is not None and self._rearmed(self.v_fired_at, x):
                self.v_fired_at = None
            # the margin only matters below the best (it is >= 0): its noise term is computed
            # there, not at every evaluation
            if self.v_best is None or (x < self.v_best
                                       and x < self.v_best - self._val_delta() * abs(self.v_best)):
                self.v_best, self.v_best_step, self.v_wait = x, step, 0
                continue
            if x < self.v_best:
                self.v_best, self.v_best_step = x, step
            self.v_wait += 1
            if self.v_wait < cfg.val_patience or self.v_fired_at is not None:
                continue
            if (self.v_wait - cfg.val_patience) % max(4, cfg.val_patience // 2):
                continue  # the trend test is repeated every few evaluations, not each one
            last = list(self.v_recent)[-min(self.v_wait, self.v_recent.maxlen or 0):]
            if improving(last, cfg.improving_tau, cfg.val_min_delta / 2):
                continue
            self.v_fired_at = min(self.v_best, x)
            over = self.ctx.log("overfit").last(pos)
            if over is not None and over >= self.v_best_step:
                continue  # overfit has reported this already, with the better diagnosis
            # val alone stalling while the train loss improves is a generalisation gap (a note);
            # with the train loss stalled too it is a plateau
            train_stalled = self.fired_at is not None and self.fired == 1
            hits.append(self._fire(frame, pos, step, float(pts.times[i]), "val", x, self.v_best,
                                   self.v_best_step, self._val_delta(), self.v_wait,
                                   None if train_stalled else "info"))
        return hits

    def _val_delta(self) -> float:
        """The margin a new best evaluation must beat the old by."""
        cfg: PlateauConfig = self.cfg
        if not isinstance(self._v_noise, float):
            self._v_noise = noise_sd(self._v_noise)
        return max(cfg.val_min_delta, cfg.noise_factor * self._v_noise)

    def _fire(self, frame: Frame, pos: int, step: int, time: float, which: str, now: float,
              best: float, best_step: int, delta: float, span: int,
              severity_override: str | None = None) -> Hit:
        cfg: PlateauConfig = self.cfg
        lr = self.ctx.latest("lr", pos)
        peak = self.lr.at(frame, pos)
        _gs, gv = self.ctx.recent("grad_norm", pos, 50)
        g = median(gv) if gv.shape[0] else None
        severity = severity_override or cfg.severity
        causes: list[tuple[str, float]] = []
        fixes: list[str] = []
        at_floor = lr is not None and peak > 0 and lr <= cfg.lr_floor_ratio * peak
        if at_floor:
            severity = cfg.floor_severity
            causes.append(((f"the LR is at its floor ({fmt(lr)}, peak {fmt(peak)}): the schedule "
                           "is exhausted and the run has converged for it"), 0.8))
            fixes.append("Stop here, or continue with a new schedule (a higher LR) if the "
                         "loss should go lower")
        if g is not None and g < cfg.grad_low:
            causes.append((f"vanishing gradients: the grad norm is only {fmt(g)}", 0.7))
            fixes.append("Check for saturated activations and missing normalisation or "
                         "residual connections")
        elif g is not None and g <= cfg.grad_high and not at_floor:
            causes.append(((f"the learning rate is too low: the grad norm is healthy ({fmt(g)}) "
                           "but updates are too small"), 0.7))
            fixes.append("Raise the learning rate 2-10x (or use an LR range test)")
        elif g is not None and g > cfg.grad_high:
            causes.append(((f"noisy updates: the grad norm is large ({fmt(g)}), the LR may be "
                           "too high to settle or the batch too small"), 0.5))
            fixes.append("Lower the LR or raise the batch size")
        causes.append(("the model's capacity or the data limit this loss", 0.3))
        fixes.append("ReduceLROnPlateau-style: lower the LR 10x when this fires (if not at "
                     "the floor), or stop early")
        name = "val_loss" if which == "val" else "The loss"
        unit = "evaluations" if which == "val" else "points"
        if which == "val":
            metric = frame.roles.get("val_loss")
            message = (f"val_loss has not improved by {pct(delta)} in {span} evaluations "
                       f"({fmt3(best)} at step {best_step}, {fmt3(now)} now).")
        else:
            metric = frame.roles.get("loss")
            message = (f"{name} has not improved by {pct(delta)} in {fmt(span)} points "
                       f"(smoothed: {fmt3(best)} at step {best_step}, {fmt3(now)} now).")
        evidence = {
            "reference": r6(best), "reference_step": best_step, "now": r6(now),
            "min_delta": r6(delta),
            f"no_improvement_{unit}": span, "lr": r6(lr) if lr is not None else None,
            "lr_peak": r6(peak), "grad_norm_median": r6(g) if g is not None else None,
        }
        return self.alert(pos=pos, severity=severity, step=step, time=time, metric=metric,
                          message=message, evidence=evidence, causes=causes, fixes=fixes)
