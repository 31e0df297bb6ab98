"""Spike-preserving downsampling against brute-force references, on seeded data."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.downsample import (
    FIRST,
    LAST,
    MAX,
    MIN,
    NONFINITE,
    bucket_rows,
    merge_buckets,
    minmax_downsample,
    minmax_indices,
    segment_extremes,
)


def noisy(rng: np.random.Generator, n: int, nan_rate: float = 0.0) -> np.ndarray:
    values = rng.normal(size=n).cumsum()
    bad = rng.random(n) < nan_rate
    values[bad] = rng.choice([np.nan, np.inf, -np.inf], size=int(bad.sum()))
    return values


def reference_extremes(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The same table as segment_extremes, one segment at a time in plain Python."""
    ends = list(starts[1:]) + [len(values)]
    rows = []
    for a, b in zip(starts, ends):
        seg = list(range(a, b))
        fin = [i for i in seg if np.isfinite(values[i])]
        bad = [i for i in seg if not np.isfinite(values[i])]
        lo = min(fin, key=lambda i: (values[i], i)) if fin else -1
        hi = min(fin, key=lambda i: (-values[i], i)) if fin else -1
        rows.append([a, lo, hi, b - 1, bad[0] if bad else -1])
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


@pytest.mark.parametrize("seed", range(6))
def test_segment_extremes_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    values = noisy(rng, n, nan_rate=[0.0, 0.05, 0.6][seed % 3])
    values[rng.integers(0, n, size=3)] = 1.0  # ties: the earliest must win
    cuts = np.unique(rng.integers(1, n, size=int(rng.integers(0, 20)))) if n > 1 else []
    starts = np.concatenate(([0], cuts)).astype(np.int64)
    assert np.array_equal(segment_extremes(values, starts), reference_extremes(values, starts))


def test_segment_extremes_all_nonfinite_segment() -> None:
    values = np.array([1.0, np.nan, np.inf, 2.0])
    ext = segment_extremes(values, np.array([0, 1, 3]))
    assert ext[1].tolist() == [1, -1, -1, 2, 1]  # no finite min/max, first NaN kept
    assert ext[0, NONFINITE] == -1 and ext[2, NONFINITE] == -1


@pytest.mark.parametrize("seed", range(4))
def test_merge_buckets_equals_direct_bucketing(seed: int) -> None:
    """Merging neighbouring buckets of width w pairwise gives exactly the buckets of width 2w."""
    rng = np.random.default_rng(100 + seed)
    w = int(rng.integers(1, 9))
    n = 2 * w * int(rng.integers(1, 30))
    steps = np.sort(rng.integers(0, 10 * n, size=n)).astype(np.int64)
    values = noisy(rng, n, nan_rate=0.1)
    times = 1e9 + steps * 0.5
    fine = bucket_rows(steps, values, times, 7, w)
    merged = merge_buckets(tuple(a[0::2] for a in fine), tuple(a[1::2] for a in fine))
    direct = bucket_rows(steps, values, times, 7, 2 * w)
    for got, want in zip(merged, direct):
        assert np.array_equal(got, want, equal_nan=True)


def test_identity_when_it_fits() -> None:
    steps = np.arange(10, dtype=np.int64)
    values = np.linspace(0, 1, 10)
    out_s, out_v = minmax_downsample(steps, values, 10)
    assert out_s is steps and out_v is values
    assert np.array_equal(minmax_indices(steps, values, 50), np.arange(10))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_points"):
        minmax_downsample(np.arange(3), np.zeros(3), 0)
    with pytest.raises(ValueError, match="shape"):
        minmax_downsample(np.arange(3), np.zeros(4), 2)


@pytest.mark.parametrize("seed", range(12))
def test_bounds_extremes_nans_and_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 5000))
    max_points = int(rng.choice([1, 2, 3, 4, 5, 6, 9, 16, 100, 999]))
    # ascending steps with repeats and gaps
    steps = np.cumsum(rng.choice([0, 1, 1, 1, 5, 40], size=n)).astype(np.int64)
    values = noisy(rng, n)
    nan_at = np.sort(rng.choice(n, size=int(rng.integers(0, 3)), replace=False))
    values[nan_at] = np.nan
    idx = minmax_indices(steps, values, max_points)
    out_s, out_v = minmax_downsample(steps, values, max_points)

    assert len(out_s) == len(out_v) == len(idx) <= max_points
    assert np.all(np.diff(idx) > 0)  # a subsequence: step order kept, no point twice
    assert np.array_equal(out_s, steps[idx])
    assert np.array_equal(out_v, values[idx], equal_nan=True)
    finite = np.flatnonzero(np.isfinite(values))
    argmax = finite[np.argmax(values[finite])]
    argmin = finite[np.argmin(values[finite])]
    if nan_at.size:
        assert np.isnan(out_v).any(), "a NaN must stay visible"
    if max_points >= 5:
        assert argmax in idx and argmin in idx
        assert idx[0] == 0 and idx[-1] == n - 1  # the line starts and ends where the data do
        # NaNs are at most two, and each bucket keeps its first non-finite point
        for i in nan_at:
            bucket_steps = (steps[-1] - steps[0]) / ((max_points - 1) // 4) + 1
            near = np.abs(out_s[np.isnan(out_v)] - steps[i]) <= bucket_steps
            assert near.any(), f"NaN at step {steps[i]} vanished"
    elif not nan_at.size:
        assert argmax in idx
        if max_points >= 2:
            assert argmin in idx


def test_one_step_spike_survives_heavy_reduction() -> None:
    rng = np.random.default_rng(7)
    n = 200_000
    steps = np.arange(n, dtype=np.int64)
    values = 2.0 * np.exp(-steps / 50_000) + 0.01 * rng.normal(size=n)
    values[123_457] = 40.0
    values[150_001] = -3.0
    values[180_000] = np.inf
    out_s, out_v = minmax_downsample(steps, values, 200)
    assert len(out_s) <= 200
    assert 123_457 in out_s and 150_001 in out_s and 180_000 in out_s
    assert out_v[out_s == 180_000][0] == np.inf


def test_unsorted_steps_fall_back_to_counts() -> None:
    rng = np.random.default_rng(3)
    steps = rng.permutation(1000).astype(np.int64)
    values = noisy(rng, 1000)
    idx = minmax_indices(steps, values, 40)
    assert len(idx) <= 40 and np.all(np.diff(idx) > 0)
    assert int(np.argmax(values)) in idx and int(np.argmin(values)) in idx


def test_equal_steps_do_not_break_the_bound() -> None:
    steps = np.zeros(1000, dtype=np.int64)
    values = np.sin(np.arange(1000.0))
    idx = minmax_indices(steps, values, 8)
    assert 0 < len(idx) <= 8
    ext = segment_extremes(values, np.zeros(1, dtype=np.int64))[0]
    assert ext[MAX] in idx and ext[MIN] in idx and ext[FIRST] == 0 and ext[LAST] == 999
