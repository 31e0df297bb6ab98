"""Detection quality of the rule engine on labelled synthetic runs (``bench/synthetic.py``).

For every fault kind, runs with that fault injected at a known step go through the engine exactly
as ``trainwatch check`` feeds them; clean runs of several shapes and noise levels measure false
alarms. Scoring follows river's drift-detector evaluation (``river.drift.evaluate``: ``match``,
``episode_recall``, ``precision``, ``detection_delay``, ``false_alarm_rate``):

* an alarm is a true positive when it is the intended rule and falls in the fault's window
  ``[step - delta_pre, step + delta_max]`` (here ``delta_pre = 0``, ``delta_max`` per fault kind);
  each alarm goes to the earliest window it falls into, alarms in no window are false alarms;
* recall is episode recall: the share of injected faults that got at least one alarm;
* precision is the share of the intended rule's alarms that landed inside a window;
* detection delay is the first matching alarm's step minus the fault's start step (river leaves
  missed faults out of the delay, so it is read next to recall);
* the false alarm rate is alarms per ``unit`` samples: here warning-or-error alerts of any rule per
  10k steps of clean runs (every alarm on a clean run is false).

It also times the rules against the parse of the same bytes (the baseline of the same run), and
fed live, a frame per 2 KiB read as the TUI tails a file: at most 1 ms of rules per read.

    python bench/detect.py               # 40 runs per fault kind, 24 clean runs (264k steps),
                                         # 12 zero-inflated clean runs apart, 5 long
                                         # clean runs of a loss as noisy as its level apart
    python bench/detect.py --quick       # 5 per kind, 6 clean runs (24k steps)
    python bench/detect.py --json OUT    # also write the scores as JSON
    python bench/detect.py --no-cadences # the dense table alone

Then the same fault kinds logged every 1, 10 and 50 steps and once per epoch under several
frameworks' metric names, clean runs at each cadence and long clean runs shaped like
pre-training (``bench/detect_cadence.py``; full: 3 runs of 1M steps, quick: one of 200k).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/detect.py`

from bench.synthetic import (
    FAULT_RULES,
    NOISY_DRAWS,
    SHAPES,
    ZERO_CLEAN_RUNS,
    SyntheticRun,
    clean_run,
    fault_run,
    noisy_flat_run,
    parse_chunks,
    zero_clean_run,
)
from trainwatch.commands.check import feed_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.engine.alert import SEVERITY_RANK, Alert

RECALL_TARGET = 0.95
FA_TARGET = 1.0
"""False alarms (warning or error) per 10k clean steps."""
LIVE_BUDGET_US = 1000.0
"""Rules' time per 2 KiB read when fed live, in microseconds (#13: a budget a user notices, the
TUI's share of a core; the old target, rules <= 0.2x the parse over short files, is withdrawn:
it measured a fixed per-file cost no user waits for). The cost over whole files is printed
against the parse, without a target: `bench/check_cost.py` holds check's budget."""
NOISY_STEPS = (30_000, 10_000)
"""Steps of each long noisy clean run (full bench, ``--quick``)."""
NOISY_BATCH = 0.5
"""Batch noise of the clean runs of ``SHAPES`` among the long noisy ones (50 % of the level)."""


def noisy_clean_runs(n_steps: int) -> list[SyntheticRun]:
    """Long clean runs of a loss whose per-step noise is as large as the loss (batch-size-1 or
    sample-by-sample training, RL, small batches): a flat loss of each of ``NOISY_DRAWS``, and
    clean runs of two ``SHAPES`` at 50 % batch noise."""
    return ([noisy_flat_run(0, n_steps, d) for d in NOISY_DRAWS]
            + [clean_run(0, n_steps=n_steps, shape=sh, noise=NOISY_BATCH) for sh in SHAPES[:2]])
CLEAN_LENGTHS = (2000, 4000, 8000, 30_000)
CLEAN_LENGTHS_QUICK = (2000, 3000, 4000, 10_000)


# ------------------------------------------------------------------------- river's definitions


def match(alarms: list[int], drifts: list[int], delta_max: int, delta_pre: int = 0
          ) -> tuple[dict[int, list[int]], list[int]]:
    """river ``drift.evaluate.match``: (drift index -> alarms in its window, false alarms)."""
    hits: dict[int, list[int]] = {}
    false: list[int] = []
    for a in alarms:
        for i, d in enumerate(drifts):
            if d - delta_pre <= a <= d + delta_max:
                hits.setdefault(i, []).append(a)
                break
        else:
            false.append(a)
    return hits, false


@dataclass
class Cost:
    """Seconds spent parsing the runs' bytes (the baseline) and running the rules on them."""

    parse_s: float = 0.0
    rules_s: float = 0.0
    steps: int = 0

    def add(self, other: Cost) -> None:
        self.parse_s += other.parse_s
        self.rules_s += other.rules_s
        self.steps += other.steps

    @property
    def ratio(self) -> float:
        return self.rules_s / self.parse_s if self.parse_s else math.nan


@dataclass
class KindScore:
    kind: str
    rule: str
    runs: int = 0
    caught: int = 0
    alarms: int = 0
    """Alarms of the intended rule (any severity) over all runs of the kind."""
    in_window: int = 0
    delays: list[int] = field(default_factory=list)
    eval_delays: list[float] = field(default_factory=list)
    """Overfit only: delay in evaluations."""
    pre_alarms: int = 0
    """Warning-or-error alerts of any rule before the fault started (false alarms too)."""
    pre_steps: int = 0
    pre_rules: Counter[str] = field(default_factory=Counter)
    late: list[str] = field(default_factory=list)
    """Alarms of the intended rule outside the window (what lowers precision)."""
    misses: list[str] = field(default_factory=list)
    cost: Cost = field(default_factory=lambda: Cost())

    @property
    def recall(self) -> float:
        return self.caught / self.runs if self.runs else math.nan

    @property
    def precision(self) -> float:
        return self.in_window / self.alarms if self.alarms else math.nan

    @property
    def median_delay(self) -> float:
        return float(statistics.median(self.delays)) if self.delays else math.nan


CHUNK = 256 << 10
"""Bytes per read when parsing the labelled runs: a short file then comes in two or three reads,
which the backfill joins (``commands.check.backfill_batches``), as a file that grew while it was read.
(Read whole, in ``check``'s 4 MiB, the ratio measures the same: 0.32-0.33x both ways, 2026-11-22;
the parser learns its fast path's schema from the head of the first read either way.)"""


def run_engine(run: SyntheticRun, cfg: Any, cost: Cost, chunk: int = CHUNK) -> list[Alert]:
    """Parse the run's bytes in reads of ``chunk`` (timed: the baseline), then feed it exactly
    as ``trainwatch check`` does (timed), finishing at the run's own clock."""
    return engine_alerts(run.name, run.jsonl(), {r: run.rank_jsonl(r) for r in run.ranks},
                         run.now, cfg, cost, chunk, run.n_steps)


def engine_alerts(name: str, data: bytes, rank_data: dict[int, bytes], now: float, cfg: Any,
                  cost: Cost, chunk: int = CHUNK, n_steps: int = 0) -> list[Alert]:
    """Parse a run's JSONL bytes (and its ranks') in reads of ``chunk`` (timed), then feed them
    exactly as ``trainwatch check`` does (timed), finishing at ``now``."""
    t0 = time.perf_counter()
    main = parse_chunks(data, f"{name}/metrics.jsonl", None, now, chunk)
    ranks = {r: parse_chunks(d, f"{name}/metrics.rank{r}.jsonl", r, now, chunk)
             for r, d in rank_data.items()}
    t1 = time.perf_counter()
    engine = RuleEngine(cfg, live=False)
    feed_run(engine, LoadedRun(Path(name), "jsonl", main, ranks), now=now)
    t2 = time.perf_counter()
    cost.parse_s += t1 - t0
    cost.rules_s += t2 - t1
    cost.steps += n_steps
    return list(engine.alerts)


LONG_BEFORE = 20_000
"""Clean steps before the fault in the long-run cost measurement (real runs are long)."""
LONG_CLEAN = 50_000
LONG_CHUNK = 4 << 20
"""What ``trainwatch check`` reads at a time (``trainwatch.formats.read.CHUNK_BYTES``)."""


def long_run_cost(cfg: Any, kinds: list[str]) -> Cost:
    """The rules' cost on runs of realistic length, read as ``check`` reads them: one run per
    fault kind with the fault after ~20k clean steps, and two 50k-step clean runs. On the short
    labelled runs above a fixed per-frame cost (a few dozen array operations per rule) weighs as
    much as the points; this is what a long file costs."""
    cost = Cost()
    runs = [fault_run(k, 0, n_before=LONG_BEFORE) for k in kinds]
    runs += [clean_run(s, n_steps=LONG_CLEAN) for s in (1, 2)]
    for run in runs:
        run_engine(run, cfg, cost, chunk=LONG_CHUNK)
    return cost


LIVE_READ = 2048
"""Bytes per read in the live cost measurement: what a tail of a busy run brings (~15 records)."""


def live_cost(cfg: Any, kinds: list[str]) -> tuple[Cost, int]:
    """The rules' cost fed live, one frame per read of ``LIVE_READ`` bytes, as the TUI tails a
    file (``live=True``), against the parse of the same reads; and the number of reads. There is
    no target: in a backfill a whole run is one frame, here every read pays each rule's fixed
    cost per frame, which is what this measures. One run per fault kind (rank streams left out)
    and two clean runs."""
    cost = Cost()
    reads = 0
    runs = [fault_run(k, 0, n_before=600) for k in kinds if k != "straggler"]
    runs += [clean_run(s, n_steps=3000) for s in (1, 2)]
    for run in runs:
        data = run.jsonl()
        t0 = time.perf_counter()
        batches = parse_chunks(data, f"{run.name}/metrics.jsonl", None, run.now, LIVE_READ)
        t1 = time.perf_counter()
        engine = RuleEngine(cfg, live=True)
        for b in batches:
            engine.feed(b, now=run.now)
        t2 = time.perf_counter()
        cost.parse_s += t1 - t0
        cost.rules_s += t2 - t1
        cost.steps += run.n_steps
        reads += len(batches)
    return cost, reads


def per_rule_cost(runs: list[SyntheticRun], cfg: Any) -> tuple[float, Counter[str]]:
    """(parse seconds, rule class -> seconds in its ``update``) over ``runs``: where the rules'
    time goes. Reads the engine's private rule list, so it is a separate, optional pass."""
    spent: Counter[str] = Counter()
    parse = 0.0
    for run in runs:
        data = run.jsonl()
        t0 = time.perf_counter()
        main = parse_chunks(data, run.name, None, run.now, CHUNK)
        parse += time.perf_counter() - t0
        engine = RuleEngine(cfg, live=False)
        for rule in getattr(engine, "_rules", []):
            rule.update = _timed(rule.update, type(rule).__name__, spent)
        t0 = time.perf_counter()
        feed_run(engine, LoadedRun(Path(run.name), "jsonl", main, {}), now=run.now)
        spent["(engine total)"] += time.perf_counter() - t0
    return parse, spent


def _timed(fn: Any, name: str, spent: Counter[str]) -> Any:
    def wrapper(frame: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(frame)
        finally:
            spent[name] += time.perf_counter() - t0

    return wrapper


def serious(a: Alert) -> bool:
    return SEVERITY_RANK.get(a.severity, 0) >= SEVERITY_RANK["warning"]


def score_kind(kind: str, seeds: range, cfg: Any, n_before: int) -> KindScore:
    sc = KindScore(kind, FAULT_RULES[kind])
    for seed in seeds:
        run = fault_run(kind, seed, n_before=n_before)
        lab = run.label
        alerts = run_engine(run, cfg, sc.cost)
        alarms = sorted(a.step for a in alerts if a.rule == lab.rule)
        hits, _false = match(alarms, [lab.step], lab.delta_max)
        sc.runs += 1
        sc.alarms += len(alarms)
        sc.in_window += sum(map(len, hits.values()))
        pre = [a for a in alerts if serious(a) and a.step < lab.step]
        sc.pre_alarms += len(pre)
        sc.pre_rules.update(f"{a.rule}/{a.severity}" for a in pre)
        outside = [a for a in alarms if not lab.step <= a <= lab.step + lab.delta_max]
        if outside:
            sc.late.append(f"seed {seed} {dict(lab.params)} step {lab.step}: {outside[:5]}")
        sc.pre_steps += max(0, lab.step - 1)
        if hits:
            sc.caught += 1
            d = min(hits[0]) - lab.step
            sc.delays.append(d)
            if "eval_every" in lab.params:
                sc.eval_delays.append(d / lab.params["eval_every"])
        else:
            fired = Counter(f"{a.rule}@{a.step}" for a in alerts if a.step >= lab.step)
            own = [s for s in alarms]
            sc.misses.append(
                f"seed {seed} {dict(lab.params)} step {lab.step}: own alarms {own[:5]}, "
                f"others {list(fired)[:6]}"
            )
    return sc


def delay_target(kind: str, cfg: Any) -> tuple[str, float] | None:
    """(label, limit) for the kinds that have a delay target; the limit is in steps, or in
    evaluations for overfit."""
    if kind == "nan":
        return "0", 0
    if kind in ("spike", "spike_sustained", "grad_explosion"):
        return "<=1", 1
    if kind == "detach":
        return "<=50", 50
    if kind == "plateau":
        # patience counts windows of ``window`` points (one point per step here)
        p = rule_param(cfg, "plateau", "patience")
        w = rule_param(cfg, "plateau", "window") or 1.0
        if p is None:
            return None
        return f"<={p * w * 1.1:.0f}", p * w * 1.1
    if kind == "overfit":
        return "<=3 ev", 3
    return None


def rule_param(cfg: Any, rule: str, name: str) -> float | None:
    """A rule's parameter from the loaded config, whatever shape the config object has."""
    for get in (
        lambda: cfg.rules[rule].params[name],
        lambda: getattr(cfg.rules[rule], name),
        lambda: cfg.rules[rule][name],
        lambda: getattr(getattr(cfg, rule), name),
        lambda: cfg[rule][name],
    ):
        try:
            v = get()
        except (AttributeError, KeyError, TypeError, IndexError):
            continue
        if isinstance(v, (int, float)):
            return float(v)
    return None


# ------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small size (5 runs per kind)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="also write the scores here")
    ap.add_argument("--seeds", type=int, help="runs per fault kind (default 40, quick 5)")
    ap.add_argument("--kinds", help="comma-separated fault kinds (default: all)")
    ap.add_argument("--clean", type=int, help="clean runs (default 25, quick 6)")
    ap.add_argument("--no-cadences", action="store_true",
                    help="skip the table at logging cadences and the long pre-training runs")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="list every missed fault, and the rules' cost rule by rule")
    args = ap.parse_args(argv)
    n_seeds = args.seeds or (5 if args.quick else 40)
    n_clean = args.clean if args.clean is not None else (6 if args.quick else 24)
    # run lengths cycle: most runs are short, some are long (slow rules fire late in a run)
    lengths = CLEAN_LENGTHS_QUICK if args.quick else CLEAN_LENGTHS
    kinds = args.kinds.split(",") if args.kinds else list(FAULT_RULES)
    for k in kinds:
        if k not in FAULT_RULES:
            ap.error(f"--kinds: unknown kind {k!r} (expected {', '.join(FAULT_RULES)})")

    cfg = load_rules_config(None)
    clean_cost = Cost()
    t_start = time.perf_counter()

    # clean runs: every warning-or-error alert is a false alarm
    fa_rules: Counter[str] = Counter()
    clean_total, fa = 0, 0
    info_rules: Counter[str] = Counter()
    for seed in range(n_clean):
        run = clean_run(seed, n_steps=lengths[seed % len(lengths)])
        alerts = run_engine(run, cfg, clean_cost)
        clean_total += run.n_steps
        for a in alerts:
            if serious(a):
                fa += 1
                fa_rules[f"{a.rule}/{a.severity}"] += 1
            else:
                info_rules[a.rule] += 1
    fa_rate = fa / clean_total * 10_000 if clean_total else math.nan
    # a zero-inflated loss (hinge, margin, triplet: 0 on easy batches), measured apart: its false
    # alarms are not all mended yet (2026-11-22), so they are shown, not counted in the target,
    # and its runs stay out of the cost (the labelled runs' cost stays comparable)
    zero_fa: Counter[str] = Counter()
    zero_steps = 0
    for seed in range(ZERO_CLEAN_RUNS * (3 if n_clean >= 24 else 1)):
        run = zero_clean_run(seed, n_steps=lengths[seed % len(lengths)])
        zero_steps += run.n_steps
        zero_fa.update(f"{a.rule}/{a.severity}" for a in run_engine(run, cfg, Cost()) if serious(a))

    # long clean runs of a loss as noisy as its level, measured apart (and out of the cost):
    # over hundreds of blocks their luckiest low and unluckiest block drift apart
    noisy_fa: Counter[str] = Counter()
    noisy_steps = 0
    for run in noisy_clean_runs(NOISY_STEPS[1 if args.quick else 0]):
        noisy_steps += run.n_steps
        noisy_fa.update(f"{a.rule}/{a.severity}" for a in run_engine(run, cfg, Cost())
                        if serious(a))

    scores = [score_kind(k, range(n_seeds), cfg, 600 if args.quick else 1000) for k in kinds]
    cost = Cost()
    cost.add(clean_cost)
    for sc in scores:
        cost.add(sc.cost)
    long_cost = long_run_cost(cfg, kinds)
    live, live_reads = live_cost(cfg, kinds)
    wall = time.perf_counter() - t_start

    # ------------------------------------------------------------------------ table
    print(f"trainwatch rules on labelled synthetic runs ({n_seeds} per fault kind; {n_clean} "
          f"clean runs, {clean_total:,} steps, of {'/'.join(f'{n:,}' for n in lengths)} steps)\n")
    hdr = (f"{'kind':<16} {'rule':<16} {'runs':>4} {'recall':>6} {'tgt':>6} {'prec':>5} "
           f"{'delay med':>9} {'p90':>6} {'tgt':>7} {'pre-FA/10k':>10} {'cost':>5}  ok")
    print(hdr)
    print("-" * len(hdr))
    all_ok = True
    out_kinds: dict[str, Any] = {}
    for sc in scores:
        dt = delay_target(sc.kind, cfg)
        delays = sc.eval_delays if sc.kind == "overfit" else sc.delays
        med = float(statistics.median(delays)) if delays else math.nan
        p90 = _quantile(delays, 0.9)
        ok = sc.recall >= RECALL_TARGET and (dt is None or (not math.isnan(med) and med <= dt[1]))
        all_ok &= ok
        pre_fa = sc.pre_alarms / sc.pre_steps * 10_000 if sc.pre_steps else math.nan
        unit = " ev" if sc.kind == "overfit" else ""
        print(f"{sc.kind:<16} {sc.rule:<16} {sc.runs:>4} {sc.recall:>6.2f} {'>=.95':>6} "
              f"{_f(sc.precision, 2):>5} {_f(med, 1) + unit:>9} {_f(p90, 1):>6} "
              f"{dt[0] if dt else '-':>7} {_f(pre_fa, 2):>10} {_f(sc.cost.ratio, 2):>5}  "
              f"{'yes' if ok else 'NO'}")
        out_kinds[sc.kind] = {
            "rule": sc.rule, "runs": sc.runs, "recall": sc.recall, "precision": sc.precision,
            "median_delay": med, "delay_unit": "evaluations" if sc.kind == "overfit" else "steps",
            "p90_delay": p90, "delay_target": dt[1] if dt else None,
            "pre_fault_false_alarms_per_10k": pre_fa, "pre_fault_by_rule": dict(sc.pre_rules),
            "outside_window": sc.late, "rules_over_parse": sc.cost.ratio,
            "ok": ok, "misses": sc.misses,
        }
    print()
    fa_ok = fa_rate <= FA_TARGET
    all_ok &= fa_ok
    by = ", ".join(f"{k} {v}" for k, v in fa_rules.most_common()) or "none"
    print(f"false alarms on clean runs: {fa} in {clean_total:,} steps = {fa_rate:.2f} per 10k steps "
          f"(target <= {FA_TARGET:g}) {'ok' if fa_ok else 'NO'}; by rule: {by}")
    if info_rules:
        print("  info-level alerts on clean runs (not counted): "
              + ", ".join(f"{k} {v}" for k, v in info_rules.most_common()))
    n_zfa = sum(zero_fa.values())
    print(f"zero-inflated loss (clean runs apart, no target yet): {n_zfa} warning+ alerts in "
          f"{zero_steps:,} steps = {n_zfa / zero_steps * 10_000:.2f} per 10k; by rule: "
          + (", ".join(f"{k} {v}" for k, v in zero_fa.most_common()) or "none")
          + " (learning_stalled tells a loss's runs of zeros once by default: mixed_points)")
    n_nfa = sum(noisy_fa.values())
    print(f"long noisy loss (clean runs apart, no target: flat loss x Exponential/lognormal/50 % "
          f"Gaussian noise, 2 shapes at 50 % batch noise): {n_nfa} warning+ alerts in "
          f"{noisy_steps:,} steps = {n_nfa / noisy_steps * 10_000:.2f} per 10k; by rule: "
          + (", ".join(f"{k} {v}" for k, v in noisy_fa.most_common()) or "none"))
    ratio = cost.ratio
    print(f"clean runs alone: rules {clean_cost.ratio:.2f}x parse")
    print(f"cost over {cost.steps:,} steps: parse (baseline) {cost.parse_s:.2f} s, rules "
          f"{cost.rules_s:.2f} s -> {ratio:.2f}x parse (no target)")
    print(f"cost on long runs ({len(kinds)} fault runs with the fault after ~{LONG_BEFORE:,} steps, "
          f"2 clean runs of {LONG_CLEAN:,}; {long_cost.steps:,} steps read in "
          f"{LONG_CHUNK >> 20} MiB as check reads): parse {long_cost.parse_s:.2f} s, rules "
          f"{long_cost.rules_s:.2f} s -> {long_cost.ratio:.2f}x parse (no target)")
    live_us = live.rules_s / live_reads * 1e6
    live_ok = live_us <= LIVE_BUDGET_US
    all_ok &= live_ok
    print(f"live, one frame per {LIVE_READ:,} B read as the TUI tails a file ({live_reads:,} reads, "
          f"{live.steps:,} steps): parse {live.parse_s / live_reads * 1e6:.0f} us a read, rules "
          f"{live_us:.0f} us a read ({live.ratio:.2f}x parse; budget <= {LIVE_BUDGET_US:.0f} us) "
          f"{'ok' if live_ok else 'NO'}")
    print(f"wall time {wall:.1f} s; all targets met: {'yes' if all_ok else 'no'}")
    misses = [(sc.kind, m) for sc in scores for m in sc.misses]
    if misses:
        print(f"\nmissed faults ({len(misses)}):" if args.verbose else
              f"\n{len(misses)} missed faults (-v lists them, and alarms outside windows and "
              "before faults)")
    if args.verbose:
        for k, m in misses:
            print(f"  {k}: {m}")
        print("\nintended rule's alarms outside the window:")
        for sc in scores:
            for m in sc.late[:5]:
                print(f"  {sc.kind}: {m}")
        print("\nwarning+ alarms before the fault started:")
        for sc in scores:
            if sc.pre_rules:
                print(f"  {sc.kind}: {dict(sc.pre_rules)}")
        parse_s, spent = per_rule_cost(
            [clean_run(s, n_steps=lengths[s % len(lengths)]) for s in range(n_clean)], cfg)
        print(f"\nrules' cost on the clean runs, rule by rule (x parse time {parse_s:.2f} s):")
        for name, sec in spent.most_common():
            print(f"  {name:<24} {sec:6.3f} s  {sec / parse_s:5.3f}x")

    cadences = None
    if not args.no_cadences:
        from bench.detect_cadence import print_cadences, run_cadences

        t0 = time.perf_counter()
        longs = ([(0, 200_000, "10", 0)] if args.quick else
                 [(0, 1_000_000, "1", 0), (0, 1_000_000, "10", 1), (1, 1_000_000, "50", 0)])
        res = run_cadences(cfg, kinds, n_seeds, 600 if args.quick else 1000, lengths, n_clean,
                           longs)
        cadences = print_cadences(res, kinds, args.verbose)
        print(f"cadences' wall time {time.perf_counter() - t0:.1f} s")

    if args.json:
        doc = {
            "sizes": {"seeds_per_kind": n_seeds, "clean_runs": n_clean, "clean_steps": clean_total},
            "kinds": out_kinds,
            "clean": {"false_alarms": fa, "steps": clean_total, "per_10k": fa_rate,
                      "target": FA_TARGET, "by_rule": dict(fa_rules), "info": dict(info_rules)},
            "noisy_clean": {"alerts": n_nfa, "steps": noisy_steps, "by_rule": dict(noisy_fa)},
            "cost": {"parse_s": cost.parse_s, "rules_s": cost.rules_s, "ratio": ratio,
                     "steps": cost.steps, "live_budget_us": LIVE_BUDGET_US,
                     "clean_ratio": clean_cost.ratio,
                     "long_runs": {"parse_s": long_cost.parse_s, "rules_s": long_cost.rules_s,
                                   "ratio": long_cost.ratio, "steps": long_cost.steps},
                     "live": {"read_bytes": LIVE_READ, "reads": live_reads,
                              "parse_s": live.parse_s, "rules_s": live.rules_s,
                              "ratio": live.ratio}},
            "all_targets_met": all_ok,
            "cadences": cadences,
        }
        args.json.write_text(json.dumps(_json_safe(doc), indent=2) + "\n")
    return 0


def _quantile(xs: list[float] | list[int], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return float(s[min(len(s) - 1, math.ceil(q * len(s)) - 1)])


def _f(x: float, digits: int) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _json_safe(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    return v


if __name__ == "__main__":
    raise SystemExit(main())
