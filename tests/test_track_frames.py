"""The reads over a growth track's held frames (:mod:`trainwatch.rules.detectors.track_frames`) against
the same reads on the frames concatenated."""

from __future__ import annotations

import math

import numpy as np

from trainwatch.rules.detectors.track_frames import (
    exact_range,
    first_counted,
    held_step,
    split_range,
)


def _frames(rng: np.random.Generator, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    steps = np.cumsum(rng.integers(1, 4, sum(sizes)))
    values = rng.normal(10.0, 1.0, sum(sizes))
    cuts = np.cumsum(sizes)[:-1]
    return list(zip(np.split(steps, cuts), np.split(values, cuts)))


def test_held_step_is_the_step_at_that_index_of_the_frames_laid_end_to_end() -> None:
    rng = np.random.default_rng(21)
    for sizes in ([1], [5], [3, 1, 7], [200, 2, 2, 15], [1, 1, 1, 1]):
        frames = _frames(rng, sizes)
        steps = np.concatenate([f[0] for f in frames])
        n = steps.shape[0]
        for i in range(n):  # (both walks: from the oldest frame and from the newest)
            assert held_step(frames, n, i) == steps[i], (sizes, i)


def test_split_range_is_the_counted_range_and_the_whole_one() -> None:
    rng = np.random.default_rng(22)
    for n in (2, 10, 65, 300, 3000):
        v = rng.normal(0.0, 1.0, n)
        for i in {1, max(1, n // 3), n - 1}:
            lo, hi, a, b = split_range(v, i)
            assert (lo, hi) == (float(v[i:].min()), float(v[i:].max()))
            assert (a, b) == (float(v.min()), float(v.max()))
    v = np.array([5.0, -1.0, 2.0, 3.0])  # the extremes in the warm-up only
    assert split_range(v, 2) == (2.0, 3.0, -1.0, 5.0)


def test_exact_range_reads_only_the_counted_points_a_window_can_hold() -> None:
    rng = np.random.default_rng(23)
    for sizes in ([40], [12, 30, 8], [3, 3, 3, 50]):
        frames = _frames(rng, sizes)
        steps = np.concatenate([f[0] for f in frames])
        values = np.concatenate([f[1] for f in frames])
        firsts = np.cumsum([1, *sizes[:-1]]).tolist()
        for extra in (0, 2, sizes[0] + 1):
            for first_count, first_step in ((1, math.inf), (10, math.inf), (20, float(steps[5])),
                                            (10_000, math.inf)):
                got = exact_range([(s, v, c) for (s, v), c in zip(frames, firsts)], extra,
                                  first_count, first_step)
                count = np.arange(1, steps.shape[0] + 1)
                held = np.arange(steps.shape[0]) < sum(sizes[:-1])
                keep = (count >= first_count) | (steps >= first_step)
                keep &= ~(held & (np.arange(steps.shape[0]) < extra))
                ref = (float(values[keep].min()), float(values[keep].max())) if keep.any() else None
                assert got == ref, (sizes, extra, first_count, first_step)



def test_first_counted_is_the_first_point_past_the_warm_up() -> None:
    steps = np.array([2, 4, 4, 7, 9, 12, 15])
    count = np.arange(5, 12)  # (the first point counts 5)
    for first_count, first_step in ((1, math.inf), (8, math.inf), (8, 7.0), (8, 3.0), (8, 20.0),
                                    (100, math.inf), (100, 9.0)):
        keep = (count >= first_count) | (steps >= first_step)
        ref = int(np.argmax(keep)) if keep.any() else steps.shape[0]
        assert first_counted(steps, steps.shape[0], 5, first_count, first_step) == ref
