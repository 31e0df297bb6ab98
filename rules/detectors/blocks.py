"""Non-overlapping block medians of a stream: the smoothed signal the trend rules compare.

Every ``k`` finite points make one block; its median and MAD are the block's values, stamped with
the step, time and record of its last point. The boundaries depend only on how many points came,
so the blocks are the same however the stream was batched. Each block also carries the *noise
level* of recent blocks: the relative standard error of a block median (1.2533 x 1.4826 x MAD /
sqrt(k) / |median|), the median over the last ``NOISE_BLOCKS`` blocks (fewer at a segment's
start). Rules raise their "improved" / "rose" bars above it, so a noisy loss does not trip them
by chance.

Several rules smooth the loss with the same window: :func:`shared_blocks` computes a role's blocks
once per frame and hands the same value to each of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.detectors.stats import MAD_TO_SIGMA, small_median
from trainwatch.rules.engine.base import Context, Frame, Points

NOISE_BLOCKS = 8
"""Blocks the noise level is the median over: enough that one odd block does not set it, few
enough that it follows a loss whose noise changes over a run."""
SE_MEDIAN = 1.2533
"""Standard error of a median is about 1.2533 sigma / sqrt(n) for normal data."""
_NONE = np.empty(0)


@dataclass(slots=True)
class Blocks:
    """The blocks one push completed, in order (a value: never changed once made)."""

    med: np.ndarray
    mad: np.ndarray
    noise: np.ndarray
    """Relative standard error of a block median, the median over the last NOISE_BLOCKS blocks."""
    step: np.ndarray
    time: np.ndarray
    pos: np.ndarray
    """Step, time and record of each block's last point."""

    def __len__(self) -> int:
        return int(self.med.shape[0])


EMPTY = Blocks(_NONE, _NONE, _NONE, np.empty(0, dtype=np.int64), _NONE,
               np.empty(0, dtype=np.int64))
"""No block."""


def rel_errors(se: float, rows: np.ndarray, med: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The MAD of each sorted row whose median is ``med``, and the relative standard error of
    that median, ``se`` x MAD / |median| (0 at a median of 0, and where it overflows: a huge MAD
    over a tiny median reads as no noise rather than as infinite noise)."""
    k = rows.shape[1]
    dev = np.abs(rows - med[:, None])
    dev.sort(axis=1)
    mad = (dev[:, (k - 1) // 2] + dev[:, k // 2]) * 0.5
    absmed = np.abs(med)
    rel = np.zeros(med.shape[0])
    np.divide(se * mad, absmed, out=rel, where=absmed > 0)
    if not np.isfinite(np.add.reduce(rel)):  # (the ufunc's own sum: ndarray.sum wraps it)
        rel[~np.isfinite(rel)] = 0.0
    return mad, rel


class BlockStream:
    """The stream of blocks of ``k`` points (fed the finite points of a series, a frame at a
    time). The work on points (sorting each block) is numpy's, on all of a push's blocks at once;
    the rolling noise level is a median of a few values per block, on Python floats."""

    def __init__(self, k: int, *, noise: bool = True) -> None:
        self.k = k
        self.noise = noise
        """Whether the blocks carry their MAD and noise level (empty when not: a stream whose
        rule reads only the medians)."""
        self.se = SE_MEDIAN * MAD_TO_SIGMA / math.sqrt(k)
        """Relative standard error of a block median per unit of relative MAD."""
        self._carry: list[float] = []
        """Values of the block under way (fewer than k): its step, time and record come from
        the point that ends it."""
        self._rel: list[float] = []
        """Relative standard errors of the last NOISE_BLOCKS - 1 blocks."""

    def push(self, pts: Points) -> Blocks:
        """Add finite points; returns the blocks they complete."""
        k, c, m = self.k, len(self._carry), pts.values.shape[0]
        if c + m < k:  # (no block ends here: the values are kept)
            self._carry += pts.values.tolist()
            return EMPTY
        v = np.concatenate((self._carry, pts.values)) if c else pts.values
        nb = (c + m) // k
        self._carry = v[nb * k:].tolist()
        rows = v[:nb * k].reshape(nb, k).copy()
        rows.sort(axis=1)  # (the method: np.sort's wrapper costs more than a short sort)
        med = (rows[:, (k - 1) // 2] + rows[:, k // 2]) * 0.5
        # block j ends at the new point k - c - 1 + j k (the carried ones are fewer than k)
        last = slice(k - c - 1, k - c - 1 + nb * k, k)
        if not self.noise:
            return Blocks(med, _NONE, _NONE, pts.steps[last], pts.times[last], pts.pos[last])
        mad, rel = rel_errors(self.se, rows, med)
        seq = self._rel + rel.tolist()
        h = len(self._rel)
        noise = [small_median(seq[max(0, t - NOISE_BLOCKS + 1):t + 1]) for t in range(h, h + nb)]
        self._rel = seq[-(NOISE_BLOCKS - 1):]
        return Blocks(med, mad, np.array(noise), pts.steps[last], pts.times[last], pts.pos[last])


class _Shared:
    """A role's block stream in the context, and the blocks it made for the frame it was last
    pushed (every rule after the first gets those)."""

    def __init__(self, stream: BlockStream) -> None:
        self.stream = stream
        self.frame: Frame | None = None
        self.blocks = EMPTY


def shared_blocks(ctx: Context, frame: Frame, role: str, k: int, *, nonzero: bool = False
                  ) -> Blocks:
    """The blocks of ``role``'s finite points completed in this frame, computed once for every
    rule that asks with the same ``k`` and ``nonzero`` (the stream lives in the context and
    restarts with it at a rewind). With ``nonzero=True`` the blocks are made of the values other
    than exact zeros (a zero-inflated loss's level is that of its non-zero values): the same
    blocks as without it for a series that holds no zero."""
    key = (role, k, nonzero)
    shared = ctx.shared.get(key)
    if shared is None:
        shared = ctx.shared[key] = _Shared(BlockStream(k))
    elif shared.frame is frame:
        return shared.blocks
    pts = frame.role(role)
    b = EMPTY
    if pts is not None and len(pts):
        pts = pts.finite().nonzero() if nonzero else pts.finite()
        b = shared.stream.push(pts) if len(pts) else EMPTY
    shared.frame, shared.blocks = frame, b
    return b
