"""One-line sparklines and trend arrows for the metrics table and the runs list (pure numpy)."""

from __future__ import annotations

import math

import numpy as np

BARS = "▁▂▃▄▅▆▇█"
NONFINITE_MARK = "×"
"""Drawn in a bucket that holds a NaN or inf: a fault is never averaged away."""


def sparkline(values: np.ndarray, width: int) -> str:
    """``values`` as ``width`` (or fewer, for short series) bar characters.

    Values are bucketed left to right; each bucket shows its mean (finite values only) scaled
    between the finite min and max. A bucket holding any non-finite value shows ``×``.
    """
    v = np.asarray(values, dtype=np.float64)
    if width <= 0 or v.size == 0:
        return ""
    n_buckets = min(width, v.size)
    edges = np.linspace(0, v.size, n_buckets + 1).astype(np.int64)
    finite = np.isfinite(v)
    vz = np.where(finite, v, 0.0)
    csum = np.concatenate(([0.0], np.cumsum(vz)))
    ccount = np.concatenate(([0], np.cumsum(finite)))
    sums = csum[edges[1:]] - csum[edges[:-1]]
    counts = ccount[edges[1:]] - ccount[edges[:-1]]
    sizes = edges[1:] - edges[:-1]
    bad = counts < sizes
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    ok = counts > 0
    if not ok.any():
        return NONFINITE_MARK * n_buckets
    lo, hi = float(means[ok].min()), float(means[ok].max())
    span = hi - lo
    if span > 0 and np.isfinite(span):
        idx = np.clip(((means - lo) / span * (len(BARS) - 1)).round(), 0, len(BARS) - 1)
    else:
        idx = np.full(n_buckets, 3.0)
    chars = [NONFINITE_MARK if b else BARS[int(i)] for i, b in zip(np.nan_to_num(idx), bad)]
    return "".join(chars)


def trend(values: np.ndarray, window: int = 50) -> str:
    """``↑``, ``↓`` or ``→``: the recent direction of the finite values.

    Compares the mean of the last half of the last ``window`` finite values with the first half;
    a change within two standard errors of that difference (noise), or below 0.1 % of the
    level, counts as flat.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)][-window:]
    if v.size < 4:
        return "→"
    half = v.size // 2
    first, second = v[:half], v[half:]
    a, b = float(first.mean()), float(second.mean())
    noise = 2.0 * math.sqrt(float(first.var()) / first.size + float(second.var()) / second.size)
    level = max(abs(a), abs(b)) * 1e-3
    if abs(b - a) <= max(noise, level):
        return "→"
    return "↑" if b > a else "↓"
