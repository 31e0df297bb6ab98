"""The rules' pure maths against direct references, on seeded data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from trainwatch.rules.detectors.blocks import BlockStream
from trainwatch.rules.detectors.episode import ESCALATE, START, START_ESCALATED, Episode
from trainwatch.rules.detectors.growth import theil_sen, trend
from trainwatch.rules.detectors.stats import (
    distinct,
    improving,
    median,
    noise_sd,
    rankdata,
    small_median,
    spearman,
    true_runs,
    windows,
)
from trainwatch.rules.engine.base import Points

RNG = np.random.default_rng(20240601)


def test_medians_match_numpy() -> None:
    for n in (1, 2, 7, 128):
        x = RNG.standard_normal(n)
        assert median(x) == pytest.approx(float(np.median(x)), abs=0)
        assert small_median(x.tolist()) == pytest.approx(float(np.median(x)), abs=0)


def test_distinct_matches_numpy_unique() -> None:
    for x in (np.empty(0, dtype=np.int64), np.array([3]), np.array([2, 2, 2]),
              RNG.integers(0, 50, 400), RNG.integers(0, 4, 9).astype(np.int32)):
        got = distinct(x)
        assert got.dtype == x.dtype and np.array_equal(got, np.unique(x))


def test_windows_view() -> None:
    a = np.arange(10.0)
    assert np.array_equal(windows(a, 3), np.lib.stride_tricks.sliding_window_view(a, 3))
    assert np.array_equal(windows(a[2:], 4), np.lib.stride_tricks.sliding_window_view(a[2:], 4))
    assert windows(a[::2], 2).shape == (4, 2)  # strided input falls back to numpy
    assert windows(a[:2], 3).shape == (0, 3)


def _naive_ranks(a: np.ndarray) -> np.ndarray:
    return np.array([np.sum(a < v) + (np.sum(a == v) + 1) / 2 for v in a])


def test_rankdata_and_spearman() -> None:
    for _ in range(20):
        a = RNG.integers(0, 6, 30).astype(float)  # many ties
        assert np.array_equal(rankdata(a), _naive_ranks(a))
        b = RNG.standard_normal(30) + 0.3 * a
        ra, rb = _naive_ranks(a), _naive_ranks(b)
        assert spearman(a, b) == pytest.approx(float(np.corrcoef(ra, rb)[0, 1]), rel=1e-12)
    assert spearman(np.ones(5), np.arange(5.0)) == 0.0


def test_theil_sen_matches_brute_force_and_resists_outliers() -> None:
    x = np.arange(40.0)
    y = 2.0 + 0.5 * x + RNG.standard_normal(40) * 0.1
    slopes = [(y[j] - y[i]) / (x[j] - x[i]) for i, j in itertools.combinations(range(40), 2)]
    assert theil_sen(x, y) == pytest.approx(float(np.median(slopes)), abs=0)
    y[::7] += 100.0  # 15 % gross outliers
    assert theil_sen(x, y) == pytest.approx(0.5, abs=0.05)
    slope, rho, growth = trend(x, y)
    assert rho > 0.5 and growth == pytest.approx(slope * 39 / np.median(y))
    # ties in x are skipped
    assert theil_sen(np.array([0.0, 0.0, 1.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(1.5)
    assert np.isnan(trend(x, -y, min_rho=0.5)[0])  # the slope is skipped below min_rho



def test_true_runs_against_a_loop() -> None:
    for carried in (0, 3):
        cond = RNG.random(50) < 0.6
        length, rid = true_runs(cond, carried)
        run, r, prev = carried, 0, carried > 0
        for i, c in enumerate(cond):
            if c:
                if not prev:
                    r += 1
                run = run + 1 if prev else 1
            else:
                run = 0
            prev = bool(c)
            assert length[i] == run and (not c or rid[i] == r)


def test_improving_and_noise() -> None:
    flat = (1 + 0.01 * RNG.standard_normal(30)).tolist()
    falling = (np.linspace(1.0, 0.95, 30) + 0.005 * RNG.standard_normal(30)).tolist()
    assert not improving(flat, 0.35, 0.005)
    assert improving(falling, 0.35, 0.005)
    assert not improving(falling, 0.35, 0.2)  # falls, but by less than asked
    # noise around a (gently bent) curve, not the curve itself: the last evaluations of a
    # decaying loss, as the overfit rule uses it
    x = np.linspace(0.5, 1, 8)
    curve = 3.0 * (1 + 5 * x) ** -0.6
    assert noise_sd(curve.tolist()) < 0.004
    sds = [noise_sd((curve * (1 + 0.01 * RNG.standard_normal(8))).tolist()) for _ in range(200)]
    assert 0.005 < float(np.median(sds)) < 0.015


def test_block_stream_is_batching_invariant() -> None:
    v = 5 + RNG.standard_normal(1000)
    pts = Points("x", np.arange(1000), v, np.arange(1000.0), np.arange(1000))
    whole = BlockStream(25).push(pts)
    bs = BlockStream(25)
    parts = [bs.push(pts.take(slice(i, i + 37))) for i in range(0, 1000, 37)]
    for field in ("med", "mad", "noise", "step", "pos"):
        assert np.array_equal(getattr(whole, field), np.concatenate([getattr(p, field) for p in parts]))
    assert np.array_equal(whole.step, np.arange(24, 1000, 25))
    blocks = v.reshape(-1, 25)
    med = np.median(blocks, axis=1)
    mad = np.median(np.abs(blocks - med[:, None]), axis=1)
    rel = 1.2533 * 1.4826 / 5 * mad / med
    ref = [np.median(rel[max(0, i - 7):i + 1]) for i in range(40)]
    assert np.allclose(whole.noise, ref, rtol=1e-12)
    assert 0.04 < whole.noise[-1] < 0.07  # sd 1 over a level of 5, 25 points a block


# --------------------------------------------------------------------------- episodes
def _reference(ep: Episode, steps: np.ndarray, mask: np.ndarray, severe: np.ndarray
               ) -> list[tuple[int, str]]:
    """Point by point, as the definition reads."""
    out = []
    for i, (s, m, sv) in enumerate(zip(steps.tolist(), mask.tolist(), severe.tolist())):
        if not m:
            ep.normal(1)
            continue
        kind = ep.hit(s, sv)
        if kind is not None:
            out.append((i, kind))
    return out


def test_episode_scan_matches_point_by_point() -> None:
    for trial in range(30):
        n = 400
        mask = RNG.random(n) < RNG.uniform(0.02, 0.5)
        severe = mask & (RNG.random(n) < 0.05)
        steps = np.arange(n) * 2
        kw = {"rearm": int(RNG.integers(1, 6)), "cooldown": int(RNG.integers(0, 40)),
              "persist": int(RNG.integers(0, 8))}
        ref = _reference(Episode(**kw), steps, mask, severe)
        ep = Episode(**kw)
        got = []
        for lo in range(0, n, 37):
            got += [(lo + i, k) for i, k in ep.scan(steps[lo:lo + 37], mask[lo:lo + 37],
                                                    severe[lo:lo + 37])]
        assert got == ref, trial


def test_episode_semantics() -> None:
    ep = Episode(rearm=2, cooldown=10, persist=3)
    assert ep.hit(0) == START
    assert ep.hit(1) is None
    assert ep.hit(2) == ESCALATE  # third anomalous point of the episode
    ep.normal(2)  # re-armed
    assert ep.hit(5) is None  # inside the cooldown
    assert ep.hit(12) == START
    ep.normal(5)
    assert ep.hit(30, severe=True) == START_ESCALATED
    ep.reset()
    assert ep.hit(0) == START


def _ranks_by_definition(a: np.ndarray) -> np.ndarray:
    """Rank 1..n, ties sharing the mean of the ranks they span (O(n^2), the definition)."""
    less = (a[None, :] < a[:, None]).sum(axis=1)
    equal = (a[None, :] == a[:, None]).sum(axis=1)
    return less + (equal + 1) / 2.0


def test_rankdata_fast_paths_match_the_definition() -> None:
    for n in (1, 2, 5, 40, 200):
        for a in (RNG.standard_normal(n), np.sort(RNG.standard_normal(n)),  # no ties; in order
                  np.arange(n, dtype=float),  # steps
                  RNG.integers(0, 4, n).astype(float), np.sort(RNG.integers(0, 4, n))):  # ties
            assert np.array_equal(rankdata(a), _ranks_by_definition(a))
