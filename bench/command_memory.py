"""Peak memory of ``inspect``, ``check`` and ``report`` on a short run and a long run of the same
shape (#15: each command at 5M points within 1.5x of its peak at 100k).

Two clean runs of the detection bench's shape (``bench/synthetic.py``: one record per step with 7
series, ``val_loss`` every 50-200 steps) of about 100k and 5M metric points are written once into a
cache folder; then each command runs on each as a user runs it, a subprocess with its output sent
to /dev/null, and its peak RSS is its own VmHWM (``/proc/self/status``) as it exits.

    python bench/command_memory.py                       # 100k vs 5M points
    python bench/command_memory.py --large 1000000       # a quicker look
    python bench/command_memory.py --commands report --repeat 3
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/command_memory.py`

from bench.check_cost import data_file

TARGET = 1.5
"""Peak RSS at the large run over that at the small run, per command (#15)."""
COMMANDS = {
    "inspect": ["inspect", "--format", "json"],
    "check": ["check", "--format", "json"],
    "report": ["report", "--format", "json"],
}
POINTS_PER_STEP = 7
"""Metric points a record of the clean shape carries (val_loss adds ~1 % more)."""


CHILD = """
import sys
from trainwatch.cli import main
try:
    rc = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as f:
        hwm = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
    sys.stderr.write(f"\\nVmHWM {hwm}\\n")
sys.exit(rc)
"""
"""A command run as ``trainwatch`` runs it, that says its own peak RSS last on stderr: VmHWM
belongs to the process's memory map, which exec replaces (``ru_maxrss`` of a child would start
from this process's size, inherited at fork)."""


def peak_of(args: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of ``trainwatch ARGS`` run as a subprocess."""
    cmd = [sys.executable, "-c", CHILD, *args]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    dt = time.perf_counter() - t0
    if done.returncode not in (0, 1):  # check exits 1 when an alert reaches --fail-on
        raise SystemExit(f"trainwatch {' '.join(args)} failed ({done.returncode}): "
                         f"{done.stderr.strip()}")
    return int(done.stderr.split()[-1]) / 1024, dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=100_000, help="points of the short run")
    ap.add_argument("--large", type=int, default=5_000_000, help="points of the long run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per command and size (median)")
    ap.add_argument("--commands", nargs="+", choices=tuple(COMMANDS), default=list(COMMANDS))
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
                    / "trainwatch-command-memory")
    a = ap.parse_args(argv)
    small = data_file(a.cache, a.small // POINTS_PER_STEP, a.seed)
    large = data_file(a.cache, a.large // POINTS_PER_STEP, a.seed)
    print(f"runs: {a.small:,} and {a.large:,} points ({large.stat().st_size / 1e6:.0f} MB); "
          f"peak RSS in MiB, median of {a.repeat}")
    print(f"{'command':<8} {'at ' + format(a.small, ','):>12} {'at ' + format(a.large, ','):>12} "
          f"{'ratio':>6} {'target':>6}  {'':<3} {'wall s (large)':>14}")
    failed = 0
    for name in a.commands:
        runs = {path: [peak_of([*COMMANDS[name][:1], str(path), *COMMANDS[name][1:]])
                       for _ in range(a.repeat)] for path in (small, large)}
        lo = statistics.median(r[0] for r in runs[small])
        hi = statistics.median(r[0] for r in runs[large])
        wall = statistics.median(r[1] for r in runs[large])
        ok = hi / lo <= TARGET
        failed += not ok
        print(f"{name:<8} {lo:12.1f} {hi:12.1f} {hi / lo:5.2f}x {TARGET:5.1f}x  "
              f"{'ok' if ok else 'NO':<3} {wall:14.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
