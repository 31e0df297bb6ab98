"""``learning_stalled``: the loss is exactly constant (learning is off), or exactly 0 (a bug).

An exactly repeated float is not noise: the parameters do not change (LR 0, frozen parameters,
an optimizer holding other tensors, ``step()`` never called), or the logged value is stale. The
rule counts the run of equal finite loss values ending at each point: a non-zero run fires at
its ``constant_points``-th value, a run of zeros at its ``zero_points``-th (once per episode,
re-armed by ``rearm_points`` non-zero values in a row). A loss that mixes exact zeros in (hinge,
margin, detection losses on easy batches) has runs of zeros: with ``mixed_points``, a run of
``zero_points`` zeros fires only after ``mixed_points`` non-zero values in a row (or none before
it), and a run of ``max(zero_points, mixed_points)`` zeros always (the loss turned into zeros).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainwatch.rules.config.models import RuleBase
from trainwatch.rules.config.schema import integer
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6, rank_causes


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


def _reaching(bar: int, runs: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              back: np.ndarray) -> list[tuple[int, int]]:
    """(run, index) of the runs among ``runs`` whose length reaches ``bar`` in this frame, at the
    index where it does (run r is ``starts[r]:ends[r]``, after ``back[r]`` equal values in
    earlier frames)."""
    at = starts[runs] + bar - 1 - back[runs]
    ok = (at >= starts[runs]) & (at < ends[runs])
    return list(zip(runs[ok].tolist(), at[ok].tolist()))


class LearningStalledRule(Rule):
    id = "learning_stalled"
    roles_read = ("loss",)

    def __init__(self, cfg: StalledConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rewind()

    def rewind(self) -> None:
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
        cfg: StalledConfig = self.cfg
        v = f.values
        m = v.shape[0]
        # runs of equal values: run r is starts[r]:ends[r], the first one going on from the
        # last frame's (``back`` values of it came before)
        starts = np.concatenate(([0], (v[1:] != v[:-1]).nonzero()[0] + 1))
        ends = np.append(starts[1:], m)
        back = np.zeros(starts.shape[0], dtype=np.int64)
        back[0] = self.prev_len if v[0] == self.prev else 0
        since = f.steps[starts]
        if back[0]:
            since[0] = self.start_step
        zero = v[starts] == 0.0

        runs = (starts, ends, back)
        found = [(i, cfg.constant_points, r, False)
                 for r, i in _reaching(cfg.constant_points, (~zero).nonzero()[0], *runs)]
        zero_runs = zero.nonzero()[0]
        if zero_runs.shape[0]:
            found += self._zeros(zero_runs, *runs)
        else:
            self.nonzero_run += m
        if self.nonzero_run >= cfg.rearm_points:
            self.zero_armed = True
        self.prev, self.prev_len = float(v[-1]), int(ends[-1] - starts[-1] + back[-1])
        self.start_step = int(since[-1])
        return [self._hit(f, i, n, int(since[r]), z) for i, n, r, z in sorted(found)]

    def _zeros(self, zero_runs: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               back: np.ndarray) -> list[tuple[int, int, int, bool]]:
        """The runs of zeros of a frame that fire: (index, run length there, run, True)."""
        cfg: StalledConfig = self.cfg
        long = max(cfg.zero_points, cfg.mixed_points)
        # non-zero values in a row before each run of zeros (a run going on: the carried count)
        before_end = np.append(0, ends[zero_runs[:-1]])
        gap = starts[zero_runs] - before_end
        gap[0] += self.nonzero_run
        rearms = gap >= cfg.rearm_points
        if back[zero_runs[0]]:
            gap[0], rearms[0] = self.run_gap, False  # (its gap re-armed in the last frame)
        cand = sorted((i, bar, r) for bar in {cfg.zero_points, long}
                      for r, i in _reaching(bar, zero_runs, starts, ends, back))
        fired = []
        seen = 0  # runs of zeros whose gaps have re-armed the rule (or not)
        for i, bar, r in cand:
            j = int(zero_runs.searchsorted(r))
            if not self.zero_armed and rearms[seen:j + 1].any():
                self.zero_armed = True
            seen = j + 1
            if self.zero_armed and (bar >= long or gap[j] >= cfg.mixed_points):
                fired.append((i, bar, r, True))
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
            message = (f"The loss has been exactly {fmt(value)} since step {since} ({n} points): "
                       "nothing is learning.")
            causes, fixes = _flat_causes(lr is not None and lr <= 0, g), _FLAT_FIXES
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(f.times[i]),
                          metric=f.name, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
