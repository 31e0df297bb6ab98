"""Labelled synthetic training runs: clean runs of several shapes and noise levels, and runs with one
fault injected at a known step, for scoring the rule engine (``bench/detect.py``).

A run looks like what the bundled trainer (``trainer/loop.py``) writes: one record per optimizer
step with ``epoch, loss, lr, grad_norm, step_time, throughput, memory`` (MiB), ``val_loss`` in the
record of every K-th step after an ``eval`` event, the detach probe (``state_attached`` every step,
``graph_size`` every 10th) on recurrent-model runs, ``run_start``/``run_end`` events, and, for
distributed runs, ``metrics.rank{N}.jsonl`` streams with ``loss, step_time, sync_wait,
throughput``.
Everything is drawn from ``numpy.random.default_rng`` seeded by (seed, kind), so one seed always
gives the same bytes. The fault injectors live in ``bench/faults.py``; :func:`fault_run` is the
way in.

The clean runs are made to contain what real clean runs contain and what a naive rule mistakes for
a fault: a slow first step (compilation), memory rising over the first steps (optimizer state),
heavy-tailed batch noise, LR drops that make the loss drop, evaluation and checkpoint pauses, rare
data-loader hiccups, and LR schedules that end at zero. A few more (:func:`zero_clean_run`) have a
zero-inflated loss, exactly 0 on most steps, as hinge and detection losses are.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.formats.jsonl import JsonlParser

SHAPES = ("exp", "cosine", "step", "linear", "heavy")
"""Clean loss/LR shapes: exponential decay at constant LR, warmup+cosine, step decay, warmup+linear
decay to zero (the Hugging Face default), and cosine with heavy-tailed (Student-t) batch noise."""
ZERO_SHAPE = "zero"
"""A zero-inflated loss (hinge, margin and triplet losses on easy batches, detection losses on
batches without positives): exactly 0 on a large, growing share of steps, exponentially
distributed around the falling curve otherwise. Not in :data:`SHAPES` (the clean runs cycle
through those by seed): :func:`zero_clean_run` makes it, :data:`ZERO_CLEAN_RUNS` of them."""
ZERO_CLEAN_RUNS = 4
"""Zero-inflated clean runs a full bench adds to the clean runs of :data:`SHAPES`."""
NOISES = (0.01, 0.03, 0.06)
"""Relative batch-to-batch loss noise levels."""
PROBE_ATTACHED = "state_attached"
"""The trainer's probe: 1.0 when the incoming hidden state is still attached to the last graph."""
PROBE_GRAPH = "graph_size"
"""The trainer's probe: autograd nodes reachable from the loss, logged every ``GRAPH_EVERY``."""
GRAPH_EVERY = 10

FAULT_RULES: Mapping[str, str] = {
    "nan": "nan_inf",
    "spike": "loss_spike",
    "spike_sustained": "loss_spike",
    "grad_explosion": "grad_explosion",
    "grad_vanishing": "grad_vanishing",
    "plateau": "plateau",
    "divergence": "divergence",
    "overfit": "overfit",
    "lr_exhausted": "lr_exhausted",
    "frozen": "learning_stalled",
    "detach": "state_detach",
    "detach_probe": "state_detach",
    "memory_growth": "memory_growth",
    "stall_gap": "stalled_stream",
    "stall_end": "stalled_stream",
    "straggler": "rank_straggler",
}
"""Fault kind -> the rule id that should report it."""


@dataclass(frozen=True)
class Label:
    """Where the fault is and how late a detection may come (river's ``delta_max``)."""

    kind: str
    """A key of :data:`FAULT_RULES`, or ``"clean"``."""
    rule: str | None
    """Rule id expected to fire; None for a clean run."""
    step: int
    """First step of the fault; -1 for a clean run."""
    delta_max: int
    """A detection at ``step <= alarm <= step + delta_max`` is a true positive."""
    params: Mapping[str, float] = field(default_factory=dict)
    """The fault's size: spike factor, doubling time, leak rate..."""
    span: int | None = None
    """Steps the injected effect lasts from ``step`` on; None: to the run's end. A sparse
    logging cadence can miss a short one (``bench/cadence.py`` decides visibility by it)."""


@dataclass(frozen=True)
class SyntheticRun:
    """One labelled run: its columns, and the JSONL a trainer would have written for it."""

    name: str
    seed: int
    shape: str
    noise: float
    label: Label
    train: Mapping[str, np.ndarray]
    """Per optimizer step: ``step``, ``time`` and the metric columns (same length)."""
    every: Mapping[str, int]
    """Columns of ``train`` logged only every N steps (the rest of the column is unused)."""
    val: Mapping[str, np.ndarray]
    """Per evaluation: ``step``, ``time`` (of its ``eval`` event), ``val_loss``, ``seconds``."""
    ranks: Mapping[int, Mapping[str, np.ndarray]]
    """Per-rank streams (``step``, ``time``, ``loss``, ``step_time``, ``sync_wait``,
    ``throughput``); empty for one process."""
    ended: bool
    """Whether the run wrote ``run_end`` (a stalled run did not)."""
    now: float
    """The wall clock to finish the rules with: a little after the last record, or, for a stalled
    run, long after it."""

    @property
    def n_steps(self) -> int:
        return int(self.train["step"].shape[0])

    def jsonl(self) -> bytes:
        """The main stream, ``metrics.jsonl``, as the trainer's ``RunWriter`` writes it."""
        tr, val = self.train, self.val
        t0 = float(tr["time"][0] - tr["step_time"][0]) if self.n_steps else self.now
        out = [_dumps({"event": "run_start", "time": round(t0, 3),
                       "config": {"shape": self.shape, "seed": self.seed}, "pid": 1,
                       "host": "synthetic", "argv": ["train.py"]})]
        keys = [k for k in tr if k not in ("step", "time")]
        cols = [tr[k].tolist() for k in keys]
        every = [self.every.get(k, 1) for k in keys]
        steps, times = tr["step"].tolist(), tr["time"].tolist()
        vi, v_steps = 0, val["step"].tolist()
        for i, s in enumerate(steps):
            fields = ",".join(
                f'"{k}":{_num(c[i])}' for k, c, e in zip(keys, cols, every) if e == 1 or s % e == 0
            )
            if vi < len(v_steps) and v_steps[vi] == s:
                v = _num(float(val["val_loss"][vi]))
                out.append(f'{{"event":"eval","step":{s},"time":{val["time"][vi]:.3f},'
                           f'"val_loss":{v},"seconds":{float(val["seconds"][vi]):.4f}}}')
                fields += f',"val_loss":{v}'
                vi += 1
            out.append(f'{{"step":{s},"time":{times[i]:.3f},{fields}}}')
        if self.ended and self.n_steps:
            out.append(_dumps({"event": "run_end", "time": round(float(times[-1]) + 1.0, 3),
                               "status": "finished", "exit_code": 0}))
        return ("\n".join(out) + "\n").encode()

    def rank_jsonl(self, rank: int) -> bytes:
        """One rank's stream, ``metrics.rank{N}.jsonl``."""
        r = self.ranks[rank]
        t0 = float(r["time"][0] - r["step_time"][0] - r["sync_wait"][0])
        lines = [_dumps({"event": "run_start", "time": round(t0, 3), "config": {}, "rank": rank})]
        lines += [
            f'{{"step":{s},"time":{t:.3f},"loss":{_num(x)},"step_time":{_num(dt)},'
            f'"sync_wait":{_num(w)},"throughput":{_num(tp)}}}'
            for s, t, x, dt, w, tp in zip(
                r["step"].tolist(), r["time"].tolist(), r["loss"].tolist(),
                r["step_time"].tolist(), r["sync_wait"].tolist(), r["throughput"].tolist())
        ]
        return ("\n".join(lines) + "\n").encode()

    def batches(self, chunk_bytes: int = 1 << 20) -> list[RecordBatch]:
        """The main stream parsed as a tailer would: whole lines, about ``chunk_bytes`` a read."""
        return parse_chunks(self.jsonl(), f"{self.name}/metrics.jsonl", None, self.now, chunk_bytes)

    def rank_batches(self, chunk_bytes: int = 1 << 20) -> dict[int, list[RecordBatch]]:
        return {
            r: parse_chunks(self.rank_jsonl(r), f"{self.name}/metrics.rank{r}.jsonl", r, self.now,
                            chunk_bytes)
            for r in self.ranks
        }

    def write(self, directory: Path) -> Path:
        """Write the run as a run directory (``metrics.jsonl`` plus rank files); returns it."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "metrics.jsonl").write_bytes(self.jsonl())
        for r in self.ranks:
            (directory / f"metrics.rank{r}.jsonl").write_bytes(self.rank_jsonl(r))
        return directory


def parse_chunks(
    data: bytes, source: str, rank: int | None, now: float, chunk_bytes: int = 1 << 20
) -> list[RecordBatch]:
    """Parse JSONL in whole-line chunks of about ``chunk_bytes``, like successive file reads."""
    parser = JsonlParser(source, rank=rank, clock=lambda: now)
    out: list[RecordBatch] = []
    pos, line = 0, 1
    while pos < len(data):
        end = data.rfind(b"\n", pos, pos + chunk_bytes) + 1 if pos + chunk_bytes < len(data) else 0
        end = end if end > pos else len(data)
        chunk = data[pos:end]
        out.append(parser.parse(chunk, line))
        line += chunk.count(b"\n")
        pos = end
    return out


def _num(x: float) -> str:
    # Python's json writes NaN/Infinity tokens, which trainwatch reads; 7 digits are plenty
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return f"{x:.7g}"


def _dumps(d: Mapping[str, object]) -> str:
    return json.dumps(d, separators=(",", ":"))


# ---------------------------------------------------------------------------------------- runs


@dataclass
class Trace:
    """A run being built: noise-free curves kept apart from noise so a fault can bend the curve."""

    rng: np.random.Generator
    steps: np.ndarray
    lr: np.ndarray
    lr_peak: float
    mean: np.ndarray
    """Noise-free train loss."""
    eps: np.ndarray
    """Unit batch noise of the loss."""
    noise: float
    grad_norm: np.ndarray
    step_time: np.ndarray
    tokens: float
    memory: np.ndarray
    eval_s: np.ndarray
    """Seconds each step's evaluation took (0 on other steps); its record is written after."""
    gap: np.ndarray
    """Seconds the trainer spent after each step's record (checkpoint, stall)."""
    eval_every: int
    val_mean: np.ndarray
    """Noise-free val loss at every step (sampled at eval steps)."""
    val_eps: np.ndarray
    epoch_steps: int = 1000
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    every: dict[str, int] = field(default_factory=dict)
    loss: np.ndarray | None = None
    """Set to override ``mean * (1 + noise * eps)`` (NaN faults)."""

    def idx(self, step: int) -> int:
        return step - 1

    def truncate(self, n: int) -> None:
        n = max(1, min(n, self.steps.shape[0]))
        for name in ("steps", "lr", "mean", "eps", "grad_norm", "step_time", "memory", "eval_s",
                     "gap", "val_mean", "val_eps"):
            setattr(self, name, getattr(self, name)[:n])
        self.extra = {k: v[:n] for k, v in self.extra.items()}
        if self.loss is not None:
            self.loss = self.loss[:n]


def _rng(seed: int, kind: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(kind.encode())])


def _schedule(kind: str, n: int, warm: int, peak: float, end: int | None = None) -> np.ndarray:
    """LR per step. ``end``: the step the decay reaches zero (defaults to ``n``)."""
    s = np.arange(1, n + 1, dtype=np.float64)
    end = n if end is None else end
    ramp = np.minimum(1.0, s / max(warm, 1))
    frac = np.clip((s - warm) / max(end - warm, 1), 0.0, 1.0)
    if kind == "constant":
        return np.full(n, peak) * ramp
    if kind == "cosine":
        return peak * np.where(s <= warm, ramp, 0.1 + 0.9 * 0.5 * (1 + np.cos(math.pi * frac)))
    if kind == "cosine0":
        return peak * np.where(s <= warm, ramp, 0.5 * (1 + np.cos(math.pi * frac)))
    if kind == "linear":
        return peak * np.where(s <= warm, ramp, 1.0 - frac)
    if kind == "step":
        return peak * np.where(s < 0.5 * n, 1.0, np.where(s < 0.75 * n, 0.1, 0.01))
    raise ValueError(f"unknown schedule {kind!r}")


_SCHEDULE_OF = {"exp": "constant", "cosine": "cosine", "step": "step", "linear": "linear",
                "heavy": "cosine"}


def base_trace(
    rng: np.random.Generator, n: int, shape: str, noise: float, *,
    schedule: str | None = None, lr_peak: float | None = None, lr_end: int | None = None,
) -> Trace:
    s = np.arange(1, n + 1, dtype=np.int64)
    warm = 1 if shape == "exp" else max(2, int(n * rng.uniform(0.01, 0.04)))
    peak = lr_peak if lr_peak is not None else float(10 ** rng.uniform(-4.3, -2.7))
    lr = _schedule(schedule or _SCHEDULE_OF[shape], n, warm, peak, lr_end)
    # progress in "steps at peak LR": a smaller LR moves the loss less, zero LR not at all
    progress = np.cumsum(lr) / peak
    l0 = rng.uniform(2.0, 8.0)
    linf = l0 * rng.uniform(0.15, 0.35)
    if shape == "exp":
        decay = np.exp(-progress / (n * rng.uniform(0.25, 0.5)))
    else:
        decay = (1 + progress / (n * rng.uniform(0.01, 0.05))) ** -rng.uniform(0.4, 0.9)
    # an LR-proportional noise floor: the loss drops when the LR drops (step/cosine schedules)
    floor = linf * rng.uniform(0.05, 0.15) * lr / peak
    mean = linf + (l0 - linf) * decay + floor
    if shape == "heavy":
        eps = rng.standard_t(5, n) / math.sqrt(5 / 3)
    else:
        eps = rng.standard_normal(n)
    eps = np.maximum(eps, -0.8 / max(noise, 1e-9))
    g0, ginf = rng.uniform(2.0, 10.0), rng.uniform(0.3, 1.5)
    grad = (ginf + (g0 - ginf) * np.exp(-s / (0.05 * n))) * rng.lognormal(0, 0.15 + noise, n)
    base_dt = rng.uniform(0.1, 0.6)
    dt = base_dt * rng.lognormal(0, 0.03, n)
    dt[0] *= rng.uniform(5, 30)  # compilation / cudnn autotune on the first step
    dt[1:3] *= rng.uniform(1.2, 2.0)
    hiccups = rng.random(n) < 1 / 3000
    dt[hiccups] *= rng.uniform(2, 4, int(hiccups.sum()))
    mem_base = rng.uniform(2000, 60000)
    mem = mem_base * (1 + rng.normal(0, 5e-4, n))
    mem[:3] *= (0.6, 0.95, 1.0)[: min(3, n)]  # optimizer state appears after the first step
    eval_every = int(rng.choice([50, 100, 200]))
    eval_s = np.zeros(n)
    is_eval = s % eval_every == 0
    eval_s[is_eval] = rng.uniform(2, 8, int(is_eval.sum()))
    gap = np.zeros(n)
    is_ckpt = s % 1000 == 0
    gap[is_ckpt] += rng.uniform(5, 20, int(is_ckpt.sum()))
    val_mean = linf * 1.08 + (l0 - linf) * decay * 1.02 + 0.5 * floor
    return Trace(
        rng=rng, steps=s, lr=lr, lr_peak=peak, mean=mean, eps=eps, noise=noise, grad_norm=grad,
        step_time=dt, tokens=float(2 ** rng.integers(14, 20)), memory=mem, eval_s=eval_s,
        gap=gap, eval_every=eval_every, val_mean=val_mean, val_eps=rng.standard_normal(n),
        epoch_steps=int(rng.integers(300, 3000)),
    )


def finish_run(tr: Trace, name: str, seed: int, shape: str, label: Label, *, ended: bool = True,
            idle: float = 1.0, ranks: Mapping[int, Mapping[str, np.ndarray]] | None = None
            ) -> SyntheticRun:
    t0 = 1.7e9 + (seed % 100_000) * 10_000.0
    # a step's record is written after its evaluation; pauses after a record delay what follows
    time = (t0 + np.cumsum(tr.step_time) + np.cumsum(tr.eval_s)
            + np.concatenate(([0.0], np.cumsum(tr.gap)[:-1])))
    loss = tr.loss if tr.loss is not None else tr.mean * (1 + tr.noise * tr.eps)
    train = {"step": tr.steps, "time": time, "epoch": np.round(tr.steps / tr.epoch_steps, 5),
             "loss": loss, "lr": tr.lr, "grad_norm": tr.grad_norm, "step_time": tr.step_time,
             "throughput": tr.tokens / tr.step_time, "memory": tr.memory, **tr.extra}
    vi = np.flatnonzero(tr.steps % tr.eval_every == 0)
    # evaluation noise is small: it averages over many batches
    vloss = tr.val_mean[vi] * (1 + 0.1 * tr.noise * tr.val_eps[vi])
    if tr.loss is not None:
        vloss = np.where(np.isnan(tr.loss[vi]), np.nan, vloss)
    val = {"step": tr.steps[vi], "time": time[vi] - 0.001, "val_loss": vloss,
           "seconds": tr.eval_s[vi]}
    now = float(time[-1]) + idle
    return SyntheticRun(name=name, seed=seed, shape=shape, noise=tr.noise, label=label,
                        train=train, every=dict(tr.every), val=val, ranks=dict(ranks or {}),
                        ended=ended, now=now)


def add_probe(tr: Trace, rng: np.random.Generator, attached_from: int | None = None) -> None:
    """Add the trainer's detach probe; the state is attached from step ``attached_from`` on."""
    n = tr.steps.shape[0]
    attached = np.zeros(n)
    nodes = np.full(n, float(rng.integers(200, 5000)))
    if attached_from is not None:
        i = tr.idx(attached_from)
        attached[i:] = 1.0
        nodes[i:] *= 1 + np.arange(n - i)  # every step's graph hangs on to the previous ones
    tr.extra[PROBE_ATTACHED] = attached
    tr.extra[PROBE_GRAPH] = nodes
    tr.every[PROBE_GRAPH] = GRAPH_EVERY


def clean_run(seed: int, n_steps: int = 4000, shape: str | None = None,
              noise: float | None = None) -> SyntheticRun:
    """A run with nothing wrong in it; shape and noise cycle with the seed unless given."""
    shape = shape or SHAPES[seed % len(SHAPES)]
    noise = NOISES[(seed // len(SHAPES)) % len(NOISES)] if noise is None else noise
    rng = _rng(seed, f"clean/{shape}")
    tr = base_trace(rng, n_steps, shape, noise)
    if seed % 4 == 0:  # a recurrent model whose trainer runs the detach probe
        add_probe(tr, rng)
    label = Label("clean", None, -1, 0)
    return finish_run(tr, f"clean-{shape}-{seed}", seed, shape, label)


def zero_clean_run(seed: int, n_steps: int = 4000) -> SyntheticRun:
    """A clean run of :data:`ZERO_SHAPE`: the LR schedule, curve and other series of a clean run
    of ``SHAPES[seed % 5]`` (noise cycling as in :func:`clean_run`), the loss zero-inflated.

    The share of exact zeros grows as the model learns (more batches are easy), from 30-60 %
    to 60-85 %; a non-zero loss is the curve times an Exponential(1) draw (a few hinge terms
    above their margin: mostly small, sometimes several times the mean). Its own random stream
    (``clean/zero``): the runs of :func:`clean_run` are untouched by it.
    """
    shape = SHAPES[seed % len(SHAPES)]
    noise = NOISES[(seed // len(SHAPES)) % len(NOISES)]
    rng = _rng(seed, f"clean/{ZERO_SHAPE}")
    tr = base_trace(rng, n_steps, shape, noise)
    p_from, p_to = rng.uniform(0.3, 0.6), rng.uniform(0.6, 0.85)
    learned = 1.0 - (tr.mean - tr.mean.min()) / max(float(tr.mean.max() - tr.mean.min()), 1e-12)
    zero = rng.random(n_steps) < p_from + (p_to - p_from) * learned
    tr.loss = np.where(zero, 0.0, tr.mean * rng.exponential(1.0, n_steps))
    label = Label("clean", None, -1, 0)
    return finish_run(tr, f"clean-{ZERO_SHAPE}-{seed}", seed, ZERO_SHAPE, label)


NOISY_DRAWS = ("exponential", "lognormal", "gauss50")
"""Per-step noise of :func:`noisy_flat_run`: Exponential(1), lognormal (sigma 1) or Gaussian with
a 50 % sd, each times the level."""


def noisy_flat_run(seed: int, n_steps: int = 30_000, draw: str = "exponential",
                   blowup: float = 1.0, at: int | None = None) -> SyntheticRun:
    """A flat loss whose every step is the level times one noisy draw (``draw``, one of
    :data:`NOISY_DRAWS`): batch-size-1 or sample-by-sample training, RL and small-batch losses,
    whose per-step noise is as large as the loss. Clean unless ``blowup`` > 1: the loss times
    that from step ``at`` on (a multiplicative blow-up; the label is ``divergence`` at ``at``).

    The LR and other series are those of a clean ``exp`` run; its own random stream
    (``noisy/<draw>``): the other generators' runs are untouched by it."""
    rng = _rng(seed, f"noisy/{draw}")
    tr = base_trace(rng, n_steps, "exp", 0.0)
    level = rng.uniform(0.5, 3.0)
    if draw == "exponential":
        x = rng.exponential(1.0, n_steps)
    elif draw == "lognormal":
        x = rng.lognormal(0.0, 1.0, n_steps)
    elif draw == "gauss50":
        # (kept above 0, as a loss is: a draw below 5 % of the level is ~3 % of them)
        x = np.maximum(1.0 + 0.5 * rng.standard_normal(n_steps), 0.05)
    else:
        raise ValueError(f"unknown draw {draw!r} (expected one of {', '.join(NOISY_DRAWS)})")
    loss = level * x
    label = Label("clean", None, -1, 0)
    if blowup > 1.0:
        at = n_steps // 2 if at is None else at
        loss[tr.idx(at):] *= blowup
        label = Label("divergence", "divergence", at, 250, {"factor": blowup})
    tr.loss = loss
    return finish_run(tr, f"noisy-{draw}-{seed}", seed, "exp", label)


def fault_run(kind: str, seed: int, n_before: int = 1000) -> SyntheticRun:
    """A run with one fault of ``kind`` injected after about ``n_before`` clean steps.

    The fault's size cycles with the seed (``seed % 3`` or ``% 4``) so a handful of seeds covers
    every size; the step varies with the seed too.
    """
    if kind not in FAULT_RULES:
        raise ValueError(f"unknown fault kind {kind!r} (expected one of {', '.join(FAULT_RULES)})")
    rng = _rng(seed, kind)
    shape = SHAPES[seed % len(SHAPES)]
    noise = NOISES[(seed // len(SHAPES)) % len(NOISES)]
    at = int(n_before * rng.uniform(0.8, 1.2))
    # bench.faults builds on this module's traces and imports it: importing it here at load time
    # would be a cycle
    from bench.faults import INJECTORS

    return INJECTORS[kind](seed, rng, shape, noise, at)
