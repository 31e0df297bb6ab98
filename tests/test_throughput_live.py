"""``throughput_drop`` on live-sized frames (and now and then a long one) of a series with slow
stretches and odd values (NaN, inf, 0, negative: left out): the alerts of the series fed
whole."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from block_frames import cut_and_whole

from trainwatch.rules.builtin.throughput_drop import ThroughputDropRule
from trainwatch.rules.config.loading import load_rules_config


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
def test_live_frames_fire_as_the_whole_series(name: str) -> None:
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
        fired += len(cut_and_whole(ThroughputDropRule, cfg, {name: v}, cuts))
    assert fired >= 20, fired
