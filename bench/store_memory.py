"""Memory, ingest rate and query time of the bounded series store, small run vs long run.

Each measurement runs in a fresh subprocess (RSS from /proc/self/status), loading N points spread
over 5 series in batches of 10 k records, as a reader would. The baseline, measured in the same
run, is (a) the same store after 100 k points, for the memory ratio the store must keep <= 1.5x,
and (b) a naive store that keeps every point and downsamples the whole array on every query.

    .venv/bin/python bench/store_memory.py           # 100 k vs 10 M points
    .venv/bin/python bench/store_memory.py --quick   # 100 k vs 1 M points
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

N_SERIES = 5
BATCH_RECORDS = 10_000
QUERY_POINTS = 1000


def rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}: this bench needs Linux")


def batches(n_points: int, seed: int = 0):
    """Batches of records with one point per series, a loss-like curve with spikes and NaNs."""
    from trainwatch.batch import RecordBatch, SeriesChunk

    rng = np.random.default_rng(seed)
    names = [f"train/metric_{i}" for i in range(N_SERIES)]
    n_records = n_points // N_SERIES
    for start in range(0, n_records, BATCH_RECORDS):
        k = min(BATCH_RECORDS, n_records - start)
        steps = np.arange(start, start + k, dtype=np.int64)
        times = 1.7e9 + steps * 0.1
        segs = np.zeros(k, dtype=np.int32)
        rows = np.arange(k, dtype=np.int32)
        series = {}
        for name in names:
            values = np.exp(-steps / 1e6) + 0.01 * rng.standard_normal(k)
            values[rng.random(k) < 1e-4] = np.nan
            series[name] = SeriesChunk(rows, steps, values, times, segs)
        yield RecordBatch("bench.jsonl", start, steps, times, segs, series)


def child(n_points: int, naive: bool) -> dict[str, float]:
    from trainwatch.downsample import minmax_downsample
    from trainwatch.store import SeriesStore

    rss0 = rss_kib()
    store = SeriesStore()
    kept: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    ingest_s = 0.0
    for b in batches(n_points):
        t0 = time.perf_counter()
        if naive:
            for name, c in b.series.items():
                kept.setdefault(name, []).append((c.steps, c.values))
        else:
            store.ingest(b)
        ingest_s += time.perf_counter() - t0
    if naive:
        t0 = time.perf_counter()
        full = {
            name: (np.concatenate([s for s, _ in parts]), np.concatenate([v for _, v in parts]))
            for name, parts in kept.items()
        }
        ingest_s += time.perf_counter() - t0
        kept.clear()
    query_s = []
    for _ in range(5):
        t0 = time.perf_counter()
        if naive:
            for steps, values in full.values():
                minmax_downsample(steps, values, QUERY_POINTS)
        else:
            for name in store.names():
                store.get(name).query(max_points=QUERY_POINTS)
        query_s.append((time.perf_counter() - t0) / N_SERIES)
    return {
        "rss_kib": rss_kib(),
        "hwm_kib": rss_kib("VmHWM"),
        "rss_start_kib": rss0,
        "store_kib": store.nbytes() / 1024,
        "points_per_s": n_points / ingest_s,
        "query_ms": 1e3 * float(np.median(query_s)),
    }


def measure(n_points: int, naive: bool = False) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", str(n_points)] + (["--naive"] if naive else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 M points instead of 10 M")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.naive)))
        return

    small, large = 100_000, 1_000_000 if args.quick else 10_000_000
    rows = {
        f"store {small:>10,}": measure(small),
        f"store {large:>10,}": measure(large),
        f"naive {large:>10,}": measure(large, naive=True),
    }
    print(f"{N_SERIES} series, batches of {BATCH_RECORDS:,} records, queries at {QUERY_POINTS}")
    print(f"{'run':<18} {'RSS MiB':>8} {'peak MiB':>9} {'arrays MiB':>10} "
          f"{'ingest pts/s':>13} {'query ms':>9}")
    for label, r in rows.items():
        print(f"{label:<18} {r['rss_kib'] / 1024:8.1f} {r['hwm_kib'] / 1024:9.1f} "
              f"{r['store_kib'] / 1024:10.2f} {r['points_per_s']:13,.0f} {r['query_ms']:9.3f}")
    s, big, nv = rows.values()
    print(f"RSS ratio, store {large:,} / store {small:,} points: "
          f"{big['rss_kib'] / s['rss_kib']:.2f}x (target <= 1.5x)")
    print(f"RSS ratio, store / naive at {large:,} points: {big['rss_kib'] / nv['rss_kib']:.2f}x")
    print(f"ingest rate, store {large:,} / store {small:,} points: "
          f"{big['points_per_s'] / s['points_per_s']:.2f}x "
          "(amortised O(1): should not fall below ~1x)")
    print(f"query time at {QUERY_POINTS} points, store / naive at {large:,}: "
          f"{big['query_ms'] / nv['query_ms']:.3f}x")


if __name__ == "__main__":
    main()
