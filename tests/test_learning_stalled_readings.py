"""learning_stalled's two readings of a person: a loss at chance (flat at ln k from the start),
and a constant loss that is only the floor of its logging precision."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import Alert, RuleEngine, load_rules_config

CFG = load_rules_config()


def _alerts(records: list[dict], k: int | None = None) -> list[Alert]:
    lines = [(json.dumps(r) + "\n").encode() for r in records]
    k = k or len(lines)
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    e = RuleEngine(CFG, live=k < len(lines))
    for i in range(0, len(lines), k):
        e.feed(p.parse(b"".join(lines[i:i + k]), i + 1))
    return [a for a in e.alerts if a.rule == "learning_stalled"]


@pytest.mark.parametrize(("classes", "name"), [(2, "loss"), (10, "train_loss"), (5, "loss")])
def test_a_loss_flat_at_ln_k_is_a_model_at_chance(classes: int, name: str) -> None:
    rng = np.random.default_rng(classes)
    recs = [{"step": s, name: math.log(classes) * (1 + 2e-4 * rng.standard_normal())}
            for s in range(1, 201)]
    got = _alerts(recs)
    assert [(a.step, a.severity, a.evidence["classes"]) for a in got] == [(50, "warning", classes)]
    assert f"ln({classes})" in got[0].message and "at chance" in got[0].message
    assert _alerts(recs, 7) == got


@pytest.mark.parametrize("shape", ["falls", "noisy", "between"])
def test_a_loss_near_ln_k_that_is_not_flat_there_is_not_at_chance(shape: str) -> None:
    rng = np.random.default_rng(1)
    s = np.arange(1, 201)
    if shape == "falls":  # passes through ln 10 on its way down
        v = 2.6 * np.exp(-s / 60) + 0.2
    elif shape == "noisy":  # around ln 10, but with a batch noise of 3 %
        v = math.log(10) * (1 + 0.03 * rng.standard_normal(s.shape[0]))
    else:  # flat, but between ln 36 and ln 37: no k explains it
        v = np.full(s.shape[0], 0.5 * (math.log(36) + math.log(37))) + 1e-5 * rng.standard_normal(
            s.shape[0])
    assert _alerts([{"step": int(a), "loss": float(b)} for a, b in zip(s, v)]) == []


def test_a_loss_at_its_logging_precision_floor_is_converged_not_stalled() -> None:
    """HF Trainer's 4 decimals: 2e-4 written as 0.0002 over and over is an info."""
    recs = [{"step": 10 * s, "loss": round(max(2e-4, 1.5 * math.exp(-s / 30)), 4)}
            for s in range(1, 401)]
    got = _alerts(recs)
    assert [(a.severity, a.evidence["quantum"]) for a in got] == [("info", 1e-4)]
    assert "below the precision it is logged at" in got[0].message


def test_a_full_precision_constant_loss_is_still_nothing_learning() -> None:
    recs = [{"step": s, "loss": 1.0 / s if s < 100 else 0.0123456789} for s in range(1, 301)]
    got = _alerts(recs)
    assert [a.severity for a in got] == ["warning"] and "nothing is learning" in got[0].message
