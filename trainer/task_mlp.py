"""``mlp``: regression onto a fixed random teacher network, fast enough for tests.

Targets are a random tanh network's output (unit variance) plus Gaussian label noise, so the
best achievable MSE is ``noise**2``; memorising the noise of a tiny training set (the overfit
fault) makes the validation loss rise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwatch.trainer.config import Config, MlpData, MlpModel
from trainwatch.trainer.tasks import Task

_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def make_data(n: int, in_dim: int, noise: float, teacher_seed: int, seed: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` inputs and noisy teacher targets; the teacher depends on ``teacher_seed`` only."""
    tg = torch.Generator().manual_seed(teacher_seed)
    w1 = torch.randn(in_dim, 32, generator=tg) / in_dim**0.5
    w2 = torch.randn(32, 1, generator=tg) / 32**0.5
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_dim, generator=g)
    clean = torch.tanh(x @ w1 * 2.0) @ w2
    clean = clean / clean.std().clamp_min(1e-6) if n > 1 else clean
    return x, clean + noise * torch.randn(n, 1, generator=g)


class Mlp(nn.Module):
    def __init__(self, m: MlpModel) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = m.in_dim
        for _ in range(m.depth):
            layers.append(nn.Linear(width, m.hidden))
            if m.activation == "leaky_relu":
                layers.append(nn.LeakyReLU(m.negative_slope))
            else:
                layers.append(_ACTIVATIONS[m.activation]())
            width = m.hidden
        self.hidden = nn.Sequential(*layers)
        self.out = nn.Linear(width, 1, bias=m.out_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.hidden(x))


class MlpTask(Task):
    def __init__(self, cfg: Config, device: torch.device, rank: int = 0) -> None:
        super().__init__(cfg, device, rank)
        m: MlpModel = cfg.model
        d: MlpData = cfg.data
        train_size = cfg.fault.train_size if cfg.fault.kind == "overfit" else d.train_size
        # the teacher is the same for every seed offset: train and val share the function
        self.x, self.y = (t.to(device) for t in make_data(
            train_size, m.in_dim, d.noise, teacher_seed=cfg.seed, seed=cfg.seed + 1))
        self.vx, self.vy = (t.to(device) for t in make_data(
            d.val_size, m.in_dim, d.noise, teacher_seed=cfg.seed, seed=cfg.seed + 7919))
        self.train_size = train_size
        self.full_batch = d.full_batch or cfg.train.batch_size >= train_size
        self.per_step = train_size if self.full_batch else cfg.train.batch_size
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        self.model = Mlp(m).to(device)

    def next_batch(self, step: int) -> Any:
        if self.full_batch:
            return self.x, self.y
        idx = torch.randint(0, self.train_size, (self.per_step,), generator=self.gen)
        idx = idx.to(self.device)
        return self.x[idx], self.y[idx]

    def forward_loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(model(x), y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> float:
        return float(nn.functional.mse_loss(model(self.vx), self.vy))

    def collapse(self, shift: float) -> None:
        """The vanishing fault: push every hidden unit's pre-activation far below zero, as a bad
        update can. Dead ReLUs (or saturated tanh/sigmoid units) pass almost no gradient."""
        with torch.no_grad():
            for layer in self.model.hidden:  # type: ignore[union-attr]
                if isinstance(layer, nn.Linear):
                    layer.bias.sub_(abs(shift))
