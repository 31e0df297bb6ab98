"""The config model of every built-in rule (what ``configs/rules.yaml`` sets, key by key).

The packaged YAML is the single source of the default values; each rule's dataclass, in its
module under ``rules/builtin/``, says which keys exist and what each accepts. "points" count
values of the watched series, "steps" count training steps, "windows" count blocks of
``window`` points.
"""

from __future__ import annotations

from trainwatch.rules.builtin.console_error import ConsoleConfig
from trainwatch.rules.builtin.divergence import DivergenceConfig
from trainwatch.rules.builtin.grad_vanishing import VanishingConfig
from trainwatch.rules.builtin.learning_stalled import StalledConfig
from trainwatch.rules.builtin.lr_exhausted import LrConfig
from trainwatch.rules.builtin.memory_growth import MemoryConfig
from trainwatch.rules.builtin.nan_inf import NanInfConfig
from trainwatch.rules.builtin.overfit import OverfitConfig
from trainwatch.rules.builtin.plateau import PlateauConfig
from trainwatch.rules.builtin.rank_straggler import StragglerConfig
from trainwatch.rules.builtin.run_crashed import CrashConfig
from trainwatch.rules.builtin.spike_rule import SpikeConfig
from trainwatch.rules.builtin.stalled_stream import StreamConfig
from trainwatch.rules.builtin.state_detach import DetachConfig
from trainwatch.rules.builtin.step_time_outlier import StepTimeConfig
from trainwatch.rules.builtin.throughput_drop import ThroughputConfig
from trainwatch.rules.config.schema import RuleBase

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
    "run_crashed": CrashConfig,
}
"""Built-in rule id -> its config model. The ids are stable: users' scripts depend on them."""

RULE_IDS: tuple[str, ...] = tuple(RULE_MODELS)
