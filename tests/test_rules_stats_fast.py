"""The shared primitives' fast paths against their plain references, to the bit: the finite
points of a series, the lowest and highest value, the median of sorted rows (1-D and 2-D) and
strided copies of windows."""

from __future__ import annotations

import math
import warnings

import numpy as np

from trainwatch.rules.detectors.stats import (
    median_sorted,
    min_max,
    strided_rows,
)
from trainwatch.rules.engine.base import Points

RNG = np.random.default_rng(20261122)


def _points(v: np.ndarray) -> Points:
    i = np.arange(v.shape[0])
    return Points("x", i, v, i.astype(np.float64), i)


def test_finite_points_match_the_exact_mask() -> None:
    big = np.array([1e200, -1e200, 3.0])  # finite, yet their sum of squares would overflow
    cases = [np.empty(0), np.array([2.0]), RNG.standard_normal(500), big,
             np.array([1.0, np.nan, 3.0]), np.array([np.inf, 1.0]), np.array([-np.inf]),
             np.array([np.inf, -np.inf, 2.0]), np.array([1e200, np.nan]),
             np.arange(7), np.array([1e308, 1e308, np.inf])]
    for v in cases:
        pts = _points(v)
        ok = np.isfinite(v)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (no overflow or invalid-value warning on any)
            f = pts.finite()
        if ok.all():
            assert f is pts and pts.all_finite, v
        else:
            assert f is not pts and not pts.all_finite, v
            assert np.array_equal(f.values, v[ok]) and np.array_equal(f.pos, pts.pos[ok]), v
            assert f.finite() is f


def test_min_max_matches_the_reductions() -> None:
    for n in (1, 2, 63, 64, 65, 500):
        v = RNG.standard_normal(n)
        lo, hi = min_max(v)
        assert (lo, hi) == (float(v.min()), float(v.max())) == (min(v.tolist()), max(v.tolist()))
        assert type(lo) is float and type(hi) is float
    v = np.array([0.0] * 70 + [-0.0])
    assert [math.copysign(1, x) for x in min_max(v)] == [math.copysign(1, float(v.min())),
                                                         math.copysign(1, float(v.max()))]


def _median_reference(rows: np.ndarray) -> np.ndarray | np.float64:
    """median_sorted as it was defined: the Ellipsis index on any shape."""
    n = rows.shape[-1]
    return (rows[..., (n - 1) // 2] + rows[..., n // 2]) * 0.5


def test_median_sorted_matches_its_definition_to_the_bit() -> None:
    for n in (1, 2, 5, 128):
        a = np.sort(RNG.standard_normal(n) * 10.0 ** RNG.integers(-300, 300))
        got, ref = median_sorted(a), _median_reference(a)
        assert type(got) is type(ref) is np.float64 and got.tobytes() == ref.tobytes()
        rows = np.sort(RNG.standard_normal((4, n)), axis=1)
        assert np.array_equal(median_sorted(rows), _median_reference(rows))



def test_strided_rows_are_writable_copies_of_the_windows() -> None:
    a = RNG.standard_normal(300)
    for arr in (a, a[::2]):  # contiguous (the view's fast path) and not
        for start, step, count in ((0, 32, 5), (7, 3, 20), (0, 1, 0)):
            got = strided_rows(arr, 16, start, step, count)
            want = np.array([arr[start + i * step:start + i * step + 16] for i in range(count)]
                            ).reshape(count, 16)
            assert got.flags.writeable and got.flags.c_contiguous
            assert np.array_equal(got, want) and got.shape == want.shape
            if count:
                got[0, 0] = 1e9  # a copy: the series is left as it was
                assert arr[start] != 1e9


def test_nonzero_points_are_the_points_other_than_exact_zeros() -> None:
    def pts(v: list[float]) -> Points:
        n = len(v)
        i = np.arange(n)
        return Points("loss", i + 1, np.array(v), i.astype(float), i)

    plain = pts([0.5, 1.0, -2.0])
    assert plain.nonzero() is plain
    p = pts([0.0, 0.5, -0.0, 1e-300, 0.0])
    z = p.nonzero()
    assert z.values.tolist() == [0.5, 1e-300] and z.pos.tolist() == [1, 3]
    assert z.nonzero() is z
    assert len(pts([0.0, -0.0]).nonzero()) == 0
