"""The bounded in-memory series store: what the TUI draws and the rules look back at.

Each series keeps its last ``recent_points`` points at full resolution and folds older points into
a min/max pyramid of at most ``summary_points`` buckets: when the pyramid is full, neighbouring
buckets merge pairwise and the resolution halves. Every bucket keeps its first and last point,
its finite min and max, and its first NaN/inf, so a one-step spike or a NaN from a week ago is
still drawn. Memory per series is therefore bounded whatever the run length, and ingest is
amortised O(1) per point with whole-array work per chunk.

Not thread-safe: one owner (the UI thread) ingests and queries. :class:`Points` handed out are
read-only copies, so they stay valid while the store moves on.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from trainwatch.batch import RecordBatch, SeriesChunk
from trainwatch.downsample import (
    FIRST,
    minmax_indices,
)
from trainwatch.pyramid import MIN_CAPACITY, MinMaxPyramid


@dataclass(frozen=True)
class Points:
    """Points of one series, ready to draw. Arrays are read-only copies."""

    steps: np.ndarray
    """int64, ascending."""
    values: np.ndarray
    """float64; NaN/inf are real non-finite values."""
    times: np.ndarray
    """float64 unix seconds."""
    exact: bool
    """False when any point came from the summary or was downsampled."""

    def __len__(self) -> int:
        return int(self.steps.shape[0])


def _points(steps: np.ndarray, values: np.ndarray, times: np.ndarray, exact: bool) -> Points:
    for a in (steps, values, times):
        a.setflags(write=False)
    return Points(steps, values, times, exact)


def _span(steps: np.ndarray, start: int | None, end: int | None) -> tuple[int, int]:
    lo = 0 if start is None else int(np.searchsorted(steps, start, side="left"))
    hi = steps.shape[0] if end is None else int(np.searchsorted(steps, end, side="right"))
    return lo, max(lo, hi)


def _check_sizes(recent_points: int, summary_points: int) -> None:
    if recent_points < 1 or summary_points < 1:
        raise ValueError(
            f"recent_points and summary_points must be at least 1, got "
            f"{recent_points} and {summary_points}"
        )


class Series:
    """One metric: a full-resolution recent window, a min/max summary of older history, and
    cumulative counters. Fed by :meth:`SeriesStore.ingest`."""

    def __init__(self, name: str, recent_points: int = 8192, summary_points: int = 4096) -> None:
        _check_sizes(recent_points, summary_points)
        self.name = name
        self.version = 0
        """Increments whenever points are added or removed (for redraw caching)."""
        self.count = 0
        """All points ever ingested, superseded ones included."""
        self.nonfinite = 0
        """Cumulative count of NaN/inf values."""
        self.last: float | None = None
        """Last value ingested (may be NaN)."""
        self.last_time: float | None = None
        self.min: float | None = None
        """Smallest finite value ever ingested; None if none."""
        self.max: float | None = None
        """Largest finite value ever ingested; None if none."""
        self.segment = 0
        """Segment of the last point (a resumed run starts a higher one)."""
        self.recent_points = recent_points
        # the recent window lives in a buffer of up to 2x recent_points: folding its oldest half
        # into the summary once per recent_points appends keeps the shift amortised O(1)
        self._steps = np.empty(0, dtype=np.int64)
        self._values = np.empty(0, dtype=np.float64)
        self._times = np.empty(0, dtype=np.float64)
        self._n = 0
        self._ord0 = 0
        """Ingest ordinal of the buffer's first point (summary ordinals are all below it)."""
        self._summary = MinMaxPyramid(summary_points)

    @property
    def first_step(self) -> int | None:
        """First step of the display view (None when it is empty)."""
        if self._summary.size:
            return int(self._summary.step[0, FIRST])
        return int(self._steps[0]) if self._n else None

    @property
    def last_step(self) -> int | None:
        """Last step of the display view (None when it is empty)."""
        return int(self._steps[self._n - 1]) if self._n else self._summary.last_step

    @property
    def resolution(self) -> int:
        """Points per summary bucket: 1 while history is exact, then 2, 4, 8... (a NaN or spike
        older than the recent window is shown within this many points of where it was)."""
        return self._summary.width

    def nbytes(self) -> int:
        recent = self._steps.nbytes + self._values.nbytes + self._times.nbytes
        return recent + self._summary.nbytes()

    # ------------------------------------------------------------------ ingest
    def ingest(self, chunk: SeriesChunk) -> bool:
        """Append a chunk (points in record order). Returns False when it was empty."""
        steps = np.asarray(chunk.steps, dtype=np.int64)
        values = np.asarray(chunk.values, dtype=np.float64)
        times = np.asarray(chunk.times, dtype=np.float64)
        segs = np.asarray(chunk.segments, dtype=np.int64)
        k = int(steps.shape[0])
        if not values.shape == times.shape == segs.shape == (k,):
            raise ValueError(
                f"series {self.name!r}: chunk arrays differ in length (steps {steps.shape}, "
                f"values {values.shape}, times {times.shape}, segments {segs.shape}); "
                "build chunks with trainwatch.builder.BatchBuilder"
            )
        if k == 0:
            return False
        # a point starts a superseding piece when a later segment goes back to (or repeats) a
        # stored step; a step going back inside one segment breaks the contract, and is treated
        # the same way so the display view stays sorted
        last_step = self.last_step
        prev_step = np.empty(k, dtype=np.int64)
        prev_seg = np.empty(k, dtype=np.int64)
        prev_step[0] = steps[0] if last_step is None else last_step
        prev_seg[0] = segs[0] if last_step is None else self.segment
        prev_step[1:] = steps[:-1]
        prev_seg[1:] = segs[:-1]
        cut = (steps < prev_step) | ((segs > prev_seg) & (steps == prev_step))
        bounds = [0, *np.flatnonzero(cut).tolist(), k]
        for a, b in pairwise(bounds):
            if a == b:
                continue
            if cut[a]:
                self._truncate(int(steps[a]))
            self._append(steps[a:b], values[a:b], times[a:b])

        finite = np.isfinite(values)
        n_finite = int(np.count_nonzero(finite))
        self.count += k
        self.nonfinite += k - n_finite
        if n_finite:
            fv = values if n_finite == k else values[finite]
            lo, hi = float(fv.min()), float(fv.max())
            self.min = lo if self.min is None else min(self.min, lo)
            self.max = hi if self.max is None else max(self.max, hi)
        self.last = float(values[-1])
        self.last_time = float(times[-1])
        self.segment = int(segs[-1])
        self.version += 1
        return True

    def _append(self, steps: np.ndarray, values: np.ndarray, times: np.ndarray) -> None:
        k, n, r = int(steps.shape[0]), self._n, self.recent_points
        cap = self._steps.shape[0]
        if n + k > cap and cap < 2 * r:
            self._grow(min(2 * r, max(n + k, 2 * cap, MIN_CAPACITY)))
            cap = self._steps.shape[0]
        if n + k <= cap:
            dst = slice(n, n + k)
        else:
            # full: fold the oldest points into the summary and keep the last recent_points
            evict = n + k - r
            old = min(evict, n)
            self._summary.add(self._steps[:old], self._values[:old], self._times[:old], self._ord0)
            if evict > n:
                e = evict - n
                self._summary.add(steps[:e], values[:e], times[:e], self._ord0 + n)
                steps, values, times = steps[e:], values[e:], times[e:]
            for buf in (self._steps, self._values, self._times):
                buf[: n - old] = buf[old:n]
            self._ord0 += evict
            n -= old
            dst = slice(n, n + steps.shape[0])
        self._steps[dst] = steps
        self._values[dst] = values
        self._times[dst] = times
        self._n = dst.stop

    def _grow(self, cap: int) -> None:
        n = self._n
        for attr in ("_steps", "_values", "_times"):
            old = getattr(self, attr)
            new = np.empty(cap, dtype=old.dtype)
            new[:n] = old[:n]
            setattr(self, attr, new)

    def _truncate(self, step: int) -> None:
        """Drop points with ``step >= step`` from the display view."""
        if self._n and self._steps[0] < step:
            # the summary lies before the window's first step, so it is untouched
            self._n = int(np.searchsorted(self._steps[: self._n], step, side="left"))
        else:
            self._n = 0
            self._summary.truncate(step)

    # ------------------------------------------------------------------ queries
    def query(
        self,
        *,
        start: int | None = None,
        end: int | None = None,
        last_n: int | None = None,
        max_points: int = 1000,
    ) -> Points:
        """Points of the display view in ``[start, end]`` (inclusive steps), or its last
        ``last_n`` points (within that range); at most ``max_points``, min/max downsampled so
        one-step spikes and NaNs stay visible."""
        if last_n is not None and last_n < 0:
            raise ValueError(f"last_n must be >= 0, got {last_n}")
        s_steps, s_values, s_times = self._summary.view()
        r_steps = self._steps[: self._n]
        s_lo, s_hi = _span(s_steps, start, end)
        r_lo, r_hi = _span(r_steps, start, end)
        if last_n is not None:
            r_lo = max(r_lo, r_hi - last_n)
            s_lo = max(s_lo, s_hi - (last_n - (r_hi - r_lo)))
        s, r = slice(s_lo, s_hi), slice(r_lo, r_hi)
        steps = np.concatenate((s_steps[s], r_steps[r]))
        values = np.concatenate((s_values[s], self._values[r]))
        times = np.concatenate((s_times[s], self._times[r]))
        # a summary still at width 1 holds single points: exact
        exact = s_hi == s_lo or self._summary.width == 1
        idx = minmax_indices(steps, values, max_points)
        if idx.shape[0] < steps.shape[0]:
            steps, values, times, exact = steps[idx], values[idx], times[idx], False
        return _points(steps, values, times, exact)

    def tail(self, n: int) -> Points:
        """The last ``n`` points at full resolution (exact while ``n`` is within the recent
        window; beyond it, summary points make up the rest and ``exact`` is False)."""
        return self.query(last_n=n, max_points=max(n, 1))


class SeriesStore:
    """All series of one source, by name, in order of first appearance."""

    def __init__(self, recent_points: int = 8192, summary_points: int = 4096) -> None:
        _check_sizes(recent_points, summary_points)
        self.recent_points = recent_points
        self.summary_points = summary_points
        self.version = 0
        """Increments on every change."""
        self._series: dict[str, Series] = {}

    def ingest(self, batch: RecordBatch) -> set[str]:
        """Add a batch's points. Returns the names of the series that changed (after a reset,
        the dropped series count as changed: :meth:`get` now returns None for them)."""
        changed: set[str] = set()
        if batch.reset:
            changed.update(self._series)
            self.reset()
        for name, chunk in batch.series.items():
            series = self._series.get(name)
            new = series is None
            if series is None:
                series = Series(name, self.recent_points, self.summary_points)
            if series.ingest(chunk):
                if new:  # only now: an empty or rejected chunk creates no series
                    self._series[name] = series
                changed.add(name)
        if changed:
            self.version += 1
        return changed

    def reset(self) -> None:
        """The source was truncated or replaced: drop everything."""
        self._series.clear()
        self.version += 1

    def names(self) -> list[str]:
        return list(self._series)

    def get(self, name: str) -> Series | None:
        return self._series.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._series

    def __len__(self) -> int:
        return len(self._series)

    def nbytes(self) -> int:
        """Approximate memory held by the series' arrays."""
        return sum(s.nbytes() for s in self._series.values())
