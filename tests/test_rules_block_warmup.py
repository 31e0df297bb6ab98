"""``divergence``'s warm-up blocks taken in one vectorised step: the first frame of every run has
them (a file checked whole is often one frame), so they go through ``_quiet_prefix`` with the
quiet run after them. Each step must leave the state that the per-block reference reaches over
the same blocks, and the alerts must be the reference's, where every warm-up block moves the
state (a loss falling fast: each block a new best) and where the loss rises straight after the
warm-up."""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

import numpy as np
import pytest
from test_rules_blocks import _state
from test_rules_data import clean, idx, set_loss, to_jsonl

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.divergence import DivergenceRule


def _fast_falling(seed: int) -> dict[str, Any]:
    """A loss that falls fast over the warm-up (8 blocks of 25 points: every block a new best),
    then stays 2 % above its last block (a slip in the warm-up's best is not hidden by a later
    one)."""
    run = clean(1500, "exp", noise=0.002, seed=seed)
    s = run["step"].astype(np.float64)
    mean = 1.5 + 4.5 * np.exp(-s / 100.0)
    mean[s > 200] = 1.02 * (1.5 + 4.5 * np.exp(-1.88))  # (the last warm-up block's middle)
    set_loss(run, 1, mean)
    return run


def _early_faults(seed: int) -> dict[str, Any]:
    """The loss rising right after the warm-up (8 blocks of 25 points)."""
    run = _fast_falling(seed)
    st = run["step"]
    i = idx(run, 230)
    set_loss(run, 230, run["mean"][i] * 2 ** (np.arange(st.shape[0] - i) / 150.0))
    return run


def _feed_one_frame(data: bytes, fast: bool) -> tuple[list, str]:
    e = RuleEngine(load_rules_config(), live=False)
    rule = next(r for r in e._rules if isinstance(r, DivergenceRule))
    rule.fast = fast
    e.feed(JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1))
    alerts = [(a.rule, a.step, a.severity, a.message) for a in e.alerts if a.rule == "divergence"]
    return alerts, _state(rule)


def _twin_checked(orig: Any, counts: list[int]) -> Any:
    """``DivergenceRule._quiet_prefix`` checked step by step: a copy of the rule from before the step, given
    the blocks it took one by one through ``_block``, fires nothing and ends in the same state
    (later blocks of the same frame overwrite most slips: the final state alone misses them)."""

    def checked(self, *a):  # type: ignore[no-untyped-def]
        twin = copy.copy(self)
        for name, v in vars(self).items():
            if isinstance(v, deque):
                setattr(twin, name, deque(v, maxlen=v.maxlen))
        warm = self.nblk < self.cfg.warmup_windows
        k = orig(self, *a)
        b, i, _j = a
        hits = [twin._block(None, b, t, float(b.med[t]), float(b.noise[t]), int(b.step[t]))
                for t in range(i, i + k)]
        assert hits == [None] * k
        assert _state(twin) == _state(self)
        counts[0] += warm
        counts[1] += k
        return k

    return checked


@pytest.mark.parametrize("make", [_fast_falling, _early_faults])
def test_warmup_in_one_step_matches_the_per_block_reference(monkeypatch: pytest.MonkeyPatch,
                                                            make: Any) -> None:
    counts = [0, 0]  # steps that took warm-up blocks, blocks taken
    monkeypatch.setattr(DivergenceRule, "_quiet_prefix",
                        _twin_checked(DivergenceRule._quiet_prefix, counts))
    fired = set()
    for seed in range(3):
        data = to_jsonl(make(seed))
        fast = _feed_one_frame(data, True)
        # the warm-up went through the vectorised step (and the quiet blocks after it)
        least = 30 if make is _fast_falling else 1
        assert counts[0] and counts[1] > least, counts
        assert fast == _feed_one_frame(data, False)
        fired |= {a[0] for a in fast[0]}
    if make is _early_faults:  # (the early faults are caught: the comparison covers alerts)
        assert fired == {"divergence"}, fired

