"""A rewound rule is a fresh rule, but for what outlives a segment.

A resumed run replays steps, and the engine rewinds every rule at the new segment (and a rule
whose role moved to another series). Rules build their per-segment state in ``rewind`` (which
``__init__`` calls, or which rebuilds what ``__init__`` built): these tests feed the bench's
fault runs, rewind, and compare every rule's state, recursively and by value, with that of a
rule just built, except the attributes listed as run-level below (each with its reason)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import pytest

from bench.synthetic import FAULT_RULES, fault_run, parse_chunks
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.engine.base import Rule
from trainwatch.rules.engine.step_log import StepLog

CFG = load_rules_config(None)

RUN_LEVEL: dict[str, frozenset[str]] = {
    # the early maximum is a fact about the run, not the segment
    "SpikeDetector": frozenset({"early_max", "early_n"}),
    # each series' shift, taken once for the run
    "StepTimeOutlierRule": frozenset({"_shifts"}),
    # the highest grad block median of every segment
    "GradVanishingRule": frozenset({"peak", "peak_step"}),
    # the LR's peak over the run
    "LrPeak": frozenset({"peak", "_pending"}),
    # the LR's story is the run's: only the loss history restarts with the steps
    "LrExhaustedRule": frozenset({"n", "peak", "all_zero", "start_fired", "zrun", "zfired",
                                  "zrun_start", "frun", "frun_start", "ffired", "last_lr"}),
    # the stream runs on through a resume: only the gap into it is not a stall
    "StalledStreamRule": frozenset({"last_step", "last_pos", "gaps", "finished", "announced",
                                    "reported_for", "watch_start", "last_arrival",
                                    "arrived_while_watching"}),
    # an end without error text waits for the console, whatever segment comes after it
    "RunCrashedRule": frozenset({"pending"}),
    # the series' recent history and the run's point counts (the logs and shared streams restart)
    "Context": frozenset({"_hist", "_pending", "frame", "run_points"}),
}


def state(x: Any, seen: dict[int, str] | None = None, path: str = "") -> Any:
    """``x`` as plain nested values, to compare by value: numpy arrays by bytes, NaN equal to
    NaN, objects by their attributes (run-level ones left out), an object met twice by the path
    where it was first met, configuration objects by identity (both engines share one), the
    engine's context as the word "ctx" (it is compared on its own)."""
    seen = {} if seen is None else seen
    if isinstance(x, float):
        return "nan" if math.isnan(x) else x
    if x is None or isinstance(x, (bool, int, str, bytes, set, frozenset)):
        return x
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, deque):
        return ("deque", x.maxlen, [state(v, seen, path) for v in x])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [state(v, seen, path) for v in x])
    if isinstance(x, dict):
        return ("dict", {k: state(v, seen, f"{path}[{k!r}]") for k, v in x.items()})
    if type(x).__module__ == "trainwatch.rules.config.models":
        return ("config", id(x))
    if id(x) in seen:
        return ("seen at", seen[id(x)])
    seen[id(x)] = path
    attrs = dict(vars(x)) if hasattr(x, "__dict__") else {}
    for cls in type(x).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(x, name):
                attrs[name] = getattr(x, name)
    skip = RUN_LEVEL.get(type(x).__name__, frozenset())
    return (type(x).__name__, {k: state(v, seen, f"{path}.{k}") if k != "ctx" else "ctx"
                               for k, v in attrs.items() if k not in skip})


def _fed(kind: str) -> RuleEngine:
    run = fault_run(kind, 0, n_before=600)
    engine = RuleEngine(CFG, live=False)
    for batch in parse_chunks(run.jsonl(), run.name, None, run.now, 64 << 10):
        engine.feed(batch)
    return engine


def _differing(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two :func:`state` values differ (for the failure message)."""
    if a == b:
        return []
    if (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2
            and isinstance(a[1], dict) and isinstance(b[1], dict) and a[0] == b[0]):
        out = [f"{path}.{k}" for k in a[1].keys() ^ b[1].keys()]
        for k in a[1].keys() & b[1].keys():
            out += _differing(a[1][k], b[1][k], f"{path}.{k}")
        return out
    return [path]


@pytest.fixture(scope="module")
def fed() -> dict[str, RuleEngine]:
    return {kind: _fed(kind) for kind in FAULT_RULES}


def test_a_rewound_rule_equals_a_fresh_one(fed: dict[str, RuleEngine]) -> None:
    fresh = RuleEngine(CFG, live=False)
    dirty: set[str] = set()
    """Rules whose state the runs changed (else the comparison after the rewind proves nothing)."""
    for kind, engine in fed.items():
        assert [type(r) for r in engine._rules] == [type(r) for r in fresh._rules]
        dirty.update(type(r).__name__ for r, new in zip(engine._rules, fresh._rules, strict=True)
                     if state(r) != state(new))
        for rule, new in zip(engine._rules, fresh._rules, strict=True):
            name = type(rule).__name__
            rule.rewind()
            diff = _differing(state(rule), state(new))
            assert not diff, f"{kind}: {name} after rewind differs from a fresh one at {diff}"
        ctx = engine.ctx
        ctx.rewind()
        # (the step logs are cleared in place, each kept under its name: equal to a new one)
        logs = {name: state(log) for name, log in ctx.logs.items()}
        assert logs == {name: state(StepLog()) for name in ctx.logs}, kind
        diff = _differing(state(ctx), state(fresh.ctx))
        assert all(p.startswith(".logs.") for p in diff), f"{kind}: context differs at {diff}"
    # every rule that reads frames moved (the rank and console rules read other streams;
    # run_crashed reads only an end that went wrong: the bench's runs end well)
    assert dirty == {type(r).__name__ for r in fresh._rules
                     if type(r).update is not Rule.update and type(r).__name__ != "RunCrashedRule"
                     }, dirty


def test_the_comparison_sees_a_state_left_over() -> None:
    """The comparison itself: a counter a rewind forgot, arrays by value, a deque's length
    bound, NaN equal to NaN."""
    a, b = RuleEngine(CFG, live=False), RuleEngine(CFG, live=False)
    assert state(a._rules[0]) == state(b._rules[0])
    a._rules[0].det.flag_run = 1
    assert _differing(state(a._rules[0]), state(b._rules[0])) == [".det.flag_run"]
    assert state(np.array([math.nan])) == state(np.array([math.nan]))
    assert state(np.array([1.0])) != state(np.array([2.0]))
    assert state(deque([1.0], maxlen=3)) != state(deque([1.0], maxlen=4))
