"""Reads over the frames a :class:`~trainwatch.rules.detectors.trend_track.TrendTrack` holds (each a
frame's arrays, oldest first): the step of a point by its index, which of a frame's points are
past the warm-up, and the range of exactly those (the flat test's).

Pure functions over the arrays (steps in order within a segment, so the counted points are a
suffix of each frame's)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from trainwatch.rules.detectors.stats import min_max


def held_step(arrs: Sequence[tuple[np.ndarray, ...]], n: int, i: int) -> int:
    """The step of the point at index ``i`` (0 <= i < n) of the held frames (``arrs``: each
    frame's arrays, steps first; ``n`` points in all), walked to from the nearer end (a few
    frames either way)."""
    if 2 * i >= n:
        k = n - i  # (the k-th last)
        for a in reversed(arrs):
            m = a[0].shape[0]
            if k <= m:
                return a[0].item(m - k)
            k -= m
    else:
        for a in arrs:
            m = a[0].shape[0]
            if i < m:
                return a[0].item(i)
            i -= m
    raise AssertionError("fewer points held than counted")


def first_counted(steps: np.ndarray, n: int, first: int, first_count: int,
                  first_step: float) -> int:
    """Index of the first of n points (steps ``steps``, the first counting ``first``) that
    counts ``first_count`` or more or sits at ``first_step`` or later (n if none)."""
    i = max(0, first_count - first)  # (the point at index j counts first + j)
    if i and first_step < math.inf:
        # (the first i only: a float searched in integer steps converts what it searches, and
        # the answer is at most i either way)
        i = int(steps[:i].searchsorted(first_step, "left"))
    return min(i, n)


def split_range(values: np.ndarray, i: int) -> tuple[float, float, float, float]:
    """(min, max) of ``values[i:]`` (0 < i < len) and of all ``values``: the second from the
    first and the few values before ``i`` (the warm-up's: a frame that holds it is read whole
    once, not twice). Min and max select, so the whole range is the same numbers (a -0.0 and a
    0.0 may swap: no test on a range tells them apart)."""
    lo, hi = min_max(values[i:])
    lo0, hi0 = min_max(values[:i])
    return lo, hi, min(lo, lo0), max(hi, hi0)


def exact_range(frames: Iterable[tuple[np.ndarray, np.ndarray, int]], extra: int,
                first_count: int, first_step: float) -> tuple[float, float] | None:
    """(min, max) of the points of ``frames`` ((steps, values, count of the first), oldest
    first; the last is the new frame) past the warm-up (see :func:`first_counted`), leaving out
    the first ``extra`` points of the held ones (those no window reads); None when none are."""
    frames = list(frames)
    lo, hi = math.inf, -math.inf
    for j, (st, v, c) in enumerate(frames):
        i = first_counted(st, v.shape[0], c, first_count, first_step)
        if j < len(frames) - 1:
            i = max(i, extra)
            extra = max(0, extra - v.shape[0])
        if i < v.shape[0]:
            a, b = min_max(v[i:])
            lo, hi = min(lo, a), max(hi, b)
    return None if lo > hi else (lo, hi)
