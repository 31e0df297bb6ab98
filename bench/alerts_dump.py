"""Every alert of the full detection bench, one JSON line each: the before/after record of a
change to the rules.

Runs what ``bench/detect.py`` runs (the clean runs, the zero-inflated and long noisy clean runs,
40 runs of every fault kind, the long-run and live-cost runs) and writes each alert the engine
raises as ``{"run": ..., "feed": "backfill"|"live", "rule", "severity", "step", "metric",
"message", "evidence", "causes", "fixes"}``. Two dumps compare with ``--diff``.

    python bench/alerts_dump.py OUT.jsonl           # the full bench (a few minutes)
    python bench/alerts_dump.py OUT.jsonl --quick   # the quick bench's runs
    python bench/alerts_dump.py --diff BEFORE.jsonl AFTER.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/alerts_dump.py`

from bench.detect import (
    CLEAN_LENGTHS,
    CLEAN_LENGTHS_QUICK,
    LIVE_READ,
    LONG_BEFORE,
    LONG_CHUNK,
    LONG_CLEAN,
    NOISY_STEPS,
    Cost,
    noisy_clean_runs,
    run_engine,
)
from bench.synthetic import (
    FAULT_RULES,
    ZERO_CLEAN_RUNS,
    SyntheticRun,
    clean_run,
    fault_run,
    parse_chunks,
    zero_clean_run,
)
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.engine.alert import Alert


def bench_runs(quick: bool) -> list[tuple[SyntheticRun, str, int]]:
    """(run, feed, chunk bytes) of every run the detection bench feeds, in its order."""
    lengths = CLEAN_LENGTHS_QUICK if quick else CLEAN_LENGTHS
    n_clean, n_seeds = (6, 5) if quick else (24, 40)
    chunk = 256 << 10
    out: list[tuple[SyntheticRun, str, int]] = []
    out += [(clean_run(s, n_steps=lengths[s % len(lengths)]), "backfill", chunk)
            for s in range(n_clean)]
    out += [(zero_clean_run(s, n_steps=lengths[s % len(lengths)]), "backfill", chunk)
            for s in range(ZERO_CLEAN_RUNS * (1 if quick else 3))]
    out += [(r, "backfill", chunk) for r in noisy_clean_runs(NOISY_STEPS[1 if quick else 0])]
    out += [(fault_run(k, s, n_before=600 if quick else 1000), "backfill", chunk)
            for k in FAULT_RULES for s in range(n_seeds)]
    out += [(fault_run(k, 0, n_before=LONG_BEFORE), "backfill", LONG_CHUNK) for k in FAULT_RULES]
    out += [(clean_run(s, n_steps=LONG_CLEAN), "backfill", LONG_CHUNK) for s in (1, 2)]
    out += [(fault_run(k, 0, n_before=600), "live", LIVE_READ) for k in FAULT_RULES
            if k != "straggler"]
    out += [(clean_run(s, n_steps=3000), "live", LIVE_READ) for s in (1, 2)]
    return out


def alerts_of(run: SyntheticRun, feed: str, chunk: int, cfg: Any) -> list[Alert]:
    if feed == "backfill":
        return run_engine(run, cfg, Cost(), chunk=chunk)
    engine = RuleEngine(cfg, live=True)
    out: list[Alert] = []
    for b in parse_chunks(run.jsonl(), f"{run.name}/metrics.jsonl", None, run.now, chunk):
        out += engine.feed(b, now=run.now)
    return out


def row(run: str, feed: str, a: Alert) -> dict[str, Any]:
    return {"run": run, "feed": feed, "rule": a.rule, "severity": a.severity, "step": a.step,
            "metric": a.metric, "message": a.message, "evidence": a.evidence,
            "causes": [[c.cause, c.confidence] for c in a.causes], "fixes": list(a.fixes)}


def dump(out: Path, quick: bool) -> None:
    cfg = load_rules_config(None)
    n = 0
    runs = bench_runs(quick)
    with out.open("w") as f:
        for i, (run, feed, chunk) in enumerate(runs):
            key = f"{run.name}@{chunk}"
            for a in alerts_of(run, feed, chunk, cfg):
                f.write(json.dumps(row(key, feed, a), default=str, sort_keys=True) + "\n")
                n += 1
            if (i + 1) % 100 == 0:
                print(f"{i + 1}/{len(runs)} runs, {n} alerts", file=sys.stderr)
    print(f"{n} alerts of {len(runs)} runs -> {out}", file=sys.stderr)


def diff(before: Path, after: Path) -> int:
    """Print the alerts that differ, run by run; exit 1 when any does."""
    def load(p: Path) -> dict[tuple[str, str], list[str]]:
        d: dict[tuple[str, str], list[str]] = defaultdict(list)
        for line in p.read_text().splitlines():
            r = json.loads(line)
            d[(r["run"], r["feed"])].append(line)
        return d

    b, a = load(before), load(after)
    changed = 0
    by_rule: Counter[str] = Counter()
    for key in sorted(set(b) | set(a)):
        lb, la = b.get(key, []), a.get(key, [])
        if lb == la:
            continue
        changed += 1
        gone = [x for x in lb if x not in la]
        new = [x for x in la if x not in lb]
        print(f"== {key[0]} ({key[1]}): {len(gone)} gone, {len(new)} new")
        for x in gone[:6]:
            by_rule[json.loads(x)["rule"]] += 1
            print(f"  - {x[:400]}")
        for x in new[:6]:
            by_rule[json.loads(x)["rule"]] += 1
            print(f"  + {x[:400]}")
    total = sum(map(len, b.values()))
    print(f"{changed} runs differ; before {total} alerts, after {sum(map(len, a.values()))}; "
          f"differing alerts by rule: {dict(by_rule) or 'none'}")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="where to write the alerts (JSON lines)")
    ap.add_argument("--quick", action="store_true", help="the quick bench's runs")
    ap.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                    help="compare two dumps")
    args = ap.parse_args(argv)
    if args.diff:
        return diff(*args.diff)
    if args.out is None:
        ap.error("give OUT, or --diff BEFORE AFTER")
    dump(args.out, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
