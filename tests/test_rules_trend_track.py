"""The growth analysis' track of a series' recent points, which holds the frames as they came and
concatenates them only when a frame is evaluated, against a reference that keeps every point:
what a push returns, and the value range the quick flat test reads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainwatch.rules.detectors.trend_track import TrendTrack
from trainwatch.rules.engine.base import Points


def _frames(seed: int, n: int, level: float) -> list[Points]:
    """n points (steps 1, 2, ... with a few gaps) in frames of 0 to 40 points."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(1, 3, n))
    vals = level + rng.normal(0, 1, n)
    vals[:11] += 50.0  # (a warm-up unlike the rest: a range that counted it would show it)
    pos = np.arange(n) * 3 + 7
    out, i = [], 0
    while i < n:
        k = int(rng.choice([0, 1, 3, 15, 16, 40]))
        cut = slice(i, min(n, i + k))
        out.append(Points("memory", steps[cut], vals[cut], steps[cut] * 0.5, pos[cut]))
        i += k
    return out


def _reference_range(vals: np.ndarray, steps: np.ndarray, seen: int, keep: int, new: int,
                     first_count: int, first_step: float) -> tuple[float, float] | None:
    """(min, max) over the last ``keep`` points before the frame and its ``new`` ones, of those
    counting first_count or more or at first_step or later, one by one."""
    idx = [i for i in range(max(0, seen - keep), seen + new)
           if i + 1 >= first_count or steps[i] >= first_step]
    return (float(vals[idx].min()), float(vals[idx].max())) if idx else None


@pytest.mark.parametrize("keep", [25, 60])
@pytest.mark.parametrize(("seed", "level"), [(0, 100.0), (1, 100.0), (2, 0.5), (3, -50.0)])
def test_push_and_range_match_the_reference(seed: int, level: float, keep: int) -> None:
    frames = _frames(seed, 400, level)
    vals = np.concatenate([f.values for f in frames])
    steps = np.concatenate([f.steps for f in frames])
    pos = np.concatenate([f.pos for f in frames])
    track = TrendTrack(keep)
    rng = np.random.default_rng(seed + 10)
    seen = 0
    for f in frames:
        n = len(f)
        for first_count, first_step in ((1, math.inf), (12, math.inf), (60, 41.0),
                                        (500, math.inf)):
            got = track.minmax_from(f, first_count, first_step)
            want = _reference_range(vals, steps, seen, keep, n, first_count, first_step)
            if want is None or got is None:
                assert got == want
                continue
            # never narrower; wider only by older points of a positive series (the flat test
            # then fails where it could pass: the analysis takes the long way, never a wrong one)
            # and never by a warm-up point: at most the oldest held frame more (a push holds its
            # last keep and up to 40 new points as one), past the warm-up
            wide = _reference_range(vals, steps, seen, 2 * keep + 40, n, first_count, first_step)
            assert wide is not None
            assert wide[0] <= got[0] <= want[0] and want[1] <= got[1] <= wide[1]
            assert got == want or got[0] > 0, (got, want)
        if rng.random() < (0.9 if (seen // 100) % 2 else 0.2):  # (streaks of either)
            p = track.push(f)
            lo = max(0, seen - keep)
            assert (p.n_old, p.c0) == (seen - lo, seen)
            assert p.steps.tolist() == steps[lo:seen + n].tolist()
            assert p.values.tolist() == vals[lo:seen + n].tolist()
            assert p.pos.tolist() == pos[lo:seen + n].tolist()
            assert p.times.tolist() == (steps[lo:seen + n] * 0.5).tolist()
            assert p.steps.dtype == np.int64 and p.pos.dtype == np.int64
        else:
            track.advance(f)
        seen += n
        assert track.count == seen


def test_the_range_is_exact_where_the_series_is_not_positive() -> None:
    # older points widen a range; around 0 a wider range could pass the flat test (it is
    # relative to the minimum's size) where the exact one fails: then the exact points are taken
    track = TrendTrack(10)
    old = np.array([-100.0] * 6 + [-1.0] * 2)
    track.advance(Points("m", np.arange(1, 9), old, np.zeros(8), np.arange(8)))
    vals = np.full(8, 1.0)
    vals[0] = 2.0
    track.advance(Points("m", np.arange(9, 17), vals, np.zeros(8), np.arange(8, 16)))
    new = Points("m", np.array([17]), np.array([1.5]), np.zeros(1), np.array([16]))
    # held: both frames (16 points); the last 10 are the first frame's last 2 and the second
    assert track.minmax_from(new, 1, math.inf) == (-1.0, 2.0)
    track.advance(Points("m", np.arange(17, 20), np.ones(3), np.zeros(3), np.arange(16, 19)))
    # the first frame is let go; the second's 2.0 is 11 points back but still held: a positive
    # range may count it (wider: never a wrong skip)
    assert track.minmax_from(new, 1, math.inf) == (1.0, 2.0)


def test_a_push_holds_its_points_as_one_frame() -> None:
    # (the next push concatenates two arrays, not every frame held since: if it held the frames
    # apart, a run of evaluated frames would copy ever more of them)
    track = TrendTrack(50)
    for f in _frames(4, 300, 100.0):
        if len(f):
            track.push(f)
            assert len(track._arrs) == 1


def test_points_of_other_dtypes_are_taken_as_a_concatenation_gives_them() -> None:
    track = TrendTrack(10)
    f = Points("m", np.arange(1, 6, dtype=np.int32), np.ones(5, dtype=np.float32),
               np.zeros(5), np.arange(5, dtype=np.int32))
    p = track.push(f)
    assert (p.steps.dtype, p.values.dtype, p.pos.dtype) == (np.int64, np.float64, np.int64)
    assert p.steps.tolist() == [1, 2, 3, 4, 5] and track.minmax_from(f, 1, math.inf) == (1.0, 1.0)
