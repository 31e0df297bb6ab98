"""``lr_exhausted``'s shortcuts for frames that cannot fire (an LR clear of its bars, or one whose
runs at the floor or ~0 are too short) against the full pass, frame by frame: the same alerts and
the same state carried to the next frame, on LR shapes built to sit at the bounds' edges."""

from __future__ import annotations

import copy
import dataclasses
from collections import deque

import numpy as np
import pytest
from rule_frames import fast_and_reference, feed_alike, frames_of

from trainwatch.rules.builtin.lr_exhausted import LrExhaustedRule
from trainwatch.rules.config.loading import load_rules_config
from trainwatch.rules.detectors.lr_calm import too_short


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


def _state(rule: LrExhaustedRule) -> str:
    """What the rule carries to the next frame, with the loss history noted for later added
    (to a copy: the rule itself goes on with it noted)."""
    twin = copy.copy(rule)
    twin.loss_hist = copy.copy(rule.loss_hist)
    twin._new_loss = list(rule._new_loss)
    twin._fold_loss()
    return repr({k: list(v) if isinstance(v, deque) else v for k, v in vars(twin).items()
                 if k not in ("cfg", "ctx", "fast", "_new_loss")})


@pytest.mark.parametrize("seed", range(6))
def test_shortcuts_match_the_full_pass(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    base = load_rules_config().rules["lr_exhausted"]
    taken = {"calm": 0, "calm_declined": 0, "clear_loop": 0}
    calm, clear = LrExhaustedRule._calm, LrExhaustedRule._clear

    def counted_calm(self, f, vmin, vmax, seen=None):  # type: ignore[no-untyped-def]
        ok = calm(self, f, vmin, vmax, seen)
        taken["calm" if ok else "calm_declined"] += 1
        return ok

    def counted_clear(self, v, vmin, vmax, seen=None):  # type: ignore[no-untyped-def]
        ok = clear(self, v, vmin, vmax, seen)
        c = max(self.cfg.floor_ratio, self.cfg.zero_ratio)
        if vmin <= max(self.cfg.zero, c * max(self.peak, vmax)):
            taken["clear_loop"] += 1
        return ok

    monkeypatch.setattr(LrExhaustedRule, "_calm", counted_calm)
    monkeypatch.setattr(LrExhaustedRule, "_clear", counted_clear)
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
        rules = fast_and_reference(LrExhaustedRule, cfg)
        for frame in frames_of({"lr": lr, "loss": loss}, sorted(set(cuts))):
            fired += len(feed_alike(rules, frame, _state))
    assert fired > 20, fired
    assert all(taken.values()), taken  # each shortcut ran, and the calm one also declined


def test_too_short_bounds_every_run_it_passes() -> None:
    """No run that the bound calls too short reaches ``max(min_points, fraction x points so
    far)`` at any of its points (brute force over small cases)."""
    for carried in (0, 3):
        for cnt in range(12):
            for before in range(30):
                for min_points in (1, 4, 9):
                    for fraction in (0.1, 0.3, 0.5, 1.0):
                        if not too_short(carried, cnt, before, min_points, fraction):
                            continue
                        # a run of the candidates in a row from the first, carried in or not
                        for j in range(1, cnt + 1):
                            length = carried + j
                            assert length < max(min_points, fraction * (before + j))


@pytest.mark.parametrize("level", [0.0, 0.03])
def test_runs_on_either_side_of_a_new_peak(level: float) -> None:
    """A run at ~0 (or at the floor) before a frame's new peak and another after it, of every
    length around the bars, after a first frame of every length: the bound that takes the two
    sides apart says "too short" only where the full pass fires nothing."""
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
                rules = fast_and_reference(LrExhaustedRule, cfg)
                for frame in frames_of({"lr": lr, "loss": loss}, sorted({0, n_pre, n})):
                    fired += len(feed_alike(rules, frame, _state))
    assert fired > 50, fired
