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


from trainwatch.rules.builtin.grad_vanishing import VanishingConfig


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


from trainwatch.rules.builtin.divergence import DivergenceConfig
from trainwatch.rules.builtin.lr_exhausted import LrConfig
from trainwatch.rules.builtin.overfit import OverfitConfig
from trainwatch.rules.builtin.plateau import PlateauConfig


@dataclass(frozen=True)
class StreamConfig(RuleBase):
    min_seconds: float = num(gt=0)
    gap_factor: float = num(gt=1)
    """Silence longer than max(min_seconds, gap_factor x median gap) is a stall."""
    gap_window: int = integer(ge=1)
    """Recent gaps the median is taken over."""
    end_events: tuple[str, ...] = events()
    """Events that mean the run finished (no stall after them)."""


from trainwatch.rules.builtin.throughput_drop import ThroughputConfig


@dataclass(frozen=True)
class MemoryConfig(RuleBase):
    window: int = integer(ge=5)
    """Points in the trend window (Theil-Sen slope + Spearman rho)."""
    every: int = integer(ge=1)
    """The trend is tested every N points."""
    warmup_points: int = integer(ge=0)
    """Points skipped at the start of a segment (optimizer state, allocator warm-up)."""
    min_rho: float = num(gt=0, le=1)
    min_growth: float = num(gt=0)
    """Growth over the window as a fraction of the level."""


@dataclass(frozen=True)
class DetachConfig(RuleBase):
    probe_severity: str = severity()
    """Severity when the trainer's probe says the state is still attached."""
    probe_metrics: tuple[str, ...] = names()
    graph_metrics: tuple[str, ...] = names()
    """Series with the autograd graph size (growing: state not detached)."""
    window: int = integer(ge=5)
    every: int = integer(ge=1)
    warmup_points: int = integer(ge=0)
    memory_min_rho: float = num(gt=0, le=1)
    memory_min_growth: float = num(gt=0)
    time_min_rho: float = num(gt=0, le=1)
    time_min_growth: float = num(gt=0)
    time_min_late_slope: float = num(ge=0)
    """A rising step time counts only when it rises steadily: a line fits it about as well as
    the best single step, or the part after that step still rises at this fraction of the slope
    the step stands for (a ramp that began inside the window). After a load step or a burst the
    step time is flat: ~0 there. See ``trainwatch.rules.detectors.rise_shape.steady_rise``."""
    time_only: bool = flag()
    """Without a memory series, step time alone rising steadily (stricter bars below)."""
    time_only_rho: float = num(gt=0, le=1)
    time_only_growth: float = num(gt=0)
    graph_window: int = integer(ge=3)
    graph_min_rho: float = num(gt=0, le=1)
    graph_min_growth: float = num(gt=0)


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
