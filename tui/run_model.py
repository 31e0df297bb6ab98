"""What the UI knows about one run. Owned by the UI thread alone; no Textual here.

The ingest thread's messages are applied here; widgets read from here. Everything derived for
the header (state, rate, ETA) is a pure function of this model and the clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.rules.detectors.stats import median
from trainwatch.rules.engine.alert import SEVERITY_RANK, Alert
from trainwatch.store import SeriesStore
from trainwatch.tui.target import RunSpec

_TOTAL_KEYS = ("max_steps", "total_steps", "num_steps", "steps", "max_iters", "max_iter",
               "iterations", "num_iterations", "train_steps", "total_iters")
RATE_WINDOW_S = 300.0
"""Throughput and ETA are measured over the last five minutes of records."""
MAX_ALERTS = 10_000
"""Alerts kept per run (a rule firing all day must not grow memory without bound)."""


@dataclass(frozen=True)
class AlertEntry:
    """An alert as the UI keeps it."""

    alert: Alert
    run_id: str
    seq: int
    """Arrival order (newest has the highest)."""
    live: bool
    """Fired while we watched (not found in history): only these ring the bell."""


@dataclass
class FileState:
    state: str
    text: str


@dataclass
class RunModel:
    spec: RunSpec
    recent_points: int = 8192
    console_lines: int = 2000
    store: SeriesStore = field(init=False)
    preview: SeriesStore | None = None
    """The file's end, shown while the history loads (None once loaded, or if none)."""
    loaded: bool = False
    progress: float = 0.0
    alerts: list[AlertEntry] = field(default_factory=list)
    console: deque[str] = field(init=False)
    config: Mapping[str, Any] = field(default_factory=dict)
    start_time: float | None = None
    end: Mapping[str, Any] | None = None
    """The ``run_end`` event's fields (status, exit_code), once seen."""
    files: dict[str, FileState] = field(default_factory=dict)
    last_step: int | None = None
    last_time: float | None = None
    """Record time (the writer's clock) of the newest record."""
    last_arrival: float | None = None
    """Our clock when the newest live record arrived (None while every record we have was
    already in the file when we opened it: then nothing says the run is still going)."""
    total_steps: int | None = None
    resets: int = 0
    """Times the main file started over (a new series may then reuse an old version number)."""
    malformed: int = 0
    first_malformed: int | None = None
    """Line number of the first malformed line of the main file (the notice names it)."""
    rewinds: int = 0
    ranks: set[int] = field(default_factory=set)
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=512))

    def __post_init__(self) -> None:
        self.store = SeriesStore(recent_points=self.recent_points)
        self.console = deque(maxlen=self.console_lines)

    # ------------------------------------------------------------------ views
    @property
    def view(self) -> SeriesStore:
        """The store to draw: the preview while the history loads, then the full store."""
        return self.preview if (self.preview is not None and not self.loaded) else self.store

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    # ------------------------------------------------------------------ applying messages
    def apply_preview(self, batches: tuple[RecordBatch, ...]) -> None:
        if self.loaded:
            return
        self.preview = SeriesStore(recent_points=self.recent_points)
        for b in batches:
            self.preview.ingest(b)
            # the file's end only: its first record is not the run's start (elapsed time waits
            # for the history, which has the real first record or the run_start event)
            self._note_records(b, start=False)

    def apply_batch(self, batch: RecordBatch, *, main: bool) -> set[str]:
        """Apply a batch; returns names whose drawing changed (none while the preview shows)."""
        if not main:
            if batch.rank is not None:
                self.ranks.add(batch.rank)
            return set()
        if batch.reset:
            # the file starts over (rotated, re-created): what we knew of the old one is void
            self.resets += 1
            self.last_step = None
            self.last_time = None
            self.start_time = None
            self.end = None
            self._samples.clear()
        changed = self.store.ingest(batch)
        if batch.malformed and self.first_malformed is None:
            self.first_malformed = batch.malformed[0].line
        self.malformed += len(batch.malformed)
        self.rewinds += len(batch.rewinds)
        for ev in batch.events:
            self._note_event(ev.name, ev.time, ev.fields)
        if batch.meta:
            self._note_total(batch.meta)
        self._note_records(batch)
        return changed if self.view is self.store else set()

    def finish_loading(self) -> None:
        self.loaded = True
        self.progress = 1.0
        self.preview = None

    def add_alerts(self, alerts: tuple[Alert, ...], live: bool, seq0: int) -> list[AlertEntry]:
        new = [AlertEntry(a, self.run_id, seq0 + i, live) for i, a in enumerate(alerts)]
        self.alerts.extend(new)
        if len(self.alerts) > MAX_ALERTS:
            del self.alerts[: len(self.alerts) - MAX_ALERTS]
        return new

    def _note_records(self, b: RecordBatch, *, start: bool = True) -> None:
        if not b.n_records:
            return
        step, t = int(b.steps[-1]), float(b.times[-1])
        if self.last_step is None or step >= self.last_step or b.rewinds:
            self.last_step = step
        if math.isfinite(t) and (self.last_time is None or t >= self.last_time):
            self.last_time = t
        if start and self.start_time is None:
            finite = b.times[np.isfinite(b.times)]
            if finite.size:
                self.start_time = float(finite[0])
        t_first, step_first = float(b.times[0]), int(b.steps[0])
        if math.isfinite(t) and math.isfinite(t_first):
            if self._samples and t_first < self._samples[-1][0]:
                self._samples.clear()  # an older preview or a restart: times went back
            if b.n_records > 1:
                self._samples.append((t_first, step_first))
            self._samples.append((t, step))

    def _note_event(self, name: str, t: float, fields: Mapping[str, Any]) -> None:
        if name == "run_start":
            self.start_time = t
            self.end = None
            cfg = fields.get("config")
            if isinstance(cfg, Mapping):
                self.config = cfg
                self._note_total(cfg)
        elif name == "run_end":
            self.end = dict(fields)

    def _note_total(self, d: Mapping[str, Any]) -> None:
        total = find_total(d)
        if total is not None:
            self.total_steps = total

    # ------------------------------------------------------------------ derived
    def rate(self) -> float | None:
        """Steps per second over the last :data:`RATE_WINDOW_S` of records."""
        if len(self._samples) < 2:
            return None
        t1, s1 = self._samples[-1]
        for t0, s0 in self._samples:
            if t1 - t0 <= RATE_WINDOW_S:
                break
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def median_interval(self) -> float | None:
        """Typical seconds between samples (what "too long without a record" is measured by)."""
        if len(self._samples) < 3:
            return None
        t = np.fromiter((s[0] for s in self._samples), dtype=np.float64)
        d = np.diff(t)
        d = d[d > 0]
        return median(d) if d.size else None

    def worst_alert(self) -> str | None:
        if not self.alerts:
            return None
        return max((e.alert.severity for e in self.alerts), key=lambda s: SEVERITY_RANK[s])


def find_total(d: Mapping[str, Any], depth: int = 0) -> int | None:
    """A total step count in a run's config or meta (``max_steps``, ``train.steps``...)."""
    for k in _TOTAL_KEYS:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v):
            return int(v)
    if depth < 2:
        for v in d.values():
            if isinstance(v, Mapping):
                found = find_total(v, depth + 1)
                if found is not None:
                    return found
    return None
