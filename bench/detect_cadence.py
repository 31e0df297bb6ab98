"""Detection quality at the logging cadences real runs use (``bench/cadence.py``), for
``bench/detect.py``: every labelled fault kind logged every 1, 10 and 50 steps and once per epoch,
clean runs at each cadence, and long clean runs shaped like pre-training (a power law, 1M steps).

Scored as the dense table is (river's episode recall; the intended rule at any severity inside
the fault's window is a hit), with three differences: the window is the fault's own or
``CONFIRM_POINTS`` logged points, whichever is longer; the delay is counted in logged points;
and a fault whose effect touches no logged point (``cadence.visible``) is left out of recall and
counted as invisible. False alarms are warning-or-error alerts of any rule on the clean runs, per
10k steps of the run that was logged (a per-epoch log of a 4,000-step run counts 4,000).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.cadence import CADENCES, NAMINGS, Logged, log_run, pretrain_run
from bench.detect import RECALL_TARGET, Cost, engine_alerts, serious
from bench.synthetic import FAULT_RULES, SyntheticRun, clean_run, fault_run
from trainwatch.rules.engine.alert import Alert


@dataclass
class CadenceScore:
    """One fault kind at one cadence."""

    kind: str
    cadence: str
    runs: int = 0
    invisible: int = 0
    caught: int = 0
    delays: list[int] = field(default_factory=list)
    """Logged points from the fault to the first matching alarm."""
    by_naming: Counter[tuple[int, bool]] = field(default_factory=Counter)
    """(naming, caught) -> visible runs."""
    misses: list[str] = field(default_factory=list)
    pre_alarms: Counter[str] = field(default_factory=Counter)
    """Warning-or-error alerts of any rule before the fault (false alarms too)."""
    pre_steps: int = 0

    @property
    def visible(self) -> int:
        return self.runs - self.invisible

    @property
    def recall(self) -> float:
        return self.caught / self.visible if self.visible else math.nan


@dataclass
class CleanScore:
    """The clean runs at one cadence."""

    cadence: str
    steps: int = 0
    runs: int = 0
    false_alarms: Counter[str] = field(default_factory=Counter)
    infos: Counter[str] = field(default_factory=Counter)

    @property
    def per_10k(self) -> float:
        return sum(self.false_alarms.values()) / self.steps * 10_000 if self.steps else math.nan


def alerts_of(logged: Logged, cfg: Any) -> list[Alert]:
    run = logged.run
    return engine_alerts(f"{run.name}@{logged.cadence}", logged.data, dict(logged.rank_data),
                         run.now, cfg, Cost(), n_steps=run.n_steps)


def score_logged(sc: CadenceScore, logged: Logged, cfg: Any) -> None:
    sc.runs += 1
    if not logged.visible:
        sc.invisible += 1
        return
    lab = logged.run.label
    alerts = alerts_of(logged, cfg)
    sc.pre_alarms.update(f"{a.rule}/{a.severity}" for a in alerts
                         if serious(a) and a.step < logged.fault_step)
    sc.pre_steps += max(0, lab.step - 1)
    hits = sorted(a.step for a in alerts if a.rule == lab.rule
                  and logged.fault_step <= a.step <= logged.window_end)
    sc.by_naming[(logged.naming, bool(hits))] += 1
    if hits:
        sc.caught += 1
        sc.delays.append(logged.delay_points(hits[0]))
    else:
        others = sorted({f"{a.rule}/{a.severity}" for a in alerts if a.step >= logged.fault_step})
        sc.misses.append(f"seed {logged.run.seed} naming {logged.naming} {dict(lab.params)} "
                         f"fault at {logged.fault_step}: other alerts {others[:5]}")


def score_clean(cs: CleanScore, logged: Logged, cfg: Any) -> None:
    cs.runs += 1
    cs.steps += logged.run.n_steps
    for a in alerts_of(logged, cfg):
        (cs.false_alarms if serious(a) else cs.infos)[f"{a.rule}/{a.severity}"] += 1


@dataclass
class CadenceResults:
    kinds: dict[tuple[str, str], CadenceScore]
    clean: dict[str, CleanScore]
    long_runs: list[dict[str, Any]]


def run_cadences(cfg: Any, kinds: list[str], n_seeds: int, n_before: int,
                 clean_lengths: tuple[int, ...], n_clean: int,
                 long_runs: list[tuple[int, int, str, int]]) -> CadenceResults:
    """Every kind at every cadence (``n_seeds`` runs each, the dense bench's runs re-logged),
    ``n_clean`` clean runs per cadence, and the long runs ``(seed, steps, cadence, naming)``
    (a naming the rules know of: a long run under names they do not read says nothing)."""
    kinds_out: dict[tuple[str, str], CadenceScore] = {}
    for kind in kinds:
        runs = [fault_run(kind, seed, n_before=n_before) for seed in range(n_seeds)]
        for cadence in CADENCES:
            sc = kinds_out[(kind, cadence)] = CadenceScore(kind, cadence)
            for run in runs:
                score_logged(sc, log_run(run, cadence), cfg)
    clean: dict[str, CleanScore] = {c: CleanScore(c) for c in CADENCES}
    clean_runs = [clean_run(seed, n_steps=clean_lengths[seed % len(clean_lengths)])
                  for seed in range(n_clean)]
    for cadence in CADENCES:
        for run in clean_runs:
            score_clean(clean[cadence], log_run(run, cadence), cfg)
    longs = []
    for seed, steps, cadence, naming in long_runs:
        run: SyntheticRun = pretrain_run(seed, steps)
        logged = log_run(run, cadence, naming)
        alerts = alerts_of(logged, cfg)
        longs.append({
            "seed": seed, "steps": steps, "cadence": cadence, "naming": logged.naming,
            "params": dict(run.label.params),
            "warnings_or_errors": [_describe(a) for a in alerts if serious(a)],
            "infos": [_describe(a) for a in alerts if not serious(a)],
        })
    return CadenceResults(kinds_out, clean, longs)


def _describe(a: Alert) -> str:
    return f"{a.rule}/{a.severity}@{a.step}: {a.message}"


def print_cadences(res: CadenceResults, kinds: list[str], verbose: bool) -> dict[str, Any]:
    """The cadence table; returns it as JSON-ready data."""
    print("\nat logging cadences (recall of visible faults / visible runs, median delay in "
          "logged points; '-' = none visible)")
    hdr = f"{'kind':<16} {'rule':<16}" + "".join(f" {'every ' + c if c != 'epoch' else 'per epoch':>16}"
                                             for c in CADENCES)
    print(hdr)
    print("-" * len(hdr))
    out: dict[str, Any] = {"kinds": {}, "clean": {}, "long_runs": res.long_runs}
    for kind in kinds:
        cells = []
        for c in CADENCES:
            sc = res.kinds[(kind, c)]
            med = statistics.median(sc.delays) if sc.delays else math.nan
            cell = "-" if not sc.visible else (
                f"{sc.recall:.2f}/{sc.visible}" + (f" d{med:g}" if sc.delays else ""))
            cells.append(f"{cell:>16}")
            out["kinds"].setdefault(kind, {})[c] = {
                "runs": sc.runs, "visible": sc.visible, "invisible": sc.invisible,
                "caught": sc.caught, "recall": None if math.isnan(sc.recall) else sc.recall,
                "median_delay_points": None if math.isnan(med) else med,
                "misses": sc.misses,
            }
        print(f"{kind:<16} {FAULT_RULES[kind]:<16}" + " ".join(cells))
    print()
    for c in CADENCES:
        scs = [res.kinds[(k, c)] for k in kinds]
        met = sum(1 for s in scs if s.visible and s.recall >= RECALL_TARGET)
        judged = sum(1 for s in scs if s.visible)
        inv = sum(s.invisible for s in scs)
        pre = Counter[str]()
        for s in scs:
            pre.update(s.pre_alarms)
        pre_steps = sum(s.pre_steps for s in scs)
        pre_rate = sum(pre.values()) / pre_steps * 10_000 if pre_steps else math.nan
        naming = Counter[tuple[int, bool]]()
        for s in scs:
            naming.update(s.by_naming)
        by_naming = ", ".join(
            f"{i} {naming[(i, True)]}/{naming[(i, True)] + naming[(i, False)]}"
            for i in range(len(NAMINGS)) if naming[(i, True)] + naming[(i, False)])
        cs = res.clean[c]
        fa = ", ".join(f"{k} {v}" for k, v in cs.false_alarms.most_common()) or "none"
        label = f"every {c}" if c != "epoch" else "per epoch"
        print(f"{label:<9}: kinds at recall >= {RECALL_TARGET:g}: {met} of {judged} judged; "
              f"invisible faults {inv}; caught by naming {by_naming}")
        print(f"{'':<9}  clean: {sum(cs.false_alarms.values())} warning+ in {cs.steps:,} steps "
              f"({cs.runs} runs) = {cs.per_10k:.2f} per 10k (target <= 1); by rule: {fa}; "
              f"infos {sum(cs.infos.values())}")
        print(f"{'':<9}  before the faults: {sum(pre.values())} warning+ in {pre_steps:,} steps = "
              f"{pre_rate:.2f} per 10k; by rule: "
              + (", ".join(f"{k} {v}" for k, v in pre.most_common(6)) or "none"))
        out["clean"][c] = {"runs": cs.runs, "steps": cs.steps, "per_10k": cs.per_10k,
                           "by_rule": dict(cs.false_alarms), "infos": dict(cs.infos),
                           "kinds_meeting_recall": met, "kinds_judged": judged,
                           "invisible": inv, "pre_fault_per_10k": pre_rate,
                           "pre_fault_by_rule": dict(pre)}
    print(f"naming: {', '.join(f'{i} {_naming_label(n)}' for i, n in enumerate(NAMINGS))}")
    for lr in res.long_runs:
        serious_n, info_n = len(lr["warnings_or_errors"]), len(lr["infos"])
        print(f"long clean power-law run (seed {lr['seed']}, {lr['steps']:,} steps, every "
              f"{lr['cadence']}, naming {lr['naming']}): {serious_n} warning+ "
              f"(target 0), {info_n} infos")
        for line in lr["warnings_or_errors"][:6] + (lr["infos"][:6] if verbose else []):
            print(f"    {line}")
    if verbose:
        print("\nmissed faults at cadences:")
        for (kind, c), sc in res.kinds.items():
            for m in sc.misses[:4]:
                print(f"  {kind} @ {c}: {m}")
    return out


def _naming_label(names: dict[str, str] | Any) -> str:
    return f"({names['loss']}, {names['val_loss']})" if names else "(loss, val_loss + events)"
