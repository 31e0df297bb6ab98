"""The config model of every built-in rule (what ``configs/rules.yaml`` sets, key by key).

The packaged YAML is the single source of the default values; these dataclasses say which keys
exist and what each accepts. "points" count values of the watched series, "steps" count training
steps, "windows" count blocks of ``window`` points.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.rules.config.schema import (
    flag,
    integer,
    num,
    opt_num,
    severity,
)


@dataclass(frozen=True)
class RuleBase:
    enabled: bool = flag()
    severity: str = severity()
    """Severity of the rule's first alert in an episode (escalations are errors)."""


@dataclass(frozen=True)
class VanishingConfig(RuleBase):
    window: int = integer(ge=2)
    """Points per block median."""
    warmup_windows: int = integer(ge=1)
    ratio: float = num(gt=0, lt=1)
    """Block median grad norm at or below this fraction of its highest block median."""
    abs_floor: float = num(ge=0)
    """...or at or below this absolute value."""
    for_windows: int = integer(ge=1)
    loss_windows: int = integer(ge=1)
    """The loss is "not improving" when its block median is not lower than N blocks ago..."""
    loss_min_delta: float = num(ge=0, lt=1)
    """...by at least this fraction."""


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


@dataclass(frozen=True)
class DivergenceConfig(RuleBase):
    window: int = integer(ge=2)
    warmup_windows: int = integer(ge=1)
    rise: float = num(gt=0)
    """Smoothed loss this fraction above its best..."""
    windows: int = integer(ge=1)
    """...for this many consecutive windows."""
    noise_factor: float = num(ge=0)
    error_rise: float = num(gt=0)
    """This fraction above the best is an error."""
    cap: float | None = opt_num()
    """An absolute smoothed loss above which it is an error (null: none)."""


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


@dataclass(frozen=True)
class LrConfig(RuleBase):
    zero: float = num(ge=0)
    """An LR at or below this is zero."""
    start_points: int = integer(ge=1)
    """Zero for the first N points: nothing will ever learn."""
    zero_ratio: float = num(gt=0, lt=1)
    """LR at or below this fraction of its peak counts as ~0..."""
    zero_fraction: float = num(gt=0, le=1)
    """...for this fraction of the run so far (and ``min_points``)."""
    floor_ratio: float = num(gt=0, lt=1)
    """LR at or below this fraction of its peak is at its floor..."""
    floor_fraction: float = num(gt=0, le=1)
    """...for this fraction of the run so far, while the loss still improves."""
    min_points: int = integer(ge=1)
    window: int = integer(ge=2)
    """Loss points per block median (for "still improving")."""
    improving_windows: int = integer(ge=1)
    min_delta: float = num(ge=0, lt=1)
    """The loss improved by this fraction over the last ``improving_windows`` windows..."""
    noise_factor: float = num(ge=0)
    """...and by this many standard errors of a window median (noisy losses)."""


@dataclass(frozen=True)
class ThroughputConfig(RuleBase):
    window: int = integer(ge=2)
    ref_windows: int = integer(ge=1)
    """Reference: median of the last N normal block medians."""
    warmup_windows: int = integer(ge=1)
    drop: float = num(gt=0, lt=1)
    """Throughput at or below (1 - drop) x the reference (step time from 1 / (1 - drop) x)."""
    for_windows: int = integer(ge=1)
    """Low blocks (not necessarily in a row: blocks between low and recovered do not break the
    count) before the rule fires."""
    recover: float = num(gt=0, lt=1)
    """Throughput at or above (1 - recover) x the reference has recovered (below ``drop``: the
    band between the two is hysteresis, where a wobble neither starts nor ends an episode)."""
    rearm_windows: int = integer(ge=1)
    """After an alert, the rule re-arms once throughput has stayed recovered for this many
    blocks..."""
    rearm_seconds: float = num(ge=0)
    """...and this many seconds (a wobble on a shared machine is one episode, not one per dip)."""


# the models that live with their rules (those modules import RuleBase from here: imported
# once it is defined)
from trainwatch.rules.builtin.console_error import ConsoleConfig
from trainwatch.rules.builtin.learning_stalled import StalledConfig
from trainwatch.rules.builtin.memory_growth import MemoryConfig
from trainwatch.rules.builtin.nan_inf import NanInfConfig
from trainwatch.rules.builtin.rank_straggler import StragglerConfig
from trainwatch.rules.builtin.spike_rule import SpikeConfig
from trainwatch.rules.builtin.stalled_stream import StreamConfig
from trainwatch.rules.builtin.state_detach import DetachConfig
from trainwatch.rules.builtin.step_time_outlier import StepTimeConfig

RULE_MODELS: dict[str, type[RuleBase]] = {
    "nan_inf": NanInfConfig,
    "loss_spike": SpikeConfig,
    "grad_explosion": SpikeConfig,
    "grad_vanishing": VanishingConfig,
    "learning_stalled": StalledConfig,
    "plateau": PlateauConfig,
    "divergence": DivergenceConfig,
    "overfit": OverfitConfig,
    "lr_exhausted": LrConfig,
    "stalled_stream": StreamConfig,
    "step_time_outlier": StepTimeConfig,
    "throughput_drop": ThroughputConfig,
    "memory_growth": MemoryConfig,
    "state_detach": DetachConfig,
    "rank_straggler": StragglerConfig,
    "console_error": ConsoleConfig,
}
"""Built-in rule id -> its config model. The ids are stable: users' scripts depend on them."""

RULE_IDS: tuple[str, ...] = tuple(RULE_MODELS)
