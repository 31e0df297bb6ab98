"""Numbers, durations and counts written for people: ``1.2k``, ``3.4e-4``, ``12 s``, ``3 min ago``.

Pure functions with no dependencies, shared by ``trainwatch check``/``report`` and the TUI so the
same value reads the same everywhere.
"""

from __future__ import annotations

import math

_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_G_SPECS = {sig: f".{sig}g" for sig in range(1, 4)}
"""Format specs of :func:`fmt_num`'s fast path (``sig`` <= 3: its results stay below 1k)."""


def _trim(mantissa: str) -> str:
    """``"1.20"`` -> ``"1.2"``, ``"3.00"`` -> ``"3"`` (trailing zeros carry no information here)."""
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return mantissa


def _sci(x: float, sig: int) -> str:
    """``0.00034`` -> ``"3.4e-4"``: Python's ``3.40e-04`` without the padding."""
    mant, exp = f"{x:.{sig - 1}e}".split("e")
    return f"{_trim(mant)}e{int(exp)}"


def fmt_num(x: float | None, sig: int = 3) -> str:
    """A metric value in at most ``sig`` significant digits.

    Large values take a k/M/G/T suffix (``1234`` -> ``"1.23k"``), tiny ones scientific notation
    (``0.00034`` -> ``"3.4e-4"``), the rest plain (``0.1234`` -> ``"0.123"``, ``512.0`` -> ``"512"``).
    Non-finite values read ``nan``, ``inf``, ``-inf``; ``None`` reads ``-``.
    """
    if x is None:
        return "-"
    x = float(x)
    a = -x if x < 0 else x
    if 1e-3 <= a < 1e3 and 0 < sig <= 3:  # (NaN fails both comparisons: general path)
        # The usual case, in one format call: "g" writes a value in [1e-3, 1e3) in plain
        # notation without trailing zeros, exactly what the general path below returns, unless it
        # rounds up to 10**sig or more (then it writes an exponent: left to the general path).
        s = format(a, _G_SPECS[sig])
        if "e" not in s:
            return "-" + s if x < 0 else s
    return _fmt_general(x, sig)


def _fmt_general(x: float, sig: int) -> str:
    """:func:`fmt_num` of a float, any magnitude."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    a = abs(x)
    # compare the rounded value so 999_999 reads "1M" (not "1e+03k") and 0.00099999 "0.001"
    r = float(f"{a:.{sig}g}")
    if r >= 1e15:
        return sign + _sci(a, sig)
    for scale, suffix in _SUFFIXES:
        if r >= scale:
            m = a / scale
            if round(m) >= 10**sig:  # (220 G in 2 digits: keep the integer, not "2.2e+02G")
                return sign + str(round(m)) + suffix
            return sign + _trim(f"{m:.{sig}g}") + suffix
    if r < 1e-3:
        return sign + _sci(a, sig)
    if r >= 10**sig:  # fewer digits asked for than the integer part has: keep the integer
        return sign + str(round(a))
    return sign + _trim(f"{r:.{sig}g}")


def fmt_duration(seconds: float | None) -> str:
    """A span of time: ``"850 ms"``, ``"4.2 s"``, ``"12 s"``, ``"3 min 20 s"``, ``"2 h 05 min"``,
    ``"3 d 4 h"``. Sub-minute values keep one decimal below 10 s, where it still matters."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(float(seconds))
    if s == 0:
        return "0 s"
    if s < 1e-3:
        return f"{sign}{s * 1e6:.0f} µs"
    if s < 1:
        return f"{sign}{s * 1e3:.0f} ms"
    if s < 10 and round(s, 1) < 10:
        return f"{sign}{_trim(f'{s:.1f}')} s"
    total = round(s)
    if total < 60:
        return f"{sign}{total} s"
    if total < 3600:
        m, sec = divmod(total, 60)
        return f"{sign}{m} min" + (f" {sec} s" if sec else "")
    if total < 86400:
        h, rem = divmod(total, 3600)
        m = rem // 60
        return f"{sign}{h} h" + (f" {m:02d} min" if m else "")
    if total >= 100_000 * 86400:  # a bogus timestamp's span: a few digits, not three hundred
        return f"{sign}{fmt_num(s / 86400)} d"
    d, rem = divmod(total, 86400)
    h = rem // 3600
    return f"{sign}{d} d" + (f" {h} h" if h else "")


def fmt_ago(seconds: float | None) -> str:
    """How long ago something happened, coarsely: ``"just now"``, ``"12 s ago"``, ``"3 min ago"``.

    A negative age (a clock slightly ahead of ours) reads ``"just now"`` rather than the future.
    """
    if seconds is None or not math.isfinite(seconds):
        return "never"
    s = float(seconds)
    if s < 1:
        return "just now"
    if s < 60:
        return f"{int(s)} s ago"
    if s < 3600:
        return f"{int(s // 60)} min ago"
    if s < 86400:
        return f"{int(s // 3600)} h ago"
    return f"{int(s // 86400)} d ago"


def fmt_count(n: float | None) -> str:
    """A count of things: exact with separators below 100,000 (``"12,345"``), compact above
    (``"123k"``, ``"4.57M"``), where the last digits no longer mean anything to a reader."""
    if n is None:
        return "-"
    if isinstance(n, float) and not math.isfinite(n):
        return fmt_num(n)
    n = int(n)
    if abs(n) < 100_000:
        return f"{n:,}"
    return fmt_num(n)
