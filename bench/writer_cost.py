"""What one ``RunWriter.log()`` call costs a training loop, against the least a JSONL logger does.

    python bench/writer_cost.py [--quick] [--n N] [--repeat R]

Per call, 6 keys (step + 5 metrics): ``log(step=i, loss=..., lr=..., grad_norm=..., tokens=...,
epoch=...)`` against a baseline measured in the same run: build the same dict, ``json.dumps`` it
and ``write`` the line to a buffered file (no time stamp, no lock, no thread, no error handling).
The writer's figure includes what its flusher thread takes from the loop (it holds the GIL while
it joins and writes), since the loop is timed on the wall clock. Also measured: the same call with
numpy scalars (the ``.item()`` path), and ``close()`` (final flush + thread join). Best of R runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from trainwatch import RunWriter


def best_us_per_call(run: Callable[[int], None], n: int, repeat: int) -> float:
    """Best (least disturbed by other processes) µs per call over ``repeat`` runs of ``n`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run(n)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20k calls per run instead of 300k")
    ap.add_argument("--n", type=int, default=None, help="calls per run")
    ap.add_argument("--repeat", type=int, default=5, help="runs per measurement (best is kept)")
    args = ap.parse_args(argv)
    n = args.n or (20_000 if args.quick else 300_000)

    with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
        root = Path(tmp)

        with open(root / "baseline.jsonl", "w") as fh:

            def baseline(k: int) -> None:
                write, dumps = fh.write, json.dumps
                for i in range(k):
                    rec = {
                        "step": i,
                        "loss": 0.5,
                        "lr": 1e-3,
                        "grad_norm": 1.25,
                        "tokens": 4096,
                        "epoch": 1,
                    }
                    write(dumps(rec) + "\n")

            base = best_us_per_call(baseline, n, args.repeat)

        w = RunWriter(root / "run", config={"lr": 1e-3}, flush_interval=0.5)

        def writer(k: int) -> None:
            log = w.log
            for i in range(k):
                log(step=i, loss=0.5, lr=1e-3, grad_norm=1.25, tokens=4096, epoch=1)

        ours = best_us_per_call(writer, n, args.repeat)

        np_cost = None
        try:
            import numpy as np
        except ImportError:
            pass
        else:
            loss, lr, gn, tok = np.float32(0.5), np.float64(1e-3), np.float32(1.25), np.int64(4096)

            def writer_np(k: int) -> None:
                log = w.log
                for i in range(k):
                    log(step=i, loss=loss, lr=lr, grad_norm=gn, tokens=tok, epoch=1)

            np_cost = best_us_per_call(writer_np, max(n // 4, 1000), args.repeat)

        t0 = time.perf_counter()
        w.close()
        close_ms = (time.perf_counter() - t0) * 1e3
        with open(w.path, "rb") as fh:
            lines = sum(1 for _ in fh)
        expected = 2 + args.repeat * n + (args.repeat * max(n // 4, 1000) if np_cost else 0)
        if lines != expected or w.dropped:
            print(f"error: {w.path} has {lines} lines, expected {expected} (dropped {w.dropped})")
            return 1

    print(f"python {sys.version.split()[0]}, {n:,} calls x {args.repeat} runs, 6 keys per record")
    print(f"baseline  json.dumps + file.write   {base:6.2f} µs/call")
    print(f"RunWriter.log                       {ours:6.2f} µs/call   {ours / base:4.2f}x baseline")
    if np_cost is not None:
        print(
            f"RunWriter.log, 4 numpy scalars      {np_cost:6.2f} µs/call   {np_cost / base:4.2f}x baseline"
        )
    print(f"RunWriter.close (flush + join)      {close_ms:6.2f} ms")
    print(f"target: < 5 µs/call for 6 keys -> {'met' if ours < 5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
