"""The two pure functions of a stream of block medians that ``divergence`` reads besides the
medians: the *jumps* between consecutive blocks (whose median is the between-block scatter, a
noise estimate) and the *level* at each block (the median of it and the two before it, what the
best is taken from). See :mod:`~trainwatch.rules.builtin.divergence` for why.

Each has a vectorised form for a frame of many blocks and a Python-float form for a few (a live
frame completes one block or none: a dozen numpy calls on one value cost more than the arithmetic
itself); the two give the same values to the bit (the same IEEE operations in the same order, a
median of three picked, not computed), and tests hold them to each other and to the definitions.
"""

from __future__ import annotations

import numpy as np

from trainwatch.rules.detectors.stats import median_sorted, small_median, windows

SCATTER_BLOCKS = 16
"""Consecutive-block jumps the between-block scatter is the median of."""
_MIN_JUMPS = 4
"""Fewer jumps than this: no scatter estimate yet (0)."""
_JUMP_TO_SIGMA = 1.0484
"""median |x - y| of two independent normal values is 0.6745 sqrt(2) sigma."""
LEVEL_BLOCKS = 3
"""Consecutive block medians whose median is a level the best is taken from."""


def block_jumps(prev: float | None, med: np.ndarray) -> np.ndarray:
    """The jumps ``|m - m_prev| / |m_prev|`` of the block medians ``med`` (``prev``: the block
    before them, None at a segment's start; a jump from 0 is taken as absolute)."""
    seq = med if prev is None else np.concatenate(([prev], med))
    base = np.abs(seq[:-1])
    out = seq[1:] - seq[:-1]  # (= np.diff, without its ~3 us of Python)
    np.abs(out, out=out)
    out /= np.where(base > 0, base, 1.0)
    return out


def jump_list(prev: float | None, meds: list[float]) -> list[float]:
    """:func:`block_jumps` on Python floats (the same operations: the same values)."""
    out = []
    for x in meds:
        if prev is not None:
            base = abs(prev)
            out.append(abs(x - prev) / (base if base > 0 else 1.0))
        prev = x
    return out


def scatter_at_list(jumps: list[float], end: int) -> float:
    """The between-block noise of the block whose own jump is ``jumps[end - 1]`` (the jumps
    before ``end``, the last ``SCATTER_BLOCKS`` of them, at least ``_MIN_JUMPS``; else 0): one
    value of :func:`block_scatter`, for the blocks the rule reads it at. The jumps are Python
    floats (the per-block path reads them so: no numpy call per block)."""
    if end < _MIN_JUMPS:
        return 0.0
    return small_median(jumps[max(0, end - SCATTER_BLOCKS):end]) * _JUMP_TO_SIGMA


def block_scatter(prev: float | None, jumps: np.ndarray, med: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The between-block noise of each block median in ``med``, relative to its level, and the
    jumps to carry to the next call: the definition, block by block (the rule reads it at the
    few blocks that need it: :func:`scatter_at_list`, :func:`scatter_of`; tests hold those to
    this).

    A block's jump is ``|m - m_prev| / |m_prev|`` (none for the first block of a segment); its
    scatter is 1.0484 x the median of its own and the previous jumps, ``SCATTER_BLOCKS`` at most,
    which estimates the standard deviation of a block median around a slowly moving level.
    ``prev`` is the block before ``med`` (None at a segment's start), ``jumps`` the carried ones.

    The jumps are not centred on their median: a steady fall or rise then counts as scatter too,
    which delays a divergence right after a fast fall by a few blocks (625 -> 725 steps on a
    rise of 5 % a block); centred, their median over 16 jumps reads low on a flat loss with
    correlated noise and let 4 of 12 such runs "diverge" instead of 1.
    """
    new = block_jumps(prev, med)
    allj = np.concatenate((jumps, new)) if jumps.shape[0] else new
    # jumps up to and including block k's own: h + k + 1 (h + k when the segment starts here)
    ends = np.arange(med.shape[0]) + jumps.shape[0] + (0 if prev is None else 1)
    return scatter_of(allj, ends), allj[-(SCATTER_BLOCKS - 1):]


def scatter_of(jumps: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`scatter_at_list` at each of ``ends``, vectorised."""
    out = np.zeros(ends.shape[0])
    full = ends >= SCATTER_BLOCKS
    if full.any():
        rows = np.sort(windows(jumps, SCATTER_BLOCKS)[ends[full] - SCATTER_BLOCKS], axis=1)
        out[full] = median_sorted(rows)
    vals = jumps.tolist()
    for k in (~full & (ends >= _MIN_JUMPS)).nonzero()[0].tolist():
        out[k] = small_median(vals[:ends[k]])
    out *= _JUMP_TO_SIGMA
    return out


def block_levels(prev: list[float], med: np.ndarray) -> np.ndarray:
    """The level at each block of ``med``: the median of it and the ``LEVEL_BLOCKS - 1`` blocks
    before it (fewer at a segment's start); ``prev`` holds the blocks before ``med``."""
    p = len(prev)
    n = med.shape[0]
    seq = np.concatenate((prev, med)) if p else med
    out = np.empty(n)
    # the blocks with 3 values up to them: the last `full` ones, their median of three as
    # max(min(a, c), min(max(a, c), x)), one of the three values as a sort picks it, in 4 numpy
    # calls (a sort of the windows cost 3x that)
    full = max(0, min(n, n + p - (LEVEL_BLOCKS - 1)))
    if full:
        s = n - full  # (the first block with two before it)
        a, c, x = seq[p + s - 2:p + n - 2], seq[p + s - 1:p + n - 1], med[s:]
        hi = np.maximum(a, c)
        np.minimum(hi, x, out=hi)
        np.maximum(np.minimum(a, c), hi, out=out[s:])
    if full < n:
        vals = seq[:p + n - full].tolist()
        for k in range(n - full):
            out[k] = small_median(vals[:p + k + 1])
    return out


def level_at(seq: list[float], t: int) -> float:
    """One value of :func:`block_levels`: the level at ``seq[t]`` (``seq``: the segment's block
    medians, or its last ones), picked as block_levels picks it."""
    if t >= LEVEL_BLOCKS - 1:
        a, c, x = seq[t - 2], seq[t - 1], seq[t]
        # (np.maximum and np.minimum return their second argument on a tie, Python's max and
        # min their first: the arguments swapped, the same zero of 0.0 and -0.0)
        hi = min(x, max(c, a))
        return max(hi, min(c, a))
    return small_median(seq[:t + 1])
