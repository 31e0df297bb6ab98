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
