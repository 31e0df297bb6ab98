"""The exact tests of a growth window that passed the quick bars, and the alert it makes:
``state_detach``'s and ``memory_growth``'s messages, evidence, causes and fixes.

:class:`~trainwatch.rules.builtin.memory_growth.GrowthAnalysis` decides which windows are judged and in which
order (and which rule owns a growth); each function here judges one window (or the trainer's
probe points of a frame) and builds its hit.
"""

from __future__ import annotations

import math

import numpy as np

from trainwatch.rules.config.models import DetachConfig, MemoryConfig
from trainwatch.rules.detectors.episode import START, START_ESCALATED, Episode
from trainwatch.rules.detectors.growth import Evals, Pushed, span_trend, span_window
from trainwatch.rules.detectors.ordered_trend import trend_in_order
from trainwatch.rules.detectors.rise_shape import steady_rise
from trainwatch.rules.engine.base import Frame, Hit, Points, fmt, make_hit, pct, r6, rank_causes

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

# Each alert's causes ranked once (and its fixes as a tuple): they never vary.
_DETACH_FIXES = tuple(DETACH_FIXES)
_DETACH_RANKED = rank_causes(DETACH_CAUSES)
_PROBE_CAUSES = rank_causes([(DETACH_CAUSES[0][0], 0.95), DETACH_CAUSES[1]])
_GRAPH_CAUSES = rank_causes([(DETACH_CAUSES[0][0], 0.9), DETACH_CAUSES[1]])
_TIME_ONLY_CAUSES = rank_causes([
    (DETACH_CAUSES[0][0], 0.6), DETACH_CAUSES[1],
    ("the work per step grows (longer sequences, a growing dataset or cache)", 0.3),
])
_MEMORY_CAUSES = rank_causes([
    ("a tensor kept with its graph across steps (e.g. total_loss += loss instead of loss.item())",
     0.7),
    ("a growing list of tensors kept on the device (outputs, predictions)", 0.5),
    ("a cache that grows (memoised tensors, recompilations for new shapes)", 0.3),
    ("allocator fragmentation from varying shapes", 0.2),
])
_MEMORY_FIXES = ("Accumulate metrics with loss.item() or loss.detach()",
                 "Move kept outputs to the CPU (.cpu()) or keep only what you need",
                 "Compare torch.cuda.memory_summary() at two steps to see what grows")


def probe_hits(det: DetachConfig, probe: Episode, pts: Points) -> list[Hit]:
    """The hits of the trainer's probe (``pts``: its finite points; ``probe``: its episode,
    carried across frames): an error when it says the state is attached."""
    if not len(pts):
        return []
    attached = pts.values >= 0.5
    # a probe that says attached from some point to the end of the frame (once the bug is in,
    # every frame; a whole run read at once) is one run, which Episode.scan would find with a
    # few more array passes: the same calls to the episode, without them
    i0 = int(attached.argmax())
    if attached[i0] and attached[i0:].all():
        probe.normal(i0)
        events = [(i0 + i, kind) for i, kind in probe.run(pts.steps[i0:])]
    else:
        events = probe.scan(pts.steps, attached)
    hits = []
    for i, kind in events:
        if kind not in (START, START_ESCALATED):
            continue
        step = int(pts.steps[i])
        hits.append(make_hit(
            "state_detach", pos=int(pts.pos[i]), severity=det.probe_severity, step=step,
            time=float(pts.times[i]), metric=pts.name,
            message=f"The trainer's probe says the hidden state entering step {step} is still "
                    "attached to the previous step's graph: it is not detached.",
            evidence={"probe": pts.name, "value": r6(float(pts.values[i]))},
            causes=_PROBE_CAUSES, fixes=_DETACH_FIXES))
    return hits


def trend_hit(det: DetachConfig, frame: Frame, ev_t: Evals, ev_dm: Pushed | None, k: int,
              rho: float, cap: int | None = None) -> Hit | None:
    """The hit for the step time rising in evaluation k (its Spearman ``rho``, known), if
    it passes the bars; the memory is read over the window's step span, at most its last
    ``cap`` points (see :func:`~trainwatch.rules.detectors.growth.span_window`)."""
    min_rho = det.time_min_rho if ev_dm is not None else det.time_only_rho
    if rho < min_rho:
        return None  # (trend() would skip the slope, and the bar below fail)
    x_t, y_t = ev_t.window_at(k)
    _slope, rho_t, g_t = trend_in_order(x_t, y_t, min_rho, rho)
    # the bars first: most candidates fail them, and need no evidence
    if ev_dm is not None:
        if not (rho_t >= det.time_min_rho and g_t >= det.time_min_growth):
            return None
        _ms, rho_m, g_m, n_m = span_trend(ev_t, k, ev_dm, det.memory_min_rho, cap)
        if not (n_m >= 5 and rho_m >= det.memory_min_rho and g_m >= det.memory_min_growth):
            return None
    elif not (rho_t >= det.time_only_rho and g_t >= det.time_only_growth):
        return None
    e = int(ev_t.end[k])
    span = int(ev_t.steps[e] - ev_t.steps[e - ev_t.window + 1])
    evidence: dict[str, object] = {"window_points": ev_t.window, "steps": span,
                                   "step_time_growth": r6(g_t), "step_time_rho": r6(rho_t)}
    if not steady(det, x_t, y_t, evidence):
        return None
    if ev_dm is not None:
        evidence.update({"memory_growth": r6(g_m), "memory_rho": r6(rho_m)})
        message = (f"Step time and memory are rising together (+{pct(g_t)} and +{pct(g_m)} "
                   f"over the last {span} steps): the recurrent state is probably not "
                   "detached, so each backward pass runs through the whole history.")
        causes = _DETACH_RANKED
    else:
        message = (f"Step time is rising steadily (+{pct(g_t)} over the last {span} steps, "
                   f"Spearman {fmt(rho_t)}): each backward pass grows, as when the recurrent "
                   "state is not detached between chunks.")
        causes = _TIME_ONLY_CAUSES
    return make_hit("state_detach", pos=int(ev_t.pos[e]), severity=det.severity,
                    step=int(ev_t.steps[e]), time=float(ev_t.times[e]),
                    metric=frame.roles.get("step_time"), message=message, evidence=evidence,
                    causes=causes, fixes=_DETACH_FIXES)


def steady(det: DetachConfig, x: np.ndarray, y: np.ndarray, evidence: dict[str, object]
           ) -> bool:
    """:func:`steady_rise` of a rising step time, noted in the evidence."""
    ok, late = steady_rise(x, y, det.time_min_late_slope)
    evidence["step_time_steady"] = ok
    evidence["step_time_late_slope"] = r6(late)
    return ok


def graph_hit(det: DetachConfig, ev_g: Evals, k: int) -> Hit | None:
    """The hit for the graph size rising in evaluation k, if it passes the bars."""
    _s, rho, g = ev_g.exact(k, det.graph_min_rho)
    if not (rho >= det.graph_min_rho and g >= det.graph_min_growth):
        return None
    e = int(ev_g.end[k])
    first = float(ev_g.values[e - ev_g.window + 1])
    last = float(ev_g.values[e])
    return make_hit(
        "state_detach", pos=int(ev_g.pos[e]), severity=det.severity, step=int(ev_g.steps[e]),
        time=float(ev_g.times[e]), metric=None,
        message=f"The autograd graph grows every step ({fmt(first)} -> {fmt(last)} over "
                f"{ev_g.window} points): the state is not detached, so the graph spans the "
                "whole history.",
        evidence={"graph_first": r6(first), "graph_last": r6(last), "growth": r6(g),
                  "rho": r6(rho), "window_points": ev_g.window},
        causes=_GRAPH_CAUSES, fixes=_DETACH_FIXES)


def memory_hit(mem: MemoryConfig, det: DetachConfig, frame: Frame, ev_m: Evals, ev_tl: Pushed,
               k: int, m_trend: tuple[float, float, float], cap: int | None = None
               ) -> tuple[Hit, bool]:
    """The hit for memory rising in evaluation k (its exact ``m_trend``): state_detach when
    the step time ramps up steadily with it, else memory_growth; and which. The step time is
    read over the window's step span, at most its last ``cap`` points (see
    :func:`~trainwatch.rules.detectors.growth.span_window`)."""
    slope, rho, g = m_trend
    x_t, y_t = span_window(ev_m, k, ev_tl, cap)
    n_t = x_t.shape[0]
    _slope, rho_t, g_t = trend_in_order(x_t, y_t, det.time_min_rho)
    e = int(ev_m.end[k])
    x0 = float(ev_m.values[e - ev_m.window + 1])
    span = int(ev_m.steps[e] - ev_m.steps[e - ev_m.window + 1])
    evidence: dict[str, object] = {
        "growth": r6(g), "rho": r6(rho), "slope_per_step": r6(slope), "first": r6(x0),
        "last": r6(float(ev_m.values[e])), "steps": span,
        "step_time_growth": r6(g_t) if n_t >= 5 and math.isfinite(g_t) else None}
    # a step time that rose in a step or a burst (load from other processes) is not the
    # detach ramp: the growth stays a memory leak
    time_up = n_t >= 5 and rho_t >= det.time_min_rho and g_t >= det.time_min_growth
    time_rising = time_up and steady(det, x_t, y_t, evidence)
    pos, step, time = int(ev_m.pos[e]), int(ev_m.steps[e]), float(ev_m.times[e])
    metric = frame.roles.get("memory")
    if time_rising:
        return make_hit(
            "state_detach", pos=pos, severity=det.severity, step=step, time=time,
            metric=metric,
            message=f"Memory and step time are rising together (+{pct(g)} and +{pct(g_t)} "
                    f"over the last {span} steps): the recurrent state is probably not "
                    "detached, so each backward pass runs through the whole history.",
            evidence=evidence, causes=_DETACH_RANKED, fixes=_DETACH_FIXES), True
    return make_hit(
        "memory_growth", pos=pos, severity=mem.severity, step=step, time=time, metric=metric,
        message=f"Memory has grown steadily by {pct(g)} over the last {span} steps "
                f"({fmt(x0)} -> {fmt(float(ev_m.values[e]))}, +{fmt(slope * 1000)} per 1k "
                "steps) while the step time "
                + ("rose only in a step or a burst, not steadily with it (another load on "
                   "the machine?)." if time_up else "is flat."),
        evidence=evidence,
        causes=_MEMORY_CAUSES, fixes=_MEMORY_FIXES), False
