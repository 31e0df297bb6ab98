"""``lr_exhausted`` on LR shapes built to sit at the bars' edges (runs at the floor or ~0 just
long enough or not, on either side of a new peak), in frames of every size: the alerts of the
series fed whole."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from block_frames import cut_and_whole

from trainwatch.rules.builtin.lr_exhausted import LrExhaustedRule
from trainwatch.rules.config.loading import load_rules_config


def _lr_shape(rng: np.random.Generator, n: int, peak: float) -> np.ndarray:
    """Pieces of a schedule: warm-ups from ~0, plateaus, decays to the floor and to ~0, dead
    stretches at exactly 0, lone dips, and now and then a NaN."""
    out: list[np.ndarray] = []
    while sum(len(p) for p in out) < n:
        k = int(rng.integers(1, max(2, n // 3)))
        kind = rng.integers(0, 6)
        if kind == 0:  # warm-up from ~0
            out.append(peak * np.linspace(rng.uniform(0, 0.01), 1.0, k))
        elif kind == 1:  # a level, somewhere between ~0 and above the peak
            out.append(np.full(k, peak * rng.choice([1.0, 0.2, 0.04, 0.0005, 2.0])))
        elif kind == 2:  # a decay to the floor or to 0
            out.append(peak * np.linspace(1.0, rng.choice([0.03, 0.0]), k))
        elif kind == 3:  # dead
            out.append(np.zeros(k))
        elif kind == 4:  # noise around a level near the floor bar
            out.append(peak * 0.05 * np.exp(rng.normal(0, 0.3, k)))
        else:  # one dip
            out.append(np.array([peak * rng.choice([0.01, 0.0001])]))
    v = np.concatenate(out)[:n]
    if rng.random() < 0.2:
        v[rng.integers(0, n, 3)] = np.nan
    return v


@pytest.mark.parametrize("seed", range(6))
def test_frames_of_every_size_fire_as_the_whole_series(seed: int) -> None:
    base = load_rules_config().rules["lr_exhausted"]
    rng = np.random.default_rng(seed)
    fired = 0
    for _ in range(60):
        cfg = dataclasses.replace(base, min_points=int(rng.choice([5, 20, 100])),
                                  floor_fraction=float(rng.choice([0.1, 0.3, 1.0])),
                                  zero_fraction=float(rng.choice([0.05, 0.1, 0.5])),
                                  window=int(rng.choice([5, 20])))
        n = int(rng.integers(30, 1500))
        lr = _lr_shape(rng, n, 10.0 ** rng.uniform(-5, -2))
        loss = 3.0 * np.exp(-np.arange(n) / rng.uniform(50, 3000)) + rng.normal(0, 0.01, n)
        k = int(rng.integers(0, 6))
        cuts = [0, *sorted(rng.choice(np.arange(1, n), size=min(k, n - 1), replace=False)), n]
        if rng.random() < 0.2:  # live-sized frames
            cuts = list(range(0, n, int(rng.integers(1, 8)))) + [n]
        fired += len(cut_and_whole(LrExhaustedRule, cfg, {"lr": lr, "loss": loss},
                                   sorted(set(cuts))))
    assert fired > 20, fired


@pytest.mark.parametrize("level", [0.0, 0.03])
def test_runs_on_either_side_of_a_new_peak(level: float) -> None:
    """A run at ~0 (or at the floor) before a frame's new peak and another after it, of every
    length around the bars, after a first frame of every length: the alerts of the series
    whole."""
    cfg = dataclasses.replace(load_rules_config().rules["lr_exhausted"], min_points=12,
                              floor_fraction=0.3, zero_fraction=0.1, window=4)
    fired = 0
    for n_pre in (0, 5, 30, 120):
        for a in range(0, 40, 3):
            for b in range(0, 40, 3):
                lr = np.concatenate([np.full(n_pre, 1.0), np.full(a, level), [2.0],
                                     np.full(b, 2 * level), [2.0] * (a % 2)])
                n = lr.shape[0]
                loss = 5.0 * np.exp(-np.arange(n) / 20.0) + 1.0
                fired += len(cut_and_whole(LrExhaustedRule, cfg, {"lr": lr, "loss": loss},
                                           sorted({0, n_pre, n})))
    assert fired > 50, fired
