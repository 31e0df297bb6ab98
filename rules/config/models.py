"""The config model of every built-in rule (what ``configs/rules.yaml`` sets, key by key).

The packaged YAML is the single source of the default values; these dataclasses say which keys
exist and what each accepts. "points" count values of the watched series, "steps" count training
steps, "windows" count blocks of ``window`` points.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.rules.config.schema import (
    events,
    flag,
    integer,
    names,
    num,
    opt_num,
    roles,
    severity,
)


@dataclass(frozen=True)
class RuleBase:
    enabled: bool = flag()
    severity: str = severity()
    """Severity of the rule's first alert in an episode (escalations are errors)."""


@dataclass(frozen=True)
class NanInfConfig(RuleBase):
    roles: tuple[str, ...] = roles()
    """Roles watched for NaN/inf."""
    metrics: tuple[str, ...] = names()
    """More series to watch, by exact name."""
    grad_only_severity: str = severity()
    """Severity when only the grad norm is non-finite and the loss is finite (an fp16 step that
    GradScaler skips)."""
    early_points: int = integer(ge=1)
    """A NaN within the run's first N loss points points at init, LR or data."""
    lookback: int = integer(ge=2)
    """Grad-norm points before the NaN searched for a blow-up."""
    blowup_ratio: float = num(gt=1)
    """Recent grad norm this many times its earlier median counts as a blow-up."""
    rearm_points: int = integer(ge=1)
    cooldown_steps: int = integer(ge=0)


@dataclass(frozen=True)
class SpikeConfig(RuleBase):
    window: int = integer(ge=8)
    """Accepted points in the rolling median/MAD baseline."""
    refresh: int = integer(ge=1)
    """The baseline is recomputed every N accepted points."""
    min_points: int = integer(ge=8)
    """Accepted points needed before the rule may fire (warm-up)."""
    z_threshold: float = num(gt=0)
    """Robust z (deviation over 1.4826 x MAD) at or above which a point is a spike."""
    min_ratio: float = num(ge=1)
    """...and the value must be at least this multiple of the window median."""
    tail_guard: float = num(ge=0)
    """...and its excess over the median at least this multiple of the largest excess among the
    last ``tail_window`` accepted points (heavy-tailed noise raises the bar; 0 disables)."""
    tail_window: int = integer(ge=1)
    persist_points: int = integer(ge=0)
    """Anomalous points in one episode that escalate it to error (0: never)."""
    early_points: int = integer(ge=1)
    """The first N accepted points define the early maximum."""
    early_max_ratio: float = num(gt=1)
    """A value this many times the early maximum escalates to error at once."""
    early_max_fires: bool = flag()
    """Whether that alone (without a robust-z spike) is anomalous."""
    rebase_points: int = integer(ge=1)
    """After this many consecutive anomalous points the level is taken as the new normal."""
    rearm_points: int = integer(ge=1)
    cooldown_steps: int = integer(ge=0)
    lead_steps: int = integer(ge=0)
    """(loss_spike) grad-norm spikes at most this many steps earlier count as "spiked first"."""
    recent_points: int = integer(ge=1)
    """A spike must also *jump* from the recent level, the median of this many last accepted
    points: the window median lags a smooth ramp (a grad norm growing with the LR warm-up)..."""
    jump_share: float = num(ge=0, le=1)
    """...by at least this share of its excess over the window median (0: merely above it)."""

    def conflict(self) -> tuple[tuple[str, ...], str] | None:
        """(the keys that clash, the first one named; why) when keys valid one by one do not go
        together, else None."""
        if self.recent_points > self.window:
            # the detector keeps only `window` accepted points: a longer recent level cannot
            # be taken the same way point by point and in its vectorised pass
            return ("recent_points", "window"), (f"must be at most window ({self.window}), "
                                                 f"got {self.recent_points}")
        return None


@dataclass(frozen=True)
class StepTimeConfig(SpikeConfig):
    min_excess_s: float = num(ge=0)
    """A slow step must also take this many seconds more than the median: on a shared CPU a 1 ms
    step often takes 3 ms, which is jitter, not a stall (series named ``*_ms`` are in ms)."""


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
class StreamConfig(RuleBase):
    min_seconds: float = num(gt=0)
    gap_factor: float = num(gt=1)
    """Silence longer than max(min_seconds, gap_factor x median gap) is a stall."""
    gap_window: int = integer(ge=1)
    """Recent gaps the median is taken over."""
    end_events: tuple[str, ...] = events()
    """Events that mean the run finished (no stall after them)."""


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


@dataclass(frozen=True)
class StragglerConfig(RuleBase):
    ratio: float = num(gt=1)
    """A rank's step time at or above this multiple of the median of the others."""
    sustain: int = integer(ge=1)
    """Consecutive compared steps."""
    min_ranks: int = integer(ge=2)
    max_lag_steps: int = integer(ge=1)
    """A rank this far behind the others is compared without waiting for it."""
    rearm_points: int = integer(ge=1)


@dataclass(frozen=True)
class ConsoleConfig(RuleBase):
    cooldown_lines: int = integer(ge=0)
    """The same error again within this many lines is the same episode."""


# (the growth rules' configs live in their modules, which import RuleBase from here)
from trainwatch.rules.builtin.memory_growth import MemoryConfig
from trainwatch.rules.builtin.state_detach import DetachConfig

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
