"""The value range of each frame a :class:`~trainwatch.rules.detectors.trend_track.TrendTrack` holds, and
the range of the points past the warm-up from them: the growth analysis' flat test (could the
values have risen at all?) asked on every frame, answered without touching the held points.

Apart from the track, which decides *which* points are held (the last ``keep``, what another
series' windows still read) and hands them over for evaluation; this keeps one (min, max) pair
per held frame beside them, taken once as each frame comes, merged when the track holds pushed
frames as one, and read by :meth:`~trainwatch.rules.detectors.trend_track.TrendTrack.minmax_from`. A track
made with ``ranged=False`` (never asked for a range) has none.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from trainwatch.rules.detectors.stats import min_max
from trainwatch.rules.detectors.track_frames import first_counted, split_range
from trainwatch.rules.engine.base import Points


class HeldRanges:
    """The (min, max) of each frame held, oldest first, as the track holds them."""

    __slots__ = ("_next", "hi", "lo", "wide")

    def __init__(self) -> None:
        self.lo: deque[float] = deque()
        self.hi: deque[float] = deque()
        self.wide: int | None = None
        """When the oldest held frame's range counts points before its first (see
        :meth:`hold_as_one`): the count of the first it may count."""
        self._next: tuple[Points, float, float] | None = None
        """The frame :meth:`counted_range` looked at and its range, to be held next."""

    def of_frame(self, pts: Points) -> tuple[float, float]:
        """The range of the frame about to be held (as :meth:`counted_range` took it, if it
        looked at this frame)."""
        nxt = self._next
        self._next = None
        return (nxt[1], nxt[2]) if nxt is not None and nxt[0] is pts else min_max(pts.values)

    def append(self, pts: Points) -> None:
        """``pts``, a new frame, is held after the others."""
        lo, hi = self.of_frame(pts)
        self.lo.append(lo)
        self.hi.append(hi)

    def drop_oldest(self) -> None:
        self.lo.popleft()
        self.hi.popleft()
        self.wide = None

    def hold_as_one(self, pts: Points, first: int, oldest_first: int | None, keep: int,
                    values: np.ndarray) -> None:
        """The pushed points (``values``; ``pts`` the frame's, the first counting ``first``) are
        held as one frame instead of those they came from (the oldest counting ``oldest_first``
        on; None when none was held). Its range is the frames' (with ``pts``'): it may count
        points left out, as far back as ``keep`` points before its first (then it is taken
        afresh, exactly)."""
        lo, hi = self.of_frame(pts)
        wide = None
        if oldest_first is not None:
            since = oldest_first if self.wide is None else self.wide
            if first - since <= keep:
                lo, hi = min(lo, min(self.lo)), max(hi, max(self.hi))
                wide = since if since < first else None
            else:
                lo, hi = min_max(values)
        self.lo.clear()
        self.hi.clear()
        self.lo.append(lo)
        self.hi.append(hi)
        self.wide = wide

    def counted_range(self, pts: Points, count: int, arrs: Sequence[tuple[np.ndarray, ...]],
                      firsts: Sequence[int], first_count: int, first_step: float
                      ) -> tuple[float, float]:
        """(min, max) of the held frames' values (``arrs``, the first of each counting
        ``firsts``) and ``pts``' (the first counting ``count + 1``), of the points that count
        ``first_count`` or more or sit at ``first_step`` or later; (inf, -inf) when none do.
        The held frames' ranges as they are once every held point is past the warm-up (nearly
        always): then the oldest frame's may count points before the last ``keep`` too."""
        lo, hi = math.inf, -math.inf
        n = pts.values.shape[0]
        if n:
            i = first_counted(pts.steps, n, count + 1, first_count, first_step)
            if i == 0:
                lo, hi = min_max(pts.values)
                self._next = (pts, lo, hi)
            elif i < n:
                # (the frame's whole range too, for when it is held: one pass over it)
                lo, hi, a, b = split_range(pts.values, i)
                self._next = (pts, a, b)
        if firsts:
            since = firsts[0] if self.wide is None else self.wide
            if since >= first_count:  # (every held point and range is past the warm-up)
                lo, hi = min(lo, min(self.lo)), max(hi, max(self.hi))
            else:
                for j, ((st, v, *_rest), c, a, b) in enumerate(
                        zip(arrs, firsts, self.lo, self.hi)):
                    i = first_counted(st, v.shape[0], c, first_count, first_step)
                    if i or (j == 0 and self.wide is not None):  # (exact: see wide)
                        if i >= v.shape[0]:
                            continue
                        a, b = min_max(v[i:])
                    lo, hi = min(lo, a), max(hi, b)
        return lo, hi
