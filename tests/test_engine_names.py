"""How the engine takes series names it has not seen (``RuleEngine._new_names``), against the
plain reference: which names wait for the record they first appear at (the frame is cut there),
and the names, roles and series of interest afterwards, for batches whose names first appear at
random records; and the roles read instead of an unresolved one, kept per config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainwatch.batch import RecordBatch, SeriesChunk
from trainwatch.families import FamilyTable, classify_run
from trainwatch.roles import RoleTable
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.engine.lanes import lane_specs

CFG = load_rules_config()

NAMES = ("train_loss", "loss", "step_time", "throughput", "memory", "lr", "val_loss", "acc",
         "gnorm", "grad_norm")
"""Names that move a role to a better named series (train_loss -> loss, gnorm -> grad_norm),
that resolve a role read from another while unresolved (throughput and memory, from the step
time), and that change nothing a rule reads."""


def _reference(known: set[str], roles_now: dict[str, str], fallbacks: dict[str, set[str]],
               firsts: dict[str, int | None], table: RoleTable
               ) -> tuple[dict[int, list[str]], set[str]]:
    """(names cut at their first record, by that record; the names seen afterwards), the plain
    way: the new names in order of their first record; a group first after the batch's first
    series point waits for its record where it moves a role, resolves one whose fallback is
    resolved, or changes the run's lanes (a loss series the loss rules judge apart). ``firsts``:
    each series' first row in the batch (None: no point)."""

    def lanes(names: set[str], roles: dict[str, str]) -> dict:
        return lane_specs(names, roles, FamilyTable(table), ("loss", "val_loss"))

    first_any = min((r for r in firsts.values() if r is not None), default=0)
    by_row: dict[int, list[str]] = {}
    for name, r in firsts.items():
        if name not in known:
            by_row.setdefault(0 if r is None else r, []).append(name)
    late: dict[int, list[str]] = {}
    now: list[str] = []
    names = set(known)
    roles: dict[str, str] | None = None
    for r in sorted(by_row):
        new = by_row[r]
        if r <= first_any:
            now += new
            names.update(new)
            continue
        if roles is None:
            roles = table.resolve(names) if now else roles_now
        names.update(new)
        after = table.resolve(names)
        if any(after.get(role) != name if name is not None
               else not fallbacks.get(role, set()).isdisjoint(roles)
               for role, name in ((role, roles.get(role)) for role in after)) \
                or lanes(names - set(new), roles) != lanes(names, after):
            late[r] = new
        else:
            now += new
        roles = after
    return late, set(known) | set(now)


def _batch(rng: np.random.Generator, first_record: int, n: int = 40
           ) -> tuple[RecordBatch, dict[str, int | None]]:
    """A batch of ``n`` records with some of NAMES, each from a random record on (or with no
    point at all, now and then)."""
    picked = rng.choice(len(NAMES), size=int(rng.integers(1, len(NAMES) + 1)), replace=False)
    series: dict[str, SeriesChunk] = {}
    firsts: dict[str, int | None] = {}
    for k in picked:
        name = NAMES[int(k)]
        lo = int(rng.integers(0, n)) if rng.random() < 0.6 else int(rng.integers(0, 3))
        rows = np.arange(lo, n, dtype=np.int32) if rng.random() > 0.08 else \
            np.empty(0, dtype=np.int32)
        m = rows.shape[0]
        series[name] = SeriesChunk(rows, rows.astype(np.int64) + first_record,
                                   rng.random(m), rows.astype(np.float64),
                                   np.zeros(m, dtype=np.int32))
        firsts[name] = int(rows[0]) if m else None
    steps = np.arange(first_record, first_record + n, dtype=np.int64)
    return RecordBatch("m.jsonl", first_record, steps, steps.astype(np.float64),
                       np.zeros(n, dtype=np.int32), series), firsts


@pytest.mark.parametrize("seed", range(40))
def test_new_names_match_the_plain_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    e = RuleEngine(CFG, live=False)
    table = CFG.roles
    for i in range(3):  # a fresh engine's first batch, then batches with names seen before
        b, firsts = _batch(rng, 40 * i)
        known, roles_now = set(e._names), dict(e._roles)
        late, seen = _reference(known, roles_now, {r: set(v) for r, v in e._fallbacks.items()},
                                firsts, table)
        assert e._new_names(b) == late
        assert e._names == seen
        assert e._roles == table.resolve(seen)
        fams = classify_run(seen, table)
        losses = {n for n, f in fams.items() if f.is_loss}
        lanes = lane_specs(seen, e._roles, FamilyTable(table), ("loss", "val_loss"))
        lane_series = {n for spec in lanes.values() for _r, n in spec.overrides if n is not None}
        assert e._wanted == set(e._roles.values()) | set(e._metrics) | losses | lane_series
        for names in late.values():  # as the engine does when it reaches their record
            e._see(names)


def test_the_roles_read_instead_are_the_built_rules_own(tmp_path: Path) -> None:
    """The engine's plan keeps, per config, the roles rules read while another is unresolved:
    they are those of the rules it builds (throughput's only while throughput_drop is on)."""
    off = tmp_path / "off.yaml"
    off.write_text("throughput_drop: false\n")
    for cfg in (CFG, load_rules_config(off), CFG):
        e = RuleEngine(cfg, live=False)
        built: dict[str, set[str]] = {}
        for rule in e._rules:
            for role, instead in rule.reads_unresolved:
                built.setdefault(role, set()).add(instead)
        assert {r: set(v) for r, v in e._fallbacks.items()} == built
        assert ("throughput" in built) == cfg.rules["throughput_drop"].enabled
