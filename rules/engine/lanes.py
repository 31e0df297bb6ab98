"""Lanes: the loss rules run again on every other member of the loss families.

Roles name one series per job: the run's ``loss`` and ``val_loss``. A run often logs more that
a person reads the same way: six HF eval sets (``eval_g0_loss`` .. ``eval_g5_loss``), a GAN's
``train_disc_loss`` and ``train_gen_loss``, a detector's ``loss_cls`` and ``loss_bbox``. Each
such series (:mod:`trainwatch.families`) gets a *lane*: the role map of the run with that one
role pointed at the member (and, for a val series, ``loss`` pointed at the train series it pairs
with), its own :class:`~trainwatch.rules.engine.base.Context`, and its own instances of the rules
that judge that role (``Rule.lane_role``). A lane only speaks about its member: its rules' alerts
about other series (the train loss that a val lane's plateau also reads) are the main lane's.

Beside a main series, some rules leave the members alone (``Rule.lane_beside_main``): a loss's
components are judged for spikes and NaN, but an auxiliary term that starts near 0 and grows, or
stays flat, is no divergence and no stall while the total learns.

A member is not a lane when it is another reduction of the main series (Lightning's
``train_loss_epoch`` beside ``train_loss_step``): the same quantity told twice.

A lane starts at the record its member first appears at (the engine cuts a frame there, as it
does where a role moves), with the main lane's history of the roles they share, so its alerts
do not depend on how the stream was batched.

**One cause is told once.** The members of a family share their causes: six eval sets that
overfit together are one alert that names the six, and a bad batch that spikes ``loss_cls`` and
``loss_bbox`` at one record is one spike. So the same rule's hits at one record are one alert,
and an alert also names the siblings that its rule says are in the same state at that record
(``Rule.also_at``); a sibling named so does not raise that rule's next alert itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, replace

from trainwatch.families import FamilyTable, SeriesFamily
from trainwatch.rules.engine.base import Context, Frame, Hit, Rule

MAX_NAMED = 8
"""Most sibling series an alert names (a run with 40 eval sets names the first 8 and a count)."""

LANE_FAMILIES = {"loss": "train_loss", "val_loss": "val_loss"}
"""The roles that have lanes, and the family whose members each judges."""


@dataclass(frozen=True)
class LaneSpec:
    """What a lane is: its member, the role the member plays there, and how the lane's role map
    differs from the run's."""

    member: str
    role: str
    overrides: tuple[tuple[str, str | None], ...]
    """(role, series) pairs put over the run's roles (None: the lane has no such series)."""
    beside_main: bool = False
    """The role has its own series in the run (the member is one more: a loss component)."""

    def roles(self, run_roles: Mapping[str, str]) -> dict[str, str]:
        out = dict(run_roles)
        for role, name in self.overrides:
            if name is None:
                out.pop(role, None)
            else:
                out[role] = name
        return out


def _same_quantity(f: SeriesFamily, g: SeriesFamily | None) -> bool:
    """Two series of one quantity, reduced differently (``val_loss_epoch`` and ``val_loss``)."""
    return g is not None and (f.split, f.set, f.base.lower()) == (g.split, g.set, g.base.lower())


def lane_specs(names: Iterable[str], roles: Mapping[str, str], table: FamilyTable,
               lane_roles: Iterable[str]) -> dict[str, LaneSpec]:
    """The lanes of a run whose series are ``names`` and roles ``roles``, by member name.
    ``lane_roles``: the roles some enabled rule judges in lanes."""
    wanted = set(lane_roles)
    if not wanted:
        return {}
    fams = table.classify_run(names)
    mains = {role: fams.get(roles[role]) for role in LANE_FAMILIES if role in roles}
    out: dict[str, LaneSpec] = {}
    for name in sorted(fams):
        f = fams[name]
        for role, family in LANE_FAMILIES.items():
            if role not in wanted or f.family != family or name in roles.values():
                continue
            if _same_quantity(f, mains.get(role)):
                continue
            overrides: tuple[tuple[str, str | None], ...] = ((role, name),)
            if role == "val_loss":
                overrides += (("loss", f.pair or roles.get("loss")),)
            out[name] = LaneSpec(name, role, overrides, role in roles)
    return out


class Lane:
    """One member's rules and their context."""

    def __init__(self, spec: LaneSpec, classes: Sequence[tuple[type[Rule], object]],
                 main: Context, main_roles: Mapping[str, str]) -> None:
        self.spec = spec
        ctx = self.ctx = Context(main.config, main.live)
        # the roles the lane shares with the main lane come with their history so far
        # (the member's own role, and a val lane's train series when it is not the main one,
        # start empty)
        own = {role for role, name in spec.overrides if name != main_roles.get(role)}
        for role, hist in main._hist.items():
            if role not in own:
                ctx._hist[role] = deepcopy(hist)
                ctx.run_points[role] = main.run_points.get(role, 0)
        shared_roles = set(main_roles) - own
        for key, state in main.shared.items():
            if isinstance(key, tuple) and key[:1] and key[0] in shared_roles:
                ctx.shared[key] = deepcopy(state)
        self.rules = [cls(cfg, ctx) for cls, cfg in classes if cls.lane_role == spec.role
                      and (cls.lane_beside_main or not spec.beside_main)]

    def update(self, frame: Frame) -> list[Hit]:
        lane_frame = replace(frame, roles=self.spec.roles(frame.roles))
        self.ctx.frame = lane_frame
        member = self.spec.member
        hits = [h for rule in self.rules for h in rule.update(lane_frame)
                if h.alert.metric == member]
        self.ctx.end_frame(lane_frame)
        self.ctx.frame = None
        return hits

    def rewind(self) -> None:
        for rule in self.rules:
            rule.rewind()
        self.ctx.rewind()

    def rule(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)


class Lanes:
    """Every lane of a run, kept in step with the names the engine has seen."""

    def __init__(self, classes: Sequence[tuple[type[Rule], object]], table: FamilyTable) -> None:
        self.classes = [(cls, cfg) for cls, cfg in classes if cls.lane_role is not None]
        self.table = table
        self.roles_judged = frozenset(cls.lane_role for cls, _cfg in self.classes)
        self.lanes: dict[str, Lane] = {}
        self.told: dict[tuple[str, str], set[str]] = {}
        """(rule id, lane role) -> members an alert of that rule named as siblings, whose own
        next alert of it is not raised."""

    def losses(self, names: Iterable[str]) -> tuple[str, ...]:
        """Every series of a loss family among ``names``, in name order."""
        return tuple(sorted(n for n, f in self.table.classify_run(names).items() if f.is_loss))

    def specs(self, names: Iterable[str], roles: Mapping[str, str]) -> dict[str, LaneSpec]:
        return lane_specs(names, roles, self.table, self.roles_judged)

    def series(self) -> set[str]:
        """Every series a lane reads in place of the run's."""
        return {name for lane in self.lanes.values() for _r, name in lane.spec.overrides
                if name is not None}

    def sync(self, names: Iterable[str], roles: Mapping[str, str], main: Context) -> None:
        """Lanes for the run's members now: new ones start, changed ones start over, gone ones
        go."""
        specs = self.specs(names, roles)
        self.lanes = {m: (lane if (lane := self.lanes.get(m)) is not None and lane.spec == spec
                          else Lane(spec, self.classes, main, roles))
                      for m, spec in specs.items()}

    def update(self, frame: Frame) -> list[Hit]:
        return [h for lane in self.lanes.values() for h in lane.update(frame)]

    def rewind(self) -> None:
        for lane in self.lanes.values():
            lane.rewind()
        self.told.clear()

    def tell(self, hits: list[Hit], main_rules: Sequence[Rule], roles: Mapping[str, str]
             ) -> list[Hit]:
        """A frame's hits (in record order) with each cause told once (see the module's
        docstring)."""
        if not self.lanes:
            return hits
        out: list[Hit] = []
        at: dict[tuple[int, str, str], int] = {}
        """(record, rule id, role) -> index in ``out`` of the alert told there."""
        for h in hits:
            a = h.alert
            role = self._role_of(a.metric, roles)
            if role is None:
                out.append(h)
                continue
            named = self.told.get((a.rule, role))
            if named and a.metric in named:
                named.discard(a.metric)  # (its state was told in a sibling's alert)
                continue
            k = at.get((h.pos, a.rule, role))
            if k is not None:
                out[k] = _naming(out[k], [a.metric])  # type: ignore[list-item]
                continue
            also = [m for m, rule in self._siblings(a.rule, role, main_rules, roles)
                    if m != a.metric and rule.also_at(h.pos)]
            if also:
                h = _naming(h, also)
                self.told.setdefault((a.rule, role), set()).update(also)
            at[(h.pos, a.rule, role)] = len(out)
            out.append(h)
        return out

    def _role_of(self, metric: str | None, roles: Mapping[str, str]) -> str | None:
        lane = self.lanes.get(metric) if metric is not None else None
        if lane is not None:
            return lane.spec.role
        return next((r for r in self.roles_judged if metric is not None and roles.get(r) == metric),
                    None)

    def _siblings(self, rule_id: str, role: str, main_rules: Sequence[Rule],
                  roles: Mapping[str, str]) -> list[tuple[str, Rule]]:
        """(series, the rule judging it) of every member of ``role``'s family, the main series
        first."""
        out: list[tuple[str, Rule]] = []
        main = roles.get(role)
        rule = next((r for r in main_rules if r.id == rule_id), None)
        if main is not None and rule is not None:
            out.append((main, rule))
        for name, lane in self.lanes.items():
            lane_rule = lane.rule(rule_id) if lane.spec.role == role else None
            if lane_rule is not None:
                out.append((name, lane_rule))
        return out


def _naming(hit: Hit, names: Sequence[str]) -> Hit:
    """``hit`` with its alert naming ``names`` too (in its message and as ``also`` evidence)."""
    a = hit.alert
    also = [*a.evidence.get("also", ()), *names]
    shown = ", ".join(also[:MAX_NAMED]) + (f" and {len(also) - MAX_NAMED} more"
                                           if len(also) > MAX_NAMED else "")
    base = a.message.split(" The same in ")[0]
    return Hit(hit.pos, replace(a, message=f"{base} The same in {shown}.",
                                evidence={**a.evidence, "also": also}))
