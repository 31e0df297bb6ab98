"""The block detectors against plain references written from their definitions, on seeded data,
compared after every push (as river's drift tests compare a detector after every element):

- :class:`~trainwatch.rules.detectors.blocks.BlockStream`: each block of ``k`` finite points, its
  median, MAD, relative noise level (the median of the last 8 blocks' relative standard errors)
  and the step, time and record of its last point;
- :class:`~trainwatch.rules.detectors.block_levels.BlockLevels`: the level (the median of a block
  and the two before it) and the between-block scatter (1.0484 x the median of the last 16
  relative jumps, at least 4) at each block of a segment.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainwatch.rules.detectors.block_levels import BlockLevels
from trainwatch.rules.detectors.blocks import BlockStream
from trainwatch.rules.engine.base import Points


def _points(v: np.ndarray, start: int) -> Points:
    idx = np.arange(start, start + v.shape[0])
    return Points("loss", idx * 2 + 1, v, idx * 0.5, idx)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[(n - 1) // 2] + s[n // 2]) / 2


def _reference_blocks(v: list[float], k: int) -> list[tuple[float, float, float, int]]:
    """(median, MAD, noise level, index of the last point) of every block, by the definition."""
    se = 1.2533 * 1.4826 / math.sqrt(k)
    out, rels = [], []
    for j in range(len(v) // k):
        block = v[j * k:(j + 1) * k]
        med = _median(block)
        mad = _median([abs(x - med) for x in block])
        rel = se * mad / abs(med) if med != 0 else 0.0
        rels.append(rel if math.isfinite(rel) else 0.0)
        out.append((med, mad, _median(rels[-8:]), (j + 1) * k - 1))
    return out


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    v = np.exp(-np.arange(n) / 1500.0) * (1.0 + rng.choice([0.01, 0.05, 0.5]) *
                                          rng.standard_normal(n))
    v[700:800] = 0.0  # (medians of 0: no relative noise there)
    v[900:960] = np.where(rng.random(60) < 0.5, 0.0, 1e-3)  # (medians of 0 with a spread)
    v[2000:2100] = -v[2000:2100]  # (a negative level)
    return v


@pytest.mark.parametrize("seed", range(4))
def test_block_stream_is_the_definition_after_every_push(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    v = _values(rng, n)
    for k in (3, 25, 50):
        want = _reference_blocks(v.tolist(), k)
        stream, got, pos = BlockStream(k), [], 0
        while pos < n:  # (pushes of no block, one, a few or many)
            c = int(rng.integers(1, 2 * k)) if rng.random() < 0.8 else int(rng.integers(1, 600))
            b = stream.push(_points(v[pos:pos + c], pos))
            for i in range(len(b)):
                got.append((float(b.med[i]), float(b.mad[i]), float(b.noise[i]), int(b.pos[i])))
                assert int(b.step[i]) == 2 * int(b.pos[i]) + 1 and b.time[i] == 0.5 * b.pos[i]
            pos = min(n, pos + c)
            assert len(got) == pos // k  # every block out as soon as its last point came
            for g, w in zip(got[len(got) - len(b):], want[len(got) - len(b):len(got)]):
                assert g[0] == w[0] and g[3] == w[3], (k, g, w)
                assert g[1] == pytest.approx(w[1], rel=1e-12, abs=1e-300)
                assert g[2] == pytest.approx(w[2], rel=1e-12, abs=1e-300)


# (the overflowing blocks warn in numpy: their values are the point here)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("k", [25, 50])
def test_pieces_give_the_whole_streams_blocks_to_the_bit(k: int) -> None:
    """However the stream is cut, the same blocks to the bit: the sign of a zero median, a huge
    spread over a tiny median (no noise) and a MAD that overflows included."""
    rng = np.random.default_rng(k)
    n = 4000
    v = _values(rng, n)
    v[1500:1525] *= 1e300  # (a huge spread over a median: treated as no noise)
    v[3000:3050] = [-1e308] * 24 + [1e-3] * 2 + [1e308] * 24  # (a MAD that overflows)
    v[3100:3125] = [-1e308] * 12 + [1e-3] + [1e308] * 12
    c = rng.random(400)  # (zeros of both signs: the sign of a zero median is numpy's sort's)
    v[3200:3600] = np.where(c < 0.45, -0.0, np.where(c < 0.9, 0.0, 1e-3))
    whole = BlockStream(k).push(_points(v, 0))
    assert np.all(np.isfinite(whole.noise))
    for top in (k // 2, 2 * k, 6 * k):
        bs, parts, pos = BlockStream(k), [], 0
        while pos < n:
            c = int(rng.integers(1, top))
            parts.append(bs.push(_points(v[pos:pos + c], pos)))
            pos += c
        for name in ("med", "mad", "noise", "step", "time", "pos"):
            got = np.concatenate([getattr(p, name) for p in parts])
            assert got.tobytes() == getattr(whole, name).tobytes(), (top, name)


def _reference_levels(med: list[float]) -> list[tuple[float, float]]:
    """(level, scatter) at each block of a segment, by the definition."""
    out, jumps = [], []
    for t, m in enumerate(med):
        if t:
            base = abs(med[t - 1])
            jumps.append(abs(m - med[t - 1]) / (base if base > 0 else 1.0))
        scatter = 1.0484 * _median(jumps[-16:]) if len(jumps) >= 4 else 0.0
        out.append((_median(med[max(0, t - 2):t + 1]), scatter))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_block_levels_are_the_definition_after_every_push(seed: int) -> None:
    rng = np.random.default_rng(10 + seed)
    med = (1.0 + 0.05 * rng.standard_normal(300)).tolist()
    med[20] = med[21] = 0.0  # (jumps from 0 are absolute)
    want = _reference_levels(med)
    levels, got, pos = BlockLevels(), [], 0
    while pos < len(med):  # (frames of one block, as live, or many)
        c = 1 if rng.random() < 0.5 else int(rng.integers(1, 40))
        level, scatter = levels.push(med[pos:pos + c])
        got += zip(level, scatter)
        pos += c
        for g, w in zip(got, want):
            assert g[0] == w[0]  # (a median of three is one of them: exact)
            assert g[1] == pytest.approx(w[1], rel=1e-12)
