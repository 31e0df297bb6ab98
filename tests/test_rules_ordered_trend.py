"""The fast trend of a window in step order gives the general functions' numbers bit for bit:
ties, uneven or repeated steps, constant values, every window length the growth rules use."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules import ordered_trend as ot
from trainwatch.rules.stats import median, spearman, theil_sen, trend


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
        assert ot.theil_sen_in_order(x, y) == theil_sen(x, y), name
        for min_rho in (-1.0, 0.6, 0.9):
            got, want = ot.trend_in_order(x, y, min_rho), trend(x, y, min_rho)
            assert np.array_equal(got, want, equal_nan=True), (name, min_rho, got, want)


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
