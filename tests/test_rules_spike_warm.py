"""The tail guard's start when a baseline becomes warm (``spike_pass.warm_deviation``): every path
of the spike detector (the point-by-point reference, the optimistic pass and its first-spike
search, the quiet-frame path) starts it alike, on heavy-tailed data whose first judged points it
decides, at the first warm-up and after each restart (rebase, rewind); and what it decides: a
heavy tail's first large value after warm-up is no spike, while the first steps' swings (the
older half of the warm-up window) do not hide a real spike."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_rules_spike import _run
from test_rules_spike_quiet import fed_alike

from trainwatch.rules import load_rules_config
from trainwatch.rules.detectors import spike_detector, spike_pass
from trainwatch.rules.detectors.spike_detector import SpikeDetector

CFG = load_rules_config()
RULES = ("loss_spike", "grad_explosion", "step_time_outlier")
CHUNKS = ([10**6], [1, 5, 300], [13], [4097], [127, 2, 31])


def _heavy(seed: int, n: int = 4000) -> np.ndarray:
    """A zero-inflated loss's non-zero values (the curve times an Exponential(1) draw: a few
    times the median now and then), starting high, with real spikes, a step up longer than
    ``rebase_points`` (the baseline restarts: warm-up again, mid-run) and a drop."""
    rng = np.random.default_rng(seed)
    curve = 0.3 + 2.0 / (1.0 + np.arange(n) / 20.0)
    x = curve * rng.exponential(1.0, n)
    x[rng.choice(np.arange(150, n), 12, replace=False)] *= rng.uniform(10.0, 40.0, 12)
    x[1500:1800] = 30.0 * (1.0 + 0.01 * rng.standard_normal(300))  # every point anomalous
    x[2600:] *= 0.02
    return x


def _variants(rule: str) -> list:
    base = CFG.rules[rule]
    return [base, dataclasses.replace(base, min_ratio=1.1, z_threshold=3.0),
            # min_points below the window and off the refresh grid: warm-up ends mid-row, on a
            # partial window
            dataclasses.replace(base, refresh=7, window=50, min_points=20)]


def _mismatches(rule: str) -> list[tuple]:
    """Where a fast path parts from the reference on the heavy-tailed data: alerts of whole
    updates in several chunkings (the pass, its search), and alerts and state after every live
    frame (the quiet-frame path)."""
    out = []
    for cfg in _variants(rule):
        for seed in range(3):
            x = _heavy(seed)
            ref = _run(cfg, x, vectorized=False, chunks=[1])
            for chunks in CHUNKS:
                if _run(cfg, x, vectorized=True, chunks=chunks) != ref:
                    out.append((cfg, seed, chunks))
            parted = next((sl for sl, _ev, alike in fed_alike(cfg, x, seed) if not alike), None)
            if parted is not None:
                out.append((cfg, seed, "frames", parted.start))
    return out


def _no_start(det: SpikeDetector, window: np.ndarray, med: float, mad: object) -> float:
    return 0.0


@pytest.mark.parametrize("rule", RULES)
def test_every_path_starts_the_guard_alike(rule: str) -> None:
    assert _mismatches(rule) == []


def test_the_data_reaches_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # the start decides alerts on this data (else the comparison above would prove nothing)...
    cfg = CFG.loss_spike
    x = _heavy(0)
    with_start = _run(cfg, x, vectorized=False, chunks=[1])
    monkeypatch.setattr(spike_detector, "warm_deviation", _no_start)
    without = _run(cfg, x, vectorized=False, chunks=[1])
    assert with_start[0] and without[0] and with_start != without
    # ...and a path that lacks it parts from the others: the reference (and the quiet-frame
    # path, which refreshes through it) here; the pass (and its search) below
    assert _mismatches("loss_spike")
    monkeypatch.undo()
    monkeypatch.setattr(spike_pass, "warm_deviation", _no_start)
    assert _mismatches("grad_explosion")


def test_no_start_without_a_tail_guard() -> None:
    cfg = CFG.step_time_outlier
    assert cfg.tail_guard == 0
    d = SpikeDetector(cfg, vectorized=False)
    x = _heavy(1)[:cfg.min_points]  # (a multiple of refresh: warm after the last point)
    d.update(x, np.arange(x.shape[0]))
    assert d.ok and d.e_hist and set(d.e_hist) == {0.0}


def _newest_half_deviation(d: SpikeDetector) -> float:
    """What the guard starts from, taken here with numpy: the newest half of the window, less
    the points the baseline flags."""
    ring = np.concatenate((d.ring, d._tail))[-d.W:]
    half = ring[ring.shape[0] - ring.shape[0] // 2:]
    e = (half - d.med) / (abs(d.med) or 1.0)
    flagged = (e >= d.r1) & ((half - d.med) / d._scale(d.med, d.mad) >= d.cfg.z_threshold)
    return float(np.abs(e[~flagged]).max())


def test_a_restart_starts_the_guard_from_its_own_window() -> None:
    cfg = CFG.loss_spike
    rng = np.random.default_rng(5)
    d = SpikeDetector(cfg, vectorized=False)
    x = 1.0 + 0.3 * rng.exponential(1.0, cfg.min_points)
    d.update(x, np.arange(x.shape[0]))
    assert d.ok and d.e_hist[-1] == pytest.approx(_newest_half_deviation(d), rel=1e-12)
    assert d.emax == d.e_hist[-1] > 0.0
    # a rewind (a resumed run) restarts the baseline: warm-up again, at another level and spread
    d.rewind()
    y = 10.0 + 0.5 * rng.standard_normal(cfg.min_points)
    d.update(y, np.arange(y.shape[0]))
    assert d.ok and d.emax == pytest.approx(_newest_half_deviation(d), rel=1e-12)
    assert d.emax < 0.2  # the old spread is forgotten


def test_a_heavy_tail_first_large_value_after_warm_up_is_no_spike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The zero-inflated loss's false alarm: its warm-up held a value ~7x the median (normal for
    an Exponential tail), the first judged points face that spread, not r1 alone."""
    cfg = CFG.loss_spike
    rng = np.random.default_rng(2)
    x = np.minimum(rng.exponential(1.0, 400), 3.0)
    x[100] = 7.0 * float(np.median(x[:cfg.min_points]))  # in the newest half of warm-up
    big = cfg.min_points + 20
    x[big] = 8.6 * float(np.median(x[:cfg.min_points]))
    assert _run(cfg, x, vectorized=False, chunks=[1])[1] == []
    monkeypatch.setattr(spike_detector, "warm_deviation", _no_start)
    assert big in _run(cfg, x, vectorized=False, chunks=[1])[1]  # (as it was)


def test_the_first_steps_swings_do_not_hide_a_spike() -> None:
    """A loss still falling fast through warm-up: its older half sits far above the first
    median (the guard, once warm, never measures a point against a median of later ones); the
    newest half alone starts the guard, and a 2x spike soon after warm-up is seen."""
    cfg = CFG.loss_spike
    rng = np.random.default_rng(4)
    n = 600
    x = 2.0 + 6.0 * (1.0 + np.arange(n) / 10.0) ** -1.5 + 0.01 * rng.standard_normal(n)
    spike = 300
    x[spike] *= 2.0
    d = SpikeDetector(cfg, vectorized=False)
    d.update(x[:cfg.min_points], np.arange(cfg.min_points))
    w = x[:cfg.min_points]
    whole = float(np.abs(w - d.med).max()) / d.med
    e_spike = (x[spike] - d.med) / d.med
    assert cfg.tail_guard * whole > e_spike  # the whole window's swing would hide it
    assert spike in _run(cfg, x, vectorized=False, chunks=[1])[1]
    for chunks in CHUNKS:
        assert spike in _run(cfg, x, vectorized=True, chunks=chunks)[1]


def test_a_spike_in_warm_up_does_not_start_the_guard() -> None:
    """A point the first baseline flags (here a spike in the newest half of warm-up, accepted
    then: nothing is judged before the baseline is warm) is left out of the start, as the guard
    leaves anomalous points out: a 3x spike soon after is seen."""
    cfg = CFG.loss_spike
    rng = np.random.default_rng(6)
    x = 2.0 + 0.02 * rng.standard_normal(600)
    x[cfg.min_points - 10] = 20.0
    spike = cfg.min_points + 100
    x[spike] = 6.0
    d = SpikeDetector(cfg, vectorized=False)
    d.update(x[:cfg.min_points], np.arange(cfg.min_points))
    assert d.ok and d.emax < 0.1
    for vectorized, chunks in ((False, [1]), *((True, c) for c in CHUNKS)):
        assert spike in _run(cfg, x, vectorized=vectorized, chunks=chunks)[1]
