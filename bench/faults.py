"""The fault injectors of the labelled synthetic runs (``bench/synthetic.py``).

Each injector builds a clean trace, bends it from step ``at`` on, cuts the run some time after and
returns the labelled run. ``v`` picks the fault's size so consecutive seeds cover each size. Call
them through :func:`bench.synthetic.fault_run`, which draws the seed's shape, noise and step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from bench.synthetic import (
    FAULT_RULES,
    Label,
    SyntheticRun,
    Trace,
    add_probe,
    base_trace,
    finish_run,
)


def _run(kind: str, seed: int, tr: Trace, shape: str, at: int, delta_max: int,
         params: Mapping[str, float], span: int | None = None, **kw: object) -> SyntheticRun:
    label = Label(kind, FAULT_RULES[kind], at, delta_max, dict(params), span)
    return finish_run(tr, f"{kind}-{seed}", seed, shape, label, **kw)  # type: ignore[arg-type]


def _nan(seed: int, rng: np.random.Generator, shape: str, noise: float, at: int) -> SyntheticRun:
    tr = base_trace(rng, at + 40, shape, noise)
    i = tr.idx(at)
    loss = tr.mean * (1 + noise * tr.eps)
    loss[i:] = np.nan  # once the weights are NaN every later loss is too
    tr.loss = loss
    tr.grad_norm[i:] = np.where(np.arange(tr.grad_norm.shape[0] - i) == 0, np.inf, np.nan)
    return _run("nan", seed, tr, shape, at, 10, {})


def _spike(seed: int, rng: np.random.Generator, shape: str, noise: float, at: int) -> SyntheticRun:
    size = (2.0, 4.0, 10.0, 100.0)[seed % 4]
    tr = base_trace(rng, at + 300, shape, noise)
    i = tr.idx(at)
    tr.mean[i] *= size
    tr.eps[i] = 0.0  # the spike's size is exact: noise does not shrink it
    tr.grad_norm[i] *= math.sqrt(size)
    return _run("spike", seed, tr, shape, at, 10, {"size": size}, span=1)


def _spike_sustained(seed: int, rng: np.random.Generator, shape: str, noise: float,
                     at: int) -> SyntheticRun:
    size = (2.0, 3.0, 5.0, 20.0)[seed % 4]
    length = (10, 30, 100)[seed % 3]
    tr = base_trace(rng, at + length + 300, shape, noise)
    i = tr.idx(at)
    k = np.arange(tr.mean.shape[0] - i, dtype=np.float64)
    # elevated for ``length`` steps, then an exponential recovery
    mult = np.where(k < length, size, 1 + (size - 1) * np.exp(-(k - length) / (length / 2)))
    tr.mean[i:] *= mult
    tr.grad_norm[i:i + length] *= math.sqrt(size)
    # the elevated steps and the recovery's first two time constants (the excess down to 14 %)
    return _run("spike_sustained", seed, tr, shape, at, 20, {"size": size, "length": length},
                span=2 * length)


def _grad_explosion(seed: int, rng: np.random.Generator, shape: str, noise: float,
                    at: int) -> SyntheticRun:
    size = (10.0, 100.0, 1000.0)[seed % 3]
    tr = base_trace(rng, at + 150, shape, noise)
    i = tr.idx(at)
    k = np.arange(tr.mean.shape[0] - i, dtype=np.float64)
    tr.grad_norm[i:] *= size * np.exp(0.02 * k)
    lag = 5  # the loss follows the gradients a few steps later
    tr.mean[i:] *= np.exp(0.01 * np.maximum(k - lag, 0))
    return _run("grad_explosion", seed, tr, shape, at, 10, {"size": size})


def _grad_vanishing(seed: int, rng: np.random.Generator, shape: str, noise: float,
                    at: int) -> SyntheticRun:
    tau = (10.0, 30.0, 60.0)[seed % 3]
    tr = base_trace(rng, at + 800, shape, noise)
    i = tr.idx(at)
    k = np.arange(tr.mean.shape[0] - i, dtype=np.float64)
    tr.grad_norm[i:] *= np.maximum(np.exp(-k / tau), 1e-7)
    tr.mean[i:] = tr.mean[i]  # no gradient, no learning
    tr.val_mean[i:] = tr.val_mean[i]
    return _run("grad_vanishing", seed, tr, shape, at, 400, {"tau": tau})


def _plateau(seed: int, rng: np.random.Generator, shape: str, noise: float,
             at: int) -> SyntheticRun:
    # an LR far too low for the model: whatever progress there was stops at ``at``
    lr = float(10 ** rng.uniform(-6.5, -5.5))
    tr = base_trace(rng, at + 3000, "cosine", noise, schedule="constant", lr_peak=lr)
    i = tr.idx(at)
    tr.mean[i:] = tr.mean[i]
    tr.val_mean[i:] = tr.val_mean[i]
    return _run("plateau", seed, tr, "constant", at, 2500, {"lr": lr})


def _divergence(seed: int, rng: np.random.Generator, shape: str, noise: float,
                at: int) -> SyntheticRun:
    doubling = (100, 200, 400)[seed % 3]
    tr = base_trace(rng, at + 2 * doubling, shape, noise)
    i = tr.idx(at)
    k = np.arange(tr.mean.shape[0] - i, dtype=np.float64)
    tr.mean[i:] = tr.mean[i] * 2 ** (k / doubling)
    tr.val_mean[i:] = tr.val_mean[i] * 2 ** (k / doubling)
    tr.grad_norm[i:] *= 2 ** (k / (2 * doubling))
    return _run("divergence", seed, tr, shape, at, doubling, {"doubling_steps": doubling})


def _overfit(seed: int, rng: np.random.Generator, shape: str, noise: float,
             at: int) -> SyntheticRun:
    rate = (0.01, 0.02, 0.05)[seed % 3]
    tr = base_trace(rng, at + 2000, shape, noise)
    # the turning point is an evaluation, after a few that improved
    at = max(4 * tr.eval_every, at - at % tr.eval_every)
    tr.truncate(at + 12 * tr.eval_every)
    i = tr.idx(at)
    k = np.arange(tr.val_mean.shape[0] - i, dtype=np.float64)
    # val loss rises by ``rate`` per evaluation while the train loss keeps falling
    tr.val_mean[i:] = tr.val_mean[i] * (1 + rate * k / tr.eval_every)
    return _run("overfit", seed, tr, shape, at, 10 * tr.eval_every,
                {"rise_per_eval": rate, "eval_every": tr.eval_every})


def _lr_exhausted(seed: int, rng: np.random.Generator, shape: str, noise: float,
                  at: int) -> SyntheticRun:
    # a schedule sized for fewer steps than the run: the LR reaches zero at ``at`` and stays there
    sched = ("linear", "cosine0")[seed % 2]
    tr = base_trace(rng, at + 1500, "cosine", noise, schedule=sched, lr_end=at)
    return _run("lr_exhausted", seed, tr, shape, at, 1000, {"schedule_end": at})


def _frozen(seed: int, rng: np.random.Generator, shape: str, noise: float,
            at: int) -> SyntheticRun:
    # from ``at`` the logged loss is one exact float: parameters that no longer move on a fixed
    # batch, or a stale value logged outside the loop; every other seed, an exact 0 (masked loss)
    tr = base_trace(rng, at + 500, shape, noise)
    i = tr.idx(at)
    loss = tr.mean * (1 + noise * tr.eps)
    zero = seed % 2 == 1
    loss[i:] = 0.0 if zero else loss[i]
    tr.loss = loss
    return _run("frozen", seed, tr, shape, at, 200, {"zero": float(zero)})


def _ramps(tr: Trace, at: int, growth: float) -> None:
    """A missing ``.detach()``: every step's graph keeps the previous ones, so backward time and
    memory grow linearly with the number of steps since the bug started."""
    i = tr.idx(at)
    k = np.arange(tr.mean.shape[0] - i, dtype=np.float64)
    tr.step_time[i:] *= 1 + growth * k
    tr.memory[i:] += tr.memory[i] * growth * 0.2 * k


def _detach(seed: int, rng: np.random.Generator, shape: str, noise: float,
            at: int) -> SyntheticRun:
    growth = (0.002, 0.01, 0.05)[seed % 3]
    tr = base_trace(rng, at + 300, shape, noise)
    _ramps(tr, at, growth)
    return _run("detach", seed, tr, shape, at, 200, {"growth": growth})


def _detach_probe(seed: int, rng: np.random.Generator, shape: str, noise: float,
                  at: int) -> SyntheticRun:
    growth = (0.002, 0.01, 0.05)[seed % 3]
    tr = base_trace(rng, at + 300, shape, noise)
    _ramps(tr, at, growth)
    add_probe(tr, rng, attached_from=at)
    return _run("detach_probe", seed, tr, shape, at, 200, {"growth": growth})


def _memory_growth(seed: int, rng: np.random.Generator, shape: str, noise: float,
                   at: int) -> SyntheticRun:
    rate = (1e-4, 5e-4, 2e-3)[seed % 3]
    tr = base_trace(rng, at + 1000, shape, noise)
    i = tr.idx(at)
    k = np.arange(tr.memory.shape[0] - i, dtype=np.float64)
    tr.memory[i:] += tr.memory[i] * rate * k  # a leak: tensors kept alive every step
    return _run("memory_growth", seed, tr, shape, at, 800, {"rate_per_step": rate})


def _stall_gap(seed: int, rng: np.random.Generator, shape: str, noise: float,
               at: int) -> SyntheticRun:
    gap = (600.0, 1800.0, 7200.0)[seed % 3]
    tr = base_trace(rng, at + 200, shape, noise)
    tr.gap[tr.idx(at)] += gap  # a hung collective or dead data loader, then it recovers
    return _run("stall_gap", seed, tr, shape, at, 5, {"gap_s": gap})


def _stall_end(seed: int, rng: np.random.Generator, shape: str, noise: float,
               at: int) -> SyntheticRun:
    gap = (600.0, 1800.0, 7200.0)[seed % 3]
    tr = base_trace(rng, at, shape, noise)
    return _run("stall_end", seed, tr, shape, at, 5, {"gap_s": gap}, ended=False, idle=gap)


def _straggler(seed: int, rng: np.random.Generator, shape: str, noise: float,
               at: int) -> SyntheticRun:
    slow = (1.75, 2.5, 4.0)[seed % 3]
    world = 4
    tr = base_trace(rng, at + 300, shape, noise)
    n = tr.mean.shape[0]
    i = tr.idx(at)
    bad = 1 + seed % (world - 1)
    busy = {r: tr.step_time / (1 + 0.02 * rng.random()) * rng.lognormal(0, 0.03, n)
            for r in range(world)}
    busy[bad][i:] *= slow
    # synchronous data parallel: every rank waits at the all-reduce for the slowest one; the
    # trainer logs its own busy time as step_time and the wait apart (sync_wait)
    wall = np.max(np.stack(list(busy.values())), axis=0) + 0.002
    tr.step_time = wall
    run = _run("straggler", seed, tr, shape, at, 200, {"slowdown": slow, "rank": bad})
    ranks = {
        r: {"step": run.train["step"], "time": run.train["time"] + 0.01 * r,
            "loss": tr.mean * (1 + noise * rng.standard_normal(n)), "step_time": busy[r],
            "sync_wait": wall - busy[r], "throughput": tr.tokens / world / busy[r]}
        for r in range(world)
    }
    return finish_run(tr, run.name, seed, shape, run.label, ranks=ranks)


Injector = Callable[[int, np.random.Generator, str, float, int], SyntheticRun]
"""(seed, rng, clean shape, noise level, fault step) -> the labelled run."""

INJECTORS: Mapping[str, Injector] = {
    "nan": _nan, "spike": _spike, "spike_sustained": _spike_sustained,
    "grad_explosion": _grad_explosion, "grad_vanishing": _grad_vanishing, "plateau": _plateau,
    "divergence": _divergence, "overfit": _overfit, "lr_exhausted": _lr_exhausted,
    "frozen": _frozen, "detach": _detach, "detach_probe": _detach_probe,
    "memory_growth": _memory_growth,
    "stall_gap": _stall_gap, "stall_end": _stall_end, "straggler": _straggler,
}
"""Fault kind (a key of ``FAULT_RULES``) -> its injector."""
