"""Non-overlapping block medians of a stream: the smoothed signal the trend rules compare.

Every ``k`` finite points make one block; its median (and MAD) is the block's value, stamped with
the step, time and record of its last point. The block boundaries depend only on how many points
came, so the blocks are the same however the stream was batched.

Each block also carries the *noise level* of recent blocks: the relative standard error of a
block median (1.2533 x 1.4826 x MAD / sqrt(k) / |median|), as the median over the last 8 blocks.
Rules raise their "improved" / "rose" bars above it, so a noisy loss does not trip them by chance.

Several rules smooth the loss with the same window: :func:`shared_blocks` computes a role's blocks
once per frame and hands the same value to all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.base import Context, Frame, Points
from trainwatch.rules.stats import MAD_TO_SIGMA, median_sorted, small_median, windows

NOISE_BLOCKS = 8
"""Blocks the noise level is the median over."""
_SE_MEDIAN = 1.2533
"""Standard error of a median is about 1.2533 sigma / sqrt(n) for normal data."""


@dataclass(frozen=True, slots=True)
class Blocks:
    med: np.ndarray
    mad: np.ndarray
    noise: np.ndarray
    """Relative standard error of a block median, over the last NOISE_BLOCKS blocks."""
    step: np.ndarray
    time: np.ndarray
    pos: np.ndarray

    def __len__(self) -> int:
        return int(self.med.shape[0])


class BlockStream:
    def __init__(self, k: int) -> None:
        self.k = k
        self.se = _SE_MEDIAN * MAD_TO_SIGMA / math.sqrt(k)
        self.reset()

    def reset(self) -> None:
        self._v = np.empty(0)
        self._s = np.empty(0, dtype=np.int64)
        self._t = np.empty(0)
        self._p = np.empty(0, dtype=np.int64)
        self._rel: list[float] = []
        """Relative standard errors of the last NOISE_BLOCKS - 1 blocks."""
        self.count = 0
        """Blocks completed since the last reset."""

    def push(self, pts: Points) -> Blocks:
        """Add finite points; returns the blocks they complete."""
        k = self.k
        if len(self._v):
            v = np.concatenate([self._v, pts.values])
            s = np.concatenate([self._s, pts.steps])
            t = np.concatenate([self._t, pts.times])
            p = np.concatenate([self._p, pts.pos])
        else:
            v, s, t, p = pts.values, pts.steps, pts.times, pts.pos
        n = (v.shape[0] // k) * k
        self._v, self._s, self._t, self._p = v[n:], s[n:], t[n:], p[n:]
        if n == 0:
            return _EMPTY
        rows = np.sort(v[:n].reshape(-1, k), axis=1)
        med = np.asarray(median_sorted(rows), dtype=np.float64)
        dev = np.sort(np.abs(rows - med[:, None]), axis=1)
        mad = np.asarray(median_sorted(dev), dtype=np.float64)
        absmed = np.abs(med)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(absmed > 0, self.se * mad / absmed, 0.0)
        rel[~np.isfinite(rel)] = 0.0
        noise = self._rolling(rel)
        last = np.arange(k - 1, n, k)
        self.count += med.shape[0]
        return Blocks(med, mad, noise, s[last], t[last], p[last])

    def _rolling(self, rel: np.ndarray) -> np.ndarray:
        """Median of each block's and the previous NOISE_BLOCKS - 1 blocks' values."""
        w = NOISE_BLOCKS
        hist = self._rel
        seq = np.concatenate([np.asarray(hist, dtype=np.float64), rel])
        h = len(hist)
        out = np.empty(rel.shape[0])
        short = min(rel.shape[0], max(0, w - 1 - h))  # the first blocks after a reset
        for i in range(short):
            out[i] = small_median(seq[: h + i + 1].tolist())
        if short < rel.shape[0]:
            out[short:] = median_sorted(np.sort(windows(seq, w)[h + short - w + 1:], axis=1))
        self._rel = seq[-(w - 1):].tolist()
        return out


def shared_blocks(ctx: Context, frame: Frame, role: str, k: int) -> Blocks:
    """The blocks of ``role`` completed in this frame, computed once for every rule that asks
    (the stream's state lives in the context and restarts with it at a rewind)."""
    key = (role, k)
    cached = ctx.shared.get(("frame", key))
    if cached is not None and cached[0] is frame:
        return cached[1]
    stream = ctx.shared.get(key)
    if stream is None:
        stream = ctx.shared[key] = BlockStream(k)
    pts = frame.role(role)
    b = stream.push(pts.finite()) if pts is not None and len(pts) else _EMPTY
    ctx.shared[("frame", key)] = (frame, b)
    return b


_EMPTY = Blocks(np.empty(0), np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0),
                np.empty(0, dtype=np.int64))
