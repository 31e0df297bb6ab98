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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainwatch.rules.base import Points
from trainwatch.rules.stats import median_sorted, trend, windows


@dataclass(frozen=True)
class Evals:
    """Evaluation points of one push: windows ending at ``end`` in the concatenated arrays."""

    steps: np.ndarray
    values: np.ndarray
    pos: np.ndarray
    times: np.ndarray
    end: np.ndarray
    """Index (into the arrays above) of each evaluated window's last point."""
    pre: np.ndarray
    """Quick growth estimate of each window (last fifth's median over the first fifth's, - 1)."""
    window: int

    def window_at(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        e = int(self.end[k])
        sl = slice(e - self.window + 1, e + 1)
        return self.steps[sl].astype(np.float64), self.values[sl]

    def exact(self, k: int, min_rho: float = -1.0) -> tuple[float, float, float]:
        """(slope per step, rho, growth over the window) of evaluation k (see :func:`trend`)."""
        x, y = self.window_at(k)
        return trend(x, y, min_rho)


def quick_growth(values: np.ndarray, first: np.ndarray, last: np.ndarray, q: int) -> np.ndarray:
    """Median of ``values[last:last+q]`` over the median of ``values[first:first+q]``, minus 1."""
    if first.shape[0] == 0:
        return np.empty(0)
    view = windows(values, q)
    a = np.asarray(median_sorted(np.sort(view[first], axis=1)), dtype=np.float64)
    b = np.asarray(median_sorted(np.sort(view[last], axis=1)), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(a > 0, b / a - 1.0, np.where(b > a, np.inf, 0.0))
    return g


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

    def evals(self, window: int, every: int, warmup: int, *, pre: bool = True) -> Evals:
        """Windows of ``window`` points ending every ``every`` points after ``warmup`` points.

        The point with count c (1-based since the reset) ends a window when
        c >= warmup + window and (c - warmup - window) is a multiple of ``every``. With
        ``pre=False`` the quick growth estimates are left at 0 (the caller knows none matters).
        """
        m = self.values.shape[0] - self.n_old
        first_c = warmup + window
        start = max(first_c, self.c0 + 1)
        start += (-(start - first_c)) % every
        c = np.arange(start, self.c0 + m + 1, every)
        end = c - self.c0 - 1 + self.n_old
        q = max(2, window // 5)
        growth = (quick_growth(self.values, end - window + 1, end - q + 1, q) if pre
                  else np.zeros(end.shape[0]))
        return Evals(self.steps, self.values, self.pos, self.times, end, growth, window)


class TrendTrack:
    """The last ``keep`` points of one series, carried across frames."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self._s = np.empty(0, dtype=np.int64)
        self._v = np.empty(0)
        self._p = np.empty(0, dtype=np.int64)
        self._t = np.empty(0)

    def push(self, pts: Points) -> Pushed:
        n_old = self._v.shape[0]
        if len(pts):
            s = np.concatenate([self._s, pts.steps])
            v = np.concatenate([self._v, pts.values])
            p = np.concatenate([self._p, pts.pos])
            t = np.concatenate([self._t, pts.times])
        else:
            s, v, p, t = self._s, self._v, self._p, self._t
        out = Pushed(s, v, p, t, n_old, self.count)
        self.count += len(pts)
        k = self.keep
        self._s, self._v, self._p, self._t = s[-k:], v[-k:], p[-k:], t[-k:]
        return out


def span_growth(ev: Evals, other: Pushed | None, q: int, min_points: int) -> np.ndarray:
    """For each evaluation of ``ev``, the quick growth of ``other``'s points within the same step
    span (NaN where ``other`` has fewer than ``min_points`` there)."""
    n = ev.end.shape[0]
    if other is None or n == 0 or other.values.shape[0] == 0:
        return np.full(n, np.nan)
    # up to the evaluated record (by position, not step: a later record may share the step)
    s0 = ev.steps[ev.end - ev.window + 1]
    lo = np.searchsorted(other.steps, s0, side="left")
    hi = np.searchsorted(other.pos, ev.pos[ev.end], side="right")
    ok = (hi - lo) >= max(min_points, q)
    out = np.full(n, np.nan)
    if ok.any():
        out[ok] = quick_growth(other.values, lo[ok], hi[ok] - q, q)
    return out


def span_trend(ev: Evals, k: int, other: Pushed, min_rho: float = -1.0
               ) -> tuple[float, float, float, int]:
    """Exact trend of ``other`` within the step span of ``ev``'s evaluation k."""
    e = int(ev.end[k])
    lo = int(np.searchsorted(other.steps, ev.steps[e - ev.window + 1], side="left"))
    hi = int(np.searchsorted(other.pos, ev.pos[e], side="right"))
    x = other.steps[lo:hi].astype(np.float64)
    y = other.values[lo:hi]
    slope, rho, growth = trend(x, y, min_rho)
    return slope, rho, growth, hi - lo
