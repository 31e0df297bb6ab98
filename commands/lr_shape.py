"""Which schedule a learning-rate series followed, judged from the series streamed past in
chunks (:class:`LrShape`): warmup, then constant, step, linear, cosine or another decay, or
``cyclic``. :func:`~trainwatch.commands.run_summary.classify_lr` is this fed the whole
series at once; ``report`` feeds it chunk by chunk and holds none of it (#15).

The shape needs the series' peak before it starts (where the warmup ends is judged against it)
and the last step of the part it fits (the cosine fits are in ``t = (step - first) / span``): a
first walk gets everything when the LR does not sit at ~0 for the end of the run; one that does
is fitted again, up to where it reached ~0, on a second walk. The fits' R² come from running
centred sums (merged chunk by chunk), not from a least-squares solve of the whole design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

COSINE_STRETCH = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0)
"""The cosine fits: a cosine that reaches 0 at ``f`` times the span, then stays there."""


@dataclass(frozen=True)
class LrSchedule:
    kind: str
    """``constant``, ``warmup + cosine decay``, ``step decay``, ``linear decay``..."""
    start: float
    peak: float
    peak_step: int
    final: float
    warmup_steps: int


class _Moments:
    """Count, mean and centred sums of squares and products of (g, y), merged chunk by chunk
    (Chan et al.'s pairwise update: no cancellation of large raw sums)."""

    def __init__(self) -> None:
        self.n = 0
        self.my = self.mg = self.syy = self.sgg = self.sgy = 0.0

    def add(self, g: np.ndarray, y: np.ndarray) -> None:
        m = y.shape[0]
        my, mg = float(y.mean()), float(g.mean())
        dy, dg = y - my, g - mg
        syy, sgg, sgy = float(dy @ dy), float(dg @ dg), float(dg @ dy)
        n = self.n + m
        ey, eg = my - self.my, mg - self.mg
        w = self.n * m / n
        self.syy += syy + ey * ey * w
        self.sgg += sgg + eg * eg * w
        self.sgy += sgy + eg * ey * w
        self.my += ey * m / n
        self.mg += eg * m / n
        self.n = n

    def r2(self) -> float:
        """R² of the least-squares line y ~ a + b g (0 when g is constant)."""
        if self.syy <= 0:
            return 1.0
        if self.sgg <= 0:
            return 0.0
        return self.sgy * self.sgy / (self.sgg * self.syy)


class _Decay:
    """What :func:`decay_kind` needs of a normalized (peak = 1) series after its warmup."""

    def __init__(self, span_end: int | None) -> None:
        self.span_end = span_end
        """The last step of the part fitted (None: not known, the fits are not made)."""
        self.n = 0
        self.x0 = 0
        self.low = math.inf
        self.high = -math.inf
        self.high_after_low = -math.inf
        self.last = math.nan
        self.jumps = 0
        self.moves = 0
        self.fits: list[_Moments] = []

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        if not y.shape[0]:
            return
        if self.n == 0:
            self.x0 = int(x[0])
            self.fits = [_Moments() for _ in range(1 + len(COSINE_STRETCH))]
            yy = y
        else:
            yy = np.concatenate(([self.last], y))  # the step from the last chunk's last value
        rel = np.abs(np.diff(yy)) / np.maximum(yy[:-1], 1e-30)
        self.jumps += int((rel > 0.05).sum())
        self.moves += int(np.count_nonzero(rel > 1e-6))
        i = int(np.argmin(y))
        if y[i] < self.low:
            self.low, self.high_after_low = float(y[i]), float(y[i:].max())
        else:
            self.high_after_low = max(self.high_after_low, float(y.max()))
        self.high = max(self.high, float(y.max()))
        self.last = float(y[-1])
        self.n += y.shape[0]
        if self.span_end is not None:
            span = float(self.span_end - self.x0) or 1.0
            t = (x - self.x0) / span
            self.fits[0].add(t, y)
            for f, m in zip(COSINE_STRETCH, self.fits[1:], strict=True):
                m.add(0.5 * (1 + np.cos(math.pi * np.minimum(t / f, 1))), y)

    def kind(self) -> str:
        if self.n < 3 or self.high - self.low <= 0.01:
            return "constant"
        # rising again by more than a fifth after the lowest point: restarts or a cyclic schedule
        if self.high_after_low - self.low > 0.2 * (1 - self.low) and self.last > self.low * 1.2:
            return "cyclic"
        if self.jumps <= 10 and self.moves <= 2 * self.jumps:
            return "step decay"
        r2_lin = self.fits[0].r2()
        r2_cos = max(m.r2() for m in self.fits[1:])
        if max(r2_lin, r2_cos) >= 0.995:
            return "cosine decay" if r2_cos > r2_lin else "linear decay"
        return "decay"


class LrShape:
    """The schedule of a learning-rate series fed in order, chunk by chunk (finite values; the
    caller drops the others). ``peak`` and ``peak_index`` (its first position among the finite
    values) and ``last_step`` (of the last finite value) come from a count of the series before.

    Feed the series once, then call :meth:`result`; when it returns None, feed the series once
    more (from the start) and call it again.
    """

    def __init__(self, peak: float, peak_index: int, last_step: int) -> None:
        self.peak, self.peak_index, self.last_step = peak, peak_index, last_step
        self.walk = 0
        self.suffix = ""
        self._start(None)

    def _start(self, cut: tuple[int, int] | None) -> None:
        """A walk begins; ``cut``: (points of the tail to fit, their last step) on a second."""
        self.walk += 1
        self.cut = cut
        self.n = 0
        self.start = math.nan
        self.final = math.nan
        self.peak_step = 0
        self.top: int | None = None
        """Position of the first value at 99.9 % of the peak (where a warmup ends)."""
        self.rising = True
        self.warm_end = 0
        self.warmup_steps = 0
        self.prev = -math.inf
        self.tail_n = 0
        self.spent = 0
        """Trailing tail values at ~0 (1e-3 of the peak or less)."""
        self.spent_step = 0
        self.decay = _Decay(self.last_step if cut is None else cut[1])

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        if not values.shape[0]:
            return
        x, y = steps, values.astype(np.float64, copy=False)
        first = self.n
        if first == 0:
            self.start = float(y[0])
        self.final = float(y[-1])
        if first <= self.peak_index < first + y.shape[0]:
            self.peak_step = int(x[self.peak_index - first])
        self.n += y.shape[0]
        if self.peak <= 0:
            return
        warm = self.peak_index > 0 and self.start < 0.9 * self.peak
        if warm and self.top is None:
            at = np.flatnonzero(y >= 0.999 * self.peak)
            upto = int(at[0]) + 1 if at.shape[0] else y.shape[0]
            d = np.diff(np.concatenate(([self.prev], y[:upto])))
            self.rising = self.rising and bool(np.all(d[1 if first == 0 else 0:] >= 0))
            if at.shape[0]:
                self.top = first + int(at[0])
                if self.rising and self.top > 0:
                    # the warmup ends here: the decay is judged from this point on
                    self.warm_end, self.warmup_steps = self.top, int(x[int(at[0])])
                    self.decay = _Decay(self.decay.span_end)
                    self.tail_n = self.spent = 0
                    x, y = x[int(at[0]):], y[int(at[0]):]
            self.prev = float(y[-1]) if y.shape[0] else self.prev
        ty = y / self.peak
        if self.cut is not None:
            keep = max(0, min(ty.shape[0], self.cut[0] - self.tail_n))
            x, ty = x[:keep], ty[:keep]
        self.decay.add(x, ty)
        self._count_spent(x, ty)

    def _count_spent(self, x: np.ndarray, ty: np.ndarray) -> None:
        if not ty.shape[0]:
            return
        low = ty <= 1e-3
        self.tail_n += ty.shape[0]
        if low.all():
            if self.spent == 0:
                self.spent_step = int(x[0])
            self.spent += ty.shape[0]
            return
        trailing = int(np.argmin(low[::-1]))
        self.spent = trailing
        if trailing:
            self.spent_step = int(x[-trailing])

    def result(self) -> LrSchedule | None:
        """The schedule, or None when the series must be fed once more."""
        if self.n == 0:
            raise ValueError("LrShape: no value fed")
        if self.peak <= 0:
            return LrSchedule("constant", self.start, self.peak, self.peak_step, self.final, 0)
        size, spent = self.tail_n, self.spent
        if self.cut is None and spent >= max(3, 0.05 * size) and spent < size:
            # a schedule that ran out: fit the part before it sat at ~0, on another walk
            self.suffix = f", then ~0 from step {self.spent_step:,}"
            self._start((size - spent + 1, self.spent_step))
            return None
        kind = self.decay.kind() + self.suffix
        if self.warm_end:
            kind = "warmup + " + kind
        return LrSchedule(kind, self.start, self.peak, self.peak_step, self.final,
                          self.warmup_steps)
