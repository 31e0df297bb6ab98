"""The spike detector's shortcuts on the way to an alert, each against the slower code it stands
for: an episode decided on a Python list of severe flags (Episode.run_list) against the array
path, a row's tail bar on Python floats (spike_pass._row_bar) against the array of every row's
bar, the MAD a pass hands over with the baseline against the MAD the reference takes; and the
jump test of a candidate row (point by point, then as arrays) and the end of a long anomalous
run (tested as arrays) against the point-by-point reference, on data made to hang on them."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
from test_rules_spike import _run
from test_rules_spike_fastpath import _dips_and_spikes

from trainwatch.rules import load_rules_config
from trainwatch.rules.detectors.episode import Episode
from trainwatch.rules.detectors.spike_detector import SpikeDetector
from trainwatch.rules.detectors.spike_pass import _row_bar, _row_bars
from trainwatch.rules.detectors.stats import mad_sorted

CFG = load_rules_config()
RNG = np.random.default_rng(20261122)


def _point_by_point(ep: Episode, steps: np.ndarray, severe: np.ndarray) -> list[tuple[int, str]]:
    """The definition: each point of the run given to hit() in turn."""
    out = []
    for i, (s, sv) in enumerate(zip(steps.tolist(), severe.tolist())):
        kind = ep.hit(s, sv)
        if kind is not None:
            out.append((i, kind))
    return out


def test_episode_runs_decide_as_their_points_one_by_one() -> None:
    """From every state an episode can be in, runs of 1 to 60 points (the cooldown scanned point
    by point up to 16, as an array beyond), with and without severe points, as a list
    (run_list) and as arrays (run)."""
    seen = set()
    for trial in range(4000):
        kw = {"rearm": int(RNG.integers(1, 4)), "cooldown": int(RNG.integers(0, 30)),
              "persist": int(RNG.integers(0, 12))}
        ep = Episode(**kw, active=bool(RNG.integers(0, 2)), count=int(RNG.integers(0, 12)),
                     quiet=int(RNG.integers(0, 3)), escalated=bool(RNG.integers(0, 2)),
                     last_start=None if RNG.random() < 0.2 else int(RNG.integers(0, 20)))
        n = int(RNG.integers(1, 61))
        steps = np.sort(RNG.choice(np.arange(90), n, replace=False)).astype(np.int64)
        severe = RNG.random(n) < RNG.choice([0.0, 0.05, 0.3])
        listed, arrays, ref = copy.copy(ep), copy.copy(ep), copy.copy(ep)
        want = _point_by_point(ref, steps, severe)
        assert (listed.run_list(steps, severe.tolist()), listed) == (want, ref), (trial, ep)
        assert (arrays.run(steps, severe), arrays) == (want, ref), (trial, ep)
        assert type(listed.last_start) in (int, type(None))
        seen.update(kind for _, kind in want)
        seen.add("none" if not want else "some")
    assert seen == {"start", "escalate", "start_escalated", "none", "some"}


def test_row_bar_matches_the_array_of_bars() -> None:
    """Row 0 (the detector's bar), rows whose look-back reaches into the detector's history,
    rows past it, and a history shorter than the look-back (missing blocks count as 0)."""
    cfg = CFG.loss_spike
    for trial in range(300):
        det = SpikeDetector(cfg)
        h = int(RNG.integers(0, det.Lb + 1))
        det.e_hist = RNG.exponential(0.3, h).tolist()
        det.emax = max(det.e_hist) if h else 0.0
        nb = int(RNG.integers(0, 3 * det.Lb))
        bm = RNG.exponential(0.3, nb)
        n_rows = nb + int(RNG.integers(0, 2)) if nb else 1
        want = _row_bars(det, bm, n_rows)
        blocks = det.e_hist + bm.tolist()
        got = [_row_bar(det, blocks, r) for r in range(n_rows)]
        assert got == want.tolist(), trial


def test_the_mad_handed_over_by_a_pass_is_the_reference_mad() -> None:
    """After every update (a pass that ends at a spike has taken the MAD of the spike's baseline
    and hands it over), the detector's MAD is the one taken from its window and median."""
    handed = 0
    for rule in ("loss_spike", "grad_explosion", "step_time_outlier"):
        cfg = CFG.rules[rule]
        for seed in range(2):
            x = _dips_and_spikes(seed, n=3000)
            steps = np.arange(x.shape[0]) * 3
            det = SpikeDetector(cfg)
            for lo in range(0, x.shape[0], 700):
                det.update(x[lo:lo + 700], steps[lo:lo + 700])
                if det._mad is not None:
                    handed += 1
                    assert det._mad == mad_sorted(det.win, det.med), (rule, seed, lo)
    assert handed >= 3


def test_the_recent_level_is_taken_from_exactly_recent_points_values() -> None:
    """A spike whose jump test hangs on the oldest of the ``recent_points`` values before it:
    four at the level and four slightly above (accepted: under the ratio bar) give a recent
    level half-way, which the spike clears by a hair; one value fewer would not."""
    cfg = dataclasses.replace(CFG.loss_spike, jump_share=0.9)
    rng = np.random.default_rng(5)
    x = 1.0 + 1e-4 * rng.standard_normal(1200)
    spike = 700
    x[spike - 4:spike] = 1.15
    x[spike] = 2.0
    ref = _run(cfg, x, vectorized=False, chunks=[1])
    assert spike in ref[1]
    for chunks in ([x.shape[0]], [650], [13]):
        assert _run(cfg, x, vectorized=True, chunks=chunks) == ref, chunks


def test_a_row_of_climbing_points_then_spikes_matches_the_reference() -> None:
    """A slow climb (no tail guard: step_time_outlier) whose points pass the ratio and z bars
    but never jump fills a whole row, then two spikes follow in it: past the first few points
    of the row the jump test runs as arrays, and must still find the first spike."""
    cfg = CFG.step_time_outlier
    rng = np.random.default_rng(11)
    x = 1.0 + 1e-4 * rng.standard_normal(1000)
    climb = np.arange(718, 1000)
    x[climb] = 1.0 + 0.02 * (climb - 718)  # over 2x the median from point 768 on
    x[793] = x[795] = 10.0  # 25 and 27 points into the row [768, 800)
    ref = _run(cfg, x, vectorized=False, chunks=[1])
    assert 793 in ref[1] and not set(range(768, 793)) & set(ref[1])
    for chunks in ([x.shape[0]], [700], [750, 10]):
        assert _run(cfg, x, vectorized=True, chunks=chunks) == ref, chunks


def _long_run_then(cfg, before: dict[int, float], after: float) -> tuple[np.ndarray, int]:
    """Quiet noise around 1, some points set before a run of 30 anomalous points at 700, and
    the point after the run; returns the series and that point's index."""
    rng = np.random.default_rng(3)
    x = 1.0 + 1e-4 * rng.standard_normal(1100)
    for i, v in before.items():
        x[i] = v
    x[700:730] = 50.0
    x[730] = after
    return x, 730


def test_a_long_anomalous_run_ends_where_the_reference_ends_it() -> None:
    """Past its first points a run of anomalous points is tested as arrays: its end must hang on
    the same bars as the reference's, here the jump test (a recent level raised just before the
    run) and the tail guard (dips among the accepted points)."""
    cases = [
        # the 8 points before the run sit at 1.9 (accepted: under 2x): 2.5 after the run is
        # over the ratio bar but no jump from 1.9
        (CFG.step_time_outlier, {i: 1.9 for i in range(692, 700)}, 2.5),
        # dips to 0.85 raise the tail guard's bar to 0.3: 1.25 is over the ratio bar only
        (CFG.loss_spike, {600: 0.85, 650: 0.85}, 1.25),
    ]
    for cfg, before, after in cases:
        x, end = _long_run_then(cfg, before, after)
        ref = _run(cfg, x, vectorized=False, chunks=[1])
        assert set(range(700, 730)) <= set(ref[1]) and end not in ref[1], cfg
        for chunks in ([x.shape[0]], [705], [13]):
            assert _run(cfg, x, vectorized=True, chunks=chunks) == ref, (cfg, chunks)
