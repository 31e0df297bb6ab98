"""The spike rules, where the engine imports them from (each lives in the module of its id)."""

from __future__ import annotations

from trainwatch.rules.builtin.grad_explosion import GradExplosionRule
from trainwatch.rules.builtin.loss_spike import LossSpikeRule
from trainwatch.rules.builtin.step_time_outlier import StepTimeOutlierRule

__all__ = ["GradExplosionRule", "LossSpikeRule", "StepTimeOutlierRule"]
