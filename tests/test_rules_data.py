"""Seeded synthetic training runs for the rule tests (and a few tests of the generator itself).

A run is a dict of per-step columns (``step, time, loss, lr, grad_norm, step_time, throughput,
memory``) plus evaluations (``val_step, val_loss``). Faults are injected by bending a column from
a step on; :func:`to_jsonl` writes what a trainer would have written.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.formats.jsonl import JsonlParser

SHAPES = ("exp", "cosine", "heavy", "step")
"""Clean shapes: exponential decay at constant LR, warm-up + cosine with a power-law loss,
cosine with heavy-tailed (Student-t, 3 dof) batch noise, step-decay LR."""


def clean(n: int, shape: str = "exp", noise: float = 0.03, seed: int = 0,
          eval_every: int = 100) -> dict[str, Any]:
    rng = np.random.default_rng([seed, len(shape), n])
    s = np.arange(1, n + 1)
    peak = 3e-4
    warm = max(2, n // 50)
    if shape == "exp":
        lr = np.full(n, peak)
    elif shape == "step":
        lr = peak * np.where(s < n // 2, 1.0, np.where(s < 3 * n // 4, 0.1, 0.01))
    else:
        frac = np.clip((s - warm) / max(n - warm, 1), 0, 1)
        lr = peak * np.where(s <= warm, s / warm, 0.1 + 0.45 * (1 + np.cos(math.pi * frac)))
    progress = np.cumsum(lr) / peak
    l0 = 6.0
    if shape == "exp":
        mean = 1.5 + (l0 - 1.5) * np.exp(-progress / (0.4 * n))
    else:
        mean = 1.5 + (l0 - 1.5) * (1 + progress / (0.03 * n)) ** -0.6
    if shape == "heavy":
        eps = rng.standard_t(3, n) / math.sqrt(3.0)
    else:
        eps = rng.standard_normal(n)
    loss = mean * (1 + noise * np.maximum(eps, -0.8 / noise))
    grad = (0.8 + 4.0 * np.exp(-s / (0.05 * n))) * rng.lognormal(0, 0.15 + noise, n)
    dt = 0.3 * rng.lognormal(0, 0.03, n)
    dt[0] *= 12.0  # compilation on the first step
    hiccup = rng.random(n) < 1 / 2000
    dt[hiccup] *= 3.0
    mem = 9000.0 * (1 + rng.normal(0, 5e-4, n))
    mem[:2] *= (0.6, 0.95)
    time = 1.7e9 + np.cumsum(dt)
    vi = np.flatnonzero(s % eval_every == 0)
    val = (mean[vi] * 1.05 + 0.05) * (1 + 0.1 * noise * rng.standard_normal(vi.shape[0]))
    return {"step": s, "time": time, "loss": loss, "lr": lr, "grad_norm": grad, "step_time": dt,
            "throughput": 4096.0 / dt, "memory": mem, "val_step": s[vi], "val_loss": val,
            "mean": mean, "noise": noise, "eps": eps}


def set_loss(run: dict[str, Any], step: int, mean: np.ndarray | float) -> None:
    """Replace the noise-free loss from ``step`` on (the batch noise is kept)."""
    i = idx(run, step)
    m = np.broadcast_to(np.asarray(mean, dtype=np.float64), run["loss"][i:].shape)
    run["mean"][i:] = m
    run["loss"][i:] = m * (1 + run["noise"] * np.maximum(run["eps"][i:], -0.8 / run["noise"]))


def idx(run: dict[str, Any], step: int) -> int:
    return int(np.searchsorted(run["step"], step))


def _num(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(float(x))


def to_jsonl(run: dict[str, Any], *, extra: dict[str, np.ndarray] | None = None,
             start: bool = True, end: bool = True) -> bytes:
    keys = ["loss", "lr", "grad_norm", "step_time", "throughput", "memory", *(extra or {})]
    cols = {k: (run[k] if k in run else extra[k]).tolist() for k in keys}  # type: ignore[index]
    vals = dict(zip(run["val_step"].tolist(), run["val_loss"].tolist()))
    out = []
    if start:
        out.append(json.dumps({"event": "run_start", "step": 0, "time": float(run["time"][0]) - 1}))
    for i, (s, t) in enumerate(zip(run["step"].tolist(), run["time"].tolist())):
        fields = ",".join(f'"{k}":{_num(cols[k][i])}' for k in keys)
        out.append(f'{{"step":{s},"time":{t!r},{fields}}}')
        if s in vals:
            out.append(f'{{"step":{s},"time":{t + 0.5!r},"val_loss":{_num(vals[s])}}}')
    if end:
        out.append(json.dumps({"event": "run_end", "step": int(run["step"][-1]),
                               "time": float(run["time"][-1]) + 1}))
    return ("\n".join(out) + "\n").encode()


def parse_all(data: bytes, source: str = "metrics.jsonl") -> list[RecordBatch]:
    """The whole file in two reads (the second takes the parser's fast path)."""
    lines = data.splitlines(keepends=True)
    p = JsonlParser(source, clock=lambda: 0.0)
    cut = min(len(lines), 50)
    out = [p.parse(b"".join(lines[:cut]), 1)]
    if cut < len(lines):
        out.append(p.parse(b"".join(lines[cut:]), cut + 1))
    return out


def parse_live(data: bytes, seed: int = 0, max_lines: int = 20,
               source: str = "metrics.jsonl") -> list[RecordBatch]:
    """The file as a tailer sees it live: random small reads of 1..max_lines whole lines."""
    rng = np.random.default_rng(seed)
    lines = data.splitlines(keepends=True)
    p = JsonlParser(source, clock=lambda: 0.0)
    out, i = [], 0
    while i < len(lines):
        k = int(rng.integers(1, max_lines + 1))
        out.append(p.parse(b"".join(lines[i:i + k]), i + 1))
        i += k
    return out


# ------------------------------------------------------------------ tests of the generator
def test_clean_runs_are_seeded_and_finite() -> None:
    for shape in SHAPES:
        a, b = clean(500, shape, seed=3), clean(500, shape, seed=3)
        assert np.array_equal(a["loss"], b["loss"])
        assert all(np.isfinite(v).all() for v in a.values())
        assert a["loss"][-50:].mean() < a["loss"][:50].mean()


def test_jsonl_round_trip() -> None:
    run = clean(300, "exp", seed=1)
    batches = parse_all(to_jsonl(run))
    loss = np.concatenate([b.series["loss"].values for b in batches])
    assert np.allclose(loss, run["loss"])
    live = parse_live(to_jsonl(run), seed=2)
    assert sum(b.n_records for b in live) == sum(b.n_records for b in batches)


def engine_alerts(data: bytes, cfg: Any = None, *, now: float | None = None,
                  live: bool = False) -> list[Any]:
    """Every alert of the main stream read as ``check`` does (finish at ``now`` if given)."""
    from trainwatch.rules import RuleEngine, load_rules_config

    e = RuleEngine(cfg if cfg is not None else load_rules_config(), live=live)
    for b in parse_all(data):
        e.feed(b)
    if now is not None:
        e.finish(now)
    return list(e.alerts)


def of(alerts: list[Any], rule: str, min_severity: str = "info") -> list[tuple[int, str]]:
    """(step, severity) of one rule's alerts at or above a severity."""
    rank = {"info": 0, "warning": 1, "error": 2}
    return [(a.step, a.severity) for a in alerts
            if a.rule == rule and rank[a.severity] >= rank[min_severity]]
