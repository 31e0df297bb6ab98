"""What the rules cost a user: ``trainwatch check`` against ``trainwatch inspect`` on one file.

A clean run of 1M steps (7 series a record, ``val_loss`` every 50-200 steps: the detection bench's
clean shape, ~190 MB of JSONL) is written once into a cache folder; then both commands run on it
as a user runs them, as subprocesses, ``--repeat`` times each in turn. ``inspect`` parses the file
and summarises every series; ``check`` parses it the same way and runs every rule: the ratio of
their wall times is what the rules add. Budget (#13): check at most 2x inspect.

    python bench/check_cost.py                  # 1M steps, median of 3
    python bench/check_cost.py --steps 200000 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/check_cost.py`

from bench.synthetic import clean_run

BUDGET = 2.0
"""check's wall time over inspect's on the same file (#13)."""


def data_file(cache: Path, steps: int, seed: int) -> Path:
    path = cache / f"clean-{steps}-s{seed}" / "metrics.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        tmp = path.with_suffix(".part")
        tmp.write_bytes(clean_run(seed, n_steps=steps).jsonl())
        tmp.rename(path)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if done.returncode not in (0, 1):  # check exits 1 when an alert reaches --fail-on
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
                    / "trainwatch-check-bench")
    args = ap.parse_args(argv)
    path = data_file(args.cache, args.steps, args.seed)
    exe = [sys.executable, "-m", "trainwatch"]
    times: dict[str, list[float]] = {"inspect": [], "check": []}
    for _ in range(args.repeat):  # interleaved: a slow spell of a shared machine hits both
        times["inspect"].append(timed([*exe, "inspect", str(path), "--format", "json"]))
        times["check"].append(timed([*exe, "check", str(path), "--format", "json",
                                     "--fail-on", "never"]))
    ins, chk = (statistics.median(times[k]) for k in ("inspect", "check"))
    ratio = chk / ins
    print(f"{args.steps:,} steps, 7 series ({path.stat().st_size / 1e6:.0f} MB), median of "
          f"{args.repeat}: inspect {ins:.2f} s (baseline), check {chk:.2f} s -> {ratio:.2f}x "
          f"inspect (budget <= {BUDGET:g}x) {'ok' if ratio <= BUDGET else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
