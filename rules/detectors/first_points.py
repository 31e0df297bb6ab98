"""A loss judged on its first points, before there are enough for block medians: a blow-up
from the first updates (4.7 -> 22 -> 85 in ten steps) or on a series of a few dozen points.

Method: the *reference* is the series' first value (the untrained model's loss) for points
judged from within ``FIRST_UPDATES`` points of it (the first updates), and later the lowest of its rolling medians of seven before
the judged points, once 8 points come before them (their noise is known then); the
last ``persist`` points (2 on a series of 3 points) are *up* when every one of them is at least
``ratio`` times the reference, or ``exp(noise_factor x sd)`` times it when more, ``sd`` being
the larger of the robust spread of the log-differences of the points before them (from 8 points
on) and the judged points' own scatter (their log range over its expected value): a loss that
scatters by 50 % from one step to the next is no blow-up at x3. One point up is a spike
(``loss_spike``'s), not this.

Only positive values are judged (the ratio of a loss crossing 0 says nothing); the stream stops
at ``limit`` points or a first finding, whichever comes first.

    >>> fp = FirstPoints(limit=200, ratio=3.0, noise_factor=5.0)
    >>> [(i, round(j.ratio, 2)) for i, j in fp.push([4.71, 22.4, 16.1, 22.4])]
    [(3, 3.42)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.detectors.stats import MAD_TO_SIGMA, median

PERSIST = 3
"""Points in a row that must be up (fewer on a series of fewer points, never below 2)."""
FIRST_UPDATES = 2
"""The first value is the reference of judged points that start within this many points of it."""
SMOOTH = 7
"""Points of the rolling median a later reference is (the lowest of many medians of 3 or 5 of a
noisy loss is one of its luckiest lows)."""
MIN_NOISE_POINTS = 8
"""Points before the judged ones needed for a spread of their own."""
RANGE_TO_SD = {2: 1.128, 3: 1.693}
"""The expected range of 2 and 3 normal values, in standard deviations."""
NOISE_POINTS = 64
"""The last points before the judged ones that the spread is read over."""


@dataclass(frozen=True)
class Finding:
    """Points up from the reference, at the point that completes them."""

    reference: float
    reference_index: int
    """Index (in the series) of the reference: its first point, or the last of three."""
    now: float
    """The median of the points up."""
    ratio: float
    """The lowest point up over the reference."""
    bar: float
    """The ratio every point up had to reach."""
    points: int
    """Points of the series the judgement had."""
    up: int
    """Points up in a row."""


def log_spread(values: list[float]) -> float:
    """Robust standard deviation of one point's log around the last's (1.4826 MAD of the
    log-differences over sqrt 2); 0 for fewer than ``MIN_NOISE_POINTS`` values."""
    if len(values) < MIN_NOISE_POINTS:
        return 0.0
    d = np.diff(np.log(np.asarray(values[-NOISE_POINTS:], dtype=np.float64)))
    mid = median(d)
    return MAD_TO_SIGMA * median(np.abs(d - mid)) / math.sqrt(2.0)


class FirstPoints:
    """The first ``limit`` points of a positive series, pushed in order; see the module."""

    def __init__(self, limit: int, ratio: float, noise_factor: float) -> None:
        self.limit = limit
        self.ratio = ratio
        self.noise_factor = noise_factor
        self.xs: list[float] = []
        self.ref = math.inf
        self.ref_index = -1
        self.done = False
        """Past the limit, a finding made, or a value <= 0 seen."""

    def push(self, values: list[float]) -> list[tuple[int, Finding]]:
        """(index in ``values``, finding) of a finding among these points (at most one)."""
        for i, x in enumerate(values):
            if self.done:
                return []
            if not x > 0.0:
                self.done = True
                return []
            found = self._point(x)
            if found is not None:
                self.done = True
                return [(i, found)]
        return []

    def _point(self, x: float) -> Finding | None:
        xs = self.xs
        xs.append(x)
        n = len(xs)
        if n >= self.limit:
            self.done = True
        if n == 1:
            self.ref, self.ref_index = x, 0
            return None
        k = min(PERSIST, n - 1)
        # the rolling median of SMOOTH points that left the judged points becomes a reference
        # candidate, once the points before the judged ones tell their noise
        j = n - 1 - k
        if j > FIRST_UPDATES and self.ref_index == 0:
            # the first value is the reference only of the first updates: past them it is one
            # draw of a loss whose noise is not known yet (a lucky low of a noisy loss)
            self.ref, self.ref_index = math.inf, -1
        if j >= SMOOTH - 1 and j + 1 >= MIN_NOISE_POINTS:
            lv = median(np.asarray(xs[j - SMOOTH + 1:j + 1]))
            if lv < self.ref:
                self.ref, self.ref_index = lv, j
        if k < 2 or self.ref_index < 0:
            return None
        up = xs[n - k:]
        low = min(up)
        if low < self.ratio * self.ref:
            return None
        # the noise: that of the points before (from 8 on), or the judged points' own scatter
        # when more (a loss as noisy as its level scatters there too)
        spread = max(log_spread(xs[:n - k]), math.log(max(up) / low) / RANGE_TO_SD[k])
        bar = max(self.ratio, math.exp(min(self.noise_factor * spread, 700.0)))
        if low < bar * self.ref:
            return None
        return Finding(self.ref, self.ref_index, sorted(up)[k // 2], low / self.ref, bar, n, k)
