"""The shape of a rising step time: a steady ramp (every backward pass longer by the same
amount, as with an undetached state) or a step or burst (other processes loading the machine).

``state_detach`` asks :func:`steady_rise` before it owns a step-time rise; a rise that came in a
step leaves a memory leak to ``memory_growth``.
"""

from __future__ import annotations

import numpy as np

from trainwatch.rules.detectors.growth import theil_sen

CLIP = 10
"""The values are clipped to their CLIP-th and (100 - CLIP)-th percentiles (see :func:`best_step`)."""
MIN_SEGMENT = 3
"""Points a step's two segments hold at the least..."""
SEGMENT_SHARE = 10
"""...and a tenth of the window each: a split nearer an end fits a single hiccup."""
LATE_SHARE = 4
"""The part after a step must hold a quarter of the window (at least MIN_SEGMENT points) for its
slope to say more than noise."""
LINE_VS_STEP = 0.9
"""A line passes when it explains at least this fraction of what the best single step does: the
step picks its split to fit the data, noise included, which a line cannot (on a 30-point window
a noisy slow ramp's best step explains ~5-15 % more than its line; a real step's line ~25 % less)."""


def best_step(y: np.ndarray, min_seg: int) -> tuple[int, float, float]:
    """The single step that best explains ``y``: (split index, share of the variance the two
    segments' means explain, share a straight line explains). Splits leave at least ``min_seg``
    points on each side.

    Both shares are taken on ``y`` clipped to its 10th-90th percentiles, so that one hiccup
    (a step 3x longer) weighs like any other high point instead of passing for a step, while a
    real step keeps its full height (values, not ranks: a short, tall step stays the best split).
    A noise-free line gives the step 0.75 at the middle split (and 1.0 to the line); a
    noise-free step in the middle gives the line 0.75.
    """
    n = y.shape[0]
    if n < 2 * min_seg:
        return n // 2, 0.0, 0.0
    srt = np.sort(y)
    yc = np.clip(y, srt[n * CLIP // 100], srt[n - 1 - n * CLIP // 100])
    yc = yc - yc.mean()
    tot = float(np.dot(yc, yc))
    if tot <= 0:
        return n // 2, 0.0, 0.0
    s = np.arange(min_seg, n - min_seg + 1)
    # the two segments' sums are c and -c (the values are centred): the between-segment sum of
    # squares of the split at s
    c = np.cumsum(yc)[s - 1]
    between = c * c * n / (s * (n - s))
    k = int(np.argmax(between))
    xc = np.arange(n) - (n - 1) * 0.5
    line = float(np.dot(xc, yc)) ** 2 / (float(np.dot(xc, xc)) * tot)
    return int(s[k]), float(between[k] / tot), line


def steady_rise(x: np.ndarray, y: np.ndarray, min_late: float) -> tuple[bool, float]:
    """Whether ``y`` (already rising against ``x``, points in order) rises steadily over the
    window rather than in one step, and the late slope ratio (1.0 when the line wins outright).

    Two ways to pass: a line explains ``y`` about as well as the best single step (see
    :func:`best_step`; the points taken as evenly spaced): a ramp; or, when a step fits better,
    the part after it still rises at ``min_late`` or more of the slope that step stands for. A
    ramp of slope b puts the two segments' medians b x (distance between their centres) apart,
    whatever the split: that jump over that distance is the slope the step stands for, and the
    part after the split keeps rising at it (ratio ~1; more when the ramp began inside the
    window). A load that arrived is a step with a flat part after it (ratio ~0); a burst at the
    end is the same. With fewer than a quarter of the window after the step its slope is mostly
    noise: not steady (yet: a later window sees more of it).
    """
    n = y.shape[0]
    split, share, line = best_step(y, max(MIN_SEGMENT, n // SEGMENT_SHARE))
    if line >= LINE_VS_STEP * share:
        return True, 1.0
    jump = float(np.median(y[split:]) - np.median(y[:split]))
    dist = float(x[split:].mean() - x[:split].mean())
    if not (jump > 0 and dist > 0):
        return False, 0.0
    late = theil_sen(x[split:], y[split:]) / (jump / dist)
    return late >= min_late and n - split >= max(MIN_SEGMENT, n // LATE_SHARE), late
