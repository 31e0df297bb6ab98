"""``grad_vanishing`` on grad norms that rise, sit, fall near (or to) zero and come back, in
frames of every size: the alerts of the series fed whole; and a streak of low blocks broken by
high ones in another frame."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from block_frames import cut_and_whole
from rule_frames import frames_of

from trainwatch.rules.builtin.grad_vanishing import GradVanishingRule
from trainwatch.rules.config.loading import load_rules_config
from trainwatch.rules.engine.base import Context


def _grad(rng: np.random.Generator, n: int) -> np.ndarray:
    """Grad norms that rise, sit, fall near (or to) zero and come back."""
    g = np.empty(0)
    while g.shape[0] < n:
        k = int(rng.integers(20, max(21, n // 3)))
        level = rng.choice([1.0, 3.0, 0.02, 0.008, 1e-5, 0.0])
        noise = np.exp(rng.normal(0, 0.2, k)) if rng.random() < 0.8 else np.ones(k)  # (ties)
        g = np.concatenate([g, level * noise])
    return g[:n]


@pytest.mark.parametrize("seed", range(5))
def test_frames_of_every_size_fire_as_the_whole_series(seed: int) -> None:
    base = load_rules_config().rules["grad_vanishing"]
    rng = np.random.default_rng(seed)
    fired = 0
    for _ in range(40):
        cfg = dataclasses.replace(base, window=int(rng.choice([5, 10, 50])),
                                  warmup_windows=int(rng.choice([1, 4])))
        n = int(rng.integers(50, 4000))
        grad = _grad(rng, n)
        loss = 2.0 + rng.normal(0, 0.01, n)  # flat: a vanishing gradient fires
        if rng.random() < 0.3:
            loss -= np.linspace(0, 1.5, n)  # improving: it does not
        k = int(rng.integers(0, 6))
        cuts = [0, *sorted(rng.choice(np.arange(1, n), size=k, replace=False)), n]
        if rng.random() < 0.2:  # live-sized frames
            cuts = [*range(0, n, int(rng.integers(1, 30))), n]
        fired += len(cut_and_whole(GradVanishingRule, cfg, {"grad_norm": grad, "loss": loss},
                                   sorted(set(cuts))))
    assert fired > 10, fired


def test_a_frame_of_high_blocks_ends_a_streak_of_low_blocks() -> None:
    """One low block, a frame of high ones, one low block: the streak restarted, so two low
    blocks apart do not fire (``for_windows: 2``); two in a row do."""
    cfg = dataclasses.replace(load_rules_config().rules["grad_vanishing"], window=10,
                              warmup_windows=1, for_windows=2)
    for gap, want in ((100, 0), (0, 1)):
        grad = np.concatenate([np.ones(300), np.full(10, 1e-4), np.ones(gap), np.full(10, 1e-4),
                               np.ones(50)])
        loss = np.full(grad.shape[0], 2.0)
        rule = GradVanishingRule(cfg, Context())
        fired = []
        for frame in frames_of({"grad_norm": grad, "loss": loss}, sorted({0, 310, 310 + gap, grad.shape[0]})):
            rule.ctx.frame = frame
            fired += rule.update(frame)
            rule.ctx.end_frame(frame)
        assert len(fired) == want, gap
        assert rule.peak == 1.0 and rule.peak_step == 10  # (the first of equal highs)


def test_frames_in_a_row_keep_the_highest_peak() -> None:
    """Two frames of high grads, the second lower than the first: a third frame low against the
    first's peak (not the second's) fires, once, as the series whole does."""
    cfg = dataclasses.replace(load_rules_config().rules["grad_vanishing"], window=10,
                              warmup_windows=1)
    grad = np.concatenate([np.full(300, 3.0), np.full(100, 1.0), np.full(100, 0.02)])
    loss = np.full(grad.shape[0], 2.0)
    got = cut_and_whole(GradVanishingRule, cfg, {"grad_norm": grad, "loss": loss},
                        [0, 300, 400, 500])
    assert len(got) == 1
