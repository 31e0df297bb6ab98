"""Human number formatting shared by check, report and the TUI."""

from __future__ import annotations

import math

import pytest

from trainwatch.humanize import fmt_ago, fmt_count, fmt_duration, fmt_num


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (0, "0"),
        (1, "1"),
        (2.0, "2"),
        (0.5, "0.5"),
        (0.1234, "0.123"),
        (3.14159, "3.14"),
        (512.0, "512"),
        (99.99, "100"),
        (1000, "1k"),
        (1234, "1.23k"),
        (1200, "1.2k"),
        (12345, "12.3k"),
        (999_999, "1M"),
        (1.5e6, "1.5M"),
        (2.3e9, "2.3G"),
        (4e12, "4T"),
        (5e15, "5e15"),
        (0.00034, "3.4e-4"),
        (1e-12, "1e-12"),
        (0.001234, "0.00123"),
        (0.00099999, "0.001"),
        (-1234, "-1.23k"),
        (-0.5, "-0.5"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (None, "-"),
    ],
)
def test_fmt_num(x: float | None, text: str) -> None:
    assert fmt_num(x) == text


def test_fmt_num_significant_digits() -> None:
    assert fmt_num(1234, sig=2) == "1.2k"
    assert fmt_num(123.4, sig=2) == "123"  # never drop integer digits
    # ... nor write an exponent before a suffix
    assert [fmt_num(v, sig=2) for v in (2.2e11, 123_456, 12_345, 9.96e4)] == [
        "220G", "123k", "12k", "100k"]
    assert [fmt_num(v, sig=1) for v in (12_345, 2.2e8, -45_000)] == ["12k", "220M", "-45k"]
    assert fmt_num(0.00034567, sig=2) == "3.5e-4"


@pytest.mark.parametrize(
    ("s", "text"),
    [
        (0, "0 s"),
        (0.0005, "500 µs"),
        (0.25, "250 ms"),
        (1.5, "1.5 s"),
        (4.0, "4 s"),
        (9.96, "10 s"),
        (12.3, "12 s"),
        (59.6, "1 min"),
        (200, "3 min 20 s"),
        (3600, "1 h"),
        (3661, "1 h 01 min"),
        (7500, "2 h 05 min"),
        (90000, "1 d 1 h"),
        (-12, "-12 s"),
        (None, "-"),
        (math.nan, "-"),
    ],
)
def test_fmt_duration(s: float | None, text: str) -> None:
    assert fmt_duration(s) == text


@pytest.mark.parametrize(
    ("s", "text"),
    [(-3, "just now"), (0.4, "just now"), (12.9, "12 s ago"), (185, "3 min ago"),
     (7300, "2 h ago"), (3 * 86400 + 5, "3 d ago"), (None, "never")],
)
def test_fmt_ago(s: float | None, text: str) -> None:
    assert fmt_ago(s) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (12, "12"), (12345, "12,345"), (99_999, "99,999"), (100_000, "100k"),
     (123_456, "123k"), (4_567_890, "4.57M"), (-5, "-5"), (None, "-")],
)
def test_fmt_count(n: int | None, text: str) -> None:
    assert fmt_count(n) == text
