"""A role that moves to another series (a higher-ranked name appears mid-run) restarts the rules
that read it, so the change of series is not taken for a spike or a divergence.

A script that logs ``train_loss`` and later also ``loss`` (here a sum over 8 micro-batches, 8x the
scale) moves the loss role to ``loss`` at that record: the rules built on the loss start over
there, the others (step time here) keep their history.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config

MOVE = 2001
"""First step that logs ``loss`` as well as ``train_loss``."""


def _lines(n: int = 4000, *, loss_spike_at: int | None = None,
           slow_step_at: int | None = None) -> list[dict]:
    rnd = random.Random(1)
    out = []
    for s in range(1, n + 1):
        level = 2.0 * math.exp(-s / 3000) + 0.5
        d: dict = {"step": s, "time": 1.7e9 + s, "lr": 1e-3,
                   "train_loss": level * (1 + 0.02 * rnd.gauss(0, 1)),
                   "step_time": 0.5 * (1 + 0.01 * rnd.gauss(0, 1))}
        if s >= MOVE:
            d["loss"] = 8 * level * (1 + 0.02 * rnd.gauss(0, 1))
            if s == loss_spike_at:
                d["loss"] *= 6
        if s == slow_step_at:
            d["step_time"] = 5.0
        out.append(d)
    out.append({"event": "run_end", "step": n, "time": 1.7e9 + n + 1})
    return out


def _alerts(lines: list[dict], chunk: int | None) -> list[tuple]:
    """Alerts of the engine fed ``chunk`` lines per batch (None: the whole file at once)."""
    data = [json.dumps(x).encode() + b"\n" for x in lines]
    chunk = chunk or len(data)
    parser = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    engine = RuleEngine(load_rules_config(None), live=chunk < len(data))
    for lo in range(0, len(data), chunk):
        engine.feed(parser.parse(b"".join(data[lo:lo + chunk]), lo + 1))
    engine.finish(now=1.7e9 + len(lines) + 2)
    return [(a.rule, a.step, a.severity, a.metric, a.message) for a in engine.alerts]


@pytest.mark.parametrize("chunk", [None, 1, 7, 300])
def test_a_loss_moving_to_another_series_raises_nothing(chunk: int | None) -> None:
    assert _alerts(_lines(), chunk) == []


@pytest.mark.parametrize("chunk", [None, 13])
def test_the_new_series_is_watched_once_warm(chunk: int | None) -> None:
    got = _alerts(_lines(loss_spike_at=3000), chunk)
    assert [(r, s, m) for r, s, _sev, m, _msg in got][:1] == [("loss_spike", 3000, "loss")]


@pytest.mark.parametrize("chunk", [None, 13])
def test_rules_of_other_roles_keep_their_history(chunk: int | None) -> None:
    # a slow step right after the move: the step-time rule is still warm (the loss rules are not)
    got = _alerts(_lines(slow_step_at=MOVE + 3), chunk)
    assert ("step_time_outlier", MOVE + 3) in [(r, s) for r, s, *_ in got]


def test_the_shared_history_of_the_role_restarts() -> None:
    lines = _lines(n=MOVE + 9)  # ``loss`` at 10 records
    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    engine = RuleEngine(load_rules_config(None), live=False)
    engine.feed(JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1))
    _steps, values = engine.ctx.recent("loss", 10 ** 9, 100)
    assert values.shape[0] == 10 and np.all(values > 8 * 0.5)  # only the new series' points


def test_check_exits_zero(tmp_path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in _lines()))
    res = subprocess.run([sys.executable, "-m", "trainwatch", "check", str(f)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No problems found." in res.stdout


# --------------------------------------------------------------------------- custom rules
def _custom_alerts(old_high: range, new_high: range, metric: str, chunk: int | None) -> list[tuple]:
    """A custom ``{metric} above 2 for 12 steps`` on a run whose loss moves from ``train_loss``
    (1, or 3 on ``old_high``) to ``loss`` (0.5, or 8 on ``new_high``) at MOVE."""
    lines: list[dict] = []
    for s in range(1, MOVE + 200):
        d: dict = {"step": s, "time": 1.7e9 + s, "train_loss": 3.0 if s in old_high else 1.0}
        if s >= MOVE:
            d["loss"] = 8.0 if s in new_high else 0.5
        lines.append(d)
    data = [json.dumps(x).encode() + b"\n" for x in lines]
    chunk = chunk or len(data)
    cfg = load_rules_config(overrides={"custom": [
        {"id": "loss_high", "metric": metric, "above": 2, "for_steps": 12}]})
    parser = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    engine = RuleEngine(cfg, live=False)
    for lo in range(0, len(data), chunk):
        engine.feed(parser.parse(b"".join(data[lo:lo + chunk]), lo + 1))
    return [(a.step, a.metric, a.message) for a in engine.alerts if a.rule == "loss_high"]


@pytest.mark.parametrize("chunk", [None, 1, 13])
def test_a_custom_rule_on_a_role_does_not_count_across_the_move(chunk: int | None) -> None:
    # 10 steps above on train_loss, then 5 on loss: 15 in a row only by mixing the two series
    assert _custom_alerts(range(MOVE - 10, MOVE), range(MOVE, MOVE + 5), "loss", chunk) == []


@pytest.mark.parametrize("chunk", [None, 1, 13])
def test_a_custom_rule_on_a_role_counts_the_new_series_from_the_move(chunk: int | None) -> None:
    got = _custom_alerts(range(MOVE - 10, MOVE), range(MOVE, MOVE + 30), "loss", chunk)
    assert got == [(MOVE + 11, "loss", f"loss is 8, above 2 since step {MOVE}.")]


@pytest.mark.parametrize("chunk", [None, 13])
def test_a_custom_rule_on_a_series_name_keeps_counting_across_the_move(chunk: int | None) -> None:
    # ``train_loss`` named as such is the same series before and after the loss role moves
    got = _custom_alerts(range(MOVE - 10, MOVE + 5), range(0), "train_loss", chunk)
    assert got == [(MOVE + 1, "train_loss", f"train_loss is 3, above 2 since step {MOVE - 10}.")]
