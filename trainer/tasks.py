"""What the training loop needs from a task, and the factory that builds one. Imports torch.

A task owns its data (generated in-process from the seed) and its model. The loop owns the
optimizer, the schedule, logging and checkpoints, so every task gets the same instrumentation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwatch.trainer.config import Config, ConfigError


class Task:
    """Base class: a model, batches, a loss, an evaluation."""

    unit = "samples"
    """What ``throughput`` counts per second (samples or tokens)."""
    stateful = False
    """True when state is carried from step to step (the LSTM): probes are logged."""

    def __init__(self, cfg: Config, device: torch.device, rank: int = 0) -> None:
        self.cfg = cfg
        self.device = device
        self.rank = rank
        self.gen = torch.Generator().manual_seed(cfg.seed * 1009 + rank)
        """Training-batch RNG (per rank: each rank sees different batches)."""
        self.model: nn.Module = nn.Identity()
        self.per_step = cfg.train.batch_size
        """Units (``unit``) processed per step."""
        self.train_size = 1

    # ---- the step
    def next_batch(self, step: int) -> Any:
        raise NotImplementedError

    def forward_loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """Forward one batch through ``model`` (maybe DDP-wrapped); returns the scalar loss."""
        raise NotImplementedError

    def end_step(self) -> None:
        """Called after the optimizer step (the LSTM detaches its state here)."""

    def corrupt(self, batch: Any, factor: float) -> Any:
        """A bad batch: inputs scaled by ``factor`` (the bad_batch fault)."""
        x, y = batch
        return x * factor, y

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> float:
        raise NotImplementedError

    def epoch(self, step: int) -> float:
        return step * self.per_step / self.train_size

    # ---- probes (stateful tasks)
    def incoming_state(self) -> Any:
        return None

    # ---- checkpointing
    def state_dict(self) -> dict[str, Any]:
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.gen.set_state(d["gen"])


def build_task(cfg: Config, device: torch.device, rank: int = 0) -> Task:
    stateful_faults = ("no_detach", "no_detach_retain")
    if cfg.fault.kind in stateful_faults and cfg.task != "lstm_freq":
        raise ConfigError(f"fault.kind: {cfg.fault.kind} needs a stateful task (task: lstm_freq)")
    if cfg.fault.kind in ("vanishing", "overfit") and cfg.task != "mlp":
        raise ConfigError(f"fault.kind: {cfg.fault.kind} is implemented for task: mlp")
    if cfg.task == "mlp":
        from trainwatch.trainer.task_mlp import MlpTask

        return MlpTask(cfg, device, rank)
    if cfg.task == "lstm_freq":
        from trainwatch.trainer.task_lstm import LstmFreqTask

        return LstmFreqTask(cfg, device, rank)
    from trainwatch.trainer.task_gpt import TinyGptTask

    return TinyGptTask(cfg, device, rank)
