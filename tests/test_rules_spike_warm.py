"""The tail guard's start when a baseline becomes warm (``spike.warm_deviation``): the data of
the detector's comparison with its reference reaches it, and what it decides: a heavy tail's
first large value after warm-up is no spike, while the first steps' swings (the older half of the
warm-up window) do not hide a real spike."""

from __future__ import annotations

import numpy as np
import pytest
from spike_reference import heavy
from test_rules_spike_detector import CHUNKS, reference, run

from trainwatch.rules import load_rules_config
from trainwatch.rules.detectors import spike
from trainwatch.rules.detectors.spike import SpikeDetector

CFG = load_rules_config()


def _no_start(det: SpikeDetector, window: np.ndarray, med: float, mad: object) -> float:
    return 0.0


def test_the_data_reaches_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start decides alerts on the heavy-tailed data (so the detector's equality with the
    reference on it proves the start alike): without it the detector parts from the
    reference."""
    cfg = CFG.loss_spike
    x = heavy(0)
    want = reference(cfg, x)
    assert run(cfg, x, [10**6]) == want
    monkeypatch.setattr(spike, "warm_deviation", _no_start)
    assert want[0] and run(cfg, x, [10**6]) != want


def test_no_start_without_a_tail_guard() -> None:
    cfg = CFG.step_time_outlier
    assert cfg.tail_guard == 0
    d = SpikeDetector(cfg)
    x = heavy(1)[:cfg.min_points]  # (a multiple of refresh: warm after the last point)
    d.update(x, np.arange(x.shape[0]))
    assert d.ok and d.e_hist and set(d.e_hist) == {0.0}


def _newest_half_deviation(d: SpikeDetector) -> float:
    """What the guard starts from, taken here with numpy: the newest half of the window, less
    the points the baseline flags."""
    ring = d.acc
    half = ring[ring.shape[0] - ring.shape[0] // 2:]
    e = (half - d.med) / (abs(d.med) or 1.0)
    flagged = (e >= d.r1) & ((half - d.med) / spike._scale(d.med, d.mad) >= d.cfg.z_threshold)
    return float(np.abs(e[~flagged]).max())


def test_a_restart_starts_the_guard_from_its_own_window() -> None:
    cfg = CFG.loss_spike
    rng = np.random.default_rng(5)
    d = SpikeDetector(cfg)
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
    assert run(cfg, x, [1])[1] == []
    monkeypatch.setattr(spike, "warm_deviation", _no_start)
    assert big in run(cfg, x, [1])[1]  # (as it was)


def test_the_first_steps_swings_do_not_hide_a_spike() -> None:
    """A loss still falling fast through warm-up: its older half sits far above the first
    median (the guard, once warm, never measures a point against a median of later ones); the
    newest half alone starts the guard, and a 2x spike soon after warm-up is seen."""
    cfg = CFG.loss_spike
    rng = np.random.default_rng(4)
    n = 600
    x = 2.0 + 6.0 * (1.0 + np.arange(n) / 10.0) ** -1.5 + 0.01 * rng.standard_normal(n)
    at = 300
    x[at] *= 2.0
    d = SpikeDetector(cfg)
    d.update(x[:cfg.min_points], np.arange(cfg.min_points))
    w = x[:cfg.min_points]
    whole = float(np.abs(w - d.med).max()) / d.med
    e_spike = (x[at] - d.med) / d.med
    assert cfg.tail_guard * whole > e_spike  # the whole window's swing would hide it
    for chunks in CHUNKS:
        assert at in run(cfg, x, chunks)[1]


def test_a_spike_in_warm_up_does_not_start_the_guard() -> None:
    """A point the first baseline flags (here a spike in the newest half of warm-up, accepted
    then: nothing is judged before the baseline is warm) is left out of the start, as the guard
    leaves anomalous points out: a 3x spike soon after is seen."""
    cfg = CFG.loss_spike
    rng = np.random.default_rng(6)
    x = 2.0 + 0.02 * rng.standard_normal(600)
    x[cfg.min_points - 10] = 20.0
    at = cfg.min_points + 100
    x[at] = 6.0
    d = SpikeDetector(cfg)
    d.update(x[:cfg.min_points], np.arange(cfg.min_points))
    assert d.ok and d.emax < 0.1
    for chunks in CHUNKS:
        assert at in run(cfg, x, chunks)[1]
