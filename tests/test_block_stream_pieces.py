"""A block stream pushed in pieces of every size gives the blocks of the stream pushed whole, to
the bit: a push of a few blocks makes them on Python floats, a long one in numpy
(rules/detectors/block_stream.py), and a lazy stream's spread is computed either way when read."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.detectors.block_stream import PY_BLOCKS, BlockStream
from trainwatch.rules.engine.base import Points


def _points(v: np.ndarray, start: int) -> Points:
    idx = np.arange(start, start + v.shape[0])
    return Points("loss", idx, v, idx.astype(np.float64), idx)


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    v = np.exp(-np.arange(n) / 1500.0) * (1.0 + 0.05 * rng.standard_normal(n))
    v[700:800] = 0.0  # (medians of 0: no relative noise there)
    v[900:960] = np.where(rng.random(60) < 0.5, 0.0, 1e-3)  # (medians of 0 with a spread)
    v[1500:1525] *= 1e300  # (a huge spread over a median: treated as no noise)
    v[2000:2100] = -v[2000:2100]  # (a negative level)
    # (a MAD that overflows over a tiny median: treated as no noise), for k = 50 and k = 25
    v[3000:3050] = [-1e308] * 24 + [1e-3] * 2 + [1e308] * 24
    v[3100:3125] = [-1e308] * 12 + [1e-3] + [1e308] * 12
    # (zeros of both signs: the sign of a zero median is the one numpy's sort puts in the middle)
    c = rng.random(400)
    v[3200:3600] = np.where(c < 0.45, -0.0, np.where(c < 0.9, 0.0, 1e-3))
    return v


# (the overflowing blocks warn in numpy, as they always did: their values are the point here)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("k", [25, 50])
@pytest.mark.parametrize("lazy", [False, True])
def test_pieces_give_the_whole_streams_blocks(k: int, lazy: bool) -> None:
    rng = np.random.default_rng(k + lazy)
    n = 4000
    v = _values(rng, n)
    whole = BlockStream(k, lazy=lazy).push(_points(v, 0))
    short = 0
    for top in (k // 2, 2 * k, (PY_BLOCKS + 2) * k):  # (mostly none or one block; a few; many)
        bs = BlockStream(k, lazy=lazy)
        parts, pos = [], 0
        while pos < n:
            c = int(rng.integers(1, top))
            parts.append(bs.push(_points(v[pos:pos + c], pos)))
            short += 0 < len(parts[-1]) <= PY_BLOCKS
            pos += c
        for name in ("med", "mad", "noise", "step", "time", "pos"):
            got = np.concatenate([getattr(p, name) for p in parts])
            # (as bytes: -0.0 and 0.0 differ, as they do in a message)
            assert got.tobytes() == getattr(whole, name).tobytes(), (top, name)
    assert short > 50
