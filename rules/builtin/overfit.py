"""``overfit``: val_loss worse than its best for several evaluations while the train loss improves.

Method: the median of the last 3 evaluations must stand clear of the lowest such median by
``min_delta`` and ``noise_factor`` times the evaluations' own noise, for ``evals`` evaluations
since the best and with an upward trend, while the train loss (its latest block median of
``train_window`` points at or before the evaluation) has not risen. The fix names the best
evaluation, the step to early-stop at.

The rise must stand clear of the evaluations' own noise, measured on the curve up to the best
evaluation as the scatter of log(val_loss) around a quadratic in log(step) (:func:`eval_noise`):
loss curves are close to power laws, so that fit follows the steep, bent start of a run that a
quadratic in the step misread as noise (up to 20x the true noise at an evaluation every 100 steps:
a slow rise then never cleared the bar).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.config.schema import RuleBase, integer, num
from trainwatch.rules.detectors.blocks import shared_blocks
from trainwatch.rules.detectors.evals import EvalPool
from trainwatch.rules.detectors.stats import (
    MAD_TO_SIGMA,
    improving,
    median,
    noise_sd,
    small_median,
)
from trainwatch.rules.engine.base import (
    Context,
    Frame,
    Hit,
    Points,
    Rule,
    fmt,
    pct,
    r6,
    rank_causes,
)


@dataclass(frozen=True)
class OverfitConfig(RuleBase):
    evals: int = integer(ge=1)
    """Consecutive evaluations worse than the best one."""
    min_delta: float = num(ge=0, lt=1)
    """The median of the last 3 must be worse than the lowest such median by this fraction..."""
    noise_factor: float = num(ge=0)
    """...and by this many times the evaluations' own relative noise."""
    min_evals: int = integer(ge=1)
    """Evaluations needed before the rule may fire."""
    train_window: int = integer(ge=2)
    """Train-loss points per block median."""
    train_min_delta: float = num(ge=0, lt=1)
    """...while the train loss has not risen by more than this fraction (or 3 standard errors
    of a window median) since the best evaluation: a rising train loss is divergence."""


TRAIN_TOL_SE = 3.0 * 1.4142
""""Not risen" allows for 3 standard errors of the difference of two window medians."""
RISE_TAU = 0.35
"""The evaluations since the best must trend up: Kendall tau of their negatives at or below
minus this (a rise, not noise hovering above an old lucky best)."""
_NOISE_EVALS = 24
"""Evaluations up to the best one that its noise is measured on (at most: fewer early in a run).
Eight gave a noise estimate that itself scattered widely, and a val_loss evaluated every step
"overfit" dozens of times on noise alone."""


def eval_noise(steps: Sequence[int], values: Sequence[float]) -> float:
    """Relative noise of a few evaluations of a decaying loss: 1.4826 x the MAD of the residuals
    of log(value) from a least-squares quadratic in log(step) (a residual in log space is a
    relative one), times sqrt(n / (n - 3)) for what the fit's three parameters absorb. Falls
    back to :func:`~trainwatch.rules.detectors.stats.noise_sd` (a quadratic in the evaluation's index, the
    same factor) when a value or a step is not positive. 0 for fewer than 6 points."""
    n = len(values)
    if n < 6:
        return 0.0
    dof = math.sqrt(n / (n - 3))
    if min(values) <= 0 or min(steps) <= 0 or len(set(steps)) < 3:
        return noise_sd(values) * dof
    x = np.log(np.asarray(steps, dtype=np.float64))
    y = np.log(np.asarray(values, dtype=np.float64))
    x -= x.mean()  # (centred: a better-conditioned fit)
    X = np.stack((np.ones(n), x, x * x), axis=1)
    res = (y - X @ np.linalg.lstsq(X, y, rcond=None)[0]).tolist()
    # (medians of a few Python floats: np.median costs ~10 us a call on them, and its first call
    # in a process imports numpy.ma, ~20 ms)
    mid = small_median(res)
    # the fit's 3 parameters absorb part of the noise: residuals of n points scatter about
    # sqrt((n - 3) / n) as much as the points do (0.79x on 8: a bar that low let a val_loss logged
    # every step "overfit" dozens of times on noise)
    return MAD_TO_SIGMA * small_median([abs(r - mid) for r in res]) * dof


_CAUSES = rank_causes([("the model is memorising the training set (overfitting)", 0.8),
                       ("a train/val mismatch or a change in the val pipeline", 0.2)])


class OverfitRule(Rule):
    id = "overfit"
    roles_read = ("loss", "val_loss")
    lane_role = "val_loss"

    def __init__(self, cfg: OverfitConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rewind()

    def rewind(self) -> None:
        self.train_tol = self.cfg.train_min_delta
        """How far the train loss may have risen since the best evaluation and still count as
        not risen (from the noise of the last train block)."""
        self.train_now: float | None = None
        self.n = 0
        self.vals: deque[float] = deque(maxlen=max(16, _NOISE_EVALS + 1))
        self.steps: deque[int] = deque(maxlen=_NOISE_EVALS + 1)
        """Steps of the last evaluations (for the noise fit)."""
        self.best: float | None = None
        self.best_step = 0
        self.train_at_best: float | None = None
        self.best_m: float | None = None
        """Lowest median of 3 consecutive evaluations so far (a noise-robust best level)."""
        self.worse = 0
        self.fired = False
        self.noise = 0.0
        """The evaluations' relative noise up to the best one."""
        self.blocks_seen = False
        """A train block of ``train_window`` points completed (the train level is its median)."""
        self.pool = EvalPool(self.cfg.train_window, judged_first=self.cfg.train_window)
        """Dense evaluations (a val_loss logged every step or few) are judged pooled, after the
        first ``train_window`` (a run logged once per epoch has a few dozen)."""
        self.above: list[tuple[int, bool]] = []
        """(record, worse than the best by ``min_delta``) of the evaluations judged in this
        frame, after the last one judged before it (``also_at``)."""

    def also_at(self, pos: int) -> bool:
        """The last evaluation judged at or before ``pos`` was worse than the best one."""
        return next((up for p, up in reversed(self.above) if p <= pos), False)

    def update(self, frame: Frame) -> list[Hit]:
        self.above = self.above[-1:]
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.train_window)
        val = frame.role("val_loss")
        if len(b):
            self.train_tol = max(self.cfg.train_min_delta, TRAIN_TOL_SE * float(b.noise[-1]))
        if val is None or not len(val):
            if len(b):
                self.train_now = float(b.med[-1])
            return []
        val = val.finite()
        hits: list[Hit] = []
        # the latest train block completed at or before each evaluation's record
        # (set at each judged evaluation: ks rises with the records, so an evaluation the pool
        # holds back would only have set what the next judged one sets again)
        ks = b.pos.searchsorted(val.pos, side="right").tolist() if len(b) else None
        meds = b.med.tolist()
        poss = val.pos.tolist()
        for i, v, step in self.pool.judged(val.values.tolist(), val.steps.tolist()):
            k = ks[i] if ks is not None else 0
            if k:
                self.train_now = meds[k - 1]
            elif self.train_now is None or not self.blocks_seen:
                self.train_now = self._train_so_far(poss[i])
            hit = self._eval(frame, val, i, v, poss[i], step)
            if hit is not None:
                hits.append(hit)
        if len(b):
            self.train_now = float(b.med[-1])
            self.blocks_seen = True
        return hits

    def _train_so_far(self, pos: int) -> float | None:
        """The train level at record ``pos`` before a first block of ``train_window`` points
        completed: the median of the train points so far (a run that evaluates from its first
        steps, or logs its train loss once per evaluation, is judged on what it has)."""
        _s, v = self.ctx.recent("loss", pos, self.cfg.train_window)
        return median(v) if v.shape[0] else None

    def _eval(self, frame: Frame, val: Points, i: int, v: float, pos: int, step: int) -> Hit | None:
        cfg: OverfitConfig = self.cfg
        self.n += 1
        vals = self.vals
        vals.append(v)
        self.steps.append(step)
        m = small_median((vals[-3], vals[-2], v) if len(vals) >= 3 else vals)
        if self.best_m is None or m < self.best_m:
            self.best_m = m
        self.above.append((pos, self.best is not None
                           and v >= self.best + self.cfg.min_delta * abs(self.best)))
        if self.best is None or v < self.best:
            self.best, self.best_step, self.train_at_best = v, step, self.train_now
            self.worse = 0
            self.fired = False
            return None
        if not self.worse:
            # the evaluations' noise comes from the curve up to the best one (a rise after it
            # must not inflate the very noise it is compared with): the evaluations before this
            # one, fitted at the first evaluation after it
            self.noise = eval_noise(tuple(self.steps)[:-1], tuple(self.vals)[-_NOISE_EVALS - 1:-1])
        self.worse += 1
        t0, t1 = self.train_at_best, self.train_now
        # the median of the last 3 must stand clear of the lowest such median so far by more
        # than the evaluations' own noise (around their trend, so a steady rise does not count):
        # the lowest of many noisy medians sits well below the true level
        bm = self.best_m
        if (
            self.fired
            or self.n < cfg.min_evals
            or self.worse < cfg.evals
            or m < bm + cfg.min_delta * abs(bm)
            or t0 is None
            or t1 is None
            or t1 > t0 + self.train_tol * abs(t0)
        ):
            return None
        delta = max(cfg.min_delta, cfg.noise_factor * self.noise)
        if m < bm + delta * abs(bm):
            return None
        # and a rise, not noise hovering above an old lucky best: the evaluations since the best
        # trend up
        since = [-x for x in list(self.vals)[-min(self.worse + 1, len(self.vals)):]]
        if not improving(since, RISE_TAU, 0.0):
            return None
        self.fired = True
        self.ctx.log(self.id).add(pos, step)
        best = self.best
        rise = (v - best) / abs(best) if best else 0.0
        message = (f"{val.name} has been above its best for {self.worse} evaluations ({fmt(v)} "
                   f"vs {fmt(best)} at step {self.best_step}) while the train loss does not rise "
                   f"({fmt(t0)} -> {fmt(t1)}).")
        evidence = {"val_loss": r6(v), "best_val_loss": r6(best), "best_step": self.best_step,
                    "val_rise": r6(rise), "evaluations_since_best": self.worse,
                    "train_at_best": r6(t0), "train_now": r6(t1), "min_rise": r6(delta)}
        causes = _CAUSES
        fixes = [(f"Early-stop at step {self.best_step} ({val.name} {fmt(best)}): keep that "
                 "checkpoint"),
                 "Add regularisation (weight decay, dropout, augmentation) or more data",
                 f"Train for fewer steps or with a lower LR (val rose {pct(rise)} since its best)"]
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(val.times[i]),
                          metric=val.name, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
