"""The spike detector against its point-by-point reference (``spike_reference.py``) on seeded
series of several shapes, compared after every element (fed one at a time: events and state)
and after every chunk (fed in chunks that cut passes, rows and anomalous runs anywhere)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from spike_reference import SHAPES, Reference, reference_run

from trainwatch.rules import load_rules_config
from trainwatch.rules.detectors.spike import SpikeDetector

CFG = load_rules_config()
RULES = ("loss_spike", "grad_explosion", "step_time_outlier")
CHUNKS = ([10**6], [1, 5, 300], [13], [4097], [127, 2, 31])


def variants(rule: str) -> list:
    """The rule's configuration, one quicker to fire (where the early maximum fires), and two
    off the default grid (warm-up ends mid-row on a partial window), with and without a tail
    guard (and then a ratio bar of 1: r1 = 0)."""
    base = CFG.rules[rule]
    grid = dataclasses.replace(base, refresh=7, window=50, min_points=20)
    return [base, dataclasses.replace(base, min_ratio=1.1, z_threshold=3.0, early_max_fires=True),
            dataclasses.replace(grid, tail_guard=2.0),
            dataclasses.replace(grid, tail_guard=0.0, min_ratio=1.0)]


def _plain(v: object) -> object:
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def run(cfg, x: np.ndarray, chunks: list[int]) -> tuple[list[tuple], list[int]]:
    """The detector's events (as the reference gives them) and anomalous indices over ``x``
    (steps 3 apart) fed in chunks of the given lengths, in turn."""
    d = SpikeDetector(cfg)
    steps = np.arange(x.shape[0]) * 3
    events, flagged, i, k = [], [], 0, 0
    while i < x.shape[0]:
        n = chunks[k % len(chunks)]
        ev, fl = d.update(x[i:i + n], steps[i:i + n])
        events += [tuple(map(_plain, (e.index + i, *e[1:]))) for e in ev]
        flagged += (fl + i).tolist()
        i, k = i + n, k + 1
    return events, flagged


def reference(cfg, x: np.ndarray) -> tuple[list[tuple], list[int]]:
    events, flagged = reference_run(cfg, x)
    return [tuple(map(_plain, e)) for e in events], flagged


def state(d: SpikeDetector | Reference) -> tuple:
    """What decides the next alerts."""
    if isinstance(d, Reference):
        acc, guard, blk = d.acc, d.guard(), d.blk
    else:
        acc, guard, blk = d.acc.tolist(), d.emax, d.blk_e
    ep = d.episode
    return tuple(map(_plain, (
        *acc, d.n_acc, d.ok, d.med, d.mad, guard, blk, d.early_n, d.early_max, d.flag_run,
        ep.active, ep.count, ep.escalated, ep.last_start)))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_chunked_feeding_equals_the_reference(rule: str, shape: str) -> None:
    fired = 0
    for cfg in variants(rule):
        for seed in (0, 1):
            x = SHAPES[shape](seed)
            want = reference(cfg, x)
            fired += len(want[0])
            for chunks in CHUNKS:
                assert run(cfg, x, chunks) == want, (cfg, seed, chunks)
    if shape != "clean":
        assert fired, "the data must hold alerts for the comparison to mean anything"


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("shape", ["spikes", "heavy", "early_then_faults", "zeros"])
def test_state_after_every_element_is_the_reference_state(rule: str, shape: str) -> None:
    for cfg in variants(rule):
        x = SHAPES[shape](2)[:2500]
        d, ref = SpikeDetector(cfg), Reference(cfg)
        for i, v in enumerate(x.tolist()):
            events, flagged = d.update(x[i:i + 1], np.array([3 * i]))
            ev, anom = ref.push(v, 3 * i)
            assert flagged.tolist() == ([0] if anom else []), (cfg, i)
            assert [tuple(map(_plain, e[1:])) for e in events] == (
                [] if ev is None else [tuple(map(_plain, ev))]), (cfg, i)
            assert state(d) == state(ref), (cfg, i)


def test_flagged_points_stay_out_of_the_baseline() -> None:
    x = np.full(2000, 2.0) + 0.01 * np.random.default_rng(3).standard_normal(2000)
    x[1000:1009] = 8.0  # a 9-point episode (persist 10 is not reached)
    d = SpikeDetector(CFG.loss_spike)
    events, flagged = d.update(x, np.arange(2000))
    assert [(e.index, e.kind) for e in events] == [(1000, "start")]
    assert flagged.tolist() == list(range(1000, 1009))
    assert d.med == pytest.approx(2.0, abs=0.01)  # the spike never entered the median
    x[1500:1530] = 8.0  # a 30-point one escalates at its 10th point
    events, _ = SpikeDetector(CFG.loss_spike).update(x, np.arange(2000))
    assert [(e.index, e.kind) for e in events][-2:] == [(1500, "start"), (1509, "escalate")]


def test_windows_with_a_zero_median_flag_the_spikes_never_a_blip() -> None:
    x = SHAPES["zeros"](0)
    for rule in RULES:
        flagged = set(run(CFG.rules[rule], x, [10**6])[1])
        assert flagged and flagged <= set(np.flatnonzero(x == 5.0).tolist()), rule


def test_a_deep_dip_raises_the_bar_mid_block() -> None:
    """Mid-block, a deep dip (accepted: only upward points are anomalous) and two points later a
    spike; later a moderate spike that the dip's deviation, in the tail guard's bar, hides."""
    cfg = CFG.loss_spike
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x = 5.0 + 0.002 * rng.standard_normal(2000)
        dip = 32 * 20 + 9
        x[dip] = 2.5  # a relative deviation of 0.5 (the bar becomes 2 x 0.5 = 1.0)
        x[dip + 2] = 50.0
        x[dip + 300] = 8.0  # 1.6x the median: above min_ratio, below the dip's bar
        for chunks in CHUNKS:
            flagged = run(cfg, x, chunks)[1]
            assert dip + 2 in flagged and dip + 300 not in flagged, (seed, chunks)


def test_long_runs_are_flagged_and_rebased() -> None:
    """Anomalous runs of 15-200 points (step_time_outlier: no tail guard) are flagged whole."""
    cfg = CFG.step_time_outlier
    x = SHAPES["dips_and_spikes"](0)
    flagged = set(run(cfg, x, [10**6])[1])
    assert set(range(2800, 3000)) <= flagged and len(flagged) > 400


def test_the_recent_level_is_taken_from_exactly_recent_points_values() -> None:
    """A spike whose jump test hangs on the oldest of the ``recent_points`` values before it:
    four at the level and four slightly above give a recent level half-way, which the spike
    clears by a hair."""
    cfg = dataclasses.replace(CFG.loss_spike, jump_share=0.9)
    x = 1.0 + 1e-4 * np.random.default_rng(5).standard_normal(1200)
    x[696:700] = 1.15
    x[700] = 2.0
    want = reference(cfg, x)
    assert 700 in want[1]
    for chunks in ([x.shape[0]], [650], [13]):
        assert run(cfg, x, chunks) == want, chunks


def test_a_row_of_climbing_points_then_spikes() -> None:
    """A slow climb whose points pass the ratio and z bars but never jump fills a whole row, then
    two spikes follow in it: the first is found."""
    cfg = CFG.step_time_outlier
    x = 1.0 + 1e-4 * np.random.default_rng(11).standard_normal(1000)
    climb = np.arange(718, 1000)
    x[climb] = 1.0 + 0.02 * (climb - 718)  # over 2x the median from point 768 on
    x[793] = x[795] = 10.0
    want = reference(cfg, x)
    assert 793 in want[1] and not set(range(768, 793)) & set(want[1])
    for chunks in ([x.shape[0]], [700], [750, 10]):
        assert run(cfg, x, chunks) == want, chunks


def test_a_long_anomalous_run_ends_where_the_reference_ends_it() -> None:
    """A run of 30 anomalous points whose end hangs on the jump test (a recent level raised just
    before the run) or the tail guard (dips among the accepted points)."""
    cases = [(CFG.step_time_outlier, {i: 1.9 for i in range(692, 700)}, 2.5),
             (CFG.loss_spike, {600: 0.85, 650: 0.85}, 1.25)]
    for cfg, before, after in cases:
        x = 1.0 + 1e-4 * np.random.default_rng(3).standard_normal(1100)
        for i, v in before.items():
            x[i] = v
        x[700:730] = 50.0
        x[730] = after
        want = reference(cfg, x)
        assert set(range(700, 730)) <= set(want[1]) and 730 not in want[1], cfg
        for chunks in ([x.shape[0]], [705], [13]):
            assert run(cfg, x, chunks) == want, (cfg, chunks)
