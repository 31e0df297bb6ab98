"""What rules are fed, what they return, and what they may ask each other.

The engine cuts each batch into *frames* (one per segment it touches) and hands every rule the
whole frame: the points of each series in record order, as arrays. A rule processes them as a
stream, vectorised where it pays, and returns :class:`Hit` values (an :class:`Alert` plus the
global record index it belongs to, so alerts sort the same however the stream was batched).

Any decision a rule takes at a point may only depend on points at or before that point's record:
that is what makes feeding point by point and feeding a whole file give identical alerts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from trainwatch.batch import Event, RecordBatch
from trainwatch.humanize import fmt_num
from trainwatch.rules.engine.alert import Alert, Cause
from trainwatch.rules.engine.step_log import StepLog

HISTORY = 256
"""Finite values of each role kept from earlier frames (for causes and evidence)."""
HISTORY_ROLES = ("loss", "grad_norm", "lr", "memory")
"""The roles rules look back at through :meth:`Context.recent`."""


def fmt(x: float | None) -> str:
    """A number for a message: two significant digits (``3.4e-4``, ``1.2k``, ``0.87``)."""
    return fmt_num(x, 2)


def fmt3(x: float | None) -> str:
    """A level compared with a close one (a best and a current loss): three digits."""
    return fmt_num(x, 3)


def pct(x: float) -> str:
    """A fraction as a percentage for people: ``0.053`` -> ``"5.3 %"``."""
    return f"{fmt_num(100.0 * x, 2)} %"


def r6(x: float) -> float:
    """Evidence numbers: 6 significant digits is all a person (or a test) needs."""
    x = float(x)
    return float(f"{x:.6g}") if math.isfinite(x) else x


@dataclass(frozen=True)
class Points:
    """The points of one series inside one frame, in record order."""

    name: str
    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray
    pos: np.ndarray
    """Global record index of each point (the engine sorts alerts by it)."""

    def __repr__(self) -> str:
        return f"Points({self.name!r}, {len(self)} points)"

    def __len__(self) -> int:
        return self.values.shape[0]

    def take(self, idx: np.ndarray | slice) -> Points:
        return Points(self.name, self.steps[idx], self.values[idx], self.times[idx], self.pos[idx])

    def finite(self) -> Points:
        """The finite points (``self`` when all are)."""
        return self._finite

    def nonzero(self) -> Points:
        """The points other than exact zeros (``self`` when none is): a zero-inflated loss (a
        hinge, margin or detection loss, 0 on easy batches) has its level in its other values."""
        return self._nonzero

    @property
    def all_finite(self) -> bool:
        return self._finite is self

    # (computed once per frame's points: most rules ask for the finite points of the loss)
    @cached_property
    def _finite(self) -> Points:
        ok = np.isfinite(self.values)
        return self if ok.all() else self.take(ok)

    @cached_property
    def _nonzero(self) -> Points:
        nz = self.values != 0.0
        return self if nz.all() else self.take(nz)


@dataclass(frozen=True, slots=True)
class Frame:
    """One segment's part of a batch."""

    segment: int
    roles: Mapping[str, str]
    """role -> series name (as resolved so far)."""
    series: Mapping[str, Points]
    """Every series of interest present in this frame, by name."""
    events: tuple[Event, ...]
    rec_steps: np.ndarray
    rec_times: np.ndarray
    rec_pos: np.ndarray
    """All records (metric records and events) of the frame."""
    rec_is_event: np.ndarray
    """Whether each record is an event."""
    losses: tuple[str, ...] = ()
    """Every series of a loss family (:mod:`trainwatch.families`: train and val losses, the
    roles' included), whether or not it has points in this frame."""

    def __repr__(self) -> str:
        return (f"Frame(segment={self.segment}, {self.rec_steps.shape[0]} records, "
                f"series={sorted(self.series)})")

    def role(self, role: str) -> Points | None:
        name = self.roles.get(role)
        return None if name is None else self.series.get(name)

    def metric(self, name: str) -> Points | None:
        return self.series.get(name)


@dataclass(frozen=True, slots=True)
class Hit:
    pos: int
    alert: Alert


class Context:
    """What rules share: recent values of every role, and notable points of other rules.

    A query always names the record it is asked for, and only data at or before that record
    answers it.
    """

    def __init__(self, config: Any = None, live: bool = True) -> None:
        self.config = config
        """The whole rules config (:class:`~trainwatch.rules.config.loading.RulesConfig`)."""
        self.live = live
        """Fed as data arrives (the TUI), not a backfill of what a file holds (``check``)."""
        self._hist: dict[str, deque[tuple[int, int, float]]] = {}
        """role -> (pos, step, value) of its last HISTORY finite points before this frame."""
        self.frame: Frame | None = None
        self.logs: dict[str, StepLog] = {}
        self.run_points: dict[str, int] = {}
        """role -> finite points seen in the run (not reset by a rewind)."""
        self.errors_told: dict[str, str] = {}
        """Error kind (``cuda_oom``...) -> the rule that told it last: ``console_error`` (a
        console line) or ``run_crashed`` (the error the run ended with). Each leaves alone what
        the other told, so one cause seen in both is told once (a run's run_end and console are
        read in either order). Not reset by a rewind: ``check`` reads the console after every
        segment of the main stream."""
        self.shared: dict[Any, Any] = {}
        """Per-segment state several rules share (see
        :func:`trainwatch.rules.detectors.blocks.shared_blocks`)."""

    def log(self, name: str) -> StepLog:
        lg = self.logs.get(name)
        if lg is None:
            lg = self.logs[name] = StepLog()
        return lg

    def recent(self, role: str, upto_pos: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of the last ``n`` (<= HISTORY) finite values of ``role`` at or before
        a record (``role`` in HISTORY_ROLES)."""
        hist = self._hist.get(role, ())
        pos = np.fromiter((p for p, _s, _v in hist), dtype=np.int64, count=len(hist))
        steps = np.fromiter((s for _p, s, _v in hist), dtype=np.int64, count=len(hist))
        values = np.fromiter((v for _p, _s, v in hist), dtype=np.float64, count=len(hist))
        pts = self.frame.role(role) if self.frame is not None else None
        if pts is not None and len(pts):
            fin = pts.finite()
            pos, steps, values = (np.concatenate([pos, fin.pos]), np.concatenate([steps, fin.steps]),
                                  np.concatenate([values, fin.values]))
        k = int(np.searchsorted(pos, upto_pos, side="right"))
        return steps[max(0, k - n):k], values[max(0, k - n):k]

    def count_before(self, role: str, pos: int) -> int:
        """Finite points of ``role`` in the run before record ``pos``."""
        n = self.run_points.get(role, 0)
        pts = self.frame.role(role) if self.frame is not None else None
        if pts is not None and len(pts):
            n += int(np.searchsorted(pts.finite().pos, pos, side="left"))
        return n

    def latest(self, role: str, upto_pos: int) -> float | None:
        _s, v = self.recent(role, upto_pos, 1)
        return float(v[0]) if v.shape[0] else None

    def end_frame(self, frame: Frame) -> None:
        """Fold the frame's finite values into the history."""
        for role in HISTORY_ROLES:
            pts = frame.role(role)
            if pts is None:
                continue
            fin = pts.finite()
            n = len(fin)
            if not n:
                continue
            self.run_points[role] = self.run_points.get(role, 0) + n
            hist = self._hist.get(role)
            if hist is None:
                hist = self._hist[role] = deque(maxlen=HISTORY)
            k = max(0, n - HISTORY)  # (a long frame: only its last HISTORY points can stay)
            hist.extend(zip(fin.pos[k:].tolist(), fin.steps[k:].tolist(), fin.values[k:].tolist()))

    def rewind(self) -> None:
        """A new segment: step-keyed logs no longer compare with the new steps, and shared
        smoothing restarts."""
        for lg in self.logs.values():
            lg.clear()
        self.shared.clear()

    def forget(self, role: str) -> None:
        """``role`` moved to another series: its history and the streams shared on it restart
        (its count of points in the run stays: it measures how far the run is)."""
        self._hist.pop(role, None)
        for key in [k for k in self.shared if isinstance(k, tuple) and k[:1] == (role,)]:
            del self.shared[key]


class Rule:
    """A rule: fed frames in order, returns hits.

    A subclass sets ``id`` and declares what it reads: ``roles_read`` (and ``reads_unresolved``)
    for series by role, :meth:`names_read` for series by exact name. It is built with its own
    config section and the run's :class:`Context` (``ctx.config`` holds every rule's settings,
    for the few rules that weigh another's parameters).
    """

    id: str = ""
    also_raises: tuple[str, ...] = ()
    """Other rule ids whose alerts this rule raises (console_error tells state_detach's console
    errors): it is built while any of them is enabled."""
    reads_unresolved: tuple[tuple[str, str], ...] = ()
    """(role, the role the rule reads instead while no series of the first is seen): a fallback,
    throughput from the step time. When the fallback's series is there, the engine counts a
    series of the first role from the record it first appears at, whatever the batching (see
    ``RuleEngine._new_names``)."""
    roles_read: tuple[str, ...] = ()
    """Roles whose series the rule's state is built from. When one of them moves to another
    series (a name ranked higher for it appears mid-run, at another scale perhaps), the engine
    rewinds the rule: it starts over on the new series instead of reading the change of series
    as a spike or a rise. Roles read only to diagnose (the LR at a spike) are not listed."""
    lane_role: str | None = None
    """The role whose every other family member the rule also judges, in a lane of its own
    (``loss``: every train loss; ``val_loss``: every val/eval loss; see
    :mod:`~trainwatch.rules.engine.lanes`)."""
    lane_beside_main: bool = True
    """Whether the rule judges the other members when the role has its own series too (False:
    only where the run has none, as a GAN's two losses)."""

    def __init__(self, cfg: Any, ctx: Context) -> None:
        self.cfg = cfg
        self.ctx = ctx

    def names_read(self) -> tuple[str, ...]:
        """Series the rule reads by exact name, whatever the roles (they join the frame)."""
        return ()

    def update(self, frame: Frame) -> list[Hit]:
        return []

    def update_rank(self, rank: int, batch: RecordBatch) -> list[Hit]:
        """One batch of one rank's own stream (``metrics.rank{N}.jsonl``)."""
        return []

    def update_console(self, lines: Sequence[str], first_line: int, step: int,
                       time: float) -> list[Hit]:
        """Lines of the run's console (numbered from ``first_line``), read when the main stream
        was at ``step`` and ``time``."""
        return []

    def rewind(self) -> None:
        """A new segment starts (a resumed run replays steps): reset per-segment state."""

    def also_at(self, pos: int) -> bool:
        """Whether the series the rule judges was, at record ``pos``, in the state its alerts
        describe (a sibling's alert of this rule then names it; see
        :mod:`~trainwatch.rules.engine.lanes`). Only data at or before ``pos`` may answer."""
        return False

    def arrived(self, now: float | None) -> None:
        """Live: a batch of the main stream arrived at ``now`` (on the clock ``tick`` gets)."""

    def tick(self, now: float) -> list[Hit]:
        """Live: the clock, while nothing arrives."""
        return []

    def finish(self, now: float) -> list[Hit]:
        """The end of a backfill, judged at ``now``."""
        return []

    def alert(self, *, pos: int, severity: str, step: int, time: float, metric: str | None,
              message: str, evidence: Mapping[str, Any] | None = None,
              causes: Sequence[tuple[str, float]] | tuple[Cause, ...] = (),
              fixes: Sequence[str] = ()) -> Hit:
        """A hit of this rule (see :func:`make_hit`)."""
        return make_hit(self.id, pos=pos, severity=severity, step=step, time=time, metric=metric,
                        message=message, evidence=evidence, causes=causes, fixes=fixes)


def rank_causes(causes: Sequence[tuple[str, float]]) -> tuple[Cause, ...]:
    """(cause, confidence) pairs as an alert holds them: most likely first (ties keep their
    order), confidences rounded to 3 decimals. Rules rank their constant causes once, at import."""
    ranked = sorted(causes, key=lambda c: -c[1])
    return tuple(Cause(c, round(float(p), 3)) for c, p in ranked)


def make_hit(
    rule: str,
    *,
    pos: int,
    severity: str,
    step: int,
    time: float,
    metric: str | None,
    message: str,
    evidence: Mapping[str, Any] | None = None,
    causes: Sequence[tuple[str, float]] | tuple[Cause, ...] = (),
    fixes: Sequence[str] = (),
) -> Hit:
    """An alert at record ``pos``. ``causes``: (cause, confidence) pairs in any order, or a tuple
    of :class:`Cause` already ranked (see :func:`rank_causes`), taken as it is."""
    if not (isinstance(causes, tuple) and all(isinstance(c, Cause) for c in causes)):
        causes = rank_causes(causes)  # type: ignore[arg-type]
    return Hit(int(pos), Alert(rule=rule, severity=severity, step=int(step),  # type: ignore[arg-type]
                               time=float(time), metric=metric, message=message,
                               evidence=dict(evidence) if evidence else {},
                               causes=causes, fixes=tuple(fixes)))  # type: ignore[arg-type]
