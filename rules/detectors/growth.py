"""Steady growth of a series: a trend tested every ``every`` points over its last ``window``.

The trend of a window is Theil-Sen's slope (robust to outliers) and Spearman's rho (monotone,
whatever the shape), its growth the slope over the window's steps as a fraction of its level
(:func:`trend`). The slope is O(window^2), so a quick estimate,
vectorised over every window a frame ends, picks the few worth them: the median of the window's
last fifth over its first fifth's, minus 1, must reach half the bar (:data:`QUICK_SHARE`). A
window may also read another series over its step span (a memory window, the step times logged
meanwhile): at most the last ``cap`` of those points, so that what a live rule holds stays
bounded and the file read whole reads the same points.

    tail = Tail(keep=200)
    ev = tail.push(points).evals(window=200, every=10, warmup=50)
    for k, (slope, rho, growth) in Episodes(min_rho=0.9, min_growth=0.01).starts(ev): ...
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from trainwatch.rules.detectors.stats import relative_growth, spearman, windows
from trainwatch.rules.engine.base import Points

SPAN_CAP_WINDOWS = 16
"""A window reads at most this many times the longer window's points of the other series in its
step span (memory every 16 steps: a 200-point memory window's 3,200 step times are all read)."""

QUICK_SHARE = 0.5
"""A window's quick estimate must reach this share of a growth bar before the exact test (the
median of a fifth is noisier than a trend over the whole window)."""
QUICK_BLOCK = 5
"""The quick estimate compares the medians of a window's first and last 1/QUICK_BLOCK (2 points
at the least)."""

MIN_POINTS = 5
"""A trend over fewer points does not count (another series' step span may hold few)."""

Trend = tuple[float, float, float]
"""(Theil-Sen slope per step, Spearman rho, growth over the window as a fraction of its level)."""

_DTYPES = (np.int64, np.float64, np.int64)
"""Of the steps, values and records a tail holds."""


def theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """Theil-Sen slope: the median of the slopes of all pairs of points with distinct ``x``.

    Each pair is read once, from two strided views (:func:`_pair_diffs`): no index tables, whose
    size a long window (a memory window's span of 3,200 step times: 5M pairs) would make a burden
    to keep; the median's two order statistics are found by partition."""
    dy, dx = _pair_diffs(y), _pair_diffs(x)
    keep = dx != 0
    if not keep.all():
        dy, dx = dy[keep], dx[keep]
    m = dy.shape[0]
    if m == 0:
        return 0.0
    dy /= dx
    k = m // 2
    dy.partition(k)
    hi = float(dy[k])
    lo = hi if m % 2 else float(dy[:k].max())
    return (lo + hi) * 0.5 + 0.0  # (+ 0.0: a zero slope is 0.0, whichever pair it came from)


def _pair_diffs(v: np.ndarray) -> np.ndarray:
    """``v[j] - v[i]`` for every pair i < j, in some order, each once (a new array): row L of
    the differences at lags 1..n/2 wrapping round holds the pairs L apart and, negated, those
    n - L apart (a negated pair gives the same slope: IEEE negation is exact); for even n the last
    row's second half repeats its first, and is cut off."""
    n = v.shape[0]
    d = windows(np.concatenate((v, v)), n)[1:n // 2 + 1] - v
    return d.reshape(-1)[:n * (n - 1) // 2]


def trend(x: np.ndarray, y: np.ndarray, min_rho: float = -1.0) -> Trend:
    """The trend of ``y`` against ``x`` (the slope is not computed below ``min_rho``: NaN)."""
    rho = spearman(x, y)
    if rho < min_rho:
        return math.nan, rho, math.nan
    slope = theil_sen(x, y)
    return slope, rho, relative_growth(slope, x, y)


class Evals(NamedTuple):
    """The windows of one push that are tested: each ends at index ``end`` of the arrays."""

    steps: np.ndarray
    values: np.ndarray
    pos: np.ndarray
    times: np.ndarray
    """The frame's points' only (from index ``n_old``): a window ends at one of them."""
    n_old: int
    end: np.ndarray
    window: int

    @property
    def q(self) -> int:
        """Points in the first and last fifth the quick estimate compares."""
        return max(2, self.window // QUICK_BLOCK)

    def growth(self, mask: np.ndarray | None = None) -> np.ndarray:
        """The quick growth estimate of each window (where ``mask`` is set; 0 elsewhere)."""
        end = self.end if mask is None else self.end[mask]
        g = quick_growth(self.values, end - (self.window - 1), end - (self.q - 1), self.q)
        if mask is None:
            return g
        out = np.zeros(self.end.shape[0])
        out[mask] = g
        return out

    def may_rise(self, bar: float) -> bool:
        """Whether a window's quick growth may reach ``bar`` (see :func:`may_rise`)."""
        e = self.end
        return e.shape[0] > 0 and may_rise(self.values[e[0] - self.window + 1:e[-1] + 1], bar)

    def window_at(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(steps as floats, values) of window k."""
        e = int(self.end[k])
        sl = slice(e - self.window + 1, e + 1)
        return self.steps[sl].astype(np.float64), self.values[sl]

    def exact(self, k: int, min_rho: float = -1.0) -> Trend:
        """The trend of window k (its slope is not computed below ``min_rho``: NaN)."""
        return trend(*self.window_at(k), min_rho)

    def at(self, k: int) -> tuple[int, int, float]:
        """(record, step, time) where window k ends."""
        e = int(self.end[k])
        return int(self.pos[e]), int(self.steps[e]), float(self.times[e - self.n_old])


class Pushed(NamedTuple):
    """A tail's points from earlier frames followed by the frame's."""

    steps: np.ndarray
    values: np.ndarray
    pos: np.ndarray
    times: np.ndarray
    """The frame's points' only."""
    n_old: int
    """How many of the points came from earlier frames."""
    c0: int
    """Points pushed since the segment began, before this frame's."""

    def evals(self, window: int, every: int, warmup: int) -> Evals:
        """Windows of ``window`` points ending every ``every`` points after ``warmup``: the point
        counting c (from 1 in the segment) ends one when c >= warmup + window and
        c - warmup - window is a multiple of ``every``. Only windows ending in the frame."""
        first = warmup + window
        start = max(first, self.c0 + 1)
        start += (first - start) % every
        at = self.n_old - self.c0 - 1  # (the index of the point counting c is c + at)
        end = np.arange(start + at, self.values.shape[0], every)
        return Evals(self.steps, self.values, self.pos, self.times, self.n_old, end, window)


class Tail:
    """The last ``keep`` points of one series in a segment, which the next frame's windows read.

    Live, a frame brings a few points and ``keep`` may be thousands (the step times a memory
    window spans): the points are appended in place to buffers twice that long, and the held ones
    moved to the front only when a buffer is full, so a frame costs about its own points."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.reset()

    def reset(self) -> None:
        self._bufs = tuple(np.zeros(2 * self.keep, dtype=d) for d in _DTYPES)
        self.count = 0
        """Points pushed since the segment began."""
        self.n = 0
        """Points held (the last ``keep`` pushed), from ``start`` in the buffers."""
        self.start = 0

    def push(self, pts: Points) -> Pushed:
        """The held points followed by ``pts`` (finite), as arrays valid until the next push;
        the last ``keep`` of them are held."""
        new = (pts.steps, pts.values, pts.pos)
        m, n_old, c0 = pts.values.shape[0], self.n, self.count
        self.count += m
        if n_old == 0 and m >= self.keep:  # (a whole file: its arrays as they are)
            self._hold(new, m)
            return Pushed(*new, pts.times, 0, c0)
        need = n_old + m
        if self.start + need > self._bufs[0].shape[0]:
            held = tuple(b[self.start:self.start + n_old] for b in self._bufs)
            if need > self._bufs[0].shape[0]:
                self._bufs = tuple(np.empty(2 * need, dtype=b.dtype) for b in self._bufs)
            self._hold(held, n_old)
        s = self.start
        for b, a in zip(self._bufs, new):
            b[s + n_old:s + need] = a
        out = Pushed(*(b[s:s + need] for b in self._bufs), pts.times, n_old, c0)
        self.n = min(need, self.keep)
        self.start = s + need - self.n
        return out

    def _hold(self, arrs: tuple[np.ndarray, ...], n: int) -> None:
        """Hold the last ``keep`` of ``arrs`` (``n`` points), copied to the buffers' front."""
        k = min(n, self.keep)
        for b, a in zip(self._bufs, arrs):
            b[:k] = a[n - k:n]
        self.n, self.start = k, 0


def quick_growth(values: np.ndarray, first: np.ndarray, last: np.ndarray, q: int) -> np.ndarray:
    """The median of ``values[last:last+q]`` over that of ``values[first:first+q]``, minus 1 (inf
    for a rise from a level at or below 0, 0 for no rise from there)."""
    k = first.shape[0]
    if k == 0:
        return np.empty(0)
    rows = windows(values, q)[np.concatenate((first, last))]
    rows.sort(axis=1)  # (short rows: sorting them beats np.median's partition and NaN checks)
    med = (rows[:, (q - 1) // 2] + rows[:, q // 2]) * 0.5
    a, b = med[:k], med[k:]
    if a.min() > 0:  # (the usual case: a memory or a step time)
        return b / a - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, b / a - 1.0, np.where(b > a, np.inf, 0.0))


FLAT_MARGIN = 0.999
""":func:`may_rise` says no only with this margin under the bar (medians and ratios round)."""


def may_rise(values: np.ndarray, bar: float) -> bool:
    """Whether a quick growth estimate over ``values`` may reach ``bar``: not when they all stay
    within ``bar`` of the lowest, which is positive (two medians of them are no further apart).
    One look at a frame's values spares the estimate of each window where nothing rises (live,
    every frame of a flat memory)."""
    lo, hi = np.minimum.reduce(values), np.maximum.reduce(values)
    return not (lo > 0 and hi - lo < FLAT_MARGIN * bar * lo)


def span_may_rise(ev: Evals, other: Pushed, bar: float) -> bool:
    """Whether ``other``'s quick growth over the step span of a window of ``ev`` may reach
    ``bar`` (see :func:`may_rise`: over all of ``other``'s points from the first window's step)."""
    if not ev.end.shape[0]:
        return False
    lo = other.steps.searchsorted(ev.steps[ev.end[0] - ev.window + 1], "left")
    return lo < other.values.shape[0] and may_rise(other.values[lo:], bar)


def _span(ev: Evals, end: np.ndarray, other: Pushed, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """The index range [lo, hi) of ``other``'s points in the step span of the windows ending at
    ``end``, up to the window's last record (by position: a later record may share its step),
    the last ``cap`` of them at most."""
    lo = other.steps.searchsorted(ev.steps[end - (ev.window - 1)], "left")
    hi = other.pos.searchsorted(ev.pos[end], "right")
    return np.maximum(lo, hi - cap), hi


def span_growth(ev: Evals, other: Pushed, mask: np.ndarray, cap: int) -> np.ndarray:
    """For each window of ``ev`` where ``mask`` is set, the quick growth of ``other`` over its step
    span (see :func:`_span`); NaN where it holds fewer than :data:`MIN_POINTS` (and the
    estimate's two blocks) or ``mask`` is not set."""
    out = np.full(ev.end.shape[0], np.nan)
    ks = mask.nonzero()[0]
    if ks.shape[0] == 0 or other.values.shape[0] == 0:
        return out
    lo, hi = _span(ev, ev.end[ks], other, cap)
    ok = hi - lo >= max(MIN_POINTS, ev.q)
    out[ks[ok]] = quick_growth(other.values, lo[ok], hi[ok] - ev.q, ev.q)
    return out


def span_window(ev: Evals, k: int, other: Pushed, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """``other``'s (steps as floats, values) in the step span of window k (see :func:`_span`)."""
    lo, hi = (int(i[0]) for i in _span(ev, ev.end[k:k + 1], other, cap))
    return other.steps[lo:hi].astype(np.float64), other.values[lo:hi]


class Episodes:
    """Growth episodes over a series' windows: a window whose quick estimate reaches its share of
    ``min_growth`` (:data:`QUICK_SHARE`) and whose trend passes ``min_rho`` and ``min_growth`` starts one, unless one
    holds; the next window whose quick estimate falls short ends it."""

    def __init__(self, min_rho: float, min_growth: float) -> None:
        self.min_rho = min_rho
        self.min_growth = min_growth
        self.active = False

    def starts(self, ev: Evals) -> Iterator[tuple[int, Trend]]:
        """The windows of ``ev`` that start an episode, in order, with their trends (lazily: a
        reader that stops early leaves the windows after it untested)."""
        bar = self.min_growth * QUICK_SHARE
        if not (self.active or ev.may_rise(bar)):
            return  # (no window can start an episode; none is there to end)
        pre = ev.growth() >= bar
        ups, downs = pre.nonzero()[0], (~pre).nonzero()[0]
        k = 0
        while True:
            seq = downs if self.active else ups
            i = int(seq.searchsorted(k))
            if i == seq.shape[0]:
                return
            k = int(seq[i]) + 1
            if self.active:
                self.active = False
                continue
            tr = ev.exact(k - 1, self.min_rho)
            if tr[1] >= self.min_rho and tr[2] >= self.min_growth:
                self.active = True
                yield k - 1, tr


def rises(tr: Trend, n: int, min_rho: float, min_growth: float) -> bool:
    """Whether a trend over ``n`` points (at least :data:`MIN_POINTS`) passes the bars."""
    return n >= MIN_POINTS and tr[1] >= min_rho and tr[2] >= min_growth
