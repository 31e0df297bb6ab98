"""``MedianBlocks`` (short pushes in Python floats, long ones in numpy), pushed a stream in
pieces of every size, against the blocks of the whole stream sorted by numpy: the same medians
bit for bit (signs of zeros included) and the same block ends."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.detectors.median_blocks import SHORT, MedianBlocks
from trainwatch.rules.engine.base import Points


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Noisy values with stretches of exact repeats and of zeros of both signs (where the
    order a sort gives equal zeros shows in a median's sign)."""
    v = rng.uniform(50.0, 150.0, n)
    for _ in range(int(rng.integers(0, 6))):
        a = int(rng.integers(0, n))
        b = min(n, a + int(rng.integers(1, 60)))
        kind = rng.integers(0, 3)
        if kind == 0:
            v[a:b] = round(float(v[a]), 1)
        elif kind == 1:
            v[a:b] = np.where(rng.random(b - a) < 0.5, 0.0, -0.0)
        else:
            v[a:b] = rng.choice([0.0, -0.0, 3.0, -2.0], b - a)
    return v


def _reference(v: np.ndarray, k: int) -> np.ndarray:
    """The medians of the whole stream's blocks, from numpy's sort of its rows."""
    rows = np.sort(v[: v.shape[0] // k * k].reshape(-1, k), axis=1)
    med = rows[:, (k - 1) // 2] + rows[:, k // 2]
    med *= 0.5
    return med


@pytest.mark.parametrize("seed", range(4))
def test_medians_and_ends_match_the_whole_stream(seed: int) -> None:
    rng = np.random.default_rng([seed, 31])
    pushes = {True: 0, False: 0}
    zero_meds = 0
    for _ in range(60):
        k = int(rng.choice([2, 3, 7, 20]))
        n = int(rng.integers(1, 3000))
        v = _values(rng, n)
        steps = np.arange(n, dtype=np.int64) * 3 + 1
        blocks = MedianBlocks(k)
        short = bool(rng.random() < 0.8)
        meds: list[float] = []
        ends: list[int] = []
        a = 0
        while a < n:
            size = int(rng.integers(1, 20)) if rng.random() < 0.8 else int(rng.integers(1, 400))
            b = min(n, a + size)
            pts = Points("x", steps[a:b], v[a:b], steps[a:b] * 0.5, steps[a:b] + 7)
            got = blocks.push(pts, short=short)
            if got:
                blk = blocks.blocks()
                assert blk.med.tobytes() == np.array(got).tobytes()
                assert blk.time.tolist() == (blk.step * 0.5).tolist()
                assert blk.pos.tolist() == (blk.step + 7).tolist()
                ends += blk.step.tolist()
                pushes[short and b - a <= SHORT] += 1
            meds += got
            a = b
        want = _reference(v, k)
        assert np.array(meds, dtype=np.float64).tobytes() == want.tobytes()
        assert ends == steps[k - 1::k][: want.shape[0]].tolist()
        zero_meds += int(np.count_nonzero(want == 0.0))
    assert min(pushes.values()) > 100 and zero_meds > 50, (pushes, zero_meds)
