"""The report's figures of a role's series, from the series streamed past in order, chunk by
chunk, instead of from the whole series in memory (#15).

Each accumulator is told, before the walk, how many points (and finite points) the series has,
from the tally of the first walk; then it gives exactly what the whole-array function of
:mod:`~trainwatch.commands.run_summary`, :mod:`~trainwatch.commands.verdict` or the
report's sparkline gives (tested against them), holding at most: a moving window, one sparkline
bucket, the loss's last ``TAIL`` share of finite values (what the tail trend takes the medians
of), and the middle of a median (:class:`ExactMedian`, which walks the file again when the
series is too long to hold).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.commands.lr_shape import LrSchedule, LrShape
from trainwatch.commands.run_summary import MetricSummary
from trainwatch.commands.tally import SeriesTally

HOLD = 1 << 17
"""Values an accumulator may hold at once (1 MiB of float64) where it cannot stream."""


def walk_series(
    batches: Iterable[RecordBatch], name: str, cutoffs: Mapping[int, int] | None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(steps, values) of ``name`` chunk by chunk, less the points a later segment rewrote
    (``cutoffs``: segment -> first step rewritten, see ``SeriesTally.cutoffs``)."""
    for b in batches:
        c = b.series.get(name)
        if c is None or not len(c):
            continue
        steps, values = c.steps, c.values
        if cutoffs:
            keep = np.ones(steps.shape[0], dtype=bool)
            for seg, step in cutoffs.items():
                keep &= ~((c.segments == seg) & (steps >= step))
            steps, values = steps[keep], values[keep]
        if steps.shape[0]:
            yield steps, values


class MovingMin:
    """The lowest trailing ``w``-point mean of a stream of finite values, as
    :func:`~trainwatch.commands.run_summary.moving_average` then ``np.argmin`` give it (the
    first lowest, or the first NaN), and the last mean. The running sum goes on from chunk to
    chunk as one ``cumsum`` would (the same sums, bit for bit); its last ``w + 1`` are held."""

    def __init__(self, w: int) -> None:
        self.w = w
        self.n = 0
        self._c = np.zeros(1)
        self.best = math.inf
        self.best_index = -1
        self.last = math.nan
        self._nan = False

    def feed(self, v: np.ndarray) -> int:
        """Add values; returns the position in ``v`` of a new lowest mean, or -1."""
        if self.w <= 1:
            avg = v.astype(np.float64, copy=True)
        else:
            c = np.cumsum(np.concatenate((self._c[-1:], v)), dtype=np.float64)
            cc = np.concatenate((self._c[:-1], c))  # running sums n - len(_c) + 1 ... n + len(v)
            base = self.n - (self._c.shape[0] - 1)
            idx = np.arange(self.n + 1, self.n + v.shape[0] + 1)
            lo = np.maximum(idx - self.w, 0)
            avg = (cc[idx - base] - cc[lo - base]) / (idx - lo)
            self._c = cc[-(self.w + 1):]
        found = -1
        if avg.shape[0]:
            self.last = float(avg[-1])
            nan = np.flatnonzero(np.isnan(avg))
            i = int(nan[0]) if nan.shape[0] else int(np.argmin(avg))
            if not self._nan and (nan.shape[0] or avg[i] < self.best):
                self.best, self.best_index, found = float(avg[i]), self.n + i, i
                self._nan = bool(nan.shape[0])
        self.n += v.shape[0]
        return found


class OneWalk:
    """An accumulator whose figure one walk of the series gives: ``feed`` each chunk in order,
    then ``walked()`` says it is done."""

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        raise NotImplementedError

    def walked(self) -> bool:
        return True


class MetricAcc(OneWalk):
    """:func:`~trainwatch.commands.run_summary.summarize_metric` of a streamed series."""

    def __init__(self, name: str, points: int, finite: int, smooth: bool = True) -> None:
        self.name, self.points, self.finite = name, points, finite
        self.w = max(1, min(50, finite // 20)) if smooth else 1
        self.ma = MovingMin(self.w)
        self.first = math.nan
        self.best_step = 0
        self.tail = np.empty(0)
        """The last ``w`` finite values (the final figure is their mean)."""
        self.final_step = 0
        self.last_step = 0
        self.last = math.nan

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        self.last_step, self.last = int(steps[-1]), float(values[-1])
        ok = np.isfinite(values)
        v, st = values[ok], steps[ok]
        if not v.shape[0]:
            return
        if self.ma.n == 0:
            self.first = float(v[0])
        new = self.ma.feed(v)
        if new >= 0:
            self.best_step = int(st[new])
        self.tail = np.concatenate((self.tail, v))[-self.w:]
        self.final_step = int(st[-1])

    def result(self) -> MetricSummary:
        if self.ma.n == 0:
            nan = math.nan
            return MetricSummary(self.name, self.points, nan, nan, nan, self.last_step,
                                 self.last_step, 0, self.points - self.finite, self.last)
        return MetricSummary(
            name=self.name, points=self.points, first=self.first,
            final=float(self.tail.mean()), best=self.ma.best, best_step=self.best_step,
            final_step=self.final_step, window=self.w, nonfinite=self.points - self.finite,
            last=self.last,
        )


class ValTurnAcc(OneWalk):
    """:func:`~trainwatch.commands.verdict._val_turn` of a streamed validation series."""

    def __init__(self, finite: int) -> None:
        self.finite = finite
        self.low = math.inf
        self.low_step = 0
        self.ma = MovingMin(min(3, finite))

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        ok = np.isfinite(values)
        v, st = values[ok], steps[ok]
        if not v.shape[0]:
            return
        i = int(np.argmin(v))
        if v[i] < self.low:
            self.low, self.low_step = float(v[i]), int(st[i])
        self.ma.feed(v)

    def result(self) -> tuple[int, float, float, int] | None:
        if self.finite < 2:
            return None
        sm_j, last = self.ma.best, self.ma.last
        rise = (last - sm_j) / abs(sm_j) if sm_j != 0 else 0.0
        return self.low_step, self.low, rise, self.finite - 1 - self.ma.best_index


class TailAcc(OneWalk):
    """The last ``share`` of a series' finite values, exactly (the verdict's tail trend)."""

    def __init__(self, finite: int, share: float) -> None:
        self.skip = finite - int(finite * share)
        self.seen = 0
        self.values: list[np.ndarray] = []
        self.first_step: int | None = None
        self.last_step = 0

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        ok = np.isfinite(values)
        v, st = values[ok], steps[ok]
        start = max(0, self.skip - self.seen)
        self.seen += v.shape[0]
        if start < v.shape[0]:
            self.values.append(v[start:])
            if self.first_step is None:
                self.first_step = int(st[start])
            self.last_step = int(st[-1])

    def tail(self) -> tuple[np.ndarray, int]:
        """(the tail's values, the steps it spans)."""
        v = np.concatenate(self.values) if self.values else np.empty(0)
        return v, self.last_step - (self.first_step or 0)


class SparkAcc(OneWalk):
    """The report's sparkline of a streamed series: bucket means, one bucket held at a time."""

    def __init__(self, points: int, width: int) -> None:
        self.n = min(width, points)
        self.edges = np.linspace(0, points, self.n + 1).astype(np.int64)
        self.means = np.empty(self.n)
        self.bad = np.zeros(self.n, dtype=bool)
        self._i = 0
        self._seen = 0
        self._held: list[np.ndarray] = []

    def feed(self, steps: np.ndarray | None, values: np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64)
        while v.shape[0] and self._i < self.n:
            take = int(self.edges[self._i + 1]) - self._seen
            self._held.append(v[:take])
            self._seen += min(take, v.shape[0])
            v = v[take:]
            if self._seen == self.edges[self._i + 1]:
                b = np.concatenate(self._held)
                f = b[np.isfinite(b)]
                self.bad[self._i] = f.size < b.size
                self.means[self._i] = f.mean() if f.size else math.nan
                self._held = []
                self._i += 1


class ExactKth:
    """The ``k``-th smallest (0-based) of a series' finite values, holding at most :data:`HOLD`
    of them. A first walk holds those in a guessed range (from a sample) and counts those under
    it: when the ``k``-th is among them, that is all. Else, while more than :data:`HOLD` lie in
    the range looked at (at first the series' lowest to highest value), a walk counts them in
    65,536 equal bins of the range, with each bin's lowest and highest value, and the next walk
    looks only at the bin the ``k``-th fell in."""

    BINS = 1 << 16

    def __init__(self, k: int, finite: int, low: float, high: float,
                 guess: tuple[float, float] | None = None) -> None:
        self.k, self.finite, self.low, self.high = k, finite, low, high
        self.value: float | None = low if low == high else None
        if guess is not None:
            self.lo, self.hi = guess
            self.below, self.in_range, self.guessing = 0, 0, True
            self.held: list[np.ndarray] = []
            self.n_held = 0
            self.counting = False
        else:
            self._whole()

    def _whole(self) -> None:
        """Look at every value again (the first range, or after a wrong guess)."""
        self.lo, self.hi = self.low, self.high
        """The range looked at, both ends included."""
        self.below = 0
        """Values under the range."""
        self.in_range = self.finite
        self.guessing = False
        self._start()

    def _start(self) -> None:
        self.held, self.n_held = [], 0
        self.counting = self.in_range > HOLD
        if self.counting:
            self.count = np.zeros(self.BINS, dtype=np.int64)
            self.bin_lo = np.full(self.BINS, np.inf)
            self.bin_hi = np.full(self.BINS, -np.inf)

    def feed(self, v: np.ndarray) -> None:
        """Finite values, in any order."""
        if self.guessing:
            self.below += int(np.count_nonzero(v < self.lo))
        v = v[(v >= self.lo) & (v <= self.hi)]
        if not self.counting:
            if self.n_held <= HOLD:  # (a wrong guess holds no more than this)
                self.held.append(v)
            self.n_held += v.shape[0]
            return
        # (halves: the width of a range from -1e308 to 1e308 is no float)
        scale = self.BINS / (self.hi / 2 - self.lo / 2)
        b = np.minimum(((v / 2 - self.lo / 2) * scale).astype(np.int64), self.BINS - 1)
        self.count += np.bincount(b, minlength=self.BINS)
        np.minimum.at(self.bin_lo, b, v)
        np.maximum.at(self.bin_hi, b, v)

    def walked(self) -> bool:
        """A walk ended: True with :attr:`value` found, else False with the range narrowed."""
        if not self.counting:
            if self.guessing and not (self.n_held <= HOLD
                                      and self.below <= self.k < self.below + self.n_held):
                self._whole()  # the guess missed: narrow down from the whole range
                return False
            s = np.sort(np.concatenate(self.held)) if self.held else np.empty(0)
            self.value, self.held = float(s[self.k - self.below]), []
            return True
        cum = np.cumsum(self.count)
        b = int(np.searchsorted(cum, self.k - self.below, side="right"))
        self.below += int(cum[b - 1]) if b else 0
        self.in_range = int(self.count[b])
        self.lo, self.hi = float(self.bin_lo[b]), float(self.bin_hi[b])
        if self.lo == self.hi:  # (the bins of a range split as far as floats go)
            self.value = self.lo
            return True
        self._start()
        return False


GUESS_MARGIN = 0.03
"""Either side of a value's rank in a sample, the share of the values a first guess holds: six
times the rank's error in a sample of 4,096 (so a guess holds ~6 % of the values)."""


class ExactMedian:
    """:func:`~trainwatch.rules.detectors.stats.median` of a series' finite values, from walks
    of the series: one when it has at most :data:`HOLD` values or a ``sample`` of them (see
    ``Thinned``) tells where the middle ones lie, a few more when not."""

    def __init__(self, finite: int, low: float, high: float,
                 sample: np.ndarray | None = None) -> None:
        self.parts = []
        for k in sorted({(finite - 1) // 2, finite // 2}) if finite else ():
            guess = None
            if sample is not None and sample.shape[0] and finite > HOLD:
                m = sample.shape[0]
                p = k / max(finite - 1, 1)
                i, j = math.floor((p - GUESS_MARGIN) * m), math.ceil((p + GUESS_MARGIN) * m)
                guess = (float(sample[i]) if i > 0 else low,
                         float(sample[j]) if j < m - 1 else high)
            self.parts.append(ExactKth(k, finite, low, high, guess))
        self.value: float | None = None

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        for p in self.parts:
            if p.value is None:
                p.feed(v)

    def walked(self) -> bool:
        walked = [p.walked() for p in self.parts if p.value is None]  # (every one, not all())
        done = all(walked)
        if done and self.parts:
            a, b = self.parts[0].value, self.parts[-1].value
            assert a is not None and b is not None
            self.value = (a + b) * 0.5
        return done


class LrAcc:
    """The LR schedule of a streamed series (:class:`~trainwatch.commands.lr_shape.
    LrShape`, told the series' peak and last step by its tally): one walk, or two when the LR
    sat at ~0 for the end of the run."""

    def __init__(self, tally: SeriesTally) -> None:
        self.shape = (LrShape(tally.peak, tally.peak_index, tally.last_finite_step)
                      if tally.finite else None)
        self.schedule: LrSchedule | None = None

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        ok = np.isfinite(values)
        if self.shape is not None:
            self.shape.feed(steps[ok], values[ok])

    def walked(self) -> bool:
        if self.shape is None:
            return True
        self.schedule = self.shape.result()
        return self.schedule is not None
