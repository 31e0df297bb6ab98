"""Spike-preserving downsampling: fewer points, same story.

A plot of a million steps has a few hundred columns. Averaging or striding would hide exactly what
a person watches training for (a one-step loss spike, a NaN), so every reduction here keeps, per
bucket, the first and last point (the line stays continuous), the finite minimum and maximum (the
spikes) and a non-finite value when there is one (the NaN stays visible, as itself).

Pure functions on numpy arrays; :mod:`trainwatch.store` folds old history into min/max buckets
with :func:`bucket_rows` and :func:`merge_buckets`, built on the same :func:`segment_extremes`.
"""

from __future__ import annotations

import numpy as np

FIRST, MIN, MAX, LAST, NONFINITE = range(5)
"""Columns of :func:`segment_extremes`' result (and slots of a store summary bucket)."""
N_SLOTS = 5


def segment_extremes(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Indices of the notable points of contiguous segments of ``values``.

    ``starts`` holds the first index of each segment (ascending, ``starts[0] == 0``, none empty);
    a segment runs to the next start. Returns an int64 array of shape ``(len(starts), 5)``: per
    segment the index of its first point, finite minimum, finite maximum, last point and first
    non-finite point (columns ``FIRST, MIN, MAX, LAST, NONFINITE``); -1 where a segment has none.
    Ties pick the earliest point. Whole-array work (``reduceat``), no loop per segment.
    """
    n = int(values.shape[0])
    g = int(starts.shape[0])
    out = np.empty((g, N_SLOTS), dtype=np.int64)
    if g == 0:
        return out
    ends = np.empty(g, dtype=np.int64)
    ends[:-1] = starts[1:]
    ends[-1] = n
    sizes = ends - starts
    idx = np.arange(n, dtype=np.int64)
    out[:, FIRST] = starts
    out[:, LAST] = ends - 1

    finite = np.isfinite(values)
    all_finite = bool(finite.all())
    # non-finite values must neither win the min nor the max: replace them by the neutral element
    lo = values if all_finite else np.where(finite, values, np.inf)
    hi = values if all_finite else np.where(finite, values, -np.inf)
    for col, vals, ufunc in ((MIN, lo, np.minimum), (MAX, hi, np.maximum)):
        best = ufunc.reduceat(vals, starts)
        # segmented arg-extreme: the earliest index whose value equals its segment's extreme
        first_hit = np.minimum.reduceat(np.where(vals == np.repeat(best, sizes), idx, n), starts)
        out[:, col] = np.where(np.isfinite(best), first_hit, -1)

    if all_finite:
        out[:, NONFINITE] = -1
    else:
        first_bad = np.minimum.reduceat(np.where(finite, n, idx), starts)
        out[:, NONFINITE] = np.where(first_bad < n, first_bad, -1)
    return out


Buckets = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Summary buckets, one row each: (points folded ``(m,)``, then per slot ``(m, 5)``: steps,
values, times, ingest ordinals). An ordinal of -1 marks an empty slot (a bucket with no finite
value has no min/max; one with no NaN/inf has no non-finite slot)."""


def bucket_rows(
    steps: np.ndarray, values: np.ndarray, times: np.ndarray, ord0: int, width: int
) -> Buckets:
    """Buckets of ``width`` consecutive points (the last may be short); the points' ordinals
    are ``ord0, ord0 + 1, ...``."""
    k = int(steps.shape[0])
    starts = np.arange(0, k, width, dtype=np.int64)
    ext = segment_extremes(values, starts)
    valid = ext >= 0
    pos = np.where(valid, ext, 0)
    n = np.diff(np.append(starts, k))
    return n, steps[pos], values[pos], times[pos], np.where(valid, ext + ord0, -1)


def merge_buckets(a: Buckets, b: Buckets) -> Buckets:
    """Row-wise merge of buckets ``a`` with the buckets ``b`` that directly follow them.

    Exact for every slot: the first/min/max/last/first-NaN of a union is among those of its
    halves (ties keep the earlier point, like :func:`segment_extremes`).
    """
    a_ok, b_ok = a[4] >= 0, b[4] >= 0
    av, bv = a[2], b[2]
    take_a = np.empty_like(a_ok)
    take_a[:, FIRST] = a_ok[:, FIRST]
    take_a[:, MIN] = a_ok[:, MIN] & (~b_ok[:, MIN] | (av[:, MIN] <= bv[:, MIN]))
    take_a[:, MAX] = a_ok[:, MAX] & (~b_ok[:, MAX] | (av[:, MAX] >= bv[:, MAX]))
    take_a[:, LAST] = ~b_ok[:, LAST]
    take_a[:, NONFINITE] = a_ok[:, NONFINITE]
    step, value, time, ordinal = (np.where(take_a, x, y) for x, y in zip(a[1:], b[1:]))
    return a[0] + b[0], step, value, time, ordinal


def _bucket_keys(steps: np.ndarray, n_buckets: int) -> np.ndarray:
    """Bucket of each point: equal step ranges (so output density is even along a step axis).

    Falls back to equal point counts when steps are not ascending or all equal, so the number of
    distinct, contiguous buckets never exceeds ``n_buckets``.
    """
    n = int(steps.shape[0])
    span = int(steps[-1]) - int(steps[0]) if n else 0
    if span <= 0 or bool(np.any(steps[1:] < steps[:-1])):
        return np.arange(n, dtype=np.int64) * n_buckets // n
    # float maths: int64 products could overflow for huge step numbers; floor keeps it monotone
    rel = (steps - steps[0]).astype(np.float64) * (n_buckets / (span + 1.0))
    return np.minimum(rel.astype(np.int64), n_buckets - 1)


def minmax_indices(steps: np.ndarray, values: np.ndarray, max_points: int) -> np.ndarray:
    """Ascending indices of the points :func:`minmax_downsample` keeps (``arange`` when all fit).

    Splits the step range into ``(max_points - 1) // 4`` buckets and keeps, per bucket, its first
    point, finite min, finite max and last point; when the bucket holds a NaN/inf that is not its
    first point, that value takes the last point's place, so at most 4 points per bucket. The
    very last point is always kept too: it is the current value, where a plot's line must end.
    """
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, got {max_points}")
    n = int(values.shape[0])
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    if max_points < 5:
        # too few for a bucket's four points: keep the most telling ones in priority order
        ext = segment_extremes(values, np.zeros(1, dtype=np.int64))[0]
        picked: list[int] = []
        for i in (ext[NONFINITE], ext[MAX], ext[MIN], ext[LAST], ext[FIRST]):
            if i >= 0 and int(i) not in picked:
                picked.append(int(i))
        return np.sort(np.asarray(picked[:max_points], dtype=np.int64))
    keys = _bucket_keys(steps, (max_points - 1) // 4)
    starts = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1)).astype(np.int64)
    ext = segment_extremes(values, starts)
    bad = ext[:, NONFINITE]
    last = np.where((bad >= 0) & (bad != ext[:, FIRST]), bad, ext[:, LAST])
    sel = np.concatenate((ext[:, FIRST], ext[:, MIN], ext[:, MAX], last, [n - 1]))
    return np.unique(sel[sel >= 0])  # sorted and deduplicated: step order, each point once


def minmax_downsample(
    steps: np.ndarray, values: np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points; per bucket keep first/min/max/last in step order so a
    one-step spike stays visible; a NaN/inf in a bucket is kept (as the value itself) so a NaN
    stays visible.

    ``steps`` should be ascending (equal steps are fine). Returns the inputs themselves when
    ``len(values) <= max_points``; otherwise new arrays.
    """
    if steps.shape != values.shape:
        raise ValueError(f"steps and values differ in shape: {steps.shape} vs {values.shape}")
    idx = minmax_indices(steps, values, max_points)
    if idx.shape[0] == values.shape[0]:
        return steps, values
    return steps[idx], values[idx]
