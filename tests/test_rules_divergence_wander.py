"""``divergence`` on a flat loss whose noise is correlated over thousands of steps: the wander of
the block medians over long lags (rules/detectors/block_wander.py).

A flat loss with AR(1) noise (phi 0.99 or 0.999, sd 1 % of the level) barely moves from one block
to the next, so a block's own spread and the scatter between consecutive blocks read low, while
over a long run the level roams: every such run of 100k steps "diverged" from its luckiest block
before the wander was read. Held here: the wander to its definition and to what it should read
(a wander, not a descent nor a steady rise), the rule's samples to the segment's whatever the
frames, no alert on such a run, a slow real rise after such a stretch still caught, and the
alerts of both the same read live and whole.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_rules_data import engine_alerts, of, parse_live

import trainwatch.rules.detectors.block_wander as bw
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.detectors.block_wander import (
    EVERY,
    GAP,
    HISTORY,
    KEEP,
    LAGS,
    MIN_DIFFS,
    WANDER_SCALE,
    WanderSamples,
    wander,
)


def _wander_reference(samples: list[float]) -> float:
    """The definition, with numpy's quantile and median."""
    n = len(samples)
    x = np.asarray(samples[:n - min(GAP, n // 4)][-HISTORY:], dtype=np.float64)
    out = 0.0
    for lag in LAGS:
        if x.shape[0] - lag < MIN_DIFFS:
            continue
        base = x[:-lag]
        d = (x[lag:] - base) / np.where(base != 0, np.abs(base), 1.0)
        out = max(out, float(np.quantile(d, 0.75)) - max(float(np.median(d)), 0.0))
    return out / 0.6745 * WANDER_SCALE


@pytest.mark.parametrize("seed", range(4))
def test_wander_is_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (0, 5, MIN_DIFFS, MIN_DIFFS + 1, 12, 40, 70, 100, 200, KEEP - 1, KEEP):
        x = 1.0 + 0.05 * np.cumsum(rng.standard_normal(n)) / math.sqrt(max(n, 1))
        if n > 20:
            x[[3, 17]] = 0.0  # (a difference from 0 is absolute)
            x[8] = -x[8]
        got, want = wander(x.tolist()), _wander_reference(x.tolist())
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), n
        assert (got > 0) == (n - min(GAP, n // 4) > MIN_DIFFS), n


def _ar(n: int, phi: float, seed: int, sd: float = 0.01) -> np.ndarray:
    """AR(1) noise of stationary sd ``sd``, from 0 (a Python loop: ~10 ms for 30k points)."""
    e = np.random.default_rng(seed).normal(0.0, sd * math.sqrt(1 - phi * phi), n).tolist()
    out, a = [], 0.0
    for x in e:
        a = phi * a + x
        out.append(a)
    return np.array(out)


def test_wander_reads_a_wander_not_a_descent_nor_a_steady_rise() -> None:
    t = np.arange(KEEP, dtype=np.float64)
    rng = np.random.default_rng(0)
    small = 0.001 * rng.standard_normal(KEEP)  # (iid noise of 0.1 %: its wander is ~0.2 %)
    descent = (1.0 + 3.0 * np.exp(-t / 60.0)) * (1 + small)
    assert wander(descent.tolist()) < 0.004
    # a steady rise (80 % over the samples, ~10 % over 64 of them): differences all alike
    rise = np.exp(0.002 * t) * (1 + small)
    assert wander(rise.tolist()) < 0.004
    # a wander of sd 1 %, correlated over ~10 samples (phi 0.999 a step, a sample every 100
    # steps): the differences' sd is ~sqrt(2) %, times the scale
    roam = 2.0 * (1 + _ar(KEEP * 10, 0.99, 1)[::10])
    w = wander(roam.tolist())
    assert 0.6 < w / (math.sqrt(2) * 0.01 * WANDER_SCALE) < 1.4, w


def test_the_samples_are_the_segments_whatever_the_frames() -> None:
    """Block medians fed in frames of 1 to 60 blocks (and one of 400): at a block the wander is
    that of the segment's every ``EVERY``-th block median up to it, the last ``KEEP``."""
    rng = np.random.default_rng(3)
    n = KEEP * EVERY + 300
    meds = 2.0 * (1 + _ar(n * 25, 0.999, 4)[::25])
    samples = WanderSamples()
    start = checked = 0
    while start < n:
        k = 400 if start == 200 else int(rng.integers(1, 61))
        med = meds[start:start + k]
        samples.start_frame(start, med)
        for i in range(med.shape[0]):
            g = start + i
            if rng.random() < 0.3 or g % EVERY == EVERY - 1:
                want = wander(meds[EVERY - 1:g + 1:EVERY].tolist()[-KEEP:])
                assert samples.at(i) == want, g
                checked += 1
        start += med.shape[0]
    assert len(samples._kept) == KEEP and checked > n // EVERY


def _jsonl(loss: np.ndarray) -> bytes:
    return ("\n".join(json.dumps({"step": i, "time": 1000.0 + 0.1 * i, "loss": float(v)})
                      for i, v in enumerate(loss.tolist())) + "\n").encode()


def _live_divergences(data: bytes, seed: int) -> list[tuple[int, str]]:
    e = RuleEngine(load_rules_config(), live=True)
    for batch in parse_live(data, seed=seed, max_lines=60):
        e.feed(batch)
    return of(list(e.alerts), "divergence")


@pytest.mark.parametrize(("phi", "seed"), [(0.99, 1), (0.999, 2)])
def test_a_flat_loss_that_wanders_does_not_diverge(monkeypatch: pytest.MonkeyPatch, phi: float,
                                                   seed: int) -> None:
    data = _jsonl(2.0 * (1 + _ar(30_000, phi, seed)))
    assert of(engine_alerts(data), "divergence") == []
    assert _live_divergences(data, seed) == []
    # without the wander the same run "diverged" from its luckiest block
    monkeypatch.setattr(bw, "wander", lambda samples: 0.0)
    assert of(engine_alerts(data), "divergence") != []


@pytest.mark.parametrize("seed", range(2))
def test_a_slow_rise_after_a_long_wandering_stretch_diverges(seed: int) -> None:
    # 26k flat steps whose level roams (sd 1 %, phi 0.99), then 10 % up over 4,000 steps, held:
    # the wander raises the bar to ~10 % above the best, and the rise still passes it
    flat, over = 26_000, 4_000
    loss = 2.0 * (1 + _ar(flat + over + 2_000, 0.99, seed))
    k = np.arange(loss.shape[0] - flat)
    loss[flat:] *= 1 + 0.1 * np.minimum(k / over, 1.0)
    data = _jsonl(loss)
    found = of(engine_alerts(data), "divergence")
    assert found and flat < found[0][0] <= flat + over + 500, found
    assert _live_divergences(data, seed) == found
