"""The recent points of one series, carried across frames for the growth analysis' windows.

A live frame holds a few points (one 2 KiB read: ~15 records) and the analysis looks at the last
``keep`` points (200 for memory), but on most frames it only asks whether the values could have
risen at all (their range, see :meth:`TrendTrack.minmax_from`) and finds they could not. So the
track holds the frames' own points, as they came, with each frame's range taken once: a quiet
frame costs the range of its own few values and a short loop over the held frames' ranges,
instead of copying a few hundred points four times over. The held points are concatenated only
for a frame that is evaluated (:meth:`TrendTrack.push`), and are then held as one frame: while
frames are evaluated one after another each push concatenates two arrays, as a plain carried
tail would.

A held range may count a few points older than the last ``keep`` (those of the oldest frame, or
of what a push held as one, at most ``keep`` further back): a range that is never narrower, and
wider only for a positive series, only ever sends the analysis the long way (see
:meth:`TrendTrack.minmax_from`), whose answers are exact.

Steps never decrease within a segment (a lower step starts a new one, and the analysis is
rewound), so the points a window can hold (after a warm-up counted in points, or from a step
on) are a suffix of the held ones.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from trainwatch.rules.base import Points
from trainwatch.rules.growth import Pushed
from trainwatch.rules.stats import min_max

_NO_INTS = np.empty(0, dtype=np.int64)
_NO_FLOATS = np.empty(0)


def _same_kinds(pts: Points) -> bool:
    """Whether ``pts``' arrays have the dtypes a concatenation onto the carried (empty) arrays
    gives: integer steps and positions, float values and times."""
    return (pts.steps.dtype == _NO_INTS.dtype and pts.pos.dtype == _NO_INTS.dtype
            and pts.values.dtype == _NO_FLOATS.dtype and pts.times.dtype == _NO_FLOATS.dtype)


_Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""A held frame's (steps, values, positions, times)."""


class TrendTrack:
    """The last ``keep`` points of one series, carried across frames."""

    def __init__(self, keep: int, ranged: bool = True) -> None:
        self.keep = keep
        self.ranged = ranged
        """Whether :meth:`minmax_from` will be asked (each frame's range is then taken as it
        comes)."""
        self.reset()

    def reset(self) -> None:
        self.count = 0
        # the held frames, oldest first: their arrays, the count (1-based since the reset) of
        # each one's first point, its length, and its values' range (if ranged)
        self._arrs: deque[_Arrays] = deque()
        self._first: deque[int] = deque()
        self._n: deque[int] = deque()
        self._lo: deque[float] = deque()
        self._hi: deque[float] = deque()
        self._n_held = 0
        """Points in the held frames: the last ``keep`` and the rest of the oldest frame.
        While it is more than ``keep``, the oldest frame's range may count points that are not
        among the last ``keep`` (see :meth:`minmax_from`)."""
        self._next: tuple[Points, float, float] | None = None
        """The frame :meth:`minmax_from` looked at and its range, to be held next."""
        self._wide: int | None = None
        """When the oldest held frame's range counts points before its first (see
        :meth:`_hold_as_one`): the count of the first it may count."""

    def _range_of(self, pts: Points) -> tuple[float, float]:
        nxt = self._next
        self._next = None
        return (nxt[1], nxt[2]) if nxt is not None and nxt[0] is pts else min_max(pts.values)

    def advance(self, pts: Points) -> None:
        """:meth:`push` when nothing will be evaluated: only the held points move on."""
        n = pts.values.shape[0]
        if not n:
            return
        self._arrs.append((pts.steps, pts.values, pts.pos, pts.times))
        self._first.append(self.count + 1)
        self._n.append(n)
        if self.ranged:
            lo, hi = self._range_of(pts)
            self._lo.append(lo)
            self._hi.append(hi)
        self._n_held += n
        self.count += n
        keep, ns = self.keep, self._n
        while self._n_held - ns[0] >= keep:  # (the others still hold the last keep)
            self._n_held -= ns.popleft()
            self._wide = None
            self._arrs.popleft()
            self._first.popleft()
            if self.ranged:
                self._lo.popleft()
                self._hi.popleft()

    def push(self, pts: Points) -> Pushed:
        """The last ``keep`` points before this frame followed by the frame's, for evaluation
        schedules. They are held from then on as one frame (the next push concatenates two
        arrays, not every frame held since)."""
        m = pts.values.shape[0]
        n_old, c0 = min(self._n_held, self.keep), self.count
        if not self._n_held and (not m or _same_kinds(pts)):
            # nothing carried (after a reset; a whole run read at once is one frame): the
            # frame's arrays as they are, not copies
            self.advance(pts)
            return Pushed(pts.steps, pts.values, pts.pos, pts.times, 0, c0)
        cut = self._n_held - n_old  # (the oldest frame's points before the last keep)
        if m and len(self._arrs) == 1:
            return self._push_onto_one(pts, n_old, c0, cut)
        parts = list(self._arrs) or [(_NO_INTS, _NO_FLOATS, _NO_INTS, _NO_FLOATS)]
        if m:
            parts.append((pts.steps, pts.values, pts.pos, pts.times))
        if len(parts) == 1:
            s, v, p, t = (a[cut:] for a in parts[0])
        else:
            # (the oldest frame's extra points are left out first: the concatenation is of
            # exactly the points the windows may hold)
            s, v, p, t = (np.concatenate([parts[0][j][cut:], *(a[j] for a in parts[1:])])
                          for j in range(4))
        out = Pushed(s, v, p, t, n_old, c0)
        if m:
            self._hold_as_one(pts, out)
        return out

    def _push_onto_one(self, pts: Points, n_old: int, c0: int, cut: int) -> Pushed:
        """:meth:`push` when one frame is held (the usual case while frames are evaluated one
        after the other): two arrays concatenated, the held frame replaced in place."""
        s, v, p, t = self._arrs[0]
        if cut:
            s, v, p, t = s[cut:], v[cut:], p[cut:], t[cut:]
        out = Pushed(np.concatenate((s, pts.steps)), np.concatenate((v, pts.values)),
                     np.concatenate((p, pts.pos)), np.concatenate((t, pts.times)), n_old, c0)
        first = c0 + 1 - n_old
        if self.ranged:
            lo, hi = self._range_of(pts)
            since = self._first[0] if self._wide is None else self._wide
            if first - since <= self.keep:  # (see _hold_as_one)
                lo, hi = min(lo, self._lo[0]), max(hi, self._hi[0])
                self._wide = since if since < first else None
            else:
                lo, hi = min_max(out.values)
                self._wide = None
            self._lo[0], self._hi[0] = lo, hi
        self._arrs[0] = (out.steps, out.values, out.pos, out.times)
        self._first[0] = first
        self._n[0] = self._n_held = out.values.shape[0]
        self.count += pts.values.shape[0]
        return out

    def _hold_as_one(self, pts: Points, out: Pushed) -> None:
        """Hold the pushed points (``pts`` the frame's) as one frame instead of the frames they
        came from. Its range is the frames' (with ``pts``'): it may count points left out, as
        far back as ``keep`` points before its first (then it is taken afresh, exactly)."""
        n = out.values.shape[0]
        first = self.count + 1 - out.n_old
        lo = hi = 0.0
        wide = None
        if self.ranged:
            lo, hi = self._range_of(pts)
            since = first if not self._first else (
                self._first[0] if self._wide is None else self._wide)
            if not self._lo:
                pass  # (nothing held before: the frame's own range)
            elif first - since <= self.keep:
                lo, hi = min(lo, min(self._lo)), max(hi, max(self._hi))
                wide = since if since < first else None
            else:
                lo, hi = min_max(out.values)
        for d in (self._arrs, self._first, self._n, self._lo, self._hi):
            d.clear()
        self._arrs.append((out.steps, out.values, out.pos, out.times))
        self._first.append(first)
        self._n.append(n)
        if self.ranged:
            self._lo.append(lo)
            self._hi.append(hi)
        self._wide = wide
        self._n_held = n
        self.count += pts.values.shape[0]

    def minmax_from(self, pts: Points, first_count: int, first_step: float
                    ) -> tuple[float, float] | None:
        """(min, max) of the carried values (the last ``keep`` points) and ``pts``', before
        ``pts`` is pushed; only of the points that count ``first_count`` or more (1-based since
        the reset) or sit at ``first_step`` or later: the points before both are warm-up that no
        window will hold. None when there are none.

        Once every held frame is past the warm-up (nearly always) this is the held frames'
        ranges, taken once each, and the new frame's: two builtin calls over a few dozen
        numbers. The oldest frame may hold points older than the last ``keep``, whose values
        widen the range. That only ever makes a positive range wider (a flat test on it then
        fails where it could have passed, and the analysis takes the long way): only when the
        minimum is not positive are the exact points taken.
        """
        if not self.ranged:
            raise ValueError("minmax_from on a track made with ranged=False")
        lo, hi = math.inf, -math.inf
        n = pts.values.shape[0]
        if n:
            i = _first_counted(pts.steps, n, self.count + 1, first_count, first_step)
            if i == 0:
                lo, hi = min_max(pts.values)
                self._next = (pts, lo, hi)
            elif i < n:
                lo, hi = min_max(pts.values[i:])
        if self._n_held:
            since = self._first[0] if self._wide is None else self._wide
            if since >= first_count:  # (every held point and range is past the warm-up)
                lo, hi = min(lo, min(self._lo)), max(hi, max(self._hi))
            else:
                for j, ((st, v, _p, _t), c, a, b) in enumerate(
                        zip(self._arrs, self._first, self._lo, self._hi)):
                    i = _first_counted(st, v.shape[0], c, first_count, first_step)
                    if i or (j == 0 and self._wide is not None):  # (exact: see _wide)
                        if i >= v.shape[0]:
                            continue
                        a, b = min_max(v[i:])
                    lo, hi = min(lo, a), max(hi, b)
        if lo > hi:
            return None
        if self._n_held > self.keep and not lo > 0:
            return self._exact_minmax(pts, first_count, first_step)
        return lo, hi

    def _exact_minmax(self, pts: Points, first_count: int, first_step: float
                      ) -> tuple[float, float] | None:
        """:meth:`minmax_from` of exactly the last ``keep`` points and ``pts``'."""
        lo, hi = math.inf, -math.inf
        extra = self._n_held - min(self._n_held, self.keep)
        frames = [*((a[0], a[1], c) for a, c in zip(self._arrs, self._first)),
                  (pts.steps, pts.values, self.count + 1)]
        for j, (st, v, c) in enumerate(frames):
            i = _first_counted(st, v.shape[0], c, first_count, first_step)
            if j == 0:
                i = max(i, extra)
            if i < v.shape[0]:
                a, b = min_max(v[i:])
                lo, hi = min(lo, a), max(hi, b)
        return None if lo > hi else (lo, hi)


def _first_counted(steps: np.ndarray, n: int, first: int, first_count: int,
                   first_step: float) -> int:
    """Index of the first of n points (steps ``steps``, the first counting ``first``) that
    counts ``first_count`` or more or sits at ``first_step`` or later (n if none)."""
    i = max(0, first_count - first)  # (the point at index j counts first + j)
    if i and first_step < math.inf:
        i = min(i, int(steps.searchsorted(first_step, "left")))
    return min(i, n)
