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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwatch.batch import Event
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


class _ReadOnly:
    """Values that never change once built (a frozen dataclass's guarantee). The engine builds
    a few per frame and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
    cost a microsecond each, a measurable part of a short file's check: these set their slots
    in ``__init__`` through the slots' own setters and refuse any later assignment."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only (cannot set {name!r})")

    __delattr__ = __setattr__  # type: ignore[assignment]


class Points(_ReadOnly):
    """The points of one series inside one frame, in record order."""

    __slots__ = ("_finite", "_nonzero", "name", "pos", "steps", "times", "values")
    name: str
    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray
    pos: np.ndarray
    """Global record index of each point (the engine sorts alerts by it)."""
    _finite: Points | None
    """The finite points, once asked for (several rules ask for them on every frame)."""

    def __init__(self, name: str, steps: np.ndarray, values: np.ndarray, times: np.ndarray,
                 pos: np.ndarray) -> None:
        _p_name(self, name)
        _p_steps(self, steps)
        _p_values(self, values)
        _p_times(self, times)
        _p_pos(self, pos)
        _p_finite(self, None)
        _p_nonzero(self, None)

    def __repr__(self) -> str:
        return f"Points({self.name!r}, {len(self)} points)"

    def __len__(self) -> int:
        return self.values.shape[0]

    def take(self, idx: np.ndarray | slice) -> Points:
        return Points(self.name, self.steps[idx], self.values[idx], self.times[idx], self.pos[idx])

    def finite(self) -> Points:
        """The finite points (``self`` when all are), computed once per object."""
        f = self._finite
        if f is None:
            ok = np.isfinite(self.values)
            # (the ufunc's own reduction: ndarray.all adds a Python wrapper. One np.dot would
            # prove the common case, a finite sum of squares, but it warns where it overflows)
            f = self if np.logical_and.reduce(ok) else self.take(ok)
            _p_finite(self, f)
            if f is not self:
                _p_finite(f, f)
        return f

    def nonzero(self) -> Points:
        """The points other than exact zeros (``self`` when none is), computed once per object:
        a zero-inflated loss (a hinge, margin or detection loss, 0 on easy batches) has its level
        in its other values (the spike rules and divergence read them; one count proves the
        usual frame, nothing 0)."""
        z = self._nonzero
        if z is None:
            v = self.values
            z = self if np.count_nonzero(v) == v.shape[0] else self.take(v != 0.0)
            _p_nonzero(self, z)
            if z is not self:
                _p_nonzero(z, z)
        return z

    @property
    def all_finite(self) -> bool:
        return self.finite() is self


# the slots' own setters: a third cheaper than object.__setattr__ by name (a Points per series
# per frame, and per rule's take())
_p_name, _p_steps, _p_values, _p_times, _p_pos, _p_finite, _p_nonzero = (
    getattr(Points, a).__set__
    for a in ("name", "steps", "values", "times", "pos", "_finite", "_nonzero"))

class Frame(_ReadOnly):
    """One segment's part of a batch."""

    __slots__ = ("events", "rec_is_event", "rec_pos", "rec_steps", "rec_times", "roles",
                 "segment", "series")
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

    def __init__(self, segment: int, roles: Mapping[str, str], series: Mapping[str, Points],
                 events: tuple[Event, ...], rec_steps: np.ndarray, rec_times: np.ndarray,
                 rec_pos: np.ndarray, rec_is_event: np.ndarray) -> None:
        _f_segment(self, segment)
        _f_roles(self, roles)
        _f_series(self, series)
        _f_events(self, events)
        _f_rec_steps(self, rec_steps)
        _f_rec_times(self, rec_times)
        _f_rec_pos(self, rec_pos)
        _f_rec_is_event(self, rec_is_event)

    def __repr__(self) -> str:
        return (f"Frame(segment={self.segment}, {self.rec_steps.shape[0]} records, "
                f"series={sorted(self.series)})")

    def role(self, role: str) -> Points | None:
        name = self.roles.get(role)
        return None if name is None else self.series.get(name)

    def metric(self, name: str) -> Points | None:
        return self.series.get(name)


(_f_segment, _f_roles, _f_series, _f_events, _f_rec_steps, _f_rec_times, _f_rec_pos,
 _f_rec_is_event) = (getattr(Frame, a).__set__ for a in (
    "segment", "roles", "series", "events", "rec_steps", "rec_times", "rec_pos", "rec_is_event"))

@dataclass(frozen=True, slots=True)
class Hit:
    pos: int
    alert: Alert


class Context:
    """What rules share: recent values of every role, and notable points of other rules.

    Rules run in a fixed order on a frame; a query always names the record it is asked for,
    and only data at or before that record answers it.
    """

    def __init__(self) -> None:
        self._hist: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        """role -> (pos, steps, values): the last HISTORY finite values before this frame (with
        the ``_pending`` tails after them)."""
        self._pending: dict[str, list[Points]] = {}
        """role -> finite tails of recent small frames, not yet folded into ``_hist`` (a live
        stream of one-record frames would otherwise copy the history at every record)."""
        self.frame: Frame | None = None
        self.logs: dict[str, StepLog] = {}
        self.run_points: dict[str, int] = {}
        """role -> finite points seen in the run (not reset by a rewind)."""
        self.shared: dict[Any, Any] = {}
        """Per-segment state several rules share (see :func:`trainwatch.rules.detectors.blocks.shared_blocks`)."""

    def log(self, name: str) -> StepLog:
        lg = self.logs.get(name)
        if lg is None:
            lg = self.logs[name] = StepLog()
        return lg

    def recent(self, role: str, upto_pos: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of the last ``n`` (<= HISTORY) finite values of ``role`` at or before
        a record (``role`` in HISTORY_ROLES). The arrays may be views: read them only."""
        fr = self.frame
        pts = fr.role(role) if fr is not None else None
        if pts is not None and len(pts):
            fin = pts.finite()  # cached on the frame's points: several rules ask
            k = int(np.searchsorted(fin.pos, upto_pos, side="right"))
            if 0 < n <= k:  # the frame alone holds them (the common case)
                return fin.steps[k - n:k], fin.values[k - n:k]
            _hp, hs, hv = self._history(role)
            s = np.concatenate([hs, fin.steps[:k]])
            v = np.concatenate([hv, fin.values[:k]])
        else:
            hp, hs, hv = self._history(role)
            keep = hp <= upto_pos
            s, v = hs[keep], hv[keep]
        return s[-n:], v[-n:]

    def count_before(self, role: str, pos: int) -> int:
        """Finite points of ``role`` in the run before record ``pos``."""
        n = self.run_points.get(role, 0)
        fr = self.frame
        pts = fr.role(role) if fr is not None else None
        if pts is not None and len(pts):
            n += int(np.searchsorted(pts.finite().pos, pos, side="left"))
        return n

    def latest(self, role: str, upto_pos: int) -> float | None:
        _s, v = self.recent(role, upto_pos, 1)
        return float(v[0]) if v.shape[0] else None

    def _history(self, role: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The history of ``role`` with the pending tails folded in."""
        pend = self._pending.get(role)
        if pend:
            hp, hs, hv = self._hist.get(role, (_EMPTY_I, _EMPTY_I, _EMPTY_F))
            self._hist[role] = (
                np.concatenate([hp, *(t.pos for t in pend)])[-HISTORY:],
                np.concatenate([hs, *(t.steps for t in pend)])[-HISTORY:],
                np.concatenate([hv, *(t.values for t in pend)])[-HISTORY:],
            )
            pend.clear()
        return self._hist.get(role, (_EMPTY_I, _EMPTY_I, _EMPTY_F))

    def end_frame(self, frame: Frame) -> None:
        """Fold the frame's finite values into the history."""
        roles, series, run_points = frame.roles, frame.series, self.run_points
        for role in HISTORY_ROLES:
            name = roles.get(role)
            pts = None if name is None else series.get(name)
            if pts is None:
                continue
            fin = pts.finite()
            n = fin.values.shape[0]
            if not n:
                continue
            run_points[role] = run_points.get(role, 0) + n
            if n >= HISTORY:
                self._hist[role] = (fin.pos[-HISTORY:], fin.steps[-HISTORY:],
                                    fin.values[-HISTORY:])
                if self._pending:
                    self._pending.pop(role, None)
            else:
                pend = self._pending.setdefault(role, [])
                pend.append(fin)
                if len(pend) >= 64:  # folded now and then, and whenever a rule asks
                    self._history(role)

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
        self._pending.pop(role, None)
        for key in [k for k in self.shared if isinstance(k, tuple) and k[:1] == (role,)]:
            del self.shared[key]


_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_F = np.empty(0, dtype=np.float64)


class Rule:
    """A built-in rule: fed frames in order, returns hits. Subclasses set ``id``."""

    id: str = ""
    order: int = 0
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

    def __init__(self, cfg: Any, ctx: Context) -> None:
        self.cfg = cfg
        self.ctx = ctx

    def update(self, frame: Frame) -> list[Hit]:
        return []

    def rewind(self) -> None:
        """A new segment starts (a resumed run replays steps): reset per-segment state."""

    def tick(self, now: float) -> list[Hit]:
        return []

    def finish(self, now: float) -> list[Hit]:
        return []

    def alert(self, *, pos: int, severity: str, step: int, time: float, metric: str | None,
              message: str, evidence: Mapping[str, Any] | None = None,
              causes: Sequence[tuple[str, float]] | tuple[Cause, ...] = (),
              fixes: Sequence[str] = ()) -> Hit:
        """A hit of this rule (see :func:`make_hit`)."""
        return _hit(self.id, pos, severity, step, time, metric, message, evidence, causes, fixes)


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
    return _hit(rule, pos, severity, step, time, metric, message, evidence, causes, fixes)


def _hit(rule: str, pos: int, severity: str, step: int, time: float, metric: str | None,
         message: str, evidence: Mapping[str, Any] | None,
         causes: Sequence[tuple[str, float]] | tuple[Cause, ...], fixes: Sequence[str]) -> Hit:
    """:func:`make_hit` with positional arguments (a fault run builds a few hundred alerts:
    keyword passing, twice, was a tenth of the cost of each)."""
    if causes.__class__ is not tuple or (causes and causes[0].__class__ is not Cause):
        causes = rank_causes(causes)  # type: ignore[arg-type]
    # Alert's fields in their declared order (rule, severity, step, time, metric, message,
    # evidence, causes, fixes): positional, as keywords cost a third of its construction
    return Hit(int(pos), Alert(rule, severity, int(step), float(time), metric,  # type: ignore[arg-type]
                               message, dict(evidence) if evidence else {}, causes,  # type: ignore[arg-type]
                               tuple(fixes)))
