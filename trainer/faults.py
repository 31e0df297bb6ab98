"""Switchable training faults: each one is a real bug or mishap, made to happen at a known step.

The LR faults live in :mod:`trainwatch.trainer.schedule` (pure functions of the step); the rest
hook into the loop here. Every fault acts through the same code path a real bug would: the
``no_detach`` faults really stop detaching the LSTM state, ``memory_leak`` really keeps tensors
with their graph, ``frozen`` really hands the optimizer the wrong tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from trainwatch.trainer.config import FaultCfg, TrainCfg
from trainwatch.trainer.tasks import Task

DEFAULT_CRASH = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
    "cpu! (injected by the trainwatch crash fault)"
)
DEFAULT_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of "
    "which 1.06 GiB is free. (injected by the trainwatch oom fault)"
)


class InjectedCrash(RuntimeError):
    """The crash fault's exception (a RuntimeError, like the real errors it stands for)."""


class DataSGD(torch.optim.Optimizer):
    """SGD (with momentum) that updates through ``p.data``, as old training scripts did.

    Writes through ``.data`` do not bump the autograd version counter, so a graph kept with
    ``retain_graph=True`` that saved these parameters is *not* rejected by the version check the
    way ``torch.optim``'s in-place updates are ("is at version N; expected version M"): backward
    keeps silently running through every earlier step (the no_detach_retain fault).
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float, momentum: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if group["momentum"]:
                    buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                    buf.mul_(group["momentum"]).add_(d)
                    d = buf
                p.data.add_(d, alpha=-group["lr"])


class DataAdam(torch.optim.Optimizer):
    """Adam written the old way, through ``p.data`` (see :class:`DataSGD` for why it matters)."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                g = p.grad
                st["exp_avg"].mul_(b1).add_(g, alpha=1 - b1)
                st["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = st["exp_avg"] / (1 - b1 ** st["step"])
                v_hat = st["exp_avg_sq"] / (1 - b2 ** st["step"])
                if group["weight_decay"]:
                    p.data.mul_(1 - group["lr"] * group["weight_decay"])
                p.data.addcdiv_(m_hat, v_hat.sqrt().add_(group["eps"]), value=-group["lr"])


class Faults:
    """The loop's hooks for one configured fault (a no-op for ``kind: none``)."""

    def __init__(self, f: FaultCfg, rank: int = 0) -> None:
        self.f = f
        self.kind = f.kind
        self.rank = rank
        self.leaked: list[torch.Tensor] = []
        """memory_leak: losses kept with their graphs (and the activations the graphs saved)."""
        self.stalled = False

    def active(self, step: int) -> bool:
        """Inside the window of a transient fault (nan, bad_batch): ``duration`` steps from
        ``step``, or to the end when ``duration`` is 0."""
        f = self.f
        return step >= f.step and (f.duration <= 0 or step < f.step + f.duration)

    # ---- building
    def optimizer_params(self, model: nn.Module) -> list[nn.Parameter]:
        """The tensors given to the optimizer. ``frozen``: copies of the parameters, as when an
        optimizer is built for one model instance and another one is trained; the real weights
        never change while their gradients look healthy."""
        params = list(model.parameters())
        if self.kind == "frozen":
            return [nn.Parameter(p.detach().clone()) for p in params]
        return params

    def make_optimizer(self, params: list[nn.Parameter], t: TrainCfg) -> torch.optim.Optimizer | None:
        """no_detach_retain trains with an optimizer that updates through ``.data`` (the kind of
        hand-written update that lets the bug run on); other faults use the configured one."""
        if self.kind != "no_detach_retain":
            return None
        if t.optimizer == "sgd":
            return DataSGD(params, t.lr, t.momentum)
        return DataAdam(params, t.lr, t.weight_decay)

    # ---- each step
    def before_step(self, step: int, task: Task, should_stop: Callable[[], bool],
                    flush: Callable[[], None]) -> None:
        """Sleeps, crashes and one-off state changes, before the step's work starts.
        ``flush`` writes out buffered records before a stall (a real hang would find them
        written by then too)."""
        k, f = self.kind, self.f
        if k == "none" or step < f.step:
            return
        if k == "stall" and not self.stalled:
            self.stalled = True
            flush()
            print(f"trainwatch fault: stalling for {f.seconds:g} s at step {step}", flush=True)
            _sleep(f.seconds, should_stop)
        elif k == "slowdown" or (k == "slow_rank" and self.rank == f.rank):
            _sleep(f.seconds, should_stop)
        elif k == "crash" and step == f.step:
            raise InjectedCrash(f.message or DEFAULT_CRASH)
        elif k == "oom" and step == f.step:
            raise torch.OutOfMemoryError(f.message or DEFAULT_OOM)
        elif k == "vanishing" and step == f.step:
            task.collapse(f.factor)  # type: ignore[attr-defined]
        elif k in ("no_detach", "no_detach_retain") and step == f.step:
            task.detach = False  # type: ignore[attr-defined]

    def batch(self, step: int, batch: Any, task: Task) -> Any:
        if self.kind == "bad_batch" and self.active(step):
            return task.corrupt(batch, self.f.factor)
        return batch

    def loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        if self.kind == "nan" and self.active(step):
            return loss * float("nan")  # as a log(0) or 0/0 somewhere in the loss would
        return loss

    def retain_graph(self, step: int) -> bool:
        return self.kind in ("memory_leak", "no_detach_retain") and step >= self.f.step

    def after_backward(self, step: int, loss: torch.Tensor) -> None:
        if self.kind == "memory_leak" and step >= self.f.step:
            # ``history.append(loss)`` after ``backward(retain_graph=True)``: every step's graph
            # and its saved activations stay reachable
            self.leaked.append(loss)


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    """Sleep, but wake up for SIGINT/SIGTERM so an interrupted stall still checkpoints."""
    end = time.monotonic() + seconds
    while not should_stop():
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.1))
