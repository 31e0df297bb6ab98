"""``lr_exhausted``'s runs of points at the LR floor or ~0, taken from their change points,
against :func:`~trainwatch.rules.detectors.stats.true_runs` point by point."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.builtin.lr_exhausted import runs_of
from trainwatch.rules.detectors.stats import true_runs


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
def test_clear_is_quiet_without_the_running_peak(seed: int) -> None:
    """``_clear`` (the frame's lowest point against its highest peak, then only the points under
    that bar against their running peak) says exactly what ``_quiet`` (every point against its
    running peak) says, with the candidates in Python floats or in arrays."""
    from trainwatch.rules.builtin.lr_exhausted import LrExhaustedRule
    from trainwatch.rules.config.loading import load_rules_config
    from trainwatch.rules.detectors.lr_calm import FEW
    from trainwatch.rules.engine.base import Context

    rule = LrExhaustedRule(load_rules_config().rules["lr_exhausted"], Context())
    rng = np.random.default_rng(seed)
    passed = {True: 0, False: 0}
    for _ in range(1500):
        n = int(rng.integers(1, 3 * FEW))
        level = 10.0 ** rng.uniform(-6, -2)
        v = level * np.exp(rng.normal(0, rng.choice([0.01, 0.5, 3.0]), n))
        if rng.random() < 0.3:  # a warm-up, or a decay to the floor and ~0
            v *= np.linspace(rng.uniform(0, 1), rng.uniform(0, 1), n)
        if rng.random() < 0.2:  # a warm-up from ~0 into a level
            v[: int(rng.integers(1, n + 1))] *= rng.uniform(0.001, 0.2)
        rule.peak = float(level * 10.0 ** rng.uniform(-1, 1.5)) if rng.random() < 0.5 else 0.0
        peak_i = np.maximum(np.maximum.accumulate(v), rule.peak)
        want = rule._quiet(v, peak_i)
        assert rule._clear(v, float(v.min()), float(v.max())) == want, (v.tolist(), rule.peak)
        passed[want] += 1
    assert min(passed.values()) > 100, passed
    # a point exactly at its bar is under it (``<=``), whether the bar is the frame's highest
    # peak's or a running peak's
    c = max(rule.cfg.floor_ratio, rule.cfg.zero_ratio)
    for peak, v in ((1.0, [c, 2.0]), (0.0, [1.0, c, 1.0]), (0.0, [0.5, 0.5 * c, 1.0])):
        rule.peak = peak
        a = np.array(v)
        assert rule._clear(a, float(a.min()), float(a.max())) is False, v
