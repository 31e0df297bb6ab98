"""Older points of a series as a pyramid of min/max buckets, bounded in size.

At most ``capacity`` buckets of ``width`` points each; when full, neighbouring buckets merge
pairwise and the width doubles. A bucket keeps its first and last point, its finite min and
max and its first NaN/inf (:mod:`trainwatch.downsample`), so whatever is folded in, a one-step
spike or a NaN stays visible. The store (:mod:`trainwatch.store`) folds a series' points into it
as they leave its full-resolution tail.
"""

from __future__ import annotations

import numpy as np

from trainwatch.downsample import (
    FIRST,
    N_SLOTS,
    Buckets,
    bucket_rows,
    merge_buckets,
)

MIN_CAPACITY = 64
"""Smallest allocation: a store of many short series (per-layer norms) must stay small."""



class MinMaxPyramid:
    """Older history as a pyramid of min/max buckets (at most ``capacity`` of them)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.width = 1
        """Points per full bucket; doubles at each pairwise merge."""
        self.size = 0
        """Buckets in use; all but the last are full."""
        self.n = np.empty(0, dtype=np.int64)
        self.step = np.empty((0, N_SLOTS), dtype=np.int64)
        self.value = np.empty((0, N_SLOTS), dtype=np.float64)
        self.time = np.empty((0, N_SLOTS), dtype=np.float64)
        self.ord = np.empty((0, N_SLOTS), dtype=np.int64)
        """Ingest ordinal of each slot's point (orders and deduplicates slots); -1 = empty."""
        self._view: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def nbytes(self) -> int:
        arrays = [self.n, self.step, self.value, self.time, self.ord, *(self._view or ())]
        return sum(a.nbytes for a in arrays)

    def _rows(self, sl: slice) -> Buckets:
        return self.n[sl], self.step[sl], self.value[sl], self.time[sl], self.ord[sl]

    def _write(self, at: int, rows: Buckets) -> None:
        end = at + int(rows[0].shape[0])
        for dst, src in zip((self.n, self.step, self.value, self.time, self.ord), rows):
            dst[at:end] = src

    def _reserve(self, size: int) -> None:
        if size <= self.n.shape[0]:
            return
        new = min(self.capacity, max(size, 2 * self.n.shape[0], MIN_CAPACITY))
        old = self._rows(slice(0, self.size))
        self.n = np.empty(new, dtype=np.int64)
        self.step = np.empty((new, N_SLOTS), dtype=np.int64)
        self.value = np.empty((new, N_SLOTS), dtype=np.float64)
        self.time = np.empty((new, N_SLOTS), dtype=np.float64)
        self.ord = np.empty((new, N_SLOTS), dtype=np.int64)
        self._write(0, old)

    def add(self, steps: np.ndarray, values: np.ndarray, times: np.ndarray, ord0: int) -> None:
        """Fold the next points (oldest first; their ordinals start at ``ord0``)."""
        k = int(steps.shape[0])
        done = 0
        while done < k:
            last = self.size - 1
            if self.size and self.n[last] < self.width:
                # top up the open bucket first so all buckets but the last stay full
                take = min(self.width - int(self.n[last]), k - done)
                sl = slice(done, done + take)
                new = bucket_rows(steps[sl], values[sl], times[sl], ord0 + done, take)
                self._write(last, merge_buckets(self._rows(slice(last, last + 1)), new))
                done += take
                continue
            need = -(-(k - done) // self.width)
            if self.size + need > self.capacity:
                self._halve()
                continue
            self._reserve(self.size + need)
            sl = slice(done, k)
            rows = bucket_rows(steps[sl], values[sl], times[sl], ord0 + done, self.width)
            self._write(self.size, rows)
            self.size += need
            done = k
        self._view = None

    def _halve(self) -> None:
        m = self.size
        pairs = m // 2
        even, odd = slice(0, 2 * pairs, 2), slice(1, 2 * pairs, 2)
        merged = merge_buckets(self._rows(even), self._rows(odd))
        if m % 2:
            self._write(pairs, self._rows(slice(m - 1, m)))
        self._write(0, merged)
        self.size = pairs + m % 2
        self.width *= 2

    def truncate(self, step: int) -> None:
        """Forget points with ``step >= step`` (a later segment supersedes them)."""
        if not self.size:
            return
        keep = int(np.searchsorted(self.step[: self.size, FIRST], step, side="left"))
        if keep:
            row = keep - 1
            gone = (self.ord[row] >= 0) & (self.step[row] >= step)
            if keep == self.size and not gone.any():
                return
            # the straddling bucket keeps only its slots before the cut, and is closed
            self.ord[row][gone] = -1
            self.n[row] = self.width
        else:
            self.width = 1
        self.size = keep
        self._view = None

    def view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, values, times) of the buckets' distinct slot points, in ingest order."""
        if self._view is None:
            o = self.ord[: self.size]
            order = np.argsort(np.where(o >= 0, o, np.iinfo(np.int64).max), axis=1, kind="stable")
            so = np.take_along_axis(o, order, axis=1)
            keep = so >= 0
            keep[:, 1:] &= so[:, 1:] != so[:, :-1]
            self._view = tuple(  # type: ignore[assignment]
                np.take_along_axis(a[: self.size], order, axis=1)[keep]
                for a in (self.step, self.value, self.time)
            )
        return self._view  # type: ignore[return-value]

    @property
    def last_step(self) -> int | None:
        if not self.size:
            return None
        row = self.size - 1
        return int(self.step[row][self.ord[row] >= 0].max())
