"""``fmt_num``'s fast path against the general formatting it short-cuts.

Alerts, reports and the TUI print numbers through ``fmt_num``; its fast path (one ``format`` call
for values in [1e-3, 1e3)) must give the very text the general path gives, on every value.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from trainwatch.humanize import _fmt_general, fmt_num


def reference_fmt_num(x: float | None, sig: int = 3) -> str:
    """``fmt_num`` without its fast path: the general formatting, which every value took before."""
    return "-" if x is None else _fmt_general(float(x), sig)


def _values() -> list[float]:
    """Random magnitudes over 1e-8..1e17, both signs, and every boundary the paths meet: round
    numbers, the values just below them that round up (99.95, 999.5, 0.00099999), their float
    neighbours, short decimals, integers, halves."""
    rng = random.Random(20240601)
    vals = [10 ** rng.uniform(-8, 17) * rng.choice((1, -1)) for _ in range(20_000)]
    vals += [round(rng.uniform(0, 1200), rng.randint(0, 4)) for _ in range(5_000)]
    for e in range(-6, 16):
        for m in (1, 0.99999, 0.9995, 0.995, 0.95, 0.9999999, 1.0000001, 0.5, 0.25, 9.95,
                  9.995, 9.9995, 1.005, 1.0005, 1.05, 2.5, 0.125):
            b = m * 10.0**e
            vals += [b, math.nextafter(b, 0), math.nextafter(b, math.inf)]
    vals += [0.0, -0.0, 1e-3, 999.5, 99.5, 9.5, 0.001, 1000.0, math.nan, math.inf, -math.inf,
             5e-324, 1.7976931348623157e308]
    return vals + [-v for v in vals]


@pytest.mark.parametrize("sig", [1, 2, 3, 4, 6])
def test_fmt_num_fast_path_matches_the_general_formatting(sig: int) -> None:
    vals = _values()
    got = [fmt_num(v, sig) for v in vals]
    want = [reference_fmt_num(v, sig) for v in vals]
    bad = [(v, g, w) for v, g, w in zip(vals, got, want) if g != w]
    assert not bad, bad[:10]


def test_fmt_num_takes_numpy_and_int_values_like_floats() -> None:
    for v in (np.float64(0.123456), np.float32(3.5), np.int64(7), 12, True, np.float64(-999.7)):
        assert fmt_num(v, 2) == reference_fmt_num(v, 2)
        assert fmt_num(v) == reference_fmt_num(v)
    assert fmt_num(None) == "-"
