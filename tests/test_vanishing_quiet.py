"""``grad_vanishing``'s quiet frames (no grad block under the bars of the highest peak: taken in
Python floats, or put off whole when the points alone show it) and its loss history noted for
later, against the per-block reference, frame by frame: the same alerts and the same state
carried to the next frame."""

from __future__ import annotations

import copy
import dataclasses
from collections import deque

import numpy as np
import pytest
from rule_frames import fast_and_reference, feed_alike, frames_of

from trainwatch.rules.builtin.grad_vanishing import GradVanishingRule
from trainwatch.rules.config.loading import load_rules_config
from trainwatch.rules.engine.base import Context


def _state(rule: GradVanishingRule) -> str:
    """What the rule carries to the next frame, with what it put off taken (in a copy: the rule
    itself goes on with it put off)."""
    twin = copy.copy(rule)
    twin._grads = copy.deepcopy(rule._grads)
    twin._later = list(rule._later)
    twin.loss_hist = copy.copy(rule.loss_hist)
    twin._new_loss = list(rule._new_loss)
    twin._take_later()
    twin._fold_loss()
    state = {k: list(v) if isinstance(v, deque) else v for k, v in vars(twin).items()
             if k not in ("cfg", "ctx", "fast", "_grads") and not k.startswith(("_new", "_later",
                                                                                 "_open"))}
    state["grads"] = (list(twin._grads._v), twin._grads.count)
    return repr(state)


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
def test_quiet_frames_match_the_per_block_reference(monkeypatch: pytest.MonkeyPatch,
                                                    seed: int) -> None:
    base = load_rules_config().rules["grad_vanishing"]
    put_off = {True: 0, False: 0}
    orig = GradVanishingRule._put_off

    def counted(self, f):  # type: ignore[no-untyped-def]
        ok = orig(self, f)
        put_off[ok] += 1
        return ok

    monkeypatch.setattr(GradVanishingRule, "_put_off", counted)
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
        rules = fast_and_reference(GradVanishingRule, cfg)
        for frame in frames_of({"grad_norm": grad, "loss": loss}, sorted(set(cuts))):
            if rng.random() < 0.1:  # a new segment (a resumed run): the peak stays
                for r in rules:
                    r.rewind()
                    r.ctx.rewind()
            fired += len(feed_alike(rules, frame, _state))
    assert fired > 10, fired
    assert min(put_off.values()) > 20, put_off  # frames put off, and frames that could not be


def test_a_frame_put_off_ends_a_streak_of_low_blocks() -> None:
    """One low block, a frame of high ones (put off), one low block: the streak restarted, so
    two low blocks apart do not fire (``for_windows: 2``); two in a row do."""
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


def test_frames_put_off_in_a_row_keep_the_highest_peak() -> None:
    """Two frames put off, the second lower than the first: a third frame low against the
    first's peak (not the second's) is not put off, and fires as the reference does."""
    cfg = dataclasses.replace(load_rules_config().rules["grad_vanishing"], window=10,
                              warmup_windows=1)
    grad = np.concatenate([np.full(300, 3.0), np.full(100, 1.0), np.full(100, 0.02)])
    loss = np.full(grad.shape[0], 2.0)
    got = []
    for fast in (True, False):
        rule = GradVanishingRule(cfg, Context())
        rule.fast = fast
        fired = []
        for frame in frames_of({"grad_norm": grad, "loss": loss}, [0, 300, 400, 500]):
            rule.ctx.frame = frame
            fired += [(h.pos, h.alert) for h in rule.update(frame)]
            rule.ctx.end_frame(frame)
        got.append(fired)
    assert got[0] == got[1]
    assert len(got[0]) == 1
