"""Building alerts: ranked causes taken as they are, positional construction, the rules' causes
ranked once at import, and every alert of the bench's fault runs in the shape the reference
ranking gives.

A rule may hand :func:`make_hit` its causes already ranked (a tuple of :class:`Cause`, built
once); these tests fail if such a tuple is not what ranking its (cause, confidence) pairs gives.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from trainwatch.commands.check import feed_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin import (
    console_error,
    divergence,
    grad_explosion,
    loss_spike,
    memory_growth,
    nan_inf,
    overfit,
    plateau,
    spike_rule,
    state_detach,
    step_time_outlier,
)
from trainwatch.rules.builtin import grad_vanishing as vanishing
from trainwatch.rules.builtin import learning_stalled as stalled
from trainwatch.rules.builtin import lr_exhausted as lr
from trainwatch.rules.builtin import stalled_stream as stream
from trainwatch.rules.builtin import throughput_drop as throughput
from trainwatch.rules.engine.alert import Alert, Cause
from trainwatch.rules.engine.base import Rule, make_hit, r6, rank_causes

# bench/ is not a package of the project: make the repository root importable
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.synthetic import FAULT_RULES, fault_run, parse_chunks

PAIRS = [("b", 0.4), ("a", 0.7), ("c", 0.4), ("d", 0.12345)]


def _reference(causes: list[tuple[str, float]]) -> tuple[Cause, ...]:
    """The ranking alerts have always had: a stable sort by falling confidence, 3 decimals."""
    return tuple(Cause(c, round(float(p), 3)) for c, p in sorted(causes, key=lambda c: -c[1]))


def _as_pairs(causes: tuple[Cause, ...]) -> list[tuple[str, float]]:
    return [(c.cause, c.confidence) for c in causes]


def test_rank_causes_sorts_by_confidence_keeping_ties_in_order() -> None:
    ranked = rank_causes(PAIRS)
    assert ranked == _reference(PAIRS)
    assert [c.cause for c in ranked] == ["a", "b", "c", "d"]
    assert ranked[-1].confidence == 0.123


def test_make_hit_takes_ranked_causes_as_they_are_and_ranks_pairs() -> None:
    kw: dict = {"pos": np.int64(7), "severity": "warning", "step": np.int64(12),
                "time": np.float64(3.5), "metric": "loss", "message": "m", "evidence": {"x": 1.0},
                "fixes": ["f1", "f2"]}
    from_pairs = make_hit("r", causes=PAIRS, **kw)
    ranked = rank_causes(PAIRS)
    from_ranked = make_hit("r", causes=ranked, **kw)
    assert from_pairs == from_ranked
    assert from_ranked.alert.causes is ranked
    assert make_hit("r", causes=[("z", 0.1), ("y", 0.9)], **kw).alert.causes == (
        Cause("y", 0.9), Cause("z", 0.1))


def test_make_hit_fills_every_field_in_place() -> None:
    ev = {"x": 1.0, "y": None}
    hit = make_hit("rule_id", pos=np.int64(7), severity="error", step=np.int64(12),
                   time=np.float64(3.5), metric="val_loss", message="msg", evidence=ev,
                   causes=(), fixes=["f1"])
    a = hit.alert
    assert hit.pos == 7 and type(hit.pos) is int
    assert (a.rule, a.severity, a.step, a.time, a.metric, a.message) == (
        "rule_id", "error", 12, 3.5, "val_loss", "msg")
    assert type(a.step) is int and type(a.time) is float
    assert a.evidence == ev and a.evidence is not ev  # a copy: the caller's dict stays its own
    assert a.causes == () and a.fixes == ("f1",)
    assert make_hit("r", pos=0, severity="info", step=0, time=0.0, metric=None,
                    message="").alert == Alert("r", "info", 0, 0.0, None, "")


def test_rule_alert_is_make_hit_with_its_id() -> None:
    class Probe(Rule):
        id = "probe_rule"

    kw: dict = {"pos": 3, "severity": "info", "step": 4, "time": 5.0, "metric": "m",
                "message": "msg", "evidence": {"k": 2}, "causes": PAIRS, "fixes": ("a",)}
    assert Probe(None, None).alert(**kw) == make_hit("probe_rule", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("x", [0.1 + 0.2, 123456789.0, -1.23456789e-7, 1e300, 5e-324, -0.0,
                               np.float64(2.0 / 3.0), np.float32(0.1), 7, math.inf, -math.inf])
def test_r6_keeps_six_significant_digits(x: float) -> None:
    v = float(x)
    want = float(f"{v:.6g}") if math.isfinite(v) else v
    got = r6(x)
    assert type(got) is float and got == want and math.copysign(1, got) == math.copysign(1, want)


def test_r6_keeps_nan() -> None:
    assert math.isnan(r6(math.nan)) and math.isnan(r6(np.float64("nan")))


def _ranked_constants() -> list[tuple[str, tuple[Cause, ...]]]:
    """Every ranked cause tuple the rule modules hold (alone or in a dict of variants)."""
    found = []
    for mod in (console_error, divergence, grad_explosion, loss_spike, lr, memory_growth, nan_inf,
                overfit, plateau, spike_rule, stalled, state_detach, step_time_outlier, stream,
                throughput, vanishing):
        for name, v in vars(mod).items():
            vals = v.values() if isinstance(v, dict) else [v]
            for i, t in enumerate(vals):
                if isinstance(t, tuple) and t and all(isinstance(c, Cause) for c in t):
                    found.append((f"{mod.__name__}.{name}[{i}]", t))
    return found


def test_the_rules_causes_are_ranked_once_as_the_reference_ranks_them() -> None:
    consts = _ranked_constants()
    assert len(consts) >= 20  # every rule module's constants were found
    for name, t in consts:
        assert t == _reference(_as_pairs(t)), name


def test_fault_runs_alerts_hold_causes_ranked_as_the_reference_ranks_them() -> None:
    """Rules that hand-rank a cause with a varying text (loss_spike's gradient-first cause,
    plateau's causes) must still give the reference order, on real alerts of every fault kind."""
    cfg = load_rules_config(None)
    seen: set[str] = set()
    for kind in FAULT_RULES:
        for seed in range(4):  # (spike seeds 2, 3 and spike_sustained 3: the gradient first)
            run = fault_run(kind, seed, n_before=600)
            main = parse_chunks(run.jsonl(), f"{run.name}/metrics.jsonl", None, run.now, 256 << 10)
            ranks = {r: parse_chunks(run.rank_jsonl(r), f"{run.name}/metrics.rank{r}.jsonl", r,
                                     run.now, 256 << 10) for r in run.ranks}
            e = RuleEngine(cfg, live=False)
            feed_run(e, LoadedRun(Path(run.name), "jsonl", main, ranks), now=run.now)
            for a in e.alerts:
                seen.add(a.rule)
                assert a.causes == _reference(_as_pairs(a.causes)), (kind, a.rule, a.causes)
                assert isinstance(a.evidence, dict) and type(a.fixes) is tuple
                assert all(isinstance(f, str) for f in a.fixes) and a.causes and a.fixes
                assert type(a.step) is int and type(a.time) is float
    assert {"loss_spike", "plateau", "divergence", "state_detach"} <= seen
