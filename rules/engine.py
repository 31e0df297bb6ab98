"""The rule engine: feeds batches to every enabled rule and collects their alerts.

    engine = RuleEngine(load_rules_config(), live=True)
    alerts = engine.feed(batch, now=time.time())  # main metric stream, batches in order; now:
                                                  # when they arrived (live stalls), optional
    alerts = engine.feed_rank(3, batch)  # per-rank streams
    alerts = engine.feed_console(lines, first_line)
    alerts = engine.tick(time.time())    # live: a silent stream
    alerts = engine.finish()             # end of a backfill

Each batch is cut at segment boundaries (a resumed run replays steps) into frames; every rule
sees every frame in a fixed order, and hits are sorted by record, so the alerts are identical
whether a file arrives point by point or all at once. After a rewind, an alert that already
fired for the replayed steps (same rule and metric) is not raised again. What happens with an
alert (toast, bell, file, exit code) is not the engine's business.
"""

from __future__ import annotations

import itertools
import time as _time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainwatch.batch import Event, RecordBatch
from trainwatch.roles import RoleTable
from trainwatch.rules.alert import Alert
from trainwatch.rules.base import Context, Frame, Hit, Points, Rule
from trainwatch.rules.config import RulesConfig, load_rules_config
from trainwatch.rules.console import ConsoleRule
from trainwatch.rules.custom import CustomRule
from trainwatch.rules.divergence import DivergenceRule
from trainwatch.rules.lr import LrExhaustedRule
from trainwatch.rules.memory import GrowthAnalysis, MemoryGrowthRule, StateDetachRule
from trainwatch.rules.models import RULE_IDS
from trainwatch.rules.nan_inf import NanInfRule
from trainwatch.rules.overfit import OverfitRule
from trainwatch.rules.plateau import PlateauRule
from trainwatch.rules.spikes import GradExplosionRule, LossSpikeRule, StepTimeOutlierRule
from trainwatch.rules.stalled import LearningStalledRule
from trainwatch.rules.straggler import RankStraggler
from trainwatch.rules.stream import StalledStreamRule
from trainwatch.rules.throughput import ThroughputDropRule
from trainwatch.rules.vanishing import GradVanishingRule

# Frame order: a rule that another one consults runs first (grad spikes before loss spikes
# and NaNs, state_detach before memory_growth and throughput_drop, overfit before plateau).
_FRAME_RULES: tuple[tuple[str, type[Rule] | None], ...] = (
    ("grad_explosion", GradExplosionRule),
    ("loss_spike", LossSpikeRule),
    ("step_time_outlier", StepTimeOutlierRule),
    ("nan_inf", NanInfRule),
    ("state_detach", None),  # with memory_growth: one GrowthAnalysis, two rule ids
    ("throughput_drop", ThroughputDropRule),
    ("learning_stalled", LearningStalledRule),
    ("grad_vanishing", GradVanishingRule),
    ("overfit", OverfitRule),
    ("plateau", PlateauRule),
    ("divergence", DivergenceRule),
    ("lr_exhausted", LrExhaustedRule),
    ("stalled_stream", StalledStreamRule),
)
_RANK = {rid: i for i, rid in enumerate(RULE_IDS)}


class RuleEngine:
    def __init__(self, cfg: RulesConfig | None = None, live: bool = True) -> None:
        self.cfg = cfg if cfg is not None else load_rules_config()
        self.live = live
        self.alerts: list[Alert] = []
        """Every alert raised so far, in order."""
        self._muted: set[str] = set()
        self._seen: set[tuple[str, str | None, int, str]] = set()
        self._names: set[str] = set()
        self._roles: dict[str, str] = {}
        self._wanted: set[str] = set()
        """Series names any rule reads (roles, probes, custom metrics)."""
        self._segments: list[int] = []
        """Segment of each alert in ``alerts`` (for the replay guard)."""
        self.last_step = 0
        self.last_time = float("nan")
        self._build()

    # ------------------------------------------------------------------ setup
    def _build(self) -> None:
        cfg = self.cfg
        plan = _plan(cfg)
        ctx = self.ctx = Context()
        rules: list[Rule] = []
        for cls, rule_cfg in plan.rules:
            if cls is GrowthAnalysis:  # one analysis, two rule ids
                det, mem = cfg.rules["state_detach"], cfg.rules["memory_growth"]
                growth = GrowthAnalysis(mem, det, ctx)  # type: ignore[arg-type]
                rules.append(StateDetachRule(det, ctx, growth))  # type: ignore[arg-type]
                rules.append(MemoryGrowthRule(mem, ctx, growth))  # type: ignore[arg-type]
            else:
                rules.append(cls(rule_cfg, ctx))
        self._rules = rules
        self._enabled = plan.enabled
        self._stream: StalledStreamRule | None = (
            rules[plan.stream] if plan.stream is not None else None)  # type: ignore[assignment]
        # built when a rank stream or a console log first comes (most runs have neither)
        self._straggler: RankStraggler | None = None
        self._console: ConsoleRule | None = None
        self._segment: int | None = None
        self._guard_until: int | None = None
        self._guard: set[tuple[str, str | None]] = set()

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return self.cfg.ids()

    def mute(self, rule_id: str) -> None:
        """Drop this rule's alerts from now on (its state keeps running, so unmuting does not
        release a backlog)."""
        if rule_id not in self.cfg.ids():
            raise ValueError(f"unknown rule id {rule_id!r} (known: {', '.join(self.cfg.ids())})")
        self._muted.add(rule_id)

    def unmute(self, rule_id: str) -> None:
        self._muted.discard(rule_id)

    # ------------------------------------------------------------------ feeding
    def feed(self, batch: RecordBatch, now: float | None = None) -> list[Alert]:
        """The main metric stream, batches in order.

        ``now``: when the batch arrived, on the clock :meth:`tick` is given. Live, a silence is
        then measured from the last record's arrival, not from its own timestamp (a writer's
        clock may be skewed, or an old log replayed). Without it, the timestamps serve (as they
        do in a backfill, and in :meth:`finish`)."""
        if batch.reset:
            self._build()
        n = batch.n_records
        if n == 0:
            return []
        out = self._feed(batch, n)
        if self.live and self._stream is not None:
            self._stream.arrived(now)
        return out

    def _feed(self, batch: RecordBatch, n: int) -> list[Alert]:
        if not self._names.issuperset(batch.series):
            self._names.update(batch.series)
            self._roles = _resolve(self.cfg.roles, self._names)
            self._wanted = self._interest()
        segs = batch.segments
        cuts = [0, n] if segs[0] == segs[-1] and not batch.rewinds else \
            [0, *(np.flatnonzero(np.diff(segs)) + 1).tolist(), n]
        ev_rows, ev_mask, widest = _event_rows(batch) if batch.events else (_NO_ROWS, None, None)
        out: list[Alert] = []
        for lo, hi in itertools.pairwise(cuts):
            if lo == hi:
                continue
            seg = int(segs[lo])
            if self._segment is not None and seg != self._segment:
                self._rewind(batch, seg)
            self._segment = seg
            frame = self._frame(batch, lo, hi, ev_rows, ev_mask, widest)
            self.ctx.frame = frame
            piece: list[Hit] = []
            for rule in self._rules:
                piece.extend(rule.update(frame))
            self.ctx.end_frame(frame)
            self.ctx.frame = None
            # recorded piece by piece: the replay guard of a later segment must see them
            out.extend(self._record(self._admit(piece)))
        self.last_step = int(batch.steps[-1])
        self.last_time = float(batch.times[-1])
        return out

    def feed_rank(self, rank: int, batch: RecordBatch, now: float | None = None) -> list[Alert]:
        """One rank's stream (``metrics.rank{N}.jsonl``): ``rank_straggler``. ``now`` (arrival
        time) is accepted as :meth:`feed` takes it; the rank rules do not read the clock."""
        if "rank_straggler" not in self._enabled:
            return []
        if self._straggler is None:
            self._straggler = RankStraggler(self.cfg.rules["rank_straggler"],  # type: ignore[arg-type]
                                            self.cfg.roles, live=self.live)
        return self._record(self._straggler.feed(rank, batch))

    def feed_console(self, lines: Sequence[str], first_line: int) -> list[Alert]:
        """Text of the run's console log: ``console_error`` and ``state_detach`` (c)."""
        if self._console is None:
            self._console = ConsoleRule(self.cfg.rules["console_error"],  # type: ignore[arg-type]
                                        self.cfg.rules["state_detach"])  # type: ignore[arg-type]
        return self._record(self._console.feed(lines, first_line, self.last_step, self.last_time))

    def tick(self, now: float) -> list[Alert]:
        """Live only: let ``stalled_stream`` see the clock."""
        if not self.live or self._stream is None:
            return []
        return self._record(self._stream.tick(now))

    def finish(self, now: float | None = None) -> list[Alert]:
        """End of a backfill: rank streams are compared (``rank_straggler``), and a file whose
        last record is old and has no ``run_end`` is a stalled stream."""
        hits: list[Hit] = []
        if "rank_straggler" in self._enabled and self._straggler is not None:  # (no rank: none)
            hits.extend(self._straggler.finish())
        if self._stream is not None:
            hits.extend(self._stream.finish(_time.time() if now is None else now))
        return self._record(hits)

    # ------------------------------------------------------------------ internals
    def _rewind(self, batch: RecordBatch, seg: int) -> None:
        for rule in self._rules:
            rule.rewind()
        self.ctx.rewind()
        rw = next((r for r in batch.rewinds if r.segment == seg), None)
        if rw is None:
            self._guard_until, self._guard = None, set()
            return
        # alerts already raised on the steps this segment replays are not raised again
        self._guard_until = rw.from_step
        self._guard = {
            (a.rule, a.metric) for a, s in zip(self.alerts, self._segments)
            if s < seg and rw.to_step <= a.step <= rw.from_step
        }

    def _admit(self, hits: list[Hit]) -> list[Hit]:
        hits.sort(key=lambda h: (h.pos, _RANK.get(h.alert.rule, len(_RANK))))
        out = []
        for h in hits:
            a = h.alert
            if (self._guard_until is not None and a.step <= self._guard_until
                    and (a.rule, a.metric) in self._guard):
                continue
            out.append(h)
        return out

    def _record(self, hits: list[Hit]) -> list[Alert]:
        out: list[Alert] = []
        for h in hits:
            a = h.alert
            if a.rule in self._muted or a.rule not in self._enabled:
                continue
            key = (a.rule, a.metric, a.step, a.message)
            if key in self._seen:  # a stream read again from the top (reset) repeats itself
                continue
            self._seen.add(key)
            out.append(a)
        self.alerts.extend(out)
        self._segments.extend([self._segment or 0] * len(out))
        return out

    def _interest(self) -> set[str]:
        names = set(self._roles.values())
        names.update(_plan(self.cfg).metrics)
        return names

    def _frame(self, batch: RecordBatch, lo: int, hi: int, ev_rows: np.ndarray,
               ev_mask: np.ndarray | None, widest: np.ndarray | None) -> Frame:
        """Records ``lo:hi`` of the batch. ``ev_rows``, ``ev_mask``, ``widest``: see
        :func:`_event_rows`."""
        whole = lo == 0 and hi == batch.n_records
        base = batch.first_record
        rec_pos = np.arange(base + lo, base + hi, dtype=np.int64)
        rec_pos.flags.writeable = False  # (shared with the series on every record, below)
        series: dict[str, Points] = {}
        got = batch.series
        made: dict[tuple[int, int], np.ndarray] = {}
        """Positions by (rows array, first point taken): series on the same records often share
        one rows array (a metric on every record shares the batch's), and their points then
        share one positions array. (The arrays are the batch's: their ids hold while it does.)"""
        n_metric = -1
        """Records that are not events, when the events are placed exactly (a metric on every
        one of them has them as its rows: events never carry metric values)."""
        pos_metric: np.ndarray | None = None
        if whole and ev_mask is not None:
            n_metric = hi - len(batch.events)
        for name in self._wanted:
            ch = got.get(name)
            if ch is None:
                continue
            rows, steps, values, times = ch.rows, ch.steps, ch.values, ch.times
            key = (id(rows), 0)
            if not whole:
                a, b = np.searchsorted(rows, (lo, hi)).tolist()
                key = (id(rows), a)
                if a == b:
                    continue
                rows, steps, values, times = rows[a:b], steps[a:b], values[a:b], times[a:b]
            elif rows.shape[0] == hi:  # (distinct sorted rows, as many as the records: all)
                series[name] = Points(name, steps, values, times, rec_pos)
                continue
            elif rows.shape[0] == n_metric:  # on every record but the events
                if pos_metric is None:
                    if widest is not None and widest.shape[0] == n_metric:  # (the same rows)
                        pos_metric = widest + base if base else widest
                    else:
                        pos_metric = rec_pos[~ev_mask]  # type: ignore[operator]
                    pos_metric.flags.writeable = False  # (shared by those series)
                series[name] = Points(name, steps, values, times, pos_metric)
                continue
            pos = made.get(key)
            if pos is None:
                pos = made[key] = rows.astype(np.int64)  # (cheaper than np.add with a dtype)
                if base:
                    pos += base
            series[name] = Points(name, steps, values, times, pos)
        events: tuple[Event, ...] = ()
        if whole and ev_mask is not None:  # every event placed, all inside
            is_event = ev_mask
            events = batch.events
        else:
            is_event = np.zeros(hi - lo, dtype=bool)
            if ev_rows.shape[0]:
                inside = [(r, ev) for r, ev in zip(ev_rows.tolist(), batch.events)
                          if lo <= r < hi]
                for r, _ev in inside:
                    is_event[r - lo] = True
                events = tuple(ev for _r, ev in inside)
        if whole:
            return Frame(int(batch.segments[0]), self._roles, series, events, batch.steps,
                         batch.times, rec_pos, is_event)
        return Frame(int(batch.segments[lo]), self._roles, series, events, batch.steps[lo:hi],
                     batch.times[lo:hi], rec_pos, is_event)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What :meth:`RuleEngine._build` builds for one config (the same for every engine of a
    backfill of many runs)."""

    rules: tuple[tuple[type[Rule | GrowthAnalysis], object], ...]
    """(rule class, its config) in frame order; GrowthAnalysis stands for the two rules it
    serves (state_detach, then memory_growth)."""
    enabled: frozenset[str]
    stream: int | None
    """Index of stalled_stream among the built rules."""
    metrics: frozenset[str]
    """Series read by name whatever the roles (nan_inf's metrics, state_detach's probes, custom
    rules' metrics): with the resolved roles' series, what a frame holds."""


_PLANS: dict[int, tuple[RulesConfig, _Plan]] = {}
"""Plans by config, as :data:`_RESOLVED` keeps roles (an entry holds its config, so the id in
its key is never reused; any thread)."""


def _plan(cfg: RulesConfig) -> _Plan:
    hit = _PLANS.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    rules: list[tuple[type[Rule | GrowthAnalysis], object]] = []
    stream: int | None = None
    n = 0
    for rid, cls in _FRAME_RULES:
        if cls is None:
            if cfg.rules["state_detach"].enabled or cfg.rules["memory_growth"].enabled:
                rules.append((GrowthAnalysis, None))
                n += 2
        elif cfg.rules[rid].enabled:
            if cls is StalledStreamRule:
                stream = n
            rules.append((cls, cfg.rules[rid]))
            n += 1
    rules += [(CustomRule, c) for c in cfg.custom if c.enabled]
    enabled = frozenset({rid for rid in RULE_IDS if cfg.rules[rid].enabled}
                        | {c.id for c in cfg.custom if c.enabled})
    metrics = {*cfg.rules["nan_inf"].metrics,  # type: ignore[attr-defined]
               *cfg.rules["state_detach"].probe_metrics,  # type: ignore[attr-defined]
               *cfg.rules["state_detach"].graph_metrics}  # type: ignore[attr-defined]
    metrics.update(c.metric for c in cfg.custom)
    plan = _Plan(tuple(rules), enabled, stream, frozenset(metrics))
    if len(_PLANS) >= 64:
        _PLANS.clear()
    _PLANS[id(cfg)] = (cfg, plan)
    return plan


_RESOLVED: dict[tuple[int, frozenset[str]], tuple[RoleTable, dict[str, str]]] = {}
"""Roles resolved from a table and a set of names (every engine of a backfill of many runs with
the same metrics asks the same question). Shared by every engine, on any thread: a lookup and a
store are single dict operations (atomic under the GIL), an entry holds its table so the id in
its key is never reused, and callers get a copy of the roles."""


def _resolve(table: RoleTable, names: set[str]) -> dict[str, str]:
    """``table.resolve(names)``, remembered: a pure function of the table and the set of names
    (the table breaks ties by name, not by the order it is given them)."""
    seq = frozenset(names)
    key = (id(table), seq)
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is table:  # (the table held: its id is not reused)
        return dict(hit[1])
    roles = table.resolve(seq)
    if len(_RESOLVED) >= 256:
        _RESOLVED.clear()
    _RESOLVED[key] = (table, roles)
    return dict(roles)


_NO_ROWS = np.empty(0, dtype=np.int64)


def _event_rows(batch: RecordBatch) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The record row of each event, in order (-1: not placed); when every event is placed
    exactly, the batch's mask of event records (else None); and the rows of the series on most
    records, as int64 (None when the batch has no series).

    Events carry no row, but they are the records that no series and no note covers (as are
    records with no usable value, rarely): when the counts agree they map one to one, and the
    uncovered records' mask is the event mask; else each event takes the next such record with
    its step and time."""
    n_ev = len(batch.events)
    free = np.ones(batch.n_records, dtype=bool)
    for row, _f in batch.notes:
        free[row] = False
    # the series on most records usually leaves exactly the events uncovered: events are never
    # covered, so when the counts agree the others need not be marked (indices as int64: numpy
    # converts int32 ones first, and slower)
    chunks = list(batch.series.values())
    widest = None
    if chunks:
        widest = max(chunks, key=lambda ch: ch.rows.shape[0]).rows.astype(np.int64)
        free[widest] = False
    cand = free.nonzero()[0]
    if cand.shape[0] != n_ev and len(chunks) > 1:
        for ch in chunks:
            free[ch.rows] = False
        cand = free.nonzero()[0]
    if cand.shape[0] == n_ev:
        return cand, free, widest
    rows: list[int] = []
    j, c = 0, cand.tolist()
    for ev in batch.events:
        while j < len(c) and not (int(batch.steps[c[j]]) == ev.step
                                  and float(batch.times[c[j]]) == ev.time):
            j += 1
        if j == len(c):
            rows.append(-1)  # cannot place it (should not happen): it is left out of frames
            continue
        rows.append(c[j])
        j += 1
    return np.asarray(rows, dtype=np.int64), None, widest
