"""Trainer configuration: the typed sections and their defaults. No torch here.

A config is built in layers (see :mod:`trainwatch.trainer.configfile`): the typed defaults below,
then the task's own model and data sections, then a YAML file (which may name a ``base`` config
it extends), then ``--set a.b=value`` overrides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TASKS = ("mlp", "lstm_freq", "tiny_gpt")
OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine", "linear")
DEVICES = ("auto", "cpu", "cuda")
FAULT_KINDS = (
    "none", "lr_spike", "nan", "lr_too_low", "overfit", "lr_zero", "frozen", "vanishing",
    "lr_exhausted", "memory_leak", "no_detach", "no_detach_retain", "stall", "crash", "oom",
    "slow_rank", "slowdown", "bad_batch", "diverge",
)


class ConfigError(ValueError):
    """A bad config: the message is one line naming the key (and file:line when known)."""


@dataclass(frozen=True)
class TrainCfg:
    steps: int = 300
    """Optimizer steps to run (the step counter is 1-based: the last logged step is ``steps``)."""
    batch_size: int = 64
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    """SGD momentum (ignored by Adam/AdamW)."""
    grad_clip: float = 0.0
    """Clip the global gradient norm to this value; 0 disables clipping (the norm is still logged)."""
    schedule: str = "constant"
    warmup_steps: int = 0
    decay_steps: int = 0
    """Steps over which cosine/linear decay runs after warmup; 0 means until ``steps``."""
    min_lr_ratio: float = 0.0
    """The decayed LR floor as a fraction of ``lr``."""


@dataclass(frozen=True)
class EvalCfg:
    every: int = 50
    """Evaluate on the validation set every N steps; 0 means no validation set (warned about)."""


@dataclass(frozen=True)
class CheckpointCfg:
    every: int = 0
    """Save a checkpoint every N steps; 0 saves only at the end, on interrupt and on OOM."""
    keep: int = 2
    """How many recent checkpoints to keep on disk."""


@dataclass(frozen=True)
class LogCfg:
    memory_every: int = 10
    """Read process memory every N steps (a /proc read; the last value is repeated between)."""
    graph_every: int = 50
    """For stateful tasks: measure the autograd graph size every N steps."""
    graph_limit: int = 100_000
    """Stop counting graph nodes past this many (the walk is bounded)."""
    flush_interval: float = 0.5
    """Seconds between writer flushes."""


@dataclass(frozen=True)
class FaultCfg:
    kind: str = "none"
    step: int = 0
    """The step the fault starts at (1-based)."""
    factor: float = 10.0
    """Strength: LR multiplier (lr_spike, lr_too_low, diverge), input scale (bad_batch), bias
    shift (vanishing)."""
    duration: int = 1
    """How many steps a transient fault lasts (lr_spike, bad_batch); 0 means until the end."""
    seconds: float = 0.0
    """Sleep length (stall: once; slowdown and slow_rank: every step)."""
    rank: int = 1
    """The slow rank for slow_rank."""
    train_size: int = 32
    """Training-set size for overfit."""
    message: str = ""
    """Exception text for crash (a default mimics a real error when empty)."""


@dataclass(frozen=True)
class DistCfg:
    backend: str = "auto"
    """gloo, nccl, or auto (nccl on CUDA, gloo on CPU)."""
    timeout_s: float = 300.0
    nproc: int = 1
    """Processes the run needs. Started as one process (``trainwatch train``, the TUI's new-run
    dialog), a config that asks for more launches them itself through torch.distributed.run
    (torchrun); under torchrun it must match the world size torchrun gave."""


@dataclass(frozen=True)
class MlpModel:
    in_dim: int = 16
    hidden: int = 64
    depth: int = 2
    activation: str = "relu"
    negative_slope: float = 0.0
    """For activation leaky_relu."""
    out_bias: bool = True


@dataclass(frozen=True)
class MlpData:
    train_size: int = 4096
    val_size: int = 1024
    noise: float = 0.1
    """Std of the label noise added to the teacher's output."""
    full_batch: bool = False
    """Use the whole training set every step (deterministic loss: frozen learning shows)."""


@dataclass(frozen=True)
class LstmModel:
    hidden: int = 64
    layers: int = 1


@dataclass(frozen=True)
class LstmData:
    freqs: list[float] = field(default_factory=lambda: [1.0, 3.0, 5.0, 7.0])
    fs: float = 100.0
    """Samples per second of the generated signals."""
    seq_len: int = 200
    """Time steps per sequence; the LSTM state is reset at each sequence boundary."""
    window: int = 50
    """Amplitude and phase of every component are redrawn every ``window`` time steps."""
    noise: float = 0.1
    train_sequences: int = 256
    """Size of the training set (sequences); an epoch is one pass over it."""
    val_sequences: int = 16
    val_len: int = 0
    """Time steps per validation sequence; 0 means ``seq_len``."""
    val_seed: int = 12345
    """Seed of the validation set's noise, amplitudes and phases (training uses ``seed``)."""


@dataclass(frozen=True)
class GptModel:
    vocab: int = 32
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    seq_len: int = 64
    dropout: float = 0.0


@dataclass(frozen=True)
class GptData:
    min_period: int = 3
    max_period: int = 8
    """Each sequence repeats a random pattern of a period in [min_period, max_period]."""
    train_sequences: int = 4096
    val_sequences: int = 128


TASK_SECTIONS: Mapping[str, tuple[type, type]] = {
    "mlp": (MlpModel, MlpData),
    "lstm_freq": (LstmModel, LstmData),
    "tiny_gpt": (GptModel, GptData),
}


@dataclass(frozen=True)
class Config:
    task: str = "mlp"
    name: str = ""
    """Run name; defaults to the config file's name."""
    description: str = ""
    seed: int = 0
    device: str = "auto"
    threads: int = 0
    """torch intra-op threads on CPU; 0 keeps torch's default."""
    expect_rule: str = ""
    """For fault configs: the trainwatch rule id this config should trigger."""
    train: TrainCfg = field(default_factory=TrainCfg)
    eval: EvalCfg = field(default_factory=EvalCfg)
    checkpoint: CheckpointCfg = field(default_factory=CheckpointCfg)
    log: LogCfg = field(default_factory=LogCfg)
    fault: FaultCfg = field(default_factory=FaultCfg)
    dist: DistCfg = field(default_factory=DistCfg)
    model: Any = field(default_factory=MlpModel)
    data: Any = field(default_factory=MlpData)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_CHOICES: Mapping[str, tuple[str, ...]] = {
    "task": TASKS,
    "device": DEVICES,
    "train.optimizer": OPTIMIZERS,
    "train.schedule": SCHEDULES,
    "fault.kind": FAULT_KINDS,
    "dist.backend": ("auto", "gloo", "nccl"),
    "model.activation": ("relu", "leaky_relu", "tanh", "sigmoid"),
}


def defaults_for(task: str) -> dict[str, Any]:
    """The full default config of a task, as a nested dict."""
    if task not in TASK_SECTIONS:
        raise ConfigError(f"task: unknown task {task!r} (expected one of {', '.join(TASKS)})")
    model_cls, data_cls = TASK_SECTIONS[task]
    return Config(task=task, model=model_cls(), data=data_cls()).to_dict()


def summary(cfg: Config) -> str:
    """A few lines a person reads before a run starts."""
    t = cfg.train
    lines = [
        f"run {cfg.name!r}: task {cfg.task}, {t.steps} steps, batch {t.batch_size}, seed {cfg.seed}",
        (f"  optimizer {t.optimizer} lr {t.lr:g} wd {t.weight_decay:g} clip {t.grad_clip:g}; "
         f"schedule {t.schedule} (warmup {t.warmup_steps}, min lr x{t.min_lr_ratio:g})"),
        f"  model {_short(cfg.model)}",
        f"  data {_short(cfg.data)}",
        f"  eval every {cfg.eval.every or '-'}; checkpoint every {cfg.checkpoint.every or '-'}",
    ]
    if cfg.fault.kind != "none":
        f = cfg.fault
        lines.append(f"  FAULT {f.kind} at step {f.step} (factor {f.factor:g}, seconds {f.seconds:g})"
                     + (f", expected rule: {cfg.expect_rule}" if cfg.expect_rule else ""))
    return "\n".join(lines)


def _short(section: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in dataclasses.asdict(section).items())
