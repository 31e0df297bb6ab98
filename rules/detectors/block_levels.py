"""The two values of a stream of block medians that ``divergence`` reads besides the medians: the
*level* at each block (the median of it and the two before it, what the best is taken from) and
the *scatter* between consecutive blocks (a noise estimate). See
:mod:`~trainwatch.rules.builtin.divergence` for why.

A block's jump is ``|m - m_prev| / |m_prev|`` (none for the first block of a segment; a jump from
0 is taken as absolute); its scatter is 1.0484 x the median of its own and the previous jumps,
``SCATTER_BLOCKS`` at most and ``_MIN_JUMPS`` at least (else 0), which estimates the standard
deviation of a block median around a slowly moving level. The jumps are not centred on their
median: a steady fall or rise then counts as scatter too, which delays a divergence right after a
fast fall by a few blocks (625 -> 725 steps on a rise of 5 % a block); centred, their median over
16 jumps reads low on a flat loss with correlated noise and let 4 of 12 such runs "diverge"
instead of 1.

A few Python-float operations per block (there are ``window`` points per block: the blocks are
few, and a live frame completes one or none).
"""

from __future__ import annotations

from trainwatch.rules.detectors.stats import small_median

SCATTER_BLOCKS = 16
"""Consecutive-block jumps the between-block scatter is the median of."""
_MIN_JUMPS = 4
"""Fewer jumps than this: no scatter estimate yet (0)."""
_JUMP_TO_SIGMA = 1.0484
"""median |x - y| of two independent normal values is 0.6745 sqrt(2) sigma."""


def median3(a: float, c: float, x: float) -> float:
    """The median of three values, picked as ``max(min(a, c), min(max(a, c), x))`` (of 0.0 and
    -0.0, the zero a sort of the three by numpy puts in the middle)."""
    return max(min(x, max(c, a)), min(c, a))


class BlockLevels:
    """A segment's block medians, fed a frame's at a time: the level and the between-block
    scatter at each block."""

    def __init__(self) -> None:
        self._last: list[float] = []
        """The segment's last two block medians."""
        self._jumps: list[float] = []
        """The segment's last ``SCATTER_BLOCKS`` jumps (all of them, when fewer)."""

    def push(self, med: list[float]) -> tuple[list[float], list[float]]:
        """(level, scatter) at each of the frame's block medians ``med``."""
        levels, scatter = [], []
        last, jumps = self._last, self._jumps
        for x in med:
            if last:
                prev = last[-1]
                base = abs(prev)
                jumps.append(abs(x - prev) / (base if base > 0 else 1.0))
                if len(jumps) > SCATTER_BLOCKS:
                    del jumps[0]
            scatter.append(small_median(jumps) * _JUMP_TO_SIGMA if len(jumps) >= _MIN_JUMPS
                           else 0.0)
            levels.append(median3(last[0], last[1], x) if len(last) == 2
                          else small_median([*last, x]))
            last.append(x)
            if len(last) > 2:
                del last[0]
        return levels, scatter
