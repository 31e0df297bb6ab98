"""Ingest speed: trainwatch's JSONL load against bare parsers on the same bytes, in one run.

Generates 6-key, 30-key and 5 %-NaN files of N lines (default 1 M), then times:
  * baseline A: bare per-line ``orjson.loads`` (or msgspec if orjson is absent) over the same lines
  * baseline B: stdlib ``json.loads`` per line
  * trainwatch: ``read_file`` (what ``inspect``/``check`` do): 4 MiB chunks of whole lines,
    parsed into columns by ``JsonlParser``
Bare parser and trainwatch alternate rep by rep (best of ``--reps`` each). Prints lines/s, MB/s,
and trainwatch's rate as a ratio to each baseline (targets: >= 0.6x bare,
>= 5x stdlib; >= 0.5x bare with 5 % NaN lines), plus peak RSS.

    python bench/ingest.py            # 1 M lines per file
    python bench/ingest.py --quick    # 100 k lines
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

from trainwatch.formats.read import read_file


def make_file(path: Path, n: int, keys: int, nan_frac: float, seed: int = 0) -> None:
    rng = random.Random(seed)
    names = ["loss", "lr", "grad_norm", "throughput"] + [f"metric_{i}" for i in range(keys - 6)]
    t0 = 1.7e9
    with path.open("w") as f:
        for i in range(n):
            rec: dict[str, float | int] = {"step": i, "time": t0 + i * 0.1}
            for k in names:
                rec[k] = rng.random() * 3
            if nan_frac and rng.random() < nan_frac:
                rec["loss"] = float("nan")
            f.write(json.dumps(rec) + "\n")


def bare_parse(lines: list[bytes]) -> float:
    try:
        import orjson

        loads = orjson.loads
    except ImportError:  # pragma: no cover
        import msgspec

        loads = msgspec.json.decode
    t = time.perf_counter()
    for ln in lines:
        try:
            loads(ln)
        except ValueError:
            json.loads(ln)  # NaN lines: what a bare parser would have to do too
    return time.perf_counter() - t


def stdlib_parse(lines: list[bytes]) -> float:
    t = time.perf_counter()
    for ln in lines:
        json.loads(ln)
    return time.perf_counter() - t


def trainwatch_load(path: Path) -> tuple[float, int]:
    """The real full-load path of ``inspect``/``check``: 4 MiB chunks of whole lines, parsed."""
    t = time.perf_counter()
    batches = read_file(path)
    return time.perf_counter() - t, sum(b.n_records for b in batches)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100 k lines per file")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    n = 100_000 if args.quick else args.lines
    print(f"ingest bench: {n:,} lines per file, best of {args.reps}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus")
    print(f"{'file':<10} {'MB':>6} {'bare l/s':>11} {'stdlib l/s':>11} {'tw l/s':>11} {'tw MB/s':>8} "
          f"{'tw/bare':>8} {'tw/stdlib':>9}")
    with tempfile.TemporaryDirectory() as d:
        for label, keys, nan in (("6-key", 6, 0.0), ("30-key", 30, 0.0), ("6-key 5%NaN", 6, 0.05)):
            p = Path(d) / f"{label}.jsonl"
            make_file(p, n, keys, nan)
            size = p.stat().st_size
            # Baseline and trainwatch take turns, rep by rep: on a shared machine a change of load
            # then hits both sides of the ratio instead of only one.
            t_bare = t_std = t_tw = math.inf
            for rep in range(args.reps):
                lines = p.read_bytes().splitlines()
                gc.collect()
                t_bare = min(t_bare, bare_parse(lines))
                if rep == 0:
                    t_std = stdlib_parse(lines)  # ~10x slower: once is enough for its ratio
                del lines  # the baselines' line list must not weigh on trainwatch's run
                gc.collect()
                t, recs = trainwatch_load(p)
                assert recs == n, (recs, n)
                t_tw = min(t_tw, t)
            print(f"{label:<10} {size / 1e6:6.0f} {n / t_bare:11,.0f} {n / t_std:11,.0f} {n / t_tw:11,.0f} "
                  f"{size / 1e6 / t_tw:8.0f} {t_bare / t_tw:8.2f}x {t_std / t_tw:8.2f}x")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {rss:.0f} MB (includes the baselines' line lists)")
    print("targets: tw/bare >= 0.60x (>= 0.50x with NaN lines), tw/stdlib >= 5x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
