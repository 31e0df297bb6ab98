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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwatch.batch import Event
from trainwatch.humanize import fmt_num
from trainwatch.rules.alert import Alert, Cause

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


@dataclass(frozen=True, slots=True)
class Points:
    """The points of one series inside one frame, in record order."""

    name: str
    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray
    pos: np.ndarray
    """Global record index of each point (the engine sorts alerts by it)."""
    _finite: Points | None = field(default=None, init=False, repr=False, compare=False)
    """The finite points, once asked for (several rules ask for them on every frame)."""

    def __len__(self) -> int:
        return self.values.shape[0]

    def take(self, idx: np.ndarray | slice) -> Points:
        return Points(self.name, self.steps[idx], self.values[idx], self.times[idx], self.pos[idx])

    def finite(self) -> Points:
        """The finite points (``self`` when all are), computed once per object."""
        f = self._finite
        if f is None:
            ok = np.isfinite(self.values)
            f = self if ok.all() else self.take(ok)
            object.__setattr__(self, "_finite", f)
            if f is not self:
                object.__setattr__(f, "_finite", f)
        return f

    @property
    def all_finite(self) -> bool:
        return self.finite() is self


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

    def role(self, role: str) -> Points | None:
        name = self.roles.get(role)
        return None if name is None else self.series.get(name)

    def metric(self, name: str) -> Points | None:
        return self.series.get(name)


@dataclass(frozen=True, slots=True)
class Hit:
    pos: int
    alert: Alert


class StepLog:
    """(pos, step) of notable points of one rule in the current segment (e.g. grad spikes),
    queried by other rules for points at or before a record."""

    def __init__(self, maxlen: int = 4096) -> None:
        self._items: deque[tuple[int, int]] = deque(maxlen=maxlen)

    def add(self, pos: int, step: int) -> None:
        self._items.append((pos, step))

    def extend(self, pos: Sequence[int], steps: Sequence[int]) -> None:
        """Several points at once, in order."""
        self._items.extend(zip(pos, steps))

    def clear(self) -> None:
        self._items.clear()

    def any_between(self, lo_step: int, hi_step: int, upto_pos: int) -> int | None:
        """The latest step in [lo_step, hi_step] logged at or before record ``upto_pos``."""
        for p, s in reversed(self._items):
            if p <= upto_pos and lo_step <= s <= hi_step:
                return s
        return None

    def last(self, upto_pos: int) -> int | None:
        for p, s in reversed(self._items):
            if p <= upto_pos:
                return s
        return None


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
        """Per-segment state several rules share (see :func:`trainwatch.rules.blocks.shared_blocks`)."""

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
        for role in HISTORY_ROLES:
            pts = frame.role(role)
            if pts is None or not len(pts):
                continue
            fin = pts.finite()
            n = len(fin)
            self.run_points[role] = self.run_points.get(role, 0) + n
            if n >= HISTORY:
                self._hist[role] = (fin.pos[-HISTORY:], fin.steps[-HISTORY:],
                                    fin.values[-HISTORY:])
                self._pending.pop(role, None)
            elif n:
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


_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_F = np.empty(0, dtype=np.float64)


class Rule:
    """A built-in rule: fed frames in order, returns hits. Subclasses set ``id``."""

    id: str = ""
    order: int = 0

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

    def alert(self, **kw: Any) -> Hit:
        """A hit of this rule (see :func:`make_hit`)."""
        return make_hit(self.id, **kw)


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
    causes: Sequence[tuple[str, float]] = (),
    fixes: Sequence[str] = (),
) -> Hit:
    """An alert at record ``pos``; causes are ranked most likely first."""
    ranked = sorted(causes, key=lambda c: -c[1])
    return Hit(int(pos), Alert(
        rule=rule,
        severity=severity,  # type: ignore[arg-type]
        step=int(step),
        time=float(time),
        metric=metric,
        message=message,
        evidence=dict(evidence or {}),
        causes=tuple(Cause(c, round(float(p), 3)) for c, p in ranked),
        fixes=tuple(fixes),
    ))
