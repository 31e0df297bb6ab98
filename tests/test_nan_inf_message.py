"""nan_inf's message says where an early non-finite loss came: counted in finite loss points,
in words a person reads as meant ("within the first 1 loss points" read as a typo)."""

from __future__ import annotations

import json
import math

import pytest

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config


def _nan_message(n_finite: int) -> str:
    recs = [{"step": s, "loss": 2.0 - 0.01 * s} for s in range(1, n_finite + 1)]
    recs.append({"step": n_finite + 1, "loss": math.nan})
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    engine = RuleEngine(load_rules_config(None), live=False)
    engine.feed(JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1))
    (alert,) = [a for a in engine.alerts if a.rule == "nan_inf"]
    return alert.message


@pytest.mark.parametrize(("n_finite", "hint"), [
    (0, "before any finite loss point"),
    (1, "after only 1 loss point."),
    (5, "after only 5 loss points."),
])
def test_an_early_nan_says_how_many_finite_loss_points_came_before(n_finite: int,
                                                                   hint: str) -> None:
    assert hint in _nan_message(n_finite)


def test_a_late_nan_gives_no_early_hint() -> None:
    msg = _nan_message(400)
    assert "after only" not in msg and "finite loss point" not in msg
