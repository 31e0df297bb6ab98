"""Steady growth of memory, step time and graph size: the shared analysis behind
``memory_growth`` and ``state_detach``.

A trend is tested every ``every`` points over the last ``window`` points of a series: Theil-Sen
slope (robust to outliers) and Spearman rho (monotone, whatever the shape), with growth over the
window as a fraction of its level. Exact tests are O(window^2), so a vectorised pre-filter (the
median of the window's last fifth against its first fifth) picks the few windows worth testing.

The two rules are one analysis so that they agree: step time and memory rising together is a
graph kept across steps through the recurrent state (``state_detach``); memory rising with a flat
step time is a tensor kept with its graph (``memory_growth``). Whichever is seen first in a
segment owns the diagnosis; the other does not fire on the same growth.

A rising step time only counts as the detach ramp when it rises *steadily* (see
:func:`~trainwatch.rules.detectors.rise_shape.steady_rise`): an undetached state makes every backward pass longer by the same amount,
while other processes loading the machine lift the step time in a step (load arrives) or a burst.
Without that test a memory leak on a busy machine reads as a detach bug.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainwatch.rules.detectors.ordered_trend import (
    spearman_in_order,
    spearman_rows,
    trend_in_order,
)
from trainwatch.rules.detectors.stats import median_sorted, windows


@dataclass(frozen=True)
class Evals:
    """Evaluation points of one push: windows ending at ``end`` in the concatenated arrays."""

    steps: np.ndarray
    values: np.ndarray
    pos: np.ndarray
    times: np.ndarray
    end: np.ndarray
    """Index (into the arrays above) of each evaluated window's last point."""
    window: int
    every: int = 1
    """Points between two evaluations (``end`` steps by it)."""

    @property
    def q(self) -> int:
        """Points in the first and last fifth the quick estimate compares."""
        return max(2, self.window // 5)

    def growth(self, flat_from: int | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """Quick growth estimate of each window (last fifth's median over the first fifth's,
        - 1), computed only where ``mask`` is set and the window starts before ``flat_from``
        (see :func:`flat_from`); 0 elsewhere (the caller knows it cannot matter there)."""
        n = self.end.shape[0]
        first = self.end - (self.window - 1)
        # the windows start in order: those before flat_from are a prefix
        cut = n if flat_from is None else int(first.searchsorted(flat_from))
        if mask is None and cut == n:
            return self._growth_prefix(n)
        out = np.zeros(n)
        if mask is None:
            if cut:
                out[:cut] = self._growth_prefix(cut)
            return out
        ks = mask[:cut].nonzero()[0]
        if ks.shape[0]:
            out[ks] = quick_growth(self.values, first[ks], self.end[ks] - (self.q - 1), self.q)
        return out

    def _growth_prefix(self, k: int) -> np.ndarray:
        """The quick growth of the first k windows: their fifths start every ``every`` points,
        so the blocks are strided views of the values (no gather)."""
        if k == 0:
            return np.empty(0)
        e0 = int(self.end[0])
        return _strided_growth(self.values, e0 - (self.window - 1), e0 - (self.q - 1),
                               self.every, k, self.q)

    def window_at(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        e = int(self.end[k])
        sl = slice(e - self.window + 1, e + 1)
        return self.steps[sl].astype(np.float64), self.values[sl]

    def exact(self, k: int, min_rho: float = -1.0, rho: float | None = None
              ) -> tuple[float, float, float]:
        """(slope per step, rho, growth over the window) of evaluation k (see
        :func:`~trainwatch.rules.detectors.stats.trend`); ``rho``: from :class:`WindowRho`, if known."""
        x, y = self.window_at(k)
        return trend_in_order(x, y, min_rho, rho)


class WindowRho:
    """Spearman rho of an :class:`Evals`' candidate windows, computed when first asked for, in
    one vectorised pass over that window and the next few candidates: the exact tests run in
    order and most fail on rho while a rise builds up (consecutive windows), so one pass answers
    several of them (see :func:`~trainwatch.rules.detectors.ordered_trend.spearman_rows`)."""

    def __init__(self, ev: Evals, cand: np.ndarray) -> None:
        self.ev = ev
        self.cand = cand
        """Indices of the evaluations that may be asked for, in order."""
        self.batch = 8
        """Windows per pass: one pass over eight costs about what two or three single ones do
        (30 or 200 points, with ties)."""
        self._rho: dict[int, float] = {}
        self._steps_in_order: bool | None = None

    def get(self, k: int) -> float:
        r = self._rho.get(k)
        if r is None:
            i = int(self.cand.searchsorted(k))
            ks = self.cand[i:i + self.batch]
            if ks.shape[0] == 0 or ks[0] != k:
                ks = np.array([k])
            self._rho.update(zip(ks.tolist(), self._compute(ks).tolist()))
            r = self._rho[k]
        return r

    def _compute(self, ks: np.ndarray) -> np.ndarray:
        ev = self.ev
        if self._steps_in_order is None:
            s = ev.steps
            self._steps_in_order = bool((s[1:] > s[:-1]).all())
        if not self._steps_in_order:  # (rare: a window may hold a repeated step)
            return np.array([spearman_in_order(*ev.window_at(k)) for k in ks.tolist()])
        return spearman_rows(windows(ev.values, ev.window)[ev.end[ks] - (ev.window - 1)])


def quick_growth(values: np.ndarray, first: np.ndarray, last: np.ndarray, q: int) -> np.ndarray:
    """Median of ``values[last:last+q]`` over the median of ``values[first:first+q]``, minus 1."""
    k = first.shape[0]
    if k == 0:
        return np.empty(0)
    rows = windows(values, q)[np.concatenate((first, last))]  # one sort for both ends
    rows.sort(axis=1)
    med = np.asarray(median_sorted(rows), dtype=np.float64)
    return _ratio(med[:k], med[k:])


def _strided_growth(values: np.ndarray, first0: int, last0: int, every: int, k: int, q: int
                    ) -> np.ndarray:
    """:func:`quick_growth` of k windows whose first and last blocks start at ``first0`` and
    ``last0`` and every ``every`` points after: two strided views, copied and sorted at once.

    When the distance between a window's two blocks is a whole number d of ``every`` (memory's
    200-point windows every 10: 16), window i's last block is window i + d's first: the k + d
    distinct blocks are sorted once each instead of 2k."""
    w = windows(values, q)
    d, r = divmod(last0 - first0, every)
    if r == 0 and d < k:
        rows = w[first0:first0 + every * (k + d):every].copy()
        rows.sort(axis=1)
        med = np.asarray(median_sorted(rows), dtype=np.float64)
        return _ratio(med[:k], med[d:d + k])
    rows = np.concatenate((w[first0:first0 + every * k:every], w[last0:last0 + every * k:every]))
    rows.sort(axis=1)
    med = np.asarray(median_sorted(rows), dtype=np.float64)
    return _ratio(med[:k], med[k:])


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``b / a - 1`` where ``a > 0``; else inf where ``b > a``, 0 elsewhere."""
    if a.min() > 0:  # (the usual case: a memory or a step time)
        g = b / a
        g -= 1.0
        return g
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, b / a - 1.0, np.where(b > a, np.inf, 0.0))


def joint_candidates(ev: Evals, other: Pushed, other_bar: float, bar: float
                     ) -> np.ndarray | None:
    """``(span_growth(ev, other, ev.q, ...) >= other_bar) & (ev.growth() >= bar)``, when
    ``other`` holds the same records as ``ev`` in strictly increasing steps (memory logged with
    every step time: the usual case): each window's span in ``other`` is then the same index
    range (never cut by a span cap: that is at least a window). ``ev``'s estimate first, from strided blocks; ``other``'s only where it passes (a flat
    step time under a leak fails about half). None otherwise."""
    n, k, q = ev.values.shape[0], ev.end.shape[0], ev.q
    if other.values.shape[0] != n or k == 0 or not np.array_equal(other.pos, ev.pos):
        return None
    s = ev.steps
    if not bool((s[1:] > s[:-1]).all()):
        return None  # (a repeated step: the span by steps may start earlier)
    cand = ev.growth() >= bar
    ks = cand.nonzero()[0]
    if ks.shape[0] == k:
        e0 = int(ev.end[0])
        g = _strided_growth(other.values, e0 - (ev.window - 1), e0 - (q - 1), ev.every, k, q)
        cand &= g >= other_bar
    elif ks.shape[0]:
        end = ev.end[ks]
        cand[ks] = quick_growth(other.values, end - (ev.window - 1), end - (q - 1), q) >= other_bar
    return cand


def flat_from(values: np.ndarray, bar: float, shortest: int = 0) -> int:
    """The first index from which the values stay positive and within ``bar`` of their minimum
    (``max - min < bar * min``, with a 0.1 % margin for rounding); ``len(values)`` if even the
    last one is not positive, or if that flat tail is shorter than ``shortest`` (then it holds
    no window of that many points, and one look at the last values says so).

    Every window inside that flat tail has a quick growth (a ratio of two medians of its values)
    below ``bar``, so a rule whose bar it is need not compute it there: on a steady series this
    skips nearly every evaluation for a few array passes.
    """
    n = values.shape[0]
    if n == 0:
        return 0
    rel = bar * 0.999
    if 0 < shortest < n:
        t = values[n - shortest:]
        lo, hi = float(t.min()), float(t.max())
        if not (lo > 0 and hi - lo < rel * lo):
            return n
    lo, hi = float(values.min()), float(values.max())
    if lo > 0 and hi - lo < rel * lo:
        return 0
    rv = values[::-1]
    smin = np.minimum.accumulate(rv)
    ok = (np.maximum.accumulate(rv) - smin < rel * smin) & (smin > 0)
    # a shorter tail has a smaller range and a larger minimum: ok holds from some index on
    return n - int(np.count_nonzero(ok))


@dataclass(frozen=True)
class Pushed:
    """A ring's recent points followed by the frame's, ready for evaluation schedules."""

    steps: np.ndarray
    values: np.ndarray
    pos: np.ndarray
    times: np.ndarray
    n_old: int
    """How many of the points came from earlier frames."""
    c0: int
    """Points pushed (since the last reset) before this frame's."""

    def evals(self, window: int, every: int, warmup: int) -> Evals:
        """Windows of ``window`` points ending every ``every`` points after ``warmup`` points.

        The point with count c (1-based since the reset) ends a window when
        c >= warmup + window and (c - warmup - window) is a multiple of ``every``.
        """
        m = self.values.shape[0] - self.n_old
        first_c = warmup + window
        start = max(first_c, self.c0 + 1)
        start += (-(start - first_c)) % every
        c = np.arange(start, self.c0 + m + 1, every)
        end = c - self.c0 - 1 + self.n_old
        return Evals(self.steps, self.values, self.pos, self.times, end, window, every)


def span_growth(ev: Evals, other: Pushed | None, q: int, min_points: int,
                flat: int | None = None, cap: int | None = None) -> np.ndarray:
    """For each evaluation of ``ev``, the quick growth of ``other``'s points within the same step
    span, at most its last ``cap`` (see :func:`span_window`; NaN where ``other`` has fewer than
    ``min_points`` there; 0 where the span starts at or after ``other``'s index ``flat``, see
    :func:`flat_from`)."""
    n = ev.end.shape[0]
    if other is None or n == 0 or other.values.shape[0] == 0:
        return np.full(n, np.nan)
    # up to the evaluated record (by position, not step: a later record may share the step)
    s0 = ev.steps[ev.end - ev.window + 1]
    lo = other.steps.searchsorted(s0, "left")
    hi = other.pos.searchsorted(ev.pos[ev.end], "right")
    if cap is not None:
        lo = np.maximum(lo, hi - cap)
    ok = (hi - lo) >= max(min_points, q)
    out = np.full(n, np.nan)
    if flat is not None:
        out[ok & (lo >= flat)] = 0.0
        ok &= lo < flat
    if ok.any():
        out[ok] = quick_growth(other.values, lo[ok], hi[ok] - q, q)
    return out


def span_window(ev: Evals, k: int, other: Pushed, cap: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``other``'s (steps, values) within the step span of ``ev``'s evaluation k (up to the
    evaluated record, by position: a later record may share its step), at most the last ``cap``.

    The cap bounds what a live track must hold of a series logged far more often than the one
    whose window it is (memory every 100 steps: a 200-point window spans 20,000 step times);
    read the same way whole-file, it gives the same points however the stream is batched."""
    e = int(ev.end[k])
    lo = int(other.steps.searchsorted(ev.steps[e - ev.window + 1], "left"))
    hi = int(other.pos.searchsorted(ev.pos[e], "right"))
    if cap is not None:
        lo = max(lo, hi - cap)
    return other.steps[lo:hi].astype(np.float64), other.values[lo:hi]


def span_trend(ev: Evals, k: int, other: Pushed, min_rho: float = -1.0, cap: int | None = None
               ) -> tuple[float, float, float, int]:
    """Exact trend of ``other`` within the step span of ``ev``'s evaluation k (at most its last
    ``cap`` points: see :func:`span_window`)."""
    x, y = span_window(ev, k, other, cap)
    slope, rho, growth = trend_in_order(x, y, min_rho)
    return slope, rho, growth, x.shape[0]
