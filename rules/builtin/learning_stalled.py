"""``learning_stalled``: the loss is exactly constant (learning is off), or exactly 0 (a bug).

An exactly repeated float is not noise: the parameters do not change (LR 0, frozen parameters,
an optimizer holding other tensors, ``step()`` never called), or the logged value is stale. The
rule counts the run of equal finite loss values ending at each point: a non-zero run fires at
its ``constant_points``-th value, a run of zeros at its ``zero_points``-th (once per episode,
re-armed by ``rearm_points`` non-zero values in a row). A loss that mixes exact zeros in (hinge,
margin, detection losses on easy batches) has runs of zeros: with ``mixed_points``, a run of
``zero_points`` zeros fires only after ``mixed_points`` non-zero values in a row (or none before
it), and a run of ``max(zero_points, mixed_points)`` zeros always (the loss turned into zeros).

Two readings a person makes of such numbers are made too:

* a constant run at the series' logging precision floor (HF rounds the loss to 4 decimals: a loss
  of 2e-4 is written 0.0002 again and again) is a loss that converged below what its log can
  show (:func:`~trainwatch.precision.at_precision_floor`): an info, not "nothing is learning";
* a loss whose first ``chance_points`` points sit flat at ln(k), never below it (ln 2 = 0.6931,
  ln 10 = 2.3026), is a model predicting every one of k classes alike
  (:mod:`~trainwatch.rules.detectors.chance`): a warning at the last of those points. Only where
  one k explains the level: near a vocabulary's size every level fits some k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.precision import at_precision_floor, logging_precision, quantum
from trainwatch.rules.config.schema import RuleBase, integer
from trainwatch.rules.detectors.chance import chance_level
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import (
    Context,
    Frame,
    Hit,
    Points,
    Rule,
    fmt,
    fmt3,
    r6,
    rank_causes,
)


@dataclass(frozen=True)
class StalledConfig(RuleBase):
    constant_points: int = integer(ge=2)
    """Consecutive exactly equal loss values that mean nothing is learning."""
    zero_points: int = integer(ge=1)
    """Consecutive loss values of exactly 0 that mean a loss or data bug."""
    rearm_points: int = integer(ge=1)
    """After a zero-loss alert, consecutive non-zero values before another may fire (a loss that
    is 0 on most batches is one story, not one alert per run of zeros)."""
    mixed_points: int = integer(ge=0)
    """A run of ``zero_points`` zeros is a bug only after this many non-zero values in a row (or
    none before it): a loss that mixes exact zeros with other values (hinge, margin and detection
    losses on easy batches) has runs of zeros. A run of this many zeros is one in any loss (it
    turned into zeros altogether). 0: every run of ``zero_points`` zeros."""
    chance_points: int = integer(ge=0)
    """The first this many loss points flat at ln(k), never below it: a uniform prediction over
    k classes (0: not looked for)."""


_NO_ZERO_YET = 1 << 40
"""Non-zero values in a row before the stream's first zero: longer than any bar."""

_ZERO_CAUSES = rank_causes([
    ("the loss is computed on an empty selection (everything masked, all targets = ignore_index)",
     0.5),
    ("labels leak into the inputs, so the task is trivial", 0.4),
    ("the loss is multiplied by 0 or clamped (a zero loss weight)", 0.4),
    (("nothing: a hinge, margin or triplet loss (or a detection loss on batches without "
      "objects) is 0 on easy batches; then set learning_stalled.mixed_points: 100"), 0.3),
])
_ZERO_FIXES = ("Print one batch's inputs, targets and mask, and the loss terms",
               "Check the loss weights and the ignore_index / masking logic")


def _flat_causes(lr_zero: bool, grad: float | None) -> tuple[Cause, ...]:
    """The causes of a flat non-zero loss, by whether the LR is 0 and the latest grad norm."""
    causes = [("the logged value is stale (a variable logged outside the training loop)", 0.3)]
    if lr_zero:
        causes.append(("the learning rate is 0", 0.9))
    if grad is None:
        causes.append((("the parameters do not move: LR 0, frozen parameters, or an optimizer "
                        "not attached to the model"), 0.6))
    elif grad == 0:
        causes.append((("no gradient reaches the parameters: they are frozen "
                        "(requires_grad=False) or the loss is detached"), 0.8))
    else:
        causes.append((("gradients exist but the parameters do not move: the optimizer holds "
                        "other parameters than the model's, or step() is never called"), 0.7))
    return rank_causes(causes)


_FLAT_FIXES = (("Print optimizer.param_groups[0]['lr'] and "
                "sum(p.requires_grad for p in model.parameters())"),
               ("Check that the optimizer was built from model.parameters() after any model "
                "surgery, and that optimizer.step() runs every step"))


CHANCE_FLAT = 0.1
"""A uniform prediction's cross-entropy is ln k whatever the labels: flat. The level must be
pinned down to this share of the gap to ln(k + 1) (0.0095 at ln 10, 0.04 at ln 2): a noisier
loss that only passes near some ln k is no evidence of it."""
PRECISION_POINTS = 256
"""Loss points the logging precision is read from (the run of equal values and what came
before it)."""
_FLOOR_CAUSES = rank_causes([
    ("the loss is below what its log can show (the logger rounds it: HF Trainer to 4 decimals)",
     0.8),
    ("the model has fit the training set (check the val loss for overfitting)", 0.4)])
_FLOOR_FIXES = ("Log the loss with more digits (e.g. f\"{loss:.3e}\") to see it move",
                "Watch the val loss: a train loss this low often means memorisation")
_CHANCE_CAUSES = rank_causes([
    (("the model outputs the same distribution for every input: labels not reaching the loss "
     "(shuffled or constant), inputs all alike (a broken pipeline), or a dead network"), 0.6),
    ("the learning rate is 0 or far too low, or the optimizer does not hold the parameters", 0.4),
    ("the LR is far too high and the model collapsed to a uniform output", 0.3)])
_CHANCE_FIXES = ("Overfit one small batch: a model that cannot is broken, not slow",
                 "Check that labels match inputs (print a few pairs) and vary across the batch",
                 "Print the LR and the grad norm of the first steps")


class LearningStalledRule(Rule):
    id = "learning_stalled"
    roles_read = ("loss",)
    lane_role = "loss"
    lane_beside_main = False  # (a loss component rising from ~0, or flat, while the total learns)

    def __init__(self, cfg: StalledConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self._long = max(cfg.zero_points, cfg.mixed_points)
        """The run of zeros that fires in any loss (one that turned into zeros altogether)."""
        self.rewind()

    def rewind(self) -> None:
        self.first: list[float] = []
        """The segment's first ``chance_points`` loss values (the chance-level test)."""
        self.prev: float | None = None
        """The last value, and the length and first step of its run of equal values."""
        self.prev_len = 0
        self.start_step = 0
        self.zero_armed = True
        """A zero-loss alert may fire (False after one, until ``rearm_points`` non-zero values
        in a row)."""
        self.nonzero_run = _NO_ZERO_YET
        """Non-zero values in a row at the end of the last frame."""
        self.run_gap = _NO_ZERO_YET
        """Non-zero values in a row before the run of zeros the last frame ended in."""

    def update(self, frame: Frame) -> list[Hit]:
        loss = frame.role("loss")
        f = loss.finite() if loss is not None else None
        if f is None or not len(f):
            return []
        chance = self._chance(f) if len(self.first) < self.cfg.chance_points else []
        return chance + self._runs(f)

    def _chance(self, f: Points) -> list[Hit]:
        """The first ``chance_points`` points, judged at the last of them (at chance or not)."""
        cfg: StalledConfig = self.cfg
        k = cfg.chance_points - len(self.first)
        self.first.extend(f.values[:k].tolist())
        if len(self.first) < cfg.chance_points:
            return []
        values = np.asarray(self.first)
        at = chance_level(values, quantum(values) or 0.0)
        # only a flat level that one k explains: near a vocabulary's size every level fits some
        # k (a loss flat at 7.6 is "ln 2000" as much as it is a plateau), and is no evidence
        if at is None or not at.exact or at.tol > CHANCE_FLAT * (
                math.log(at.classes + 1) - math.log(at.classes)):
            return []
        i = min(k, len(f)) - 1
        about = ""
        message = (f"The loss has sat at {at.level:.4g} for its first {len(values)} points: "
                   f"ln({about}{at.classes}), the loss of predicting each of {about}{at.classes} "
                   "classes alike. The model is at chance.")
        evidence = {"level": r6(at.level), "ln_classes": r6(math.log(at.classes)),
                    "classes": at.classes, "exact": at.exact, "tolerance": r6(at.tol),
                    "points": len(values)}
        return [self.alert(pos=int(f.pos[i]), severity=cfg.severity, step=int(f.steps[i]),
                           time=float(f.times[i]), metric=f.name, message=message,
                           evidence=evidence, causes=_CHANCE_CAUSES, fixes=_CHANCE_FIXES)]

    def _runs(self, f: Points) -> list[Hit]:
        cfg: StalledConfig = self.cfg
        v = f.values
        m = v.shape[0]
        # runs of equal values: run r is starts[r]:ends[r]; the first goes on from the last
        # frame's run when it holds the same value (``back`` of its values came before)
        cut = (v[1:] != v[:-1]).nonzero()[0] + 1
        if cut.shape[0] == m - 1 and v[0] != self.prev and not np.count_nonzero(v == 0.0):
            # (the usual frame: every run is one value and none is 0, so none reaches a bar)
            self.prev, self.prev_len, self.start_step = float(v[-1]), 1, int(f.steps[-1])
            self.nonzero_run += m
            self.zero_armed = self.zero_armed or self.nonzero_run >= cfg.rearm_points
            return []
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [m]))
        back = self.prev_len if v[0] == self.prev else 0
        lens = ends - starts
        lens[0] += back
        # only a run as long as the shortest bar can reach one: where each does
        long = (lens >= min(cfg.constant_points, cfg.zero_points)).nonzero()[0].tolist()
        found: list[tuple[int, int, int, bool]] = []  # (index, run length there, run, zero)
        for r in long:
            zero = bool(v[starts[r]] == 0.0)
            for bar in {cfg.zero_points, self._long} if zero else (cfg.constant_points,):
                i = int(starts[r]) + bar - 1 - (back if r == 0 else 0)
                if starts[r] <= i < ends[r]:
                    found.append((i, bar, r, zero))
        found.sort()
        zero_runs = (v[starts] == 0.0).nonzero()[0]
        if zero_runs.shape[0]:
            found = self._arm(found, zero_runs, starts, ends, back)
        else:
            self.nonzero_run += m
        if self.nonzero_run >= cfg.rearm_points:
            self.zero_armed = True

        def since(r: int) -> int:
            return self.start_step if r == 0 and back else int(f.steps[starts[r]])

        hits = [self._hit(f, i, n, since(r), zero) for i, n, r, zero in found]
        self.prev, self.prev_len, self.start_step = float(v[-1]), int(lens[-1]), since(len(lens) - 1)
        return hits

    def _arm(self, found: list[tuple[int, int, int, bool]], zero_runs: np.ndarray,
             starts: np.ndarray, ends: np.ndarray, back: int) -> list[tuple[int, int, int, bool]]:
        """``found`` (index, run length there, run, zero; in order) without the runs of zeros
        that do not fire: one fires while armed, with ``mixed_points`` non-zero values before
        it or at its longer bar. Carries the arming, the non-zero run and the gap."""
        cfg: StalledConfig = self.cfg
        # non-zero values in a row before each run of zeros (a run going on: the carried gap)
        gap = starts[zero_runs] - np.concatenate(([0], ends[zero_runs[:-1]]))
        gap[0] += self.nonzero_run
        rearms = gap >= cfg.rearm_points
        if zero_runs[0] == 0 and back:
            gap[0], rearms[0] = self.run_gap, False  # (its gap re-armed in the last frame)
        fired = []
        seen = 0  # runs of zeros whose gap has re-armed the rule (or not)
        for i, bar, r, zero in found:
            if not zero:
                fired.append((i, bar, r, zero))
                continue
            j = int(zero_runs.searchsorted(r))
            if not self.zero_armed and rearms[seen:j + 1].any():
                self.zero_armed = True
            seen = j + 1
            if self.zero_armed and (bar >= self._long or gap[j] >= cfg.mixed_points):
                fired.append((i, bar, r, zero))
                self.zero_armed = False
        if rearms[seen:].any():
            self.zero_armed = True
        last = int(zero_runs[-1])
        self.nonzero_run = int(ends[-1] - ends[last])
        if last == starts.shape[0] - 1:
            self.run_gap = int(gap[-1])
        return fired

    def _hit(self, f: Points, i: int, n: int, since: int, zero: bool) -> Hit:
        """An alert at point ``i``, the ``n``-th of its run, which began at step ``since``."""
        cfg: StalledConfig = self.cfg
        pos, step = int(f.pos[i]), int(f.steps[i])
        value = float(f.values[i])
        evidence: dict[str, object] = {"value": r6(value), "points": n, "since_step": since}
        if zero:
            message = f"The loss has been exactly 0 since step {since} ({n} points): a loss or data bug."
            causes, fixes = _ZERO_CAUSES, _ZERO_FIXES
        else:
            lr = self.ctx.latest("lr", pos)
            g = self.ctx.latest("grad_norm", pos)
            evidence.update({"lr": r6(lr) if lr is not None else None,
                             "grad_norm": r6(g) if g is not None else None})
            _s, recent = self.ctx.recent("loss", pos, PRECISION_POINTS)
            if at_precision_floor(value, recent):
                p = logging_precision(recent)
                evidence["quantum"] = r6(p.quantum(value)) if p is not None else None
                message = (f"The loss has been logged as {fmt3(value)} since step {since} ({n} "
                           "points): it converged below the precision it is logged at.")
                return self.alert(pos=pos, severity="info", step=step, time=float(f.times[i]),
                                  metric=f.name, message=message, evidence=evidence,
                                  causes=_FLOOR_CAUSES, fixes=_FLOOR_FIXES)
            message = (f"The loss has been exactly {fmt(value)} since step {since} ({n} points): "
                       "nothing is learning.")
            causes, fixes = _flat_causes(lr is not None and lr <= 0, g), _FLAT_FIXES
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(f.times[i]),
                          metric=f.name, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
