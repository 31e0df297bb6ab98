"""``lstm_freq``: extract one frequency from a noisy mixture of sinusoids, one time step per call.

Each sequence mixes sinusoids at ``freqs`` Hz, each with an amplitude and phase redrawn every
``window`` time steps, plus Gaussian noise. The input at each time step is ``[mixture value,
one-hot selector of the wanted frequency]`` and the target is the clean component at that
frequency. With sequence length L = 1 the LSTM sees one time step per forward call: its hidden
and cell state are carried from step to step and detached after each backward (truncated BPTT of
length 1), and reset only at sequence boundaries. Forgetting that detach is the classic bug the
``no_detach`` faults reproduce.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from trainwatch.trainer.config import Config, LstmData, LstmModel
from trainwatch.trainer.tasks import Task

State = tuple[torch.Tensor, torch.Tensor]


def make_sequences(n: int, d: LstmData, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences: inputs [n, T, 1 + F] and targets [n, T, 1], generated from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    f = torch.tensor(d.freqs, dtype=torch.float32)
    nf, steps = len(d.freqs), d.seq_len
    n_win = math.ceil(steps / d.window)
    amp = 0.5 + torch.rand(n, n_win, nf, generator=g)  # U(0.5, 1.5)
    phase = 2 * math.pi * torch.rand(n, n_win, nf, generator=g)
    win = torch.arange(steps) // d.window
    t = torch.arange(steps, dtype=torch.float32) / d.fs
    # component[i, t, k] = A sin(2 pi f_k t + phi), A and phi from t's window
    comp = amp[:, win] * torch.sin(2 * math.pi * f * t[:, None] + phase[:, win])
    mixture = comp.mean(-1) + d.noise * torch.randn(n, steps, generator=g)
    which = torch.randint(0, nf, (n,), generator=g)
    onehot = nn.functional.one_hot(which, nf).float()
    x = torch.cat([mixture[..., None], onehot[:, None, :].expand(n, steps, nf)], dim=-1)
    y = comp[torch.arange(n), :, which][..., None]
    return x, y


class LstmNet(nn.Module):
    def __init__(self, n_in: int, m: LstmModel) -> None:
        super().__init__()
        self.lstm = nn.LSTM(n_in, m.hidden, m.layers)
        self.head = nn.Linear(m.hidden, 1)

    def forward(self, x: torch.Tensor, state: State | None) -> tuple[torch.Tensor, State]:
        """``x``: [B, n_in], one time step. Returns the prediction [B, 1] and the new state."""
        out, new_state = self.lstm(x.unsqueeze(0), state)
        return self.head(out[0]), new_state


class LstmFreqTask(Task):
    stateful = True

    def __init__(self, cfg: Config, device: torch.device, rank: int = 0) -> None:
        super().__init__(cfg, device, rank)
        d: LstmData = cfg.data
        self.seq_len = d.seq_len
        self.x, self.y = (t.to(device) for t in make_sequences(
            d.train_sequences, d, seed=cfg.seed * 7 + 1))
        vd = dataclasses.replace(d, seq_len=d.val_len) if d.val_len > 0 else d
        self.vx, self.vy = (t.to(device) for t in make_sequences(d.val_sequences, vd, d.val_seed))
        self.train_size = d.train_sequences
        torch.manual_seed(cfg.seed)
        self.model = LstmNet(1 + len(d.freqs), cfg.model).to(device)
        self.state: State | None = None
        self.rows = torch.zeros(0, dtype=torch.long)
        """Which training sequence each batch row is in (kept on the CPU: deciding resets never
        waits for the device)."""
        # Each batch row starts its sequences at its own offset: resets and amplitude windows
        # are spread over the steps instead of hitting every row at once, so the loss of a step
        # does not depend on where in the sequence the whole batch happens to be.
        self.offsets = torch.arange(self.per_step) * self.seq_len // self.per_step
        self.detach = True
        """Detach the carried state after each step (the no_detach faults turn this off)."""

    def next_batch(self, step: int) -> Any:
        t = (step - 1 + self.offsets) % self.seq_len
        if self.rows.numel() == 0:  # the first step (or the first after a resume)
            self.rows = self._draw(self.per_step)
            self.state = None
        else:
            new = t == 0  # rows at a sequence boundary: a new sequence and a fresh state
            if bool(new.any()):
                self.rows = torch.where(new, self._draw(self.per_step), self.rows)
                if self.state is not None:
                    # multiply rather than assign: never modify a tensor autograd may have saved
                    keep = (~new).to(self.device, self.state[0].dtype)[None, :, None]
                    self.state = (self.state[0] * keep, self.state[1] * keep)
        rows, t = self.rows.to(self.device), t.to(self.device)
        return self.x[rows, t], self.y[rows, t]

    def _draw(self, n: int) -> torch.Tensor:
        return torch.randint(0, self.train_size, (n,), generator=self.gen)

    def forward_loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        pred, self.state = model(x, self.state)
        return nn.functional.mse_loss(pred, y)

    def end_step(self) -> None:
        if self.detach and self.state is not None:
            self.state = (self.state[0].detach(), self.state[1].detach())

    def corrupt(self, batch: Any, factor: float) -> Any:
        x, y = batch
        x = x.clone()
        x[:, 0] *= factor
        return x, y

    def incoming_state(self) -> Any:
        return self.state

    def epoch(self, step: int) -> float:
        return step / self.seq_len * self.per_step / self.train_size

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> float:
        state: State | None = None
        total = torch.zeros((), device=self.device)
        for t in range(self.vx.shape[1]):
            pred, state = model(self.vx[:, t], state)
            total += nn.functional.mse_loss(pred, self.vy[:, t])
        return float(total) / self.vx.shape[1]  # one device sync per evaluation

    def state_dict(self) -> dict[str, Any]:
        # the carried state is not saved: a resumed run starts a fresh sequence
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        super().load_state_dict(d)
        self.rows = torch.zeros(0, dtype=torch.long)
        self.state = None
