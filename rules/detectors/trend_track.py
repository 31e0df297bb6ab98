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

A held range may count a few points older than those a window can read (those of the oldest
frame, or of what a push held as one, at most ``keep`` further back): a range that is never
narrower, and wider only for a positive series, only ever sends the analysis the long way (see
:meth:`TrendTrack.minmax_from`), whose answers are exact.

Steps never decrease within a segment (a lower step starts a new one, and the analysis is
rewound), so the points a window can hold (after a warm-up counted in points, or from a step
on) are a suffix of the held ones.

The other series' windows read this one by *step* span (memory's 200-point windows read the step
time of their ~2,000 steps when memory is logged every 10 steps), so a track that another reads
(:attr:`TrendTrack.read_by`) also holds every point from the first step of that series' oldest
window still to be read (:meth:`TrendTrack.reach_step`), up to ``cap`` points: live, a frame's
windows then read what they would read in the file read whole. The reads take at most the last
``cap`` points of a span (see :func:`~trainwatch.rules.detectors.growth.span_window`), so a series logged
far more often than the other is held to ``cap`` points (plus the rest of the oldest frame, at
most a push's ``cap`` and a frame: under ``2 * cap`` and a frame in all), not to the whole span.
The reads over the held frames' arrays are :mod:`~trainwatch.rules.detectors.track_frames`'s, the held
frames' ranges :mod:`~trainwatch.rules.detectors.track_ranges`'s.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from trainwatch.rules.detectors.growth import Pushed
from trainwatch.rules.detectors.track_frames import exact_range, held_step
from trainwatch.rules.detectors.track_ranges import HeldRanges
from trainwatch.rules.engine.base import Points

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
    """The last ``keep`` points of one series, carried across frames (and those another series'
    windows can still read: see :attr:`read_by`)."""

    def __init__(self, keep: int, ranged: bool = True, window: int | None = None,
                 cap: int | None = None) -> None:
        self.keep = keep
        self.ranged = ranged
        """Whether :meth:`minmax_from` will be asked (each frame's range is then taken as it
        comes)."""
        self.window = keep if window is None else window
        """Points in this series' own windows (at most ``keep``: the points a window can still
        hold are then always held, see :meth:`reach_step`)."""
        if not 2 <= self.window <= keep:
            raise ValueError(f"window {self.window} must be from 2 to keep ({keep})")
        self.cap = keep if cap is None else max(cap, keep)
        """The most points held for :attr:`read_by`'s windows (they read no more of a span)."""
        self.slack = 0 if ranged else keep
        """Points held past ``keep`` (with :attr:`read_by`) before any is let go: trimming on
        every frame costs more than holding more points (which no window then reads). Zero when
        ranged: the held points would widen the range the flat test reads on every frame."""
        self._read_by: TrendTrack | None = None
        self._trim_at = keep
        """Frames are let go once the newer ones hold this many points."""
        self.reset()

    @property
    def read_by(self) -> TrendTrack | None:
        """The track whose windows read this series over their step spans: the points from the
        first step of its oldest window still to be read are held as well (up to ``cap``)."""
        return self._read_by

    @read_by.setter
    def read_by(self, other: TrendTrack | None) -> None:
        self._read_by = other
        self._trim_at = self.keep if other is None else self.keep + self.slack
        self._since = math.inf if other is None else -math.inf  # (nothing known yet)

    def reset(self) -> None:
        self.count = 0
        self._reach_at = -1
        self._reach = 0.0
        """:meth:`reach_step`'s answer, and the count it was asked at."""
        self._since = -math.inf if self._read_by is not None else math.inf
        """The last :meth:`from_step` known: it only grows within a segment, so the points
        before it are not read (those after it may be)."""
        # the held frames, oldest first: their arrays, the count (1-based since the reset) of
        # each one's first point, its length, and its values' range (if ranged)
        self._arrs: deque[_Arrays] = deque()
        self._first: deque[int] = deque()
        self._n: deque[int] = deque()
        self._ranges = HeldRanges()
        self._n_held = 0
        """Points in the held frames: those a window may read (the last ``keep``, and
        :attr:`read_by`'s reach) and the rest of the oldest frames. While it is more than
        ``keep``, the oldest frame's range may count points that no window reads (see
        :meth:`minmax_from`)."""

    def advance(self, pts: Points) -> None:
        """:meth:`push` when nothing will be evaluated: only the held points move on."""
        n = pts.values.shape[0]
        if not n:
            return
        self._arrs.append((pts.steps, pts.values, pts.pos, pts.times))
        self._first.append(self.count + 1)
        self._n.append(n)
        if self.ranged:
            self._ranges.append(pts)
        self._n_held += n
        self.count += n
        ns = self._n
        rest = self._n_held - ns[0]
        if rest >= self._trim_at:
            arrs = self._arrs
            if rest >= self.cap or arrs[0][0].item(-1) < self._since:
                # (the usual case, without _trim's loop: this runs on every frame) the oldest
                # frame is past the keep and before what the other's windows read (as the last
                # step known says: see _trim)
                self._drop_oldest(rest)
                if rest - ns[0] < self._trim_at:
                    return
            self._trim()

    def _trim(self) -> None:
        """Let go of the oldest frames while the others hold the last ``keep`` points and every
        point :attr:`read_by`'s windows can still read (those from :meth:`from_step` on, up to
        ``cap``). The last step known is a bound (it only grows) that lets most frames go
        without asking it again; asked, it is as it stands (when this track moves first in a
        frame, the other's is the step before its frame's points: earlier, so more is held,
        never less)."""
        keep, ns, arrs = self.keep, self._n, self._arrs
        asked = self._read_by is None
        since = math.inf if asked else self._since
        while True:
            rest = self._n_held - ns[0]
            if rest < keep:
                return
            # (.item: a numpy integer scalar compares with a float slower than all the rest)
            if rest < self.cap and arrs[0][0].item(-1) >= since:
                # the oldest frame may hold a point the other's windows read
                if asked:
                    return
                since = self._since = self.from_step(1)
                asked = True
                if arrs[0][0].item(-1) >= since:
                    return
            self._drop_oldest(rest)

    def _drop_oldest(self, rest: int) -> None:
        """Let go of the oldest frame held (``rest``: the points the others hold)."""
        self._n_held = rest
        self._n.popleft()
        self._arrs.popleft()
        self._first.popleft()
        if self.ranged:
            self._ranges.drop_oldest()

    def reach_step(self) -> float | None:
        """Step of the oldest point one of this series' windows can still hold: the
        ``window - 1``-th last (a window ends at a point still to come), or the first since the
        reset while fewer are held (none was let go then: a track lets go only while it holds
        ``keep``); None while none is held."""
        n = self._n_held
        if not n:
            return None
        if self._reach_at == self.count:
            return self._reach
        step = held_step(self._arrs, n, n - min(self.window - 1, n))
        self._reach_at, self._reach = self.count, float(step)
        return self._reach

    def from_step(self, new_frames: int = 0) -> float:
        """The step from which :attr:`read_by`'s windows may read this series (its
        :meth:`reach_step`); inf when no other reads it. While the other holds nothing, this
        series' last step before its ``new_frames`` newest held frames (those of the frame
        being read, whose records may hold the other's first points at earlier steps): the
        other's first point cannot come before it."""
        other = self._read_by
        if other is None:
            return math.inf
        s = other.reach_step()
        if s is None:
            arrs = self._arrs
            return float(arrs[-1 - new_frames][0].item(-1)) if len(arrs) > new_frames else (
                -math.inf)
        return s

    def held_from(self) -> float:
        """:meth:`from_step`, or the last one known where either gives the same points (the
        point before the last ``keep`` is before it: a window reads the last ``keep`` either
        way), which spares asking the other track's reach on most evaluated frames."""
        if self._n_held <= self.keep or self._before_keep() < self._since:
            return self._since
        return self.from_step()

    def _before_keep(self) -> int:
        """The step of the point before the last ``keep`` (more are held): a walk over the
        frames, where it is, and one value read."""
        return held_step(self._arrs, self._n_held, self._n_held - self.keep - 1)

    def _n_reach(self, since: float) -> int:
        """How many of the held points a window may read: the last ``keep``, and those at step
        ``since`` or later, up to ``cap``."""
        n, keep = self._n_held, self.keep
        if n <= keep or since == math.inf:
            return min(n, keep)
        if self._before_keep() < since:
            return keep  # (the usual case)
        r = 0
        for a in reversed(self._arrs):
            st = a[0]
            m = st.shape[0]
            if st.item(0) >= since:
                r += m
                if r >= self.cap:
                    break
                continue
            r += m - int(st.searchsorted(since, "left"))
            break
        return min(n, max(keep, min(self.cap, r)))

    def push(self, pts: Points, since: float | None = None) -> Pushed:
        """The last ``keep`` points before this frame (and those from step ``since`` on, up to
        ``cap``: by default :meth:`held_from`, which the caller asks before the other track
        moves in this frame) followed by the frame's, for evaluation schedules. They are held
        from then on as one frame (the next push concatenates two arrays, not every frame held
        since)."""
        m = pts.values.shape[0]
        c0 = self.count
        if not self._n_held and (not m or _same_kinds(pts)):
            # nothing carried (after a reset; a whole run read at once is one frame): the
            # frame's arrays as they are, not copies
            self.advance(pts)
            return Pushed(pts.steps, pts.values, pts.pos, pts.times, 0, c0)
        if since is None:
            since = self.held_from()
        self._since = max(self._since, since)
        n_old = self._n_reach(since) if self._n_held else 0
        ns = self._n
        while self._n_held and self._n_held - ns[0] >= n_old:  # (no window reads them)
            self._drop_oldest(self._n_held - ns[0])
        cut = self._n_held - n_old  # (the oldest frame's points no window reads)
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
            self._ranges.hold_as_one(pts, first, self._first[0], self.keep, out.values)
        self._arrs[0] = (out.steps, out.values, out.pos, out.times)
        self._first[0] = first
        self._n[0] = self._n_held = out.values.shape[0]
        self.count += pts.values.shape[0]
        return out

    def _hold_as_one(self, pts: Points, out: Pushed) -> None:
        """Hold the pushed points (``pts`` the frame's) as one frame instead of the frames they
        came from (their ranges merged too: see :mod:`~trainwatch.rules.detectors.track_ranges`)."""
        n = out.values.shape[0]
        first = self.count + 1 - out.n_old
        if self.ranged:
            self._ranges.hold_as_one(pts, first, self._first[0] if self._first else None,
                                     self.keep, out.values)
        for d in (self._arrs, self._first, self._n):
            d.clear()
        self._arrs.append((out.steps, out.values, out.pos, out.times))
        self._first.append(first)
        self._n.append(n)
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
        lo, hi = self._ranges.counted_range(pts, self.count, self._arrs, self._first,
                                            first_count, first_step)
        if lo > hi:
            return None
        if self._n_held > self.keep and not lo > 0:
            return self._exact_minmax(pts, first_count, first_step)
        return lo, hi

    def _exact_minmax(self, pts: Points, first_count: int, first_step: float
                      ) -> tuple[float, float] | None:
        """:meth:`minmax_from` of exactly the points a window may read (see :meth:`_n_reach`)
        and ``pts``'."""
        extra = self._n_held - self._n_reach(self.from_step())
        frames = [*((a[0], a[1], c) for a, c in zip(self._arrs, self._first)),
                  (pts.steps, pts.values, self.count + 1)]
        return exact_range(frames, extra, first_count, first_step)
