"""Learning-rate schedules and the LR side of the faults, as pure functions of the step.

The LR at step ``s`` (1-based) is ``train.lr * lr_factor(s, train) * fault_lr_factor(s, fault)``.
Being pure, the schedule needs no state in a checkpoint beyond the step itself, and resuming at
step ``s`` gives exactly the LR an uninterrupted run would have had.
"""

from __future__ import annotations

import math

from trainwatch.trainer.config import FaultCfg, TrainCfg

EXHAUSTED_FLOOR = 1e-4
"""lr_exhausted decays to this fraction of the LR (``~0``; an exact 0 is the lr_zero fault)."""


def lr_factor(step: int, t: TrainCfg) -> float:
    """Linear warmup over ``warmup_steps``, then constant, cosine or linear decay to
    ``min_lr_ratio`` over ``decay_steps`` (default: the rest of the run)."""
    if t.warmup_steps > 0 and step <= t.warmup_steps:
        return step / t.warmup_steps
    if t.schedule == "constant":
        return 1.0
    span = t.decay_steps if t.decay_steps > 0 else max(1, t.steps - t.warmup_steps)
    p = min(1.0, max(0.0, (step - t.warmup_steps) / span))
    m = t.min_lr_ratio
    if t.schedule == "cosine":
        return m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * p))
    return m + (1.0 - m) * (1.0 - p)  # linear


def fault_lr_factor(step: int, f: FaultCfg) -> float:
    """The LR multiplier a fault applies at ``step`` (1.0 when none applies)."""
    k = f.kind
    if k == "lr_spike":
        end = f.step + f.duration if f.duration > 0 else None
        return f.factor if step >= f.step and (end is None or step < end) else 1.0
    if k == "lr_too_low":
        return f.factor if step >= f.step else 1.0
    if k == "lr_zero":
        return 0.0 if step >= f.step else 1.0
    if k == "lr_exhausted":
        # a schedule whose decay was meant for far fewer steps: cosine to ~0 by fault.step
        if f.step <= 0 or step >= f.step:
            return EXHAUSTED_FLOOR
        return EXHAUSTED_FLOOR + (1 - EXHAUSTED_FLOOR) * 0.5 * (1 + math.cos(math.pi * step / f.step))
    if k == "diverge":
        # LR grows by ``factor`` every 100 steps from fault.step: the loss climbs away
        return f.factor ** ((step - f.step) / 100.0) if step >= f.step else 1.0
    return 1.0


def lr_at(step: int, t: TrainCfg, f: FaultCfg) -> float:
    return t.lr * lr_factor(step, t) * fault_lr_factor(step, f)
