"""``state_detach`` and ``memory_growth``: one analysis (see :mod:`trainwatch.rules.detectors.growth`), two
rule ids.

``state_detach`` is told (a) by the trainer's probe (``state_attached`` = 1: error at once),
(b) by the stream alone: step time and memory rising linearly together, or step time alone when
no memory is logged, or a ``graph_size`` series growing; and (c) by the console (see
:mod:`trainwatch.rules.builtin.console_error`). ``memory_growth`` is memory rising steadily while the step time
is flat, or rises only in a step or a burst (another process loading the machine: see
:func:`~trainwatch.rules.detectors.rise_shape.steady_rise`); if the step time ramps up steadily as well, the
same evidence is reported as ``state_detach``.

This module holds the analysis' state across frames and the order in which a frame's windows
are judged; :mod:`trainwatch.rules.builtin.growth_alerts` judges one window and builds its alert.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from functools import lru_cache

import numpy as np

from trainwatch.rules.builtin.growth_alerts import (
    graph_hit,
    memory_hit,
    probe_hits,
    trend_hit,
)
from trainwatch.rules.config.models import DetachConfig, MemoryConfig
from trainwatch.rules.detectors.episode import Episode
from trainwatch.rules.detectors.growth import (
    Evals,
    Pushed,
    WindowRho,
    flat_from,
    joint_candidates,
    span_growth,
)
from trainwatch.rules.detectors.trend_track import TrendTrack
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule

SPAN_CAP_WINDOWS = 16
"""A window reads at most this many of the longer window's points of the other series in its step
span (memory every 16 steps: a 200-point memory window's 3,200 step times are all read): what
each track holds for the other's windows is bounded by it, whatever the two series' rates."""

_EMPTY = Points("", np.empty(0, dtype=np.int64), np.empty(0), np.empty(0),
                np.empty(0, dtype=np.int64))


@lru_cache(maxsize=16)
def _side_names(probe: tuple[str, ...], graph: tuple[str, ...]) -> frozenset[str]:
    """The probe and graph series names as one set (once per config: every engine asks)."""
    return frozenset(probe + graph)


class GrowthAnalysis:
    """Runs once per frame for both rules; each rule takes its own hits."""

    fast = True
    """Skip what cannot matter: a frame of flat memory, windows in a flat tail (tests turn it
    off to compare)."""

    def __init__(self, mem: MemoryConfig, det: DetachConfig, ctx: Context) -> None:
        self.mem, self.det, self.ctx = mem, det, ctx
        self.span_cap = SPAN_CAP_WINDOWS * max(mem.window, det.window)
        """The most points of the other series a window reads in its step span (the last ones):
        each track holds at most this many for the other's windows (see
        :mod:`~trainwatch.rules.detectors.trend_track`), and the whole file is read the same way."""
        self._side_names = _side_names(det.probe_metrics, det.graph_metrics)
        """The series the probe and the graph size are read from."""
        self._frame: Frame | None = None
        self._hits: dict[str, list[Hit]] = {}
        self.rewind()

    def rewind(self) -> None:
        """A new segment: new tracks and probe episode (built here only, so an engine's
        construction builds each once rather than building then resetting them)."""
        mem, det = self.mem, self.det
        keep = max(mem.window, det.window)
        self.time_track = TrendTrack(keep, ranged=False, window=det.window, cap=self.span_cap)
        self.mem_track = TrendTrack(keep, window=mem.window, cap=self.span_cap)
        # memory windows read the step time over their step span (memory_hit), step-time windows
        # read the memory over theirs (the state_detach trend): each holds what the other reads
        self.time_track.read_by = self.mem_track
        self.mem_track.read_by = self.time_track
        self.graph_track = TrendTrack(det.graph_window)
        self.probe = Episode(rearm=10, cooldown=0)
        self.detach_fired = False
        self.trend_fired = False
        self.mem_fired = False
        self.mem_active = False
        self.time_from_step = math.inf
        """Step of the first step-time point a detach window can hold (after its warm-up)."""

    def hits(self, frame: Frame, rule: str) -> list[Hit]:
        if self._frame is not frame:
            self._frame = frame
            self._hits = self._run(frame)
        return self._hits.get(rule, [])

    # ------------------------------------------------------------------ analysis
    def _run(self, frame: Frame) -> dict[str, list[Hit]]:
        det, mem = self.det, self.mem
        time_pts = _finite(frame.role("step_time"))
        mem_pts = _finite(frame.role("memory"))
        has_mem = frame.roles.get("memory") is not None
        if det.enabled and not frame.series.keys().isdisjoint(self._side_names):
            probe_hits = self._probe(frame)
            graph = self._graph_points(frame)
        else:  # (the usual frame: no probe, no graph size; one lookup for both)
            probe_hits, graph = [], None
        if not (len(time_pts) or len(mem_pts) or probe_hits or (graph is not None and len(graph))):
            return {}  # no window ends without a new point (evaluation records, events)
        # what is still live in this segment: once state_detach has fired, a memory window can
        # only confirm it (memory_growth yields to it, and it does not repeat); once either
        # rule fired, the trend and graph windows stay silent (see the event loop below)
        trend_live = det.enabled and not (self.trend_fired or self.mem_fired)
        mem_live = mem.enabled and not (self.fast and self.detach_fired)
        if self.fast and not (trend_live or mem_live):
            # settled until a rewind (which resets the tracks): only the probe can still speak
            if probe_hits:
                self.detach_fired = True
            return {"state_detach": probe_hits} if probe_hits else {}
        k = det.warmup_points - self.time_track.count
        if self.time_from_step == math.inf and 0 <= k < len(time_pts):
            self.time_from_step = float(time_pts.steps[k])
        # skip quickly when nothing is near a threshold: memory that stays within half the
        # smallest growth bar over every window this frame ends cannot rise in any of them.
        # Only memory a window can hold counts: not the warm-up's (optimizer state appearing
        # after the first step), or the first frame of every run would take the long way.
        flat = False
        if has_mem:
            mm = self.mem_track.minmax_from(mem_pts, mem.warmup_points + 1, self.time_from_step)
            flat = mm is None or mm[1] - mm[0] < min(
                mem.min_growth, det.memory_min_growth) / 2 * abs(mm[0])
        if self.fast and flat and not (self.mem_active and mem_live) and self._graph_flat(graph):
            # no trend can be tested, memory and the graph cannot rise: the tracks only move on
            self.time_track.advance(time_pts)
            self.mem_track.advance(mem_pts)
            if graph is not None:
                self.graph_track.advance(graph)
            if probe_hits:
                self.detach_fired = True
            return {"state_detach": probe_hits} if probe_hits else {}
        # (the step time's reach before its points move: this frame's windows start there)
        mem_from = self.mem_track.held_from()
        tp = self.time_track.push(time_pts)
        mp = self.mem_track.push(mem_pts, mem_from)
        mv = mp.values
        ev_t = tp.evals(det.window, det.every, det.warmup_points)
        ev_m = mp.evals(mem.window, mem.every, mem.warmup_points)
        # windows inside a steady tail cannot reach the quick growth bars: their estimates are
        # not computed (see flat_from)
        m_flat = None if flat or not mv.shape[0] or not self.fast else flat_from(
            mv, min(mem.min_growth, det.memory_min_growth) / 2, min(mem.window, det.window))
        events: list[tuple[int, int, str, int]] = []  # (pos, order, kind, index)
        if det.enabled:
            events += [(h.pos, 0, "probe", i) for i, h in enumerate(probe_hits)]
            if ev_t.end.shape[0] and trend_live and not flat:
                joint = joint_candidates(ev_t, mp, det.memory_min_growth / 2,
                                         det.time_min_growth / 2) if has_mem and self.fast else None
                if joint is not None:
                    cand = joint  # both must rise
                elif has_mem:
                    # both must rise: the step time's estimate only where memory's passes
                    pre_m = span_growth(ev_t, mp, ev_t.q, 5, m_flat, self.span_cap)
                    cand = pre_m >= det.memory_min_growth / 2
                    if cand.any():
                        cand &= ev_t.growth(mask=cand) >= det.time_min_growth / 2
                elif det.time_only:
                    t_flat = (flat_from(tp.values, det.time_only_growth / 2, det.window)
                              if self.fast else None)
                    cand = ev_t.growth(t_flat) >= det.time_only_growth / 2
                else:
                    cand = np.zeros(ev_t.end.shape[0], dtype=bool)
                ks = cand.nonzero()[0]
                t_rho = WindowRho(ev_t, ks)
                events += zip(ev_t.pos[ev_t.end[ks]].tolist(), itertools.repeat(1),
                              itertools.repeat("trend"), ks.tolist())
            ev_g = None if graph is None else self.graph_track.push(graph).evals(
                det.graph_window, 1, 0)
            if ev_g is not None and ev_g.end.shape[0] and trend_live:
                cand = ev_g.growth() >= det.graph_min_growth / 2
                ks = cand.nonzero()[0]
                events += zip(ev_g.pos[ev_g.end[ks]].tolist(), itertools.repeat(2),
                              itertools.repeat("graph"), ks.tolist())
        else:
            ev_g = None
        mem_pre = m_rho = None
        if mem_live and ev_m.end.shape[0] and (self.mem_active or not flat):
            pre = ev_m.growth(m_flat) >= mem.min_growth / 2
            if pre.any() or self.mem_active:
                mem_pre = pre
                m_rho = WindowRho(ev_m, pre.nonzero()[0])
        out: dict[str, list[Hit]] = {"state_detach": [], "memory_growth": []}

        def other(kind: str, k: int) -> None:
            if kind == "probe":
                out["state_detach"].append(probe_hits[k])
                self.detach_fired = True
            elif kind == "trend" and not (self.trend_fired or self.mem_fired):
                hit = trend_hit(self.det, frame, ev_t, mp if has_mem else None, k, t_rho.get(k),
                                self.span_cap)
                if hit is not None:
                    out["state_detach"].append(hit)
                    self.trend_fired = self.detach_fired = True
            elif kind == "graph" and ev_g is not None and not (self.trend_fired or self.mem_fired):
                hit = graph_hit(self.det, ev_g, k)
                if hit is not None:
                    out["state_detach"].append(hit)
                    self.trend_fired = self.detach_fired = True

        if mem_pre is None or m_rho is None:
            for _pos, _o, kind, k in sorted(events):
                other(kind, k)
        elif not self.fast:
            # a window that passes the quick bar is judged (unless one already holds the
            # episode); one that fails ends the episode: only the first of a run can
            keep = mem_pre.copy()
            keep[0] = True
            keep[1:] |= mem_pre[:-1]
            ks = keep.nonzero()[0]
            events += zip(ev_m.pos[ev_m.end[ks]].tolist(), itertools.repeat(3),
                          np.where(mem_pre[ks], "mem", "mem_ok").tolist(), ks.tolist())
            for _pos, _o, kind, k in sorted(events):
                if kind == "mem_ok":
                    self.mem_active = False
                elif kind == "mem":
                    if not self.mem_active:
                        self._judge_memory(frame, ev_m, m_rho, tp, k, out)
                else:
                    other(kind, k)
        else:
            # the same, with the memory windows that can change something only: while an
            # episode holds, the next that fails the quick bar (it ends it); else the next that
            # passes (it is judged); none once state_detach has fired (memory_growth yields)
            ups = mem_pre.nonzero()[0].tolist()
            downs = (~mem_pre).nonzero()[0].tolist()
            m_pos = ev_m.pos[ev_m.end].tolist()
            cur = 0
            evs = [*sorted(events), (math.inf, 0, "", 0)]
            for at, (pos, _o, kind, k) in enumerate(evs):
                if self.detach_fired and (self.trend_fired or self.mem_fired):
                    # settled: no memory window can change anything (memory_growth yields to
                    # state_detach, which does not repeat), trend and graph windows are silent;
                    # only the probe's hits are left
                    for _p, _o2, kind2, k2 in evs[at:]:
                        if kind2 == "probe":
                            other(kind2, k2)
                    break
                while not self.detach_fired:  # the windows before this record (at it: after)
                    seq = downs if self.mem_active else ups
                    i = bisect_left(seq, cur)
                    if i == len(seq) or m_pos[seq[i]] >= pos:
                        break
                    cur = seq[i] + 1
                    if self.mem_active:
                        self.mem_active = False
                    else:
                        self._judge_memory(frame, ev_m, m_rho, tp, seq[i], out)
                if kind == "probe" or not (self.trend_fired or self.mem_fired):
                    other(kind, k)  # (else a trend or graph window: they are settled)
        return out

    def _judge_memory(self, frame: Frame, ev_m: Evals, m_rho: WindowRho, tp: Pushed, k: int,
                      out: dict[str, list[Hit]]) -> None:
        """Memory window k passed the quick bar while no episode holds: the exact test, and the
        hit (memory_growth, or state_detach if the step time ramps with it) into ``out``."""
        mem, det = self.mem, self.det
        rho = m_rho.get(k)
        if rho < mem.min_rho:
            return  # (the exact test below would say so: most windows stop here)
        m_trend = ev_m.exact(k, mem.min_rho, rho)
        if not (m_trend[1] >= mem.min_rho and m_trend[2] >= mem.min_growth):
            return
        self.mem_active = True
        if self.detach_fired:
            return  # the same growth, already diagnosed as state_detach
        hit, time_rising = memory_hit(mem, det, frame, ev_m, tp, k, m_trend, self.span_cap)
        if time_rising and det.enabled and not self.trend_fired:
            out["state_detach"].append(hit)
            self.trend_fired = self.detach_fired = True
        elif not time_rising:
            out["memory_growth"].append(hit)
            self.mem_fired = True

    def _probe(self, frame: Frame) -> list[Hit]:
        pts = _first_series(frame, self.det.probe_metrics)
        return [] if pts is None else probe_hits(self.det, self.probe, _finite(pts))

    def _graph_points(self, frame: Frame) -> Points | None:
        """The finite points of the first graph-size series the frame has."""
        pts = _first_series(frame, self.det.graph_metrics)
        return None if pts is None else _finite(pts)

    def _graph_flat(self, graph: Points | None) -> bool:
        """Whether no graph-size window this frame ends can reach half the growth bar (the
        quick estimate's bar: a ratio of two medians of its values)."""
        if graph is None:
            return True
        mm = self.graph_track.minmax_from(graph, 1, math.inf)
        return mm is None or (mm[0] > 0 and mm[1] - mm[0] < self.det.graph_min_growth / 2 * mm[0])


def _first_series(frame: Frame, names: tuple[str, ...]) -> Points | None:
    """The points of the first of ``names`` the frame has (a plain loop: this runs twice on
    every frame, where a generator costs more than the lookups)."""
    series = frame.series
    for n in names:
        pts = series.get(n)
        if pts is not None:
            return pts
    return None


def _finite(pts: Points | None) -> Points:
    return _EMPTY if pts is None or not len(pts) else pts.finite()


class StateDetachRule(Rule):
    id = "state_detach"
    roles_read = ("step_time", "memory")
    reads_unresolved = (("memory", "step_time"),)  # (no memory: step time alone, time_only)

    def __init__(self, cfg: DetachConfig, ctx: Context, analysis: GrowthAnalysis) -> None:
        super().__init__(cfg, ctx)
        self.analysis = analysis

    def update(self, frame: Frame) -> list[Hit]:
        hits = self.analysis.hits(frame, self.id)
        if hits:  # (the log is made when first asked for: most runs never fill it)
            log = self.ctx.log(self.id)
            for h in hits:
                log.add(h.pos, h.alert.step)
        return hits

    def rewind(self) -> None:
        self.analysis.rewind()


class MemoryGrowthRule(Rule):
    id = "memory_growth"

    def __init__(self, cfg: MemoryConfig, ctx: Context, analysis: GrowthAnalysis) -> None:
        super().__init__(cfg, ctx)
        self.analysis = analysis

    def update(self, frame: Frame) -> list[Hit]:
        return self.analysis.hits(frame, self.id)
