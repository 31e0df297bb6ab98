"""What ``check`` and ``report`` count of a run's main stream as it goes by, batch by batch, so
the stream is walked once and never held (#15): records, distinct steps, malformed lines, names
in order of appearance, where each series starts, its segments' step ranges, the time span.

Every figure is the one the whole-run code computed on concatenated arrays (tested against it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwatch.batch import Malformed, RecordBatch
from trainwatch.rules.detectors.stats import distinct

PAGE_BITS = 16
"""A :class:`StepSet` page covers 65,536 consecutive steps."""
DENSE_AT = 1 << 13
"""Distinct steps at which a page turns from a sorted array (8 bytes a step) into a bitmap
(one byte a possible step, 64 KiB): where both cost the same."""


class StepSet:
    """The distinct integer steps seen, counted exactly in memory that does not grow with the
    run: pages of 65,536 steps, each a sorted array while sparse and a bitmap once dense.

    >>> s = StepSet(); s.add(np.array([3, 1, 3])); s.add(np.array([2, 1])); len(s)
    3
    """

    def __init__(self) -> None:
        self._pages: dict[int, np.ndarray] = {}
        """page -> sorted distinct offsets (int64), or a bool bitmap of the whole page."""

    def add(self, steps: np.ndarray) -> None:
        if not steps.shape[0]:
            return
        s = np.sort(steps.astype(np.int64, copy=False))
        page = s >> PAGE_BITS
        cuts = np.flatnonzero(page[1:] != page[:-1]) + 1
        for part in np.split(s, cuts):
            key = int(part[0] >> PAGE_BITS)
            offsets = part & ((1 << PAGE_BITS) - 1)
            have = self._pages.get(key)
            if have is not None and have.dtype == np.bool_:
                have[offsets] = True
                continue
            merged = distinct(offsets if have is None else np.concatenate((have, offsets)))
            if merged.shape[0] >= DENSE_AT:
                bitmap = np.zeros(1 << PAGE_BITS, dtype=np.bool_)
                bitmap[merged] = True
                merged = bitmap
            self._pages[key] = merged

    def __len__(self) -> int:
        return sum(int(np.count_nonzero(p)) if p.dtype == np.bool_ else int(p.shape[0])
                   for p in self._pages.values())


SAMPLE = 4096
"""Most values a :class:`Thinned` sample keeps."""


class Thinned:
    """Every k-th of the finite values fed (k a power of two, doubled whenever more than
    :data:`SAMPLE` are kept): a picture of where a series' values lie, for the exact median's
    first guess of the range its middle values are in."""

    def __init__(self) -> None:
        self.k = 1
        self.n = 0
        self.at: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def add(self, v: np.ndarray) -> None:
        at = np.arange(self.n, self.n + v.shape[0])
        keep = at % self.k == 0
        self.at.append(at[keep])
        self.values.append(v[keep])
        self.n += v.shape[0]
        while sum(a.shape[0] for a in self.at) > SAMPLE:
            self.k *= 2
            keep2 = [a % self.k == 0 for a in self.at]
            self.at = [a[m] for a, m in zip(self.at, keep2, strict=True)]
            self.values = [a[m] for a, m in zip(self.values, keep2, strict=True)]

    def sorted(self) -> np.ndarray:
        return np.sort(np.concatenate(self.values)) if self.values else np.empty(0)


@dataclass
class SeriesTally:
    """One series of the main stream, as far as read."""

    points: int = 0
    finite: int = 0
    first: tuple[int, int] | None = None
    """(record in the stream, step) of its first point: when its role may take it over."""
    segments: dict[int, list[int]] = field(default_factory=dict)
    """segment -> [lowest step, highest step] of its points there."""
    peak: float = -np.inf
    """Highest finite value."""
    peak_index: int = -1
    """Its position among the finite values (the first, if several)."""
    low: float = np.inf
    """Lowest finite value."""
    last_finite_step: int = 0
    """Step of the last finite value."""
    sample: Thinned | None = None
    """A thinned sample of the finite values, for the series a median is taken of."""

    def add(self, steps: np.ndarray, values: np.ndarray, segments: np.ndarray) -> None:
        ok = np.isfinite(values)
        n_ok = int(np.count_nonzero(ok))
        if n_ok:
            v = values[ok]
            i = int(np.argmax(v))
            if v[i] > self.peak:
                self.peak, self.peak_index = float(v[i]), self.finite + i
            self.low = min(self.low, float(v.min()))
            self.last_finite_step = int(steps[ok][-1])
            if self.sample is not None:
                self.sample.add(v)
        self.points += int(values.shape[0])
        self.finite += n_ok
        if segments[0] == segments[-1] and (segments.shape[0] < 3 or
                                            np.all(segments == segments[0])):
            parts = [(int(segments[0]), steps)]
        else:
            parts = [(int(g), steps[segments == g]) for g in distinct(segments)]
        for seg, st in parts:
            lo, hi = int(st.min()), int(st.max())
            have = self.segments.get(seg)
            if have is None:
                self.segments[seg] = [lo, hi]
            else:
                have[0], have[1] = min(have[0], lo), max(have[1], hi)

    def cutoffs(self) -> dict[int, int] | None:
        """segment -> the first step a later segment rewrote (points at or after it are dropped,
        as :func:`~trainwatch.commands.run_summary.collect_series` drops them); None when
        the series has one segment. Segments nothing later rewrote are left out."""
        if len(self.segments) < 2:
            return None
        out: dict[int, int] = {}
        later = None
        for seg in sorted(self.segments, reverse=True):
            if later is not None:
                out[seg] = later
            start = self.segments[seg][0]
            later = start if later is None else min(later, start)
        return out

    def rewritten(self) -> bool:
        """Whether a later segment rewrote some of its points (the counts above include them)."""
        cut = self.cutoffs() or {}
        return any(self.segments[seg][1] >= step for seg, step in cut.items())


@dataclass
class RunTally:
    """The main stream's figures that ``check`` and ``report`` print, counted batch by batch."""

    records: int = 0
    malformed: int = 0
    first_malformed: tuple[str, Malformed] | None = None
    steps: StepSet = field(default_factory=StepSet)
    step_range: tuple[int, int] | None = None
    """(lowest, highest) step of any metric point."""
    time_range: tuple[float, float] | None = None
    """(earliest, latest) finite record time."""
    timed: int = 0
    """Records with a finite time."""
    ended: bool = False
    """A ``run_end`` event was seen."""
    end: Mapping[str, Any] | None = None
    """The fields of the last ``run_end`` (``status``, ``exit_code``, ``error``...)."""
    series: dict[str, SeriesTally] = field(default_factory=dict)
    """Per name, in order of first appearance."""
    sampled: Callable[[str], bool] = lambda _name: False
    """Which series get a :class:`Thinned` sample (those of a role whose median is shown)."""

    def add(self, b: RecordBatch) -> None:
        offset = self.records
        self.records += b.n_records
        if b.malformed:
            if self.first_malformed is None:
                self.first_malformed = (b.source, b.malformed[0])
            self.malformed += len(b.malformed)
        if b.n_records:
            t = b.times[np.isfinite(b.times)]
            if t.shape[0]:
                lo, hi = float(t.min()), float(t.max())
                r = self.time_range
                self.time_range = (lo, hi) if r is None else (min(r[0], lo), max(r[1], hi))
                self.timed += int(t.shape[0])
        for e in b.events:
            if e.name == "run_end":
                self.ended, self.end = True, e.fields
        for name, c in b.series.items():
            s = self.series.get(name)
            if s is None:
                s = self.series[name] = SeriesTally(sample=Thinned() if self.sampled(name)
                                                    else None)
            if not len(c):
                continue
            if s.first is None:
                s.first = (offset + int(c.rows[0]), int(c.steps[0]))
            s.add(c.steps, c.values, c.segments)
            self.steps.add(c.steps)
            lo, hi = int(c.steps.min()), int(c.steps.max())
            r = self.step_range
            self.step_range = (lo, hi) if r is None else (min(r[0], lo), max(r[1], hi))
