"""The *wander* of a stream of block medians: how far the level drifts over long lags, a noise
estimate that ``divergence`` reads besides a block's own spread and the scatter between
consecutive blocks (see :mod:`~trainwatch.rules.builtin.divergence`).

A loss whose noise is correlated over thousands of steps (a flat loss on a plateau that wanders:
AR(1) noise with phi 0.99 or 0.999) moves little from one block to the next, so both short-lag
estimates read low, while over a long run its level roams several of its standard deviations
either side of the middle: the best block is the lowest of that roaming, and a high of it is 5 %
above the best without any divergence (every such run of 100k steps "diverged" before). The
spread of the differences between blocks far apart measures that roaming.

The rule samples every ``EVERY``-th block median of a segment (by its index in the segment, so the
samples do not depend on how a stream is cut into frames) and keeps the last ``KEEP`` of them
(bounded memory, the same live and in backfill). The wander reads ``HISTORY`` of them, leaving out
the last ``GAP`` (a rise under way is not its own noise). For each lag of ``LAGS`` samples it takes
the relative differences ``(x_t - x_{t-L}) / |x_{t-L}|`` and reads how far their upper quartile
sits above ``max(their median, 0)``, as a standard deviation (/ 0.6745):

- a loss that falls (training) has differences at or below 0: their upper quartile reads ~0, so a
  descent, however curved, is not taken for noise;
- a loss that rises steadily (a slow divergence) has differences all alike: their upper quartile
  sits just above their median, so the rise does not hide itself;
- a flat loss that wanders has differences either side of 0: their upper quartile is 0.6745 times
  their standard deviation, ~sqrt(2) times the level's;
- a quartile, not a mean square: a rise older than the gap, a few of the samples, moves it
  little.

The largest over the lags, times ``WANDER_SCALE``, is the wander. It only raises the bar, and
only a wander of more than 1 % of the level (5 % / noise_factor) raises it past the 5 % ``rise``:
every alert of the labelled runs of ``bench/detect.py`` (iid noise, a descent) is unchanged by it.
The price is paid on a loss that does wander: there a real rise must clear the wider bar (10 %
over 4,000 steps on a loss roaming with sd 1 % is caught ~3,500 steps in, not ~1,000).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from trainwatch.rules.detectors.stats import median_sorted

EVERY = 4
"""One block median in this many is sampled (at window 25: one per 100 points)."""
HISTORY = 256
"""Samples read (at window 25: 25,600 points)."""
GAP = 40
"""The last samples not read (at window 25: 4,000 points), a quarter of them at most: a rise
under way is not read as its own noise (10 % over 4,000 steps on a wandering loss hid itself)."""
KEEP = HISTORY + GAP
"""Samples the rule keeps."""
LAGS = (1, 4, 16, 64)
"""Lags, in samples, whose differences are read (at window 25: 100 to 6,400 points)."""
MIN_DIFFS = 8
"""Fewer differences than this at a lag: the lag is not read (too few for a quartile)."""
_Q3_TO_SIGMA = 1 / 0.6745
"""The upper quartile of a normal value is 0.6745 standard deviations above its middle."""
WANDER_SCALE = 1.6
"""The rise from the best is a difference between the lowest of a long wander and one of its
highs, not between two typical blocks: over 100k-300k steps of AR(1) noise (phi 0.99, 0.999) each
sits up to ~3.5 level sd from the middle. Measured on flat runs of AR(1) noise of sd 1 % of the
level, 10 seeds of 300k steps per phi: 11 of 20 "diverged" at a scale of 1.0, 4 at 1.3, none at
1.6 (nor 120 runs of 100k steps)."""


def read_count(kept: int) -> int:
    """How many of the segment's last ``kept`` samples (at most ``KEEP``) :func:`wander` reads."""
    return min(kept - min(GAP, kept // 4), HISTORY)


def wander(samples: Sequence[float]) -> float:
    """The wander (relative to the level) of the sampled block medians ``samples`` (the segment's
    last ``KEEP`` or fewer, oldest first): of the last ``HISTORY`` before the last ``GAP`` (a
    quarter of them at most, early in a segment), the largest over ``LAGS`` of the upper quartile
    of the relative differences above ``max(their median, 0)``, as a standard deviation, times
    ``WANDER_SCALE``; 0 with fewer than ``MIN_DIFFS + 1`` read. A difference from 0 is taken as
    absolute (as a block jump)."""
    kept = len(samples)
    n = read_count(kept)
    if n - LAGS[0] < MIN_DIFFS:
        return 0.0
    end = kept - min(GAP, kept // 4)
    x = np.array(samples[end - n:end], dtype=np.float64)
    out = 0.0
    for lag in LAGS:
        k = n - lag
        if k < MIN_DIFFS:
            break
        base = x[:k]
        d = x[lag:] - base
        d /= np.where(base != 0, np.abs(base), 1.0)
        d.sort()
        # the upper quartile as numpy's default (linear) quantile reads it
        pos = 0.75 * (k - 1)
        lo = int(pos)
        q3 = d[lo] if lo + 1 >= k else d[lo] + (pos - lo) * (d[lo + 1] - d[lo])
        out = max(out, float(q3) - max(float(median_sorted(d)), 0.0))
    return out * _Q3_TO_SIGMA * WANDER_SCALE


class WanderSamples:
    """A segment's sampled block medians, fed a frame's blocks at a time, and the wander at any
    block of the frame being driven: that of the samples up to the block, whatever the frames."""

    __slots__ = ("_kept", "_med", "_start", "last_read")

    def __init__(self) -> None:
        self._kept: deque[float] = deque(maxlen=KEEP)
        """The samples before the frame being driven, the last ``KEEP``."""
        self._med: np.ndarray | None = None
        """The frame's block medians, sampled into ``_kept`` when the next frame starts."""
        self._start = 0
        """The index in the segment of the frame's first block (what picks its samples)."""
        self.last_read = (-1, 0.0)
        """(the count of samples up to a block, the wander they give), the last computed: the
        samples change once every ``EVERY`` blocks, so a rise under way, block after block, sorts
        them once per ``EVERY`` blocks."""

    def start_frame(self, start: int, med: np.ndarray) -> None:
        """The next frame's blocks, ``med``, start at index ``start`` of the segment."""
        prev = self._med
        if prev is not None:  # (the previous frame's samples: blocks EVERY - 1, 2 EVERY - 1, ...)
            first = (EVERY - 1 - self._start) % EVERY
            self._kept.extend(prev[first::EVERY].tolist())
        self._start, self._med = start, med

    def at(self, i: int) -> float:
        """The wander at block ``i`` of the frame: of the segment's samples up to it."""
        count = (self._start + i + 1) // EVERY
        if read_count(min(count, KEEP)) - LAGS[0] < MIN_DIFFS:
            return 0.0  # (too few samples yet: not one copied)
        if self.last_read[0] == count:
            return self.last_read[1]
        seq = list(self._kept)
        first = (EVERY - 1 - self._start) % EVERY
        if i >= first and self._med is not None:
            seq += self._med[first:i + 1:EVERY].tolist()
        val = wander(seq[-KEEP:])
        self.last_read = (count, val)
        return val
