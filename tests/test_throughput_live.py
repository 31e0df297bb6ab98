"""``throughput_drop`` on live-sized frames: a frame of finite values (above 0, for a step time)
goes in as Python floats (the inverses taken in Python, the blocks' medians by ``sorted``),
others through the arrays; against the rule with its fast paths off, frame by frame: the same
alerts and the same state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rule_frames import fast_and_reference, feed_alike, frames_of

from trainwatch.rules.builtin.throughput_drop import ThroughputDropRule
from trainwatch.rules.config.loading import load_rules_config


def _state(rule: ThroughputDropRule) -> tuple[object, ...]:
    return (list(rule.ref), rule.nblk, rule.low, rule.active, rule.since, rule.calm,
            rule.calm_from, list(rule.blocks._carry))


def _series(rng: np.random.Generator, n: int, name: str) -> np.ndarray:
    """A step time (or throughput) with slow stretches that come and go, and now and then a
    NaN, an inf, a 0 or a negative value (left out: not finite, or no step time)."""
    v = 0.1 * rng.lognormal(0, 0.05, n)
    for _ in range(int(rng.integers(1, 5))):
        a = int(rng.integers(0, n))
        v[a:a + int(rng.integers(20, 400))] *= rng.choice([1.6, 2.0, 3.0])
    odd = rng.random(n) < rng.choice([0.0, 0.01, 0.05])
    v[odd] = rng.choice([np.nan, np.inf, 0.0, -1.0], int(odd.sum()))
    if name == "step_time":
        return v
    with np.errstate(divide="ignore"):
        return 1.0 / v


@pytest.mark.parametrize("name", ["step_time", "throughput"])
def test_live_frames_match_the_arrays(name: str) -> None:
    base = load_rules_config().rules["throughput_drop"]
    rng = np.random.default_rng([3, len(name)])
    fired = 0
    for _ in range(30):
        cfg = dataclasses.replace(base, window=int(rng.choice([3, 10, 20])),
                                  rearm_seconds=float(rng.choice([0.0, 5.0])))
        n = int(rng.integers(200, 2000))
        v = _series(rng, n, name)
        cuts = [0]
        while cuts[-1] < n:  # live reads, and now and then a long one
            cuts.append(min(n, cuts[-1] + int(rng.integers(1, 30) if rng.random() < 0.9
                                              else rng.integers(30, 300))))
        rules = fast_and_reference(ThroughputDropRule, cfg)
        for frame in frames_of({name: v}, cuts):
            fired += len(feed_alike(rules, frame, _state))
    assert fired >= 20, fired
