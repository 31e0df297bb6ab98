"""The context's step logs: the notable points of one rule (grad spikes, detach alerts) that
other rules ask about, for points at or before a record (see
:class:`~trainwatch.rules.engine.base.Context`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice


class StepLog:
    """(pos, step) of notable points of one rule in the current segment (e.g. grad spikes),
    queried by other rules for points at or before a record. Only the last ``maxlen`` points
    logged answer (as a bounded deque of them would)."""

    __slots__ = ("_maxlen", "_pos", "_steps")

    def __init__(self, maxlen: int = 4096) -> None:
        self._maxlen = maxlen
        # Two parallel lists, extended in C, cut back to the last maxlen points once they hold
        # twice that: a (pos, step) tuple per point cost ~60 ns, and a sustained explosion logs
        # thousands of points in one frame.
        self._pos: list[int] = []
        self._steps: list[int] = []

    def add(self, pos: int, step: int) -> None:
        self._pos.append(pos)
        self._steps.append(step)
        if len(self._pos) > 2 * self._maxlen:
            self._trim()

    def extend(self, pos: Sequence[int], steps: Sequence[int]) -> None:
        """Several points at once, in order (pairs: the longer sequence's extra items are
        dropped)."""
        if len(pos) != len(steps):
            n = min(len(pos), len(steps))
            pos, steps = pos[:n], steps[:n]
        self._pos.extend(pos)
        self._steps.extend(steps)
        if len(self._pos) > 2 * self._maxlen:
            self._trim()

    def _trim(self) -> None:
        del self._pos[:-self._maxlen]
        del self._steps[:-self._maxlen]

    def clear(self) -> None:
        self._pos.clear()
        self._steps.clear()

    def _latest(self) -> Iterator[tuple[int, int]]:
        """The (pos, step) pairs that answer, latest first."""
        return islice(zip(reversed(self._pos), reversed(self._steps)), self._maxlen)

    def any_between(self, lo_step: int, hi_step: int, upto_pos: int) -> int | None:
        """The latest step in [lo_step, hi_step] logged at or before record ``upto_pos``."""
        for p, s in self._latest():
            if p <= upto_pos and lo_step <= s <= hi_step:
                return s
        return None

    def last(self, upto_pos: int) -> int | None:
        for p, s in self._latest():
            if p <= upto_pos:
                return s
        return None
