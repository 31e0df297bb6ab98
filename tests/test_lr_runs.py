"""``lr_exhausted``'s runs of points at the LR floor or ~0, taken from their change points,
against :func:`~trainwatch.rules.stats.true_runs` point by point."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.lr import runs_of
from trainwatch.rules.stats import true_runs


def _reference(cond: np.ndarray, carried: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    length, rid = true_runs(cond, carried)
    prev = np.concatenate(([carried > 0], cond[:-1]))
    return length, rid, np.flatnonzero(cond & ~prev)


@pytest.mark.parametrize("seed", range(4))
def test_runs_of_matches_true_runs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(0, 80))
        p = rng.random()
        if rng.random() < 0.5:  # long runs (an LR at its floor), or scattered points
            cond = np.repeat(rng.random(4) < p, -(-n // 4))[:n]
        else:
            cond = rng.random(n) < p
        carried = int(rng.integers(0, 30)) if rng.random() < 0.5 else 0
        got, want = runs_of(cond, carried), _reference(cond, carried)
        for g, w in zip(got, want):
            assert g.tolist() == w.tolist(), (cond.tolist(), carried)


@pytest.mark.parametrize("seed", range(3))
def test_clear_frames_are_quiet(seed: int) -> None:
    """``_clear`` (two reductions against the frame's highest peak) may only pass a frame that
    ``_quiet`` (every point against its running peak) passes too; it passes most flat LRs."""
    from trainwatch.rules.base import Context
    from trainwatch.rules.config import load_rules_config
    from trainwatch.rules.lr import LrExhaustedRule

    rule = LrExhaustedRule(load_rules_config().rules["lr_exhausted"], Context())
    rng = np.random.default_rng(seed)
    passed = 0
    for _ in range(500):
        n = int(rng.integers(1, 60))
        level = 10.0 ** rng.uniform(-6, -2)
        v = level * np.exp(rng.normal(0, rng.choice([0.01, 0.5, 3.0]), n))
        if rng.random() < 0.3:  # a warm-up, or a decay to the floor and ~0
            v *= np.linspace(rng.uniform(0, 1), rng.uniform(0, 1), n)
        rule.peak = float(level * 10.0 ** rng.uniform(-1, 1.5)) if rng.random() < 0.5 else 0.0
        peak_i = np.maximum(np.maximum.accumulate(v), rule.peak)
        if rule._clear(v):
            passed += 1
            assert rule._quiet(v, peak_i), (v.tolist(), rule.peak)
    assert passed > 50
