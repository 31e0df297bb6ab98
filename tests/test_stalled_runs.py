"""``learning_stalled`` taken from its runs of equal values (and a loss above 0 told by one
reduction) against the run length of every point, frame by frame: the same alerts and state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rule_frames import fast_and_reference, feed_alike, frames_of

from trainwatch.rules.builtin.learning_stalled import LearningStalledRule
from trainwatch.rules.config.loading import load_rules_config


def _state(rule: LearningStalledRule) -> str:
    return repr({k: v for k, v in vars(rule).items() if k not in ("cfg", "ctx", "fast")})


def _loss(rng: np.random.Generator, n: int) -> np.ndarray:
    """A noisy loss with stretches frozen at one value, at exactly 0 (or -0.0), lone repeats,
    negative values and NaNs."""
    out: list[np.ndarray] = []
    while sum(len(p) for p in out) < n:
        k = int(rng.integers(1, 80))
        kind = rng.integers(0, 6)
        if kind == 0:
            out.append(np.full(k, round(float(rng.uniform(0.5, 2)), 2)))
        elif kind == 1:
            out.append(np.zeros(k) * rng.choice([1.0, -1.0]))
        elif kind == 2:
            out.append(np.repeat(rng.uniform(-1, 1, -(-k // 2)), 2)[:k])
        elif kind == 3:
            out.append(np.full(k, np.nan))
        else:
            out.append(rng.uniform(0.1, 3, k))
    return np.concatenate(out)[:n]


@pytest.mark.parametrize("seed", range(5))
def test_runs_match_the_run_length_of_every_point(seed: int) -> None:
    base = load_rules_config().rules["learning_stalled"]
    rng = np.random.default_rng(seed)
    fired = {True: 0, False: 0}
    for _ in range(60):
        cfg = dataclasses.replace(base, zero_points=int(rng.choice([1, 3, 10])),
                                  constant_points=int(rng.choice([2, 5, 50])),
                                  rearm_points=int(rng.choice([1, 5, 50])))
        n = int(rng.integers(1, 1500))
        loss = _loss(rng, n)
        k = int(rng.integers(0, 8))
        cuts = sorted({0, n, *rng.integers(1, max(n, 2), k).tolist()})
        if rng.random() < 0.2:  # live-sized frames
            cuts = [*range(0, n, int(rng.integers(1, 10))), n]
        rules = fast_and_reference(LearningStalledRule, cfg)
        for frame in frames_of({"loss": loss}, [c for c in cuts if c <= n]):
            for _p, a in feed_alike(rules, frame, _state):
                fired["exactly 0" in a.message] += 1
    assert min(fired.values()) > 20, fired
