"""Block medians alone (no MAD, no noise level), with short pushes taken in Python floats.

:class:`~trainwatch.rules.detectors.blocks.BlockStream` with ``noise=False`` gives the same blocks: every
``k`` finite points make one block, valued at its median and stamped with the step, time and
record of its last point. A live frame brings a dozen points and completes one block or none,
and the stream's numpy calls on arrays that short (a concatenation, a sort, two slices, the
block ends) cost several times what Python's ``sorted`` of ``k`` floats does. So a short push
is taken in Python floats, and the blocks' arrays are built only when a rule asks for them (a
quiet frame never does: its medians alone tell that nothing can fire).

The medians are numpy's bit for bit: sorting orders equal floats alike except 0.0 and -0.0,
and a middle pair of zeros (where the order of their signs shows in the median's) is taken
with numpy's sort, as the long pushes are.
"""

from __future__ import annotations

import numpy as np

from trainwatch.rules.detectors.block_stream import Blocks, list_block_medians, sorted_medians
from trainwatch.rules.engine.base import Points

SHORT = 64
"""Pushes of at most this many points are taken in Python floats."""
_NONE = np.empty(0)


class MedianBlocks:
    """The stream of block medians of ``k`` points."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.reset()

    def reset(self) -> None:
        self._carry: list[float] = []
        """Values of the block under way (fewer than k)."""
        self._pts: Points | None = None
        """The last push that completed blocks (their ends are its points)."""
        self._before = 0
        """How many values were carried into that push."""
        self._med: np.ndarray | None = None
        """Its medians as an array, once built."""
        self._meds: list[float] = []

    def push(self, pts: Points, *, short: bool = True) -> list[float]:
        """Add finite points; returns the medians of the blocks they complete, in order (their
        arrays: :meth:`blocks`). ``short=False``: numpy's path whatever the length (tests
        compare the two)."""
        k, carry = self.k, self._carry
        c, m = len(carry), pts.values.shape[0]
        if c + m < k or (short and m <= SHORT):
            return self.push_values(pts.values.tolist(), pts)
        self._pts, self._before = pts, c
        v = np.concatenate((np.array(carry), pts.values)) if c else pts.values
        n = v.shape[0] // k * k
        med = sorted_medians(v[:n].reshape(-1, k).copy())
        self._carry, self._med = v[n:].tolist(), med
        self._meds = med.tolist()
        return self._meds

    def push_values(self, values: list[float], pts: Points) -> list[float]:
        """:meth:`push` of finite ``values`` given as Python floats, stamped by the points
        ``pts`` (one each: the points themselves, or their inverses), in Python floats."""
        k, carry = self.k, self._carry
        if len(carry) + len(values) < k:  # no block ends here: only the values are carried
            carry.extend(values)
            return []
        self._pts, self._before = pts, len(carry)
        vals = carry + values
        nb = len(vals) // k
        _rows, meds = list_block_medians(vals, k, nb)
        self._carry, self._med, self._meds = vals[nb * k:], None, meds
        return meds

    def medians(self) -> np.ndarray:
        """The medians of the last push that completed blocks, as an array (:meth:`blocks`'
        ``med``, without the rest of the blocks)."""
        med = self._med
        if med is None:
            med = self._med = np.array(self._meds)
        return med

    def blocks(self) -> Blocks:
        """The blocks of the last push that completed any (as ``BlockStream.push`` returns
        them, with an empty MAD and noise level)."""
        pts, k, c = self._pts, self.k, self._before
        assert pts is not None
        med = self.medians()
        # block j ends at the pushed point k - c - 1 + j k (the carried ones are fewer than k)
        last = slice(k - c - 1, k - c - 1 + med.shape[0] * k, k)
        return Blocks(med, _NONE, _NONE, pts.steps[last], pts.times[last], pts.pos[last])
