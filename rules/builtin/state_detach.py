"""``state_detach``: a recurrent model's hidden state carried to the next step without
``.detach()``, so every backward pass runs through the whole history.

Told four ways on the main stream (and a fifth in the console: see
:mod:`~trainwatch.rules.builtin.console_error`): (a) the trainer's probe (``state_attached`` = 1)
says so, an error at once; (b) a ``graph_size`` series grows (Theil-Sen + Spearman over
``graph_window`` points); (c) the step time ramps up steadily over ``window`` points with the
memory rising over the same steps (without a memory series: the step time alone, on stricter
bars); (d) ``memory_growth``'s window of rising memory has the step time ramping up steadily with
it. A step time lifted by machine load rises in a step or a burst, not steadily
(:func:`~trainwatch.rules.detectors.rise_shape.steady_rise`): that stays a memory leak.

Whichever of ``state_detach`` and ``memory_growth`` sees a growth first in a segment owns it: once
either has fired, (b) and (c) are silent (and ``memory_growth`` yields to any ``state_detach``
alert before its own). So this rule follows the memory windows too, with ``memory_growth``'s
parameters, and knows when that rule fires. Its alerts are logged in the context
(``ctx.log("state_detach")``): ``throughput_drop`` and ``memory_growth`` ask it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainwatch.rules.config.schema import RuleBase, flag, integer, names, num, severity
from trainwatch.rules.detectors.episode import START, START_ESCALATED, Episode
from trainwatch.rules.detectors.growth import (
    MIN_POINTS,
    QUICK_SHARE,
    SPAN_CAP_WINDOWS,
    Episodes,
    Evals,
    Pushed,
    Tail,
    Trend,
    rises,
    span_growth,
    span_may_rise,
    span_window,
    trend,
)
from trainwatch.rules.detectors.rise_shape import steady_rise
from trainwatch.rules.engine.base import (
    Context,
    Frame,
    Hit,
    Points,
    Rule,
    fmt,
    make_hit,
    pct,
    r6,
    rank_causes,
)

if TYPE_CHECKING:  # (memory_growth imports this module)
    from trainwatch.rules.builtin.memory_growth import MemoryConfig


@dataclass(frozen=True)
class DetachConfig(RuleBase):
    probe_severity: str = severity()
    """Severity when the trainer's probe says the state is still attached."""
    probe_metrics: tuple[str, ...] = names()
    graph_metrics: tuple[str, ...] = names()
    """Series with the autograd graph size (growing: state not detached)."""
    window: int = integer(ge=5)
    every: int = integer(ge=1)
    warmup_points: int = integer(ge=0)
    memory_min_rho: float = num(gt=0, le=1)
    memory_min_growth: float = num(gt=0)
    time_min_rho: float = num(gt=0, le=1)
    time_min_growth: float = num(gt=0)
    time_min_late_slope: float = num(ge=0)
    """A rising step time counts only when it rises steadily: a line fits it about as well as
    the best single step, or the part after that step still rises at this fraction of the slope
    the step stands for (a ramp that began inside the window). After a load step or a burst the
    step time is flat: ~0 there. See ``trainwatch.rules.detectors.rise_shape.steady_rise``."""
    time_only: bool = flag()
    """Without a memory series, step time alone rising steadily (stricter bars below)."""
    time_only_rho: float = num(gt=0, le=1)
    time_only_growth: float = num(gt=0)
    graph_window: int = integer(ge=3)
    graph_min_rho: float = num(gt=0, le=1)
    graph_min_growth: float = num(gt=0)


PROBE_ATTACHED = 0.5
"""A probe value at or above this says attached (the trainer writes 1 or 0)."""
PROBE_REARM = 10
"""Probe points saying "detached" that end an episode of "attached" (then it may fire again)."""

DETACH_CAUSES = [
    (("the recurrent hidden state (h, or (h, c) for an LSTM) is carried to the next sample or "
     "chunk without .detach(), so every backward pass runs through the whole history"), 0.85),
    ("retain_graph=True was added to silence 'backward through the graph a second time'", 0.4),
]
DETACH_FIXES = [
    ("Detach the state at the start of each sample or TBPTT chunk: h = h.detach() "
    "(LSTM: h, c = h.detach(), c.detach())"),
    "Remove retain_graph=True: it only hides this bug",
    "Accumulate running losses with loss.item(), not the tensor",
]
_FIXES = tuple(DETACH_FIXES)
_CAUSES = rank_causes(DETACH_CAUSES)
_PROBE_CAUSES = rank_causes([(DETACH_CAUSES[0][0], 0.95), DETACH_CAUSES[1]])
_GRAPH_CAUSES = rank_causes([(DETACH_CAUSES[0][0], 0.9), DETACH_CAUSES[1]])
_TIME_ONLY_CAUSES = rank_causes([
    (DETACH_CAUSES[0][0], 0.6), DETACH_CAUSES[1],
    ("the work per step grows (longer sequences, a growing dataset or cache)", 0.3),
])


def span_cap(mem: MemoryConfig, det: DetachConfig) -> int:
    """The most points of the other series a window reads in its step span (the last ones)."""
    return SPAN_CAP_WINDOWS * max(mem.window, det.window)


def memory_window(det: DetachConfig, ev_m: Evals, k: int, tr: Trend, tp: Pushed, cap: int
                  ) -> tuple[bool, bool, float, dict[str, object]]:
    """Memory window k, rising (its trend ``tr``), with the step time over its steps (``tp``):
    whether the step time rises past (c)'s bars, whether steadily (then it is (d)), its growth,
    and the evidence both rules' memory alerts carry."""
    slope, rho, g = tr
    x, y = span_window(ev_m, k, tp, cap)
    _s, _r, g_t = t_tr = trend(x, y, det.time_min_rho)
    e = int(ev_m.end[k])
    evidence: dict[str, object] = {
        "growth": r6(g), "rho": r6(rho), "slope_per_step": r6(slope),
        "first": r6(float(ev_m.values[e - ev_m.window + 1])), "last": r6(float(ev_m.values[e])),
        "steps": int(ev_m.steps[e] - ev_m.steps[e - ev_m.window + 1]),
        "step_time_growth": r6(g_t) if x.shape[0] >= MIN_POINTS and math.isfinite(g_t)
        else None}
    up = rises(t_tr, x.shape[0], det.time_min_rho, det.time_min_growth)
    return up, up and steady(det, x, y, evidence), g_t, evidence


def steady(det: DetachConfig, x: np.ndarray, y: np.ndarray, evidence: dict[str, object]) -> bool:
    """:func:`steady_rise` of a rising step time, noted in the evidence."""
    ok, late = steady_rise(x, y, det.time_min_late_slope)
    evidence["step_time_steady"] = ok
    evidence["step_time_late_slope"] = r6(late)
    return ok


def _first(frame: Frame, names: tuple[str, ...]) -> Points | None:
    """The finite points of the first of ``names`` the frame has."""
    for n in names:
        pts = frame.series.get(n)
        if pts is not None:
            return pts.finite()
    return None


class StateDetachRule(Rule):
    id = "state_detach"
    roles_read = ("step_time", "memory")
    reads_unresolved = (("memory", "step_time"),)  # (no memory: the step time alone, time_only)

    def __init__(self, cfg: DetachConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.mem = mem = ctx.config.rules["memory_growth"]
        """``memory_growth``'s parameters: (d) reads its windows, and (b), (c) yield to it."""
        self.cap = span_cap(mem, cfg)
        self.time, self.memory = Tail(self.cap), Tail(self.cap)
        self.graph = Tail(cfg.graph_window)
        self.probe = Episode(rearm=PROBE_REARM, cooldown=0)
        self.rises = Episodes(mem.min_rho, mem.min_growth)
        self.rewind()

    def names_read(self) -> tuple[str, ...]:
        return (*self.cfg.probe_metrics, *self.cfg.graph_metrics)

    def rewind(self) -> None:
        for tail in (self.time, self.memory, self.graph):
            tail.reset()
        self.probe.reset()
        self.rises.active = False
        self.fired = False
        """This rule fired in the segment (``memory_growth`` yields to it from then on)."""
        self.owned = False
        """A growth is owned, by either rule: (b) and (c) are silent."""

    def update(self, frame: Frame) -> list[Hit]:
        det = self.cfg
        if not det.enabled:
            return []
        probe = _first(frame, det.probe_metrics)
        hits = [] if probe is None else self._probe(probe)
        if self.fired and self.owned:  # (settled until the next segment: only the probe speaks)
            return self._log(hits)
        # every window this frame ends, by record: probe, step time, graph, then memory windows
        events = [(h.pos, 0, i) for i, h in enumerate(hits)]
        tp = self.time.push(finite_of(frame.role("step_time")))
        mp = self.memory.push(finite_of(frame.role("memory")))
        has_mem = frame.roles.get("memory") is not None
        ev_t = tp.evals(det.window, det.every, det.warmup_points)
        if not self.owned:
            ks = self._candidates(ev_t, mp if has_mem else None).nonzero()[0]
            events += zip(ev_t.pos[ev_t.end[ks]].tolist(), [1] * len(ks), ks.tolist())
        graph = _first(frame, det.graph_metrics)
        ev_g = None
        if graph is not None:
            ev_g = self.graph.push(graph).evals(det.graph_window, 1, 0)
            ks = (ev_g.growth() >= det.graph_min_growth * QUICK_SHARE).nonzero()[0]
            events += zip(ev_g.pos[ev_g.end[ks]].tolist(), [2] * len(ks), ks.tolist())
        ev_m = mp.evals(self.mem.window, self.mem.every, self.mem.warmup_points)
        starts = ((ev_m.at(k)[0], 3, k, tr) for k, tr in
                  (self.rises.starts(ev_m) if self.mem.enabled else ()))
        out: list[Hit] = []
        for _pos, kind, k, *tr in heapq.merge(sorted(events), starts):
            hit = None
            if kind == 0:
                hit = hits[k]
            elif self.fired and self.owned:
                continue  # (settled: only the probe speaks)
            elif kind == 3:
                if self.fired:
                    continue  # (the same growth, diagnosed already)
                _up, rising, g_t, evidence = memory_window(det, ev_m, k, tr[0], tp, self.cap)
                if rising:
                    hit = self._memory_hit(frame, ev_m, k, tr[0][2], g_t, evidence)
                self.owned = True  # (not rising: memory_growth's, which fires there)
            elif not self.owned:
                hit = (self._trend_hit(frame, ev_t, mp if has_mem else None, k) if kind == 1
                       else self._graph_hit(ev_g, k))  # type: ignore[arg-type]
                self.owned = hit is not None
            if hit is not None:
                out.append(hit)
                self.fired = True
        return self._log(out)

    def _log(self, hits: list[Hit]) -> list[Hit]:
        if hits:  # (the log is made when first asked for: most runs never fill it)
            log = self.ctx.log(self.id)
            for h in hits:
                log.add(h.pos, h.alert.step)
        return hits

    def _probe(self, pts: Points) -> list[Hit]:
        """(a): a hit where the probe starts saying the state is attached."""
        det = self.cfg
        hits = []
        for i, kind in self.probe.scan(pts.steps, pts.values >= PROBE_ATTACHED):
            if kind not in (START, START_ESCALATED):
                continue
            step = int(pts.steps[i])
            hits.append(make_hit(
                self.id, pos=int(pts.pos[i]), severity=det.probe_severity, step=step,
                time=float(pts.times[i]), metric=pts.name,
                message=f"The trainer's probe says the hidden state entering step {step} is "
                        "still attached to the previous step's graph: it is not detached.",
                evidence={"probe": pts.name, "value": r6(float(pts.values[i]))},
                causes=_PROBE_CAUSES, fixes=_FIXES))
        return hits

    def _candidates(self, ev: Evals, mp: Pushed | None) -> np.ndarray:
        """(c)'s windows worth an exact test: the quick estimates of the step time and of the
        memory over its steps both reach half their bars (the step time alone, without a memory
        series)."""
        det = self.cfg
        none = np.zeros(ev.end.shape[0], dtype=bool)
        if mp is None:
            return ev.growth() >= det.time_only_growth * QUICK_SHARE if det.time_only else none
        bar = det.memory_min_growth * QUICK_SHARE
        if not span_may_rise(ev, mp, bar):
            return none  # (the usual frame: the memory is flat)
        cand = ev.growth() >= det.time_min_growth * QUICK_SHARE
        return cand & (span_growth(ev, mp, cand, self.cap) >= bar)

    def _trend_hit(self, frame: Frame, ev: Evals, mp: Pushed | None, k: int) -> Hit | None:
        """(c): the step time of window k ramps up steadily, with the memory over its steps."""
        det = self.cfg
        min_rho, min_growth = ((det.time_min_rho, det.time_min_growth) if mp is not None
                               else (det.time_only_rho, det.time_only_growth))
        x, y = ev.window_at(k)
        _slope, rho_t, g_t = trend(x, y, min_rho)
        if not rises((_slope, rho_t, g_t), x.shape[0], min_rho, min_growth):
            return None
        if mp is not None:
            xm, ym = span_window(ev, k, mp, self.cap)
            _s, rho_m, g_m = trend(xm, ym, det.memory_min_rho)
            if not rises((_s, rho_m, g_m), xm.shape[0], det.memory_min_rho,
                         det.memory_min_growth):
                return None
        pos, step, time = ev.at(k)
        span = int(step - ev.steps[ev.end[k] - ev.window + 1])
        evidence: dict[str, object] = {"window_points": ev.window, "steps": span,
                                       "step_time_growth": r6(g_t), "step_time_rho": r6(rho_t)}
        if not steady(det, x, y, evidence):
            return None
        if mp is not None:
            evidence.update({"memory_growth": r6(g_m), "memory_rho": r6(rho_m)})
            message = (f"Step time and memory are rising together (+{pct(g_t)} and "
                       f"+{pct(g_m)} over the last {span} steps): the recurrent state is "
                       "probably not detached, so each backward pass runs through the whole "
                       "history.")
        else:
            message = (f"Step time is rising steadily (+{pct(g_t)} over the last {span} "
                       f"steps, Spearman {fmt(rho_t)}): each backward pass grows, as when the "
                       "recurrent state is not detached between chunks.")
        return make_hit(self.id, pos=pos, severity=det.severity, step=step, time=time,
                        metric=frame.roles.get("step_time"), message=message,
                        evidence=evidence, causes=_CAUSES if mp is not None else
                        _TIME_ONLY_CAUSES, fixes=_FIXES)

    def _graph_hit(self, ev: Evals, k: int) -> Hit | None:
        """(b): the graph size rises over window k."""
        det = self.cfg
        _s, rho, g = ev.exact(k, det.graph_min_rho)
        if not (rho >= det.graph_min_rho and g >= det.graph_min_growth):
            return None
        pos, step, time = ev.at(k)
        e = int(ev.end[k])
        first, last = float(ev.values[e - ev.window + 1]), float(ev.values[e])
        return make_hit(
            self.id, pos=pos, severity=det.severity, step=step, time=time, metric=None,
            message=f"The autograd graph grows every step ({fmt(first)} -> {fmt(last)} over "
                    f"{ev.window} points): the state is not detached, so the graph spans the "
                    "whole history.",
            evidence={"graph_first": r6(first), "graph_last": r6(last), "growth": r6(g),
                      "rho": r6(rho), "window_points": ev.window},
            causes=_GRAPH_CAUSES, fixes=_FIXES)

    def _memory_hit(self, frame: Frame, ev: Evals, k: int, g: float, g_t: float,
                    evidence: dict[str, object]) -> Hit:
        """(d): memory_growth's window k rises with the step time ramping up steadily."""
        pos, step, time = ev.at(k)
        return make_hit(
            self.id, pos=pos, severity=self.cfg.severity, step=step, time=time,
            metric=frame.roles.get("memory"),
            message=f"Memory and step time are rising together (+{pct(g)} and +{pct(g_t)} "
                    f"over the last {evidence['steps']} steps): the recurrent state is probably "
                    "not detached, so each backward pass runs through the whole history.",
            evidence=evidence, causes=_CAUSES, fixes=_FIXES)


def finite_of(pts: Points | None) -> Points:
    """The finite points of a series (none when the frame has no such series)."""
    return _NO if pts is None else pts.finite()


_NO = Points("", np.empty(0, dtype=np.int64), np.empty(0), np.empty(0),
             np.empty(0, dtype=np.int64))
