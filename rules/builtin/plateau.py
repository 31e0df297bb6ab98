"""``plateau``: the smoothed train loss (or val_loss) stops improving.

Method: the loss is smoothed into block medians of ``window`` points, and the patience restarts
when a block beats the best by ``min_delta`` (raised to ``noise_factor`` standard errors of a
block median, for noisy losses) or the level (the median of three blocks) beats the level at the
last restart by as much; after ``patience`` windows without either, the rule fires unless the
loss still trends down slowly (Kendall tau and a Theil-Sen drop since the best).

The alert reads the LR (at its floor: the schedule is over, a note) and the grad norm (healthy:
the LR is too low; tiny: vanishing). Evaluations get the same treatment counted in evaluations
(``val_patience``, as keras' EarlyStopping). Once fired, the rule re-arms only after the loss goes
clearly below its level then (``rearm_delta``, or the alert's noise margin if more): one plateau,
one alert.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.config.schema import RuleBase, integer, num, severity
from trainwatch.rules.detectors.blocks import Blocks, shared_blocks
from trainwatch.rules.detectors.evals import EvalPool
from trainwatch.rules.detectors.stats import MAD_TO_SIGMA, improving, median, noise_sd, small_median
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, fmt3, pct, r6


@dataclass(frozen=True)
class PlateauConfig(RuleBase):
    window: int = integer(ge=2)
    """Train-loss points per smoothing window (one rolling-median value per window)."""
    patience: int = integer(ge=1)
    """Windows without an improvement of at least ``min_delta`` before the rule fires..."""
    patience_fraction: float = num(ge=0, lt=1)
    """...or this fraction of the windows seen so far, if more (progress slows as runs go on)."""
    min_delta: float = num(ge=0, lt=1)
    """Relative improvement that restarts the patience (as ReduceLROnPlateau's threshold): of a
    window on the best window so far, or of the smoothed level (the median of the last three
    windows) on the level at the last restart, so a slow improvement adds up."""
    noise_factor: float = num(ge=0)
    """The bar is raised to this many standard errors of a window median (noisy losses)."""
    warmup_windows: int = integer(ge=1)
    improving_tau: float = num(gt=0, le=1)
    """A loss whose Kendall tau against time since its best is at or below minus this, and whose
    Theil-Sen drop over that span is at least half of ``min_delta``, is still improving."""
    rearm_delta: float = num(gt=0, lt=1)
    """After firing, the rule re-arms once the loss is this fraction (or the alert's noise
    margin, if more) below its best then: one plateau, one alert."""
    val_patience: int = integer(ge=1)
    """Evaluations without an improvement of at least ``val_min_delta``."""
    val_min_delta: float = num(ge=0, lt=1)
    lr_floor_ratio: float = num(gt=0, lt=1)
    """LR at or below this fraction of its peak: the schedule is exhausted (expected; info)."""
    floor_severity: str = severity()
    grad_low: float = num(ge=0)
    """Grad norm below this reads as vanishing gradients."""
    grad_high: float = num(gt=0)
    """Grad norm up to this (and above ``grad_low``) reads as healthy: the LR is too low."""


LEVEL_DIFF = math.sqrt(1.0 + 0.449)
"""Standard error of a level (the median of 3 block medians: variance 0.449 of one for normal
data) minus the reference block, in standard errors of one block median."""
TREND_WINDOWS = 400
"""Most window medians the trend test looks back over (its cost grows with the square)."""
TREND_SPAN = 2
"""The trend test reads the blocks since the best, up to this many patiences: on a noisy loss a
trend needs length to show."""
RETEST = 4
"""Past the patience, the trend test is run again every max(RETEST, patience / RETEST) blocks
(every max(RETEST, val_patience / 2) evaluations): a Theil-Sen fit is not run at every block."""
VAL_NOISE_EVERY = 4
"""The evaluations' noise is refreshed every this many evaluations."""
VAL_NOISE_EVALS = 16
"""Fewest evaluations the evaluations' noise and trend are read over."""
NOISY_SPREAD = 0.05
"""A train loss whose points scatter more than this (relative, robust) around their level is
noisy: at a plateau an LR too high to settle near the minimum is then as likely as one too low."""
SPREAD_POINTS = 200
"""Train-loss points the robust spread is taken over (fewer than 20: no spread)."""
GRAD_POINTS = 50
"""Grad-norm points whose median the diagnosis reads."""
_CAPACITY = Cause("the model's capacity or the data limit this loss", 0.3)


class LrPeak:
    """The highest finite LR seen so far, at or before a record."""

    def __init__(self) -> None:
        self.peak = 0.0
        """Over the frames before the one being read."""

    def at(self, frame: Frame, pos: int) -> float:
        fin = _lr(frame)
        k = int(fin.pos.searchsorted(pos, side="right")) if fin is not None else 0
        return max(self.peak, float(fin.values[:k].max())) if k else self.peak  # type: ignore[union-attr]

    def end_frame(self, frame: Frame) -> None:
        fin = _lr(frame)
        if fin is not None and len(fin):
            self.peak = max(self.peak, float(fin.values.max()))


def _lr(frame: Frame) -> Points | None:
    pts = frame.role("lr")
    return pts.finite() if pts is not None and len(pts) else None


VAL_RISE_NOISE = 4.0
"""A val loss this many times its evaluations' noise above its best has risen: not a plateau."""


class PlateauRule(Rule):
    id = "plateau"
    roles_read = ("loss", "val_loss", "lr")
    lane_role = "val_loss"

    def __init__(self, cfg: PlateauConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.lr = LrPeak()
        self.rewind()

    def rewind(self) -> None:
        cfg: PlateauConfig = self.cfg
        self.nblk = 0
        """Blocks seen in this segment."""
        self.best: float | None = None
        self.best_step = 0
        """The lowest block median so far."""
        self.recent: deque[float] = deque(maxlen=TREND_WINDOWS)
        """The last window medians (for the trend test)."""
        self.fired = 0
        """Plateau alerts in this segment (repeats are notes: the user has been told)."""
        self.ref, self.ref_step = math.nan, 0
        """The loss when the patience last restarted (a clear improvement)."""
        self.wait = 0
        """Blocks since the patience last restarted."""
        self.since_best = 0
        """Blocks since the last clear new best (the span of the trend test)."""
        self.prev = (math.nan, math.nan)
        """The two block medians before the next one (NaN before they came)."""
        self.rearm_below: float | None = None
        """After an alert, the level a block must go below to re-arm the rule."""
        self.first: tuple[int, int | None] | None = None
        """Records where the first train-loss alert fired and where the rule re-armed after it
        (None: not yet): the evaluations of a frame, taken after its blocks, ask this."""
        self.v_recent: deque[float] = deque(maxlen=max(cfg.val_patience, VAL_NOISE_EVALS))
        self.v_pool = EvalPool(cfg.window)
        """Dense evaluations (a val_loss logged every step or few) are judged pooled."""
        self.v_noise = 0.0
        self.v_count = 0
        self.v_best: float | None = None
        self.v_best_step = 0
        self.v_wait = 0
        self.v_rearm_below: float | None = None

    def update(self, frame: Frame) -> list[Hit]:
        hits: list[Hit] = []
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window)
        for i, (med, noise, step) in enumerate(zip(b.med.tolist(), b.noise.tolist(),
                                                   b.step.tolist())):
            hit = self._block(frame, b, i, med, noise, step)
            if hit is not None:
                hits.append(hit)
        val = frame.role("val_loss")
        if val is not None and len(val):
            hits.extend(self._val(frame, val.finite()))
        self.lr.end_frame(frame)
        return hits

    def _rearm_level(self, best: float, delta: float) -> float:
        return best - max(self.cfg.rearm_delta, delta) * abs(best)

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float,
               step: int) -> Hit | None:
        cfg: PlateauConfig = self.cfg
        self.nblk += 1
        self.recent.append(med)
        if self.rearm_below is not None and med < self.rearm_below:
            self.rearm_below = None
            if self.first is not None and self.first[1] is None:
                self.first = (self.first[0], int(b.pos[i]))
        p1, p2 = self.prev
        self.prev = (p2, med)
        best = self.best
        # a clear improvement on the best so far restarts the patience
        if best is None or med < best - max(cfg.min_delta, cfg.noise_factor * noise) * abs(best):
            self.best, self.best_step = med, step
            self.wait = self.since_best = 0
            self.ref, self.ref_step = med, step
            return None
        self.since_best += 1
        if med < best:
            self.best, self.best_step = med, step
        # so does a slow one that adds up: the level (the median of this block and the two
        # before, so one lucky block does not count) clearly below the reference, the loss at
        # the last restart (as ReduceLROnPlateau's ``best``; the lowest block alone moves down
        # with the noise). The bar allows for the noise of the two values compared. (A median of
        # three is below a bar when two of them are; p1 is NaN for the first two blocks.)
        ref = self.ref
        bar = ref - max(cfg.min_delta, LEVEL_DIFF * cfg.noise_factor * noise) * abs(ref)
        if med < bar and (p1 < bar or p2 < bar) and not math.isnan(p1):
            self.ref, self.ref_step, self.wait = small_median((p1, p2, med)), step, 0
            return None
        if self.nblk <= cfg.warmup_windows:
            return None
        self.wait += 1
        # late in a long run, progress is slower: the patience grows with the run
        patience = max(cfg.patience, int(cfg.patience_fraction * self.nblk))
        if self.wait < patience or self.rearm_below is not None:
            return None
        if self.ref == 0.0:
            # a smoothed loss at exactly 0 (more than half its points 0: a hinge or detection
            # loss on easy batches, or a zero-loss bug, learning_stalled's story) cannot improve
            # by any fraction of its level: "not improved by 1 % of 0" says nothing
            return None
        if (self.wait - patience) % max(RETEST, patience // RETEST):
            return None
        # a slow, steady improvement since the best is not a plateau
        back = list(self.recent)[-min(self.since_best, TREND_SPAN * patience, TREND_WINDOWS):]
        if improving(back, cfg.improving_tau, cfg.min_delta / 2):
            return None
        if med > ref + LEVEL_DIFF * max(cfg.min_delta, cfg.noise_factor * noise) * abs(ref):
            return None  # a loss clearly above where it was has risen: no plateau (divergence's)
        delta = max(cfg.min_delta, cfg.noise_factor * noise)
        self.rearm_below = self._rearm_level(min(self.best, med), delta)  # type: ignore[type-var]
        self.fired += 1
        if self.fired == 1:
            self.first = (int(b.pos[i]), None)
        # (the message compares the reference with now: it names that comparison's margin)
        margin = max(cfg.min_delta, LEVEL_DIFF * cfg.noise_factor * noise)
        return self._fire(frame, int(b.pos[i]), step, float(b.time[i]), "train", med,
                          self.ref, self.ref_step, margin, self.wait * cfg.window,
                          "info" if self.fired > 1 else None)

    def _val(self, frame: Frame, pts: Points) -> list[Hit]:
        cfg: PlateauConfig = self.cfg
        hits: list[Hit] = []
        recent = self.v_recent
        patience = cfg.val_patience
        poss = pts.pos.tolist()
        for i, x, step in self.v_pool.judged(pts.values.tolist(), pts.steps.tolist()):
            pos = poss[i]
            recent.append(x)
            self.v_count += 1
            if self.v_count % VAL_NOISE_EVERY == 1:
                self.v_noise = noise_sd(tuple(recent))
            if self.v_rearm_below is not None and x < self.v_rearm_below:
                self.v_rearm_below = None
            best = self.v_best
            if best is None or x < best - self._val_delta() * abs(best):
                self.v_best, self.v_best_step, self.v_wait = x, step, 0
                continue
            if x < best:
                self.v_best, self.v_best_step = x, step
            self.v_wait += 1
            wait = self.v_wait
            if wait < patience or self.v_rearm_below is not None:
                continue
            if (wait - patience) % max(RETEST, patience // 2):
                continue  # the trend test is repeated every few evaluations, not each one
            if improving(list(recent)[-min(wait, recent.maxlen or 0):], cfg.improving_tau,
                         cfg.val_min_delta / 2):
                continue
            if x > self.v_best + max(cfg.val_min_delta, VAL_RISE_NOISE * self.v_noise) \
                    * abs(self.v_best):  # type: ignore[operator]
                continue  # a val loss clearly above its best has risen: overfit's or divergence's
            self.v_rearm_below = self._rearm_level(min(self.v_best, x), self._val_delta())  # type: ignore[type-var]
            over = self.ctx.log("overfit").last(pos)
            if over is not None and over >= self.v_best_step:
                continue  # overfit has reported this already, with the better diagnosis
            # val alone stalling while the train loss improves is a generalisation gap (a note);
            # with the train loss stalled too it is a plateau
            first = self.first
            train_stalled = first is not None and first[0] <= pos and (
                first[1] is None or pos < first[1])
            hits.append(self._fire(frame, pos, step, float(pts.times[i]), "val", x,
                                   self.v_best, self.v_best_step, self._val_delta(), wait,  # type: ignore[arg-type]
                                   None if train_stalled else "info"))
        return hits

    def _val_delta(self) -> float:
        """The margin a new best evaluation must beat the old by."""
        return max(self.cfg.val_min_delta, self.cfg.noise_factor * self.v_noise)

    # ------------------------------------------------------------------ the alert
    def _spread(self, pos: int) -> float:
        """Relative robust spread (1.4826 MAD / |median|) of the last train-loss points."""
        _s, v = self.ctx.recent("loss", pos, SPREAD_POINTS)
        if v.shape[0] < 20:
            return 0.0
        m = median(v)
        return MAD_TO_SIGMA * median(np.abs(v - m)) / abs(m) if m else 0.0

    def _fire(self, frame: Frame, pos: int, step: int, time: float, which: str, now: float,
              best: float, best_step: int, delta: float, span: int,
              severity_override: str | None = None) -> Hit:
        """The alert: the LR (at its floor: the schedule is over), the grad norm (healthy: the
        LR is too low; tiny: vanishing; large: noisy updates) and the train loss's scatter
        (noisy: an LR too high to settle is as likely as one too low), ranked into causes."""
        cfg: PlateauConfig = self.cfg
        lr = self.ctx.latest("lr", pos)
        peak = self.lr.at(frame, pos)
        _gs, gv = self.ctx.recent("grad_norm", pos, GRAD_POINTS)
        g = small_median(gv.tolist()) if gv.shape[0] else None
        severity = severity_override or cfg.severity
        causes: list[Cause] = []  # (in ranked order: confidence never rises down the list)
        fixes: list[str] = []
        at_floor = lr is not None and peak > 0 and lr <= cfg.lr_floor_ratio * peak
        spread = self._spread(pos) if which == "train" else None
        if at_floor:
            severity = cfg.floor_severity
            causes.append(Cause((f"the LR is at its floor ({fmt(lr)}, peak {fmt(peak)}): the "
                                 "schedule is exhausted and the run has converged for it"), 0.8))
            fixes.append("Stop here, or continue with a new schedule (a higher LR) if the "
                         "loss should go lower")
        if g is not None and g < cfg.grad_low:
            causes.append(Cause(f"vanishing gradients: the grad norm is only {fmt(g)}", 0.7))
            fixes.append("Check for saturated activations and missing normalisation or "
                         "residual connections")
        elif g is not None and g <= cfg.grad_high and not at_floor:
            noisy = spread is not None and spread > NOISY_SPREAD
            if noisy:
                causes.append(Cause((f"a noisy loss: its points scatter {pct(spread)} around "  # type: ignore[arg-type]
                                     "their level; the LR may be too high to settle near the "
                                     "minimum, or the batch too small"), 0.5))
                fixes.append("Lower the LR 2-10x (or decay it sooner), or raise the batch size "
                             "(gradient accumulation)")
            causes.append(Cause((f"the learning rate is too low: the grad norm is healthy "
                                 f"({fmt(g)}) but updates are too small"), 0.5 if noisy else 0.7))
            fixes.append("Raise the learning rate 2-10x (or use an LR range test)")
        elif g is not None and g > cfg.grad_high:
            causes.append(Cause((f"noisy updates: the grad norm is large ({fmt(g)}), the LR may "
                                 "be too high to settle or the batch too small"), 0.5))
            fixes.append("Lower the LR or raise the batch size")
        causes.append(_CAPACITY)
        fixes.append("ReduceLROnPlateau-style: lower the LR 10x when this fires (if not at "
                     "the floor), or stop early")
        if which == "val":
            metric, unit = frame.roles.get("val_loss"), "evaluations"
            message = (f"{metric} has not improved by {pct(delta)} in {span} evaluations "
                       f"({fmt3(best)} at step {best_step}, {fmt3(now)} now).")
        else:
            metric, unit = frame.roles.get("loss"), "points"
            message = (f"The loss has not improved by {pct(delta)} in {fmt(span)} points "
                       f"(smoothed: {fmt3(best)} at step {best_step}, {fmt3(now)} now).")
        evidence = {
            "reference": r6(best), "reference_step": best_step, "now": r6(now),
            "min_delta": r6(delta),
            f"no_improvement_{unit}": span, "lr": r6(lr) if lr is not None else None,
            "lr_peak": r6(peak), "grad_norm_median": r6(g) if g is not None else None,
        }
        if spread is not None:
            evidence["loss_spread"] = r6(spread)
        return self.alert(pos=pos, severity=severity, step=step, time=time, metric=metric,
                          message=message, evidence=evidence, causes=tuple(causes), fixes=fixes)
