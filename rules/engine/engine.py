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
fired for the replayed steps (same rule and metric) is not raised again. When a role moves to
another series mid-run (a name ranked higher for it appears), the rules built on it start over
on the new series. What happens with an alert (toast, bell, file, exit code) is not the
engine's business.
"""

from __future__ import annotations

import itertools
import time as _time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.families import DEFAULT_FAMILIES, FamilyTable
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.rules.builtin.console_error import ConsoleRule
from trainwatch.rules.builtin.custom import CustomRule
from trainwatch.rules.builtin.divergence import DivergenceRule
from trainwatch.rules.builtin.grad_explosion import GradExplosionRule
from trainwatch.rules.builtin.grad_vanishing import GradVanishingRule
from trainwatch.rules.builtin.learning_stalled import LearningStalledRule
from trainwatch.rules.builtin.loss_spike import LossSpikeRule
from trainwatch.rules.builtin.lr_exhausted import LrExhaustedRule
from trainwatch.rules.builtin.memory_growth import MemoryGrowthRule
from trainwatch.rules.builtin.nan_inf import NanInfRule
from trainwatch.rules.builtin.overfit import OverfitRule
from trainwatch.rules.builtin.plateau import PlateauRule
from trainwatch.rules.builtin.rank_straggler import RankStraggler
from trainwatch.rules.builtin.run_crashed import RunCrashedRule
from trainwatch.rules.builtin.stalled_stream import StalledStreamRule
from trainwatch.rules.builtin.state_detach import StateDetachRule
from trainwatch.rules.builtin.step_time_outlier import StepTimeOutlierRule
from trainwatch.rules.builtin.throughput_drop import ThroughputDropRule
from trainwatch.rules.config.loading import RulesConfig, load_rules_config
from trainwatch.rules.config.models import RULE_IDS
from trainwatch.rules.engine.alert import Alert
from trainwatch.rules.engine.base import Context, Hit, Rule
from trainwatch.rules.engine.framing import NO_ROWS, event_rows, frame_of
from trainwatch.rules.engine.lanes import Lanes

# Every built-in rule, in the order a frame is given to them: a rule that another one consults
# runs first (grad spikes before loss spikes and NaNs, state_detach before memory_growth and
# throughput_drop, overfit before plateau, state_detach before run_crashed). The rank and
# console rules read no frames.
_RULES: tuple[tuple[str, type[Rule]], ...] = (
    ("grad_explosion", GradExplosionRule),
    ("loss_spike", LossSpikeRule),
    ("step_time_outlier", StepTimeOutlierRule),
    ("nan_inf", NanInfRule),
    ("state_detach", StateDetachRule),
    ("memory_growth", MemoryGrowthRule),
    ("throughput_drop", ThroughputDropRule),
    ("learning_stalled", LearningStalledRule),
    ("grad_vanishing", GradVanishingRule),
    ("overfit", OverfitRule),
    ("plateau", PlateauRule),
    ("divergence", DivergenceRule),
    ("lr_exhausted", LrExhaustedRule),
    ("rank_straggler", RankStraggler),
    ("console_error", ConsoleRule),
    ("run_crashed", RunCrashedRule),
    ("stalled_stream", StalledStreamRule),
)
_RANK = {rid: i for i, rid in enumerate(RULE_IDS)}


def _hit_order(h: Hit) -> tuple[int, int]:
    """A frame's hits sort by record, then by rule id in RULE_IDS' order (custom rules last)."""
    return h.pos, _RANK.get(h.alert.rule, len(_RANK))


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
        self._losses: tuple[str, ...] = ()
        """Every loss series of the run (``Frame.losses``)."""
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
        ctx = self.ctx = Context(cfg, self.live)
        rules = [cls(rule_cfg, ctx) for cls, rule_cfg in plan.rules]
        self._rules = rules
        self._lanes = Lanes(plan.rules, DEFAULT_FAMILIES if cfg.roles is DEFAULT_ROLES
                            else FamilyTable(cfg.roles))
        self._fallbacks = plan.fallbacks
        self._metrics = frozenset(name for rule in rules for name in rule.names_read())
        self._enabled = plan.enabled
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
        if self.live:
            for rule in self._rules:
                rule.arrived(now)
        return out

    def _feed(self, batch: RecordBatch, n: int) -> list[Alert]:
        segs = batch.segments
        cuts = [0, n] if segs[0] == segs[-1] and not batch.rewinds else \
            [0, *(np.flatnonzero(np.diff(segs)) + 1).tolist(), n]
        late: dict[int, list[str]] = {}
        if not self._names.issuperset(batch.series):
            late = self._new_names(batch)
            if late:
                cuts = sorted({*cuts, *late})
        ev_rows = event_rows(batch) if batch.events else NO_ROWS
        out: list[Alert] = []
        for lo, hi in itertools.pairwise(cuts):
            if lo == hi:
                continue
            names = late.pop(lo, None)
            if names:
                self._see(names)
            seg = int(segs[lo])
            if self._segment is not None and seg != self._segment:
                self._rewind(batch, seg)
            self._segment = seg
            frame = frame_of(batch, lo, hi, self._wanted, self._roles, ev_rows, self._losses)
            self.ctx.frame = frame
            piece: list[Hit] = []
            for rule in self._rules:
                piece.extend(rule.update(frame))
            self.ctx.end_frame(frame)
            self.ctx.frame = None
            if self._lanes.lanes:
                piece.extend(self._lanes.update(frame))
            if piece:  # recorded piece by piece: the replay guard of a later segment must see them
                told = self._lanes.tell(self._admit(piece), self._rules, frame.roles)
                out.extend(self._record(told))
        self.last_step = int(batch.steps[-1])
        self.last_time = float(batch.times[-1])
        return out

    def _new_names(self, batch: RecordBatch) -> dict[int, list[str]]:
        """Take the batch's series names not seen before. Roles are resolved from the names seen
        so far, so fed record by record a name counts from the record it first appears at; read
        in bigger batches, it must count from there too where that can change what a rule
        reads: where it moves a role to another series, or resolves a role whose absence a rule
        reads while the series it reads instead is there (``Rule.reads_unresolved``: throughput
        from the step time until a throughput series comes). Those names are returned by the record they first appear at (the frame
        is cut there); the others are seen at once: before their first point, a role that is
        resolved but has no point reads the same as an unresolved one (a frame holds only
        series with points)."""
        known = self._names
        first: list[tuple[str, int]] = []
        """(name, its first record) of the new names."""
        first_any: int | None = None
        """The batch's first record with a series point."""
        for name, ch in batch.series.items():
            rows = ch.rows
            r = int(rows[0]) if rows.shape[0] else -1
            if r >= 0 and (first_any is None or r < first_any):
                first_any = r
            if name not in known:
                first.append((name, r))
        if first_any is None:
            first_any = 0
        # the names first at or before the batch's first series point (or with no point) are
        # seen at once: no series point comes before them
        now = [name for name, r in first if r <= first_any]
        if len(now) == len(first):  # (the usual first batch: one resolution)
            self._see(now)
            return {}
        by_row: dict[int, list[str]] = {}
        for name, r in first:
            if r > first_any:
                by_row.setdefault(r, []).append(name)
        late: dict[int, list[str]] = {}
        names = known | set(now)
        roles = self.cfg.roles.resolve(names) if now else self._roles
        lanes = self._lanes.specs(names, roles)
        for r in sorted(by_row):
            new = by_row[r]
            names.update(new)
            after = self.cfg.roles.resolve(names)
            after_lanes = self._lanes.specs(names, after)
            # (a role never goes unresolved as names come: after's roles hold roles')
            if not roles.items() <= after.items() or any(
                    role in after and role not in roles and not instead.isdisjoint(roles)
                    for role, instead in self._fallbacks.items()) or after_lanes != lanes:
                late[r] = new
            else:
                now += new
            roles, lanes = after, after_lanes
        if now:
            # with no name left for later, the last resolution is that of every name
            self._see(now, None if late else roles)
        return late

    def _see(self, names: list[str], roles: dict[str, str] | None = None) -> None:
        """Take ``names`` as seen; ``roles``: their resolution with those already seen, when
        known."""
        self._names.update(names)
        before = self._roles
        self._roles = self.cfg.roles.resolve(self._names) if roles is None else roles
        if not before.items() <= self._roles.items():  # (a role never goes unresolved)
            self._restart({role for role, name in before.items()
                           if self._roles.get(role) != name})
        self._lanes.sync(self._names, self._roles, self.ctx)
        self._losses = self._lanes.losses(self._names)
        self._wanted = self._interest()

    def _restart(self, moved: set[str]) -> None:
        """Roles that moved to another series: the rules built on them, and the context's
        history of them, start over (see ``Rule.roles_read``). The engine cuts a frame where a
        role moves (``_new_names``), so this happens at the same record however the stream is
        batched."""
        for rule in self._rules:
            if not moved.isdisjoint(rule.roles_read):
                rule.rewind()
        for role in moved:
            self.ctx.forget(role)

    def feed_rank(self, rank: int, batch: RecordBatch, now: float | None = None) -> list[Alert]:
        """One rank's stream (``metrics.rank{N}.jsonl``): ``rank_straggler``. ``now`` (arrival
        time) is accepted as :meth:`feed` takes it; the rank rules do not read the clock."""
        return self._record([h for rule in self._rules for h in rule.update_rank(rank, batch)])

    def feed_console(self, lines: Sequence[str], first_line: int) -> list[Alert]:
        """Text of the run's console log: ``console_error`` and ``state_detach`` (c)."""
        return self._record([h for rule in self._rules for h in rule.update_console(
            lines, first_line, self.last_step, self.last_time)])

    def tick(self, now: float) -> list[Alert]:
        """Live only: let the rules see the clock (``stalled_stream``)."""
        if not self.live:
            return []
        return self._record([h for rule in self._rules for h in rule.tick(now)])

    def finish(self, now: float | None = None) -> list[Alert]:
        """End of a backfill: rank streams are compared (``rank_straggler``), and a file whose
        last record is old and has no ``run_end`` is a stalled stream."""
        now = _time.time() if now is None else now
        return self._record([h for rule in self._rules for h in rule.finish(now)])

    # ------------------------------------------------------------------ internals
    def _rewind(self, batch: RecordBatch, seg: int) -> None:
        for rule in self._rules:
            rule.rewind()
        self.ctx.rewind()
        self._lanes.rewind()
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
        """The frame's hits in record order (rules in frame order at one record), less those the
        replay guard holds back."""
        if len(hits) > 1:
            hits.sort(key=_hit_order)
        until = self._guard_until
        if until is None:
            return hits
        guard = self._guard
        return [h for h in hits
                if not (h.alert.step <= until and (h.alert.rule, h.alert.metric) in guard)]

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
        names.update(self._metrics)
        names.update(self._lanes.series())
        names.update(self._losses)
        return names

@dataclass(frozen=True, slots=True)
class _Plan:
    """What :meth:`RuleEngine._build` builds for one config."""

    rules: tuple[tuple[type[Rule], object], ...]
    """(rule class, its config) in frame order."""
    enabled: frozenset[str]
    fallbacks: Mapping[str, frozenset[str]]
    """Role -> the roles rules read instead while it is unresolved (``Rule.reads_unresolved``,
    a class attribute)."""


def _plan(cfg: RulesConfig) -> _Plan:
    rules: list[tuple[type[Rule], object]] = [
        (cls, cfg.rules[rid]) for rid, cls in _RULES
        if any(cfg.rules[r].enabled for r in (rid, *cls.also_raises))]
    rules += [(CustomRule, c) for c in cfg.custom if c.enabled]
    enabled = frozenset({rid for rid in RULE_IDS if cfg.rules[rid].enabled}
                        | {c.id for c in cfg.custom if c.enabled})
    fallbacks: dict[str, set[str]] = {}
    for cls, _c in rules:
        for role, instead in cls.reads_unresolved:
            fallbacks.setdefault(role, set()).add(instead)
    return _Plan(tuple(rules), enabled, {role: frozenset(v) for role, v in fallbacks.items()})
