"""The fast trend of a window in step order gives the general functions' numbers bit for bit:
ties, uneven or repeated steps, constant values, every window length the growth rules use."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.detectors import ordered_trend as ot
from trainwatch.rules.detectors.stats import median, spearman, theil_sen, trend


def _cases(seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in (3, 4, 5, 10, 11, 30, 200, 201):
        k = np.arange(n)
        ramp = 1000.0 * (1 + 0.001 * k) * rng.lognormal(0, 0.01, n)
        steps = 100.0 + k
        out += [
            ("ramp", steps, ramp),
            ("ramp by 10", 100.0 + 10 * k, ramp),
            ("rounded (ties)", steps, np.round(ramp, -1)),
            ("flat then rising, ties", steps, np.round(1000.0 + np.maximum(0, k - n // 2), 0)),
            ("constant", steps, np.full(n, 7.0)),
            ("falling", steps, ramp[::-1].copy()),
            ("uneven steps", np.cumsum(rng.integers(1, 4, n)) * 1.0, ramp),
            ("repeated step", np.sort(rng.integers(0, n, n)) * 1.0, ramp),
            ("out of order", rng.permutation(n) * 1.0, ramp),
            ("zero level", steps, ramp - np.median(ramp)),
        ]
    return out


@pytest.mark.parametrize("seed", range(3))
def test_ordered_trend_is_bit_identical_to_the_general_one(seed: int) -> None:
    for name, x, y in _cases(seed):
        assert ot.spearman_in_order(x, y) == spearman(x, y), name
        # (bits, not ==: a median of -0.0 where theil_sen gives 0.0 would show in the evidence)
        assert _bits(ot.theil_sen_in_order(x, y)) == _bits(theil_sen(x, y)), name
        for min_rho in (-1.0, 0.6, 0.9):
            got, want = ot.trend_in_order(x, y, min_rho), trend(x, y, min_rho)
            assert np.array_equal(got, want, equal_nan=True), (name, min_rho, got, want)


def _bits(v: float) -> bytes:
    return np.float64(v).tobytes()


@pytest.mark.parametrize("n", [64, 65, 200, 201])
def test_long_windows_take_the_circular_slopes(n: int) -> None:
    # no pair tables at or past _CIRCULAR_FROM points (only a zero median asks them which zero)
    assert n >= ot._CIRCULAR_FROM
    rng = np.random.default_rng(n)
    x = 100.0 + 5 * np.arange(n)
    y = np.round(1000 + np.cumsum(rng.normal(0.1, 1, n)), 1)
    want = theil_sen(x, y)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ot, "_pairs", None)
        assert _bits(ot.theil_sen_in_order(x, y)) == _bits(want)
    assert ot._circular_diffs(y, ot._scratch(n)[0]).shape[0] == n * (n - 1) // 2
    # the same multiset of slopes, bit for bit, as the pairwise form
    i, j = np.triu_indices(n, 1)
    got = ot._circular_diffs(y, ot._scratch(n)[0]) / ot._circular_diffs(x, ot._scratch(n)[1])
    assert np.array_equal(np.sort(got), np.sort((y[j] - y[i]) / (x[j] - x[i])))


@pytest.mark.parametrize("n", [67, 200])
def test_a_zero_median_slope_is_the_same_zero(n: int) -> None:
    # half the circular slopes divide negated differences: 0 / -5 is -0.0, and a wave's median
    # slope of 0 may be one of those; stats.theil_sen's is 0.0
    x = 100.0 + 5 * np.arange(n)
    y = np.round(np.sin(np.arange(n) / 7.0), 1) + 0.0  # (+ 0.0: no -0.0 values)
    slopes = ot._circular_diffs(y, ot._scratch(n)[0])
    slopes /= ot._circular_diffs(x, ot._scratch(n)[1])
    if n == 67:  # (the case this test is about: without the check, -0.0)
        assert np.signbit(ot._median(slopes))
    assert _bits(ot.theil_sen_in_order(x, y)) == _bits(theil_sen(x, y)) == _bits(0.0)


def test_partition_median_is_the_sorted_median() -> None:
    rng = np.random.default_rng(5)
    for m in (1, 2, 3, 4, 435, 19900, 19901):
        a = np.round(rng.normal(size=m), 2)  # with ties
        assert ot._median(a.copy()) == median(a), m


def test_the_fast_paths_are_taken() -> None:
    # the general functions stand in only where the fast path does not apply: if these call
    # them, the speed-up is gone (and the tests above compare the general path with itself)
    x = np.arange(30.0)
    y = np.round(np.linspace(1.0, 2.0, 30), 1)  # ties
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ot, "spearman", None)
        m.setattr(ot, "theil_sen", None)
        ot.trend_in_order(x, y)
        ot.trend_in_order(x * 10.0, y[::-1].copy())
        ot.theil_sen_in_order(np.cumsum(np.arange(1.0, 31.0)), y)


@pytest.mark.parametrize("n", [3, 10, 30, 200])
def test_spearman_rows_is_bit_identical_row_by_row(n: int) -> None:
    rng = np.random.default_rng(n)
    x = np.arange(n) * 1.0
    for decimals in (6, 2, 0):  # from no ties to many, rows with and without them mixed
        rows = np.round(1000 + np.cumsum(rng.normal(0, 1, (9, n)), axis=1), decimals)
        rows[3] = 5.0  # constant: rho 0
        got = ot.spearman_rows(rows)
        assert got.tolist() == [spearman(x, r) for r in rows], decimals
        varied = np.delete(rows, 3, axis=0)  # (no constant row: the division needs no guard)
        assert ot.spearman_rows(varied).tolist() == [spearman(x, r) for r in varied], decimals
