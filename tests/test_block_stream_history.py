"""A lazy block stream's noise history (rules/detectors/block_stream.py): a push whose noise is read keeps
the relative errors of the stream's last blocks, and the next push reads its history from there
instead of recomputing it; pushes whose noise nobody read are computed from their rows. Either
way the blocks are an eager stream's, to the bit, whatever the order of reads."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.detectors.block_stream import BlockStream
from trainwatch.rules.engine.base import Points


def _points(v: np.ndarray, start: int) -> Points:
    idx = np.arange(start, start + v.shape[0])
    return Points("loss", idx, v, idx.astype(np.float64), idx)


def _loss(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = np.exp(-np.arange(n) / 900.0) * (1.0 + 0.05 * rng.standard_normal(n))
    v[300:340] = 0.0  # (medians of 0: no relative noise there)
    return v


@pytest.mark.parametrize("read", ["every", "every_other", "some"])
@pytest.mark.parametrize("seed", range(3))
def test_lazy_history_gives_the_eager_noise(seed: int, read: str) -> None:
    """Pushes of 1 to 300 points (none, one, a few or many blocks, the Python and the numpy
    paths), the noise read at every push (a live watch: each push's history from the last
    one's), every other push, or at random ones: each read is the eager stream's noise."""
    rng = np.random.default_rng(100 + seed)
    v = _loss(seed, 6000)
    for k in (25, 50):
        eager, lazy = BlockStream(k), BlockStream(k, lazy=True)
        pos = pushes = reads = 0
        while pos < v.shape[0]:
            c = int(rng.integers(1, 300)) if rng.random() < 0.5 else int(rng.integers(1, 2 * k))
            part = _points(v[pos:pos + c], pos)
            a, b = eager.push(part), lazy.push(part)
            pos += c
            if not len(a):
                continue
            pushes += 1
            if read == "every" or (read == "every_other" and pushes % 2) or (
                    read == "some" and rng.random() < 0.3):
                assert np.array_equal(a.noise, b.noise), (k, pos)
                assert np.array_equal(a.mad, b.mad), (k, pos)
                reads += 1
        assert reads >= 8


def test_a_read_push_hands_its_history_on() -> None:
    """After a read push, the next push's history comes from it: the rows of the pushes before
    are not read again (here they are made unreadable, and the noise is still the eager one)."""
    v = _loss(7, 1200)
    eager, lazy = BlockStream(50), BlockStream(50, lazy=True)
    for start in range(0, 1200, 100):  # (two blocks a push: the Python path)
        part = _points(v[start:start + 100], start)
        a, b = eager.push(part), lazy.push(part)
        for p in lazy._tail[:-1]:
            p.rows = None  # type: ignore[assignment]
        assert np.array_equal(a.noise, b.noise), start
