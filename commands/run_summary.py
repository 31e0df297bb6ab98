"""The series maths of a finished run: whole-run series, metric summaries, the LR schedule,
the roles that moved to another series mid-run.

Small pure functions on numpy arrays, tested on their own; :mod:`trainwatch.commands.report` puts
their results in the report and :mod:`trainwatch.commands.verdict` judges the run from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.commands.lr_shape import LrSchedule, LrShape
from trainwatch.roles import ROLES, RoleTable
from trainwatch.rules.detectors.stats import distinct


@dataclass(frozen=True)
class Series:
    """One metric over the whole run, resumed segments merged (later writes win)."""

    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray


@dataclass(frozen=True)
class MetricSummary:
    name: str
    """The metric's own name in the run (``train/loss``, ``eval_loss``...)."""
    points: int
    first: float
    final: float
    """Mean of the last ``window`` finite points (one batch's loss is noise)."""
    best: float
    """Lowest ``window``-point moving average (lowest single value for evaluations)."""
    best_step: int
    final_step: int
    window: int
    nonfinite: int
    last: float
    """The very last value, finite or not (a run that ended in NaN says so)."""


@dataclass(frozen=True)
class RoleMove:
    """A role that went to another series mid-run: a name ranked higher for it appeared (a
    script logging ``train_loss`` later also logs ``loss``), perhaps at another scale."""

    role: str
    from_series: str
    to_series: str
    step: int
    """Step of the record the new series first has a point at (the rules start over there)."""


def role_moves(batches: Iterable[RecordBatch], table: RoleTable) -> tuple[RoleMove, ...]:
    """Where roles moved to another series, as the rule engine moves them: names count from the
    record of their first point (those first at one record together), and a role goes to the
    highest-ranked name seen so far. In record order, then in ``ROLES`` order at one record."""
    firsts: dict[str, tuple[int, int]] = {}
    """name -> (global record, step) of its first point."""
    offset = 0
    for b in batches:
        for name, c in b.series.items():
            if name not in firsts and c.rows.shape[0]:
                firsts[name] = (offset + int(c.rows[0]), int(c.steps[0]))
        offset += b.n_records
    return moves_from(firsts, table)


def moves_from(firsts: Mapping[str, tuple[int, int]], table: RoleTable) -> tuple[RoleMove, ...]:
    """:func:`role_moves` given each name's (record, step) of its first point, in the order the
    names first appeared."""
    by_record: dict[tuple[int, int], list[str]] = {}
    for name, at in firsts.items():
        by_record.setdefault(at, []).append(name)
    order = {role: i for i, role in enumerate(ROLES)}
    moves: list[RoleMove] = []
    seen: list[str] = []
    roles: dict[str, str] = {}
    for (_rec, step), names in sorted(by_record.items()):
        seen += names
        after = table.resolve(seen)
        moved = [RoleMove(role, roles[role], name, step) for role, name in after.items()
                 if role in roles and roles[role] != name]
        moves += sorted(moved, key=lambda m: order.get(m.role, len(order)))
        roles = after
    return tuple(moves)


def collect_series(batches: Iterable[RecordBatch]) -> dict[str, Series]:
    """Every series of a stream, concatenated; a resumed segment replaces the steps it rewrites."""
    parts: dict[str, list[Any]] = {}
    for b in batches:
        for name, c in b.series.items():
            parts.setdefault(name, []).append(c)
    out: dict[str, Series] = {}
    for name, chunks in parts.items():
        steps = np.concatenate([c.steps for c in chunks])
        values = np.concatenate([c.values for c in chunks])
        times = np.concatenate([c.times for c in chunks])
        segs = np.concatenate([c.segments for c in chunks])
        keep = _latest_segment_mask(steps, segs)
        out[name] = Series(steps[keep], values[keep], times[keep])
    return out


def _latest_segment_mask(steps: np.ndarray, segs: np.ndarray) -> np.ndarray:
    """Drop points a later segment (a resumed run) wrote again from an earlier step."""
    keep = np.ones(steps.shape[0], dtype=bool)
    if steps.shape[0] == 0 or segs[0] == segs[-1] and np.all(segs == segs[0]):
        return keep
    for seg in distinct(segs)[1:]:
        start = int(steps[segs == seg].min())
        keep &= ~((segs < seg) & (steps >= start))
    return keep


def summarize_metric(name: str, s: Series, smooth: bool = True) -> MetricSummary:
    """First, final and best value of a loss-like (lower is better) series."""
    ok = np.isfinite(s.values)
    v, st = s.values[ok], s.steps[ok]
    nonfinite = int((~ok).sum())
    if v.size == 0:
        nan = math.nan
        last = int(s.steps[-1]) if s.steps.size else 0
        return MetricSummary(name, int(s.values.size), nan, nan, nan, last, last, 0, nonfinite,
                             float(s.values[-1]) if s.values.size else nan)
    w = max(1, min(50, v.size // 20)) if smooth else 1
    avg = moving_average(v, w)
    best_i = int(np.argmin(avg))
    return MetricSummary(
        name=name, points=int(s.values.size), first=float(v[0]), final=float(v[-w:].mean()),
        best=float(avg[best_i]), best_step=int(st[best_i]), final_step=int(st[-1]), window=w,
        nonfinite=nonfinite, last=float(s.values[-1]),
    )


def moving_average(v: np.ndarray, w: int) -> np.ndarray:
    """Trailing ``w``-point mean (the first ``w - 1`` points average what exists so far)."""
    if w <= 1:
        return v.astype(np.float64, copy=True)
    c = np.concatenate(([0.0], np.cumsum(v, dtype=np.float64)))
    idx = np.arange(1, v.size + 1)
    lo = np.maximum(idx - w, 0)
    return (c[idx] - c[lo]) / (idx - lo)


# ----------------------------------------------------------------------------------- LR shape


def classify_lr(steps: np.ndarray, lr: np.ndarray) -> LrSchedule | None:
    """Name the schedule a learning-rate series followed: warmup, then constant, step, linear,
    cosine or another decay (or ``cyclic`` when it rises again after decaying); see
    :class:`~trainwatch.commands.lr_shape.LrShape`, fed the whole series here."""
    ok = np.isfinite(lr)
    x, y = steps[ok], lr[ok].astype(np.float64)
    if y.size == 0:
        return None
    peak_i = int(np.argmax(y))
    shape = LrShape(float(y[peak_i]), peak_i, int(x[-1]))
    while True:
        shape.feed(x, y)
        schedule = shape.result()
        if schedule is not None:
            return schedule
