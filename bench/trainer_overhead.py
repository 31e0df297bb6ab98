"""Logging overhead of the bundled trainer: step time with trainwatch on vs off, same process.

For each default config two trainers are built from the same seed: one instrumented (metrics
gathered every step, RunWriter writing to a temporary directory with its flusher thread, memory
and state probes) and one that trains identically but measures and logs nothing. They run
alternating blocks of steps (the order flips every round, so drift and warm-up hit both alike);
the reported ratio is the median over rounds of on/off for adjacent blocks. Evaluation and
checkpoints are off in both: they are training work, not logging.

    python bench/trainer_overhead.py [--quick] [--configs lstm_freq,tiny_gpt,mlp]

Target: ratio <= 1.02 on the default configs (lstm_freq, tiny_gpt). ``mlp`` is the test task
(~0.4 ms steps), shown to make the fixed per-step cost visible.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trainwatch.trainer.config import CheckpointCfg, EvalCfg
from trainwatch.trainer.configfile import load_config
from trainwatch.trainer.loop import Trainer

BLOCK_SECONDS = 0.25
"""Aim for blocks this long (steps per block come from a timing probe)."""


def build(name: str, run_dir: Path, instrument: bool) -> Trainer:
    cfg = load_config(name)
    cfg = dataclasses.replace(cfg, eval=EvalCfg(every=0), checkpoint=CheckpointCfg(every=0))
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    t = Trainer(cfg, run_dir, torch.device("cpu"), instrument=instrument)
    t.open_writers()
    return t


def timed_block(t: Trainer, n: int) -> tuple[float, float]:
    """Wall and process-CPU seconds per step over ``n`` steps. CPU time (all threads of this
    process, the writer's flusher included) is immune to other processes on a shared box."""
    start = t.step
    w0, c0 = time.perf_counter(), time.process_time()
    for s in range(start + 1, start + n + 1):
        t.train_step(s)
    return (time.perf_counter() - w0) / n, (time.process_time() - c0) / n


@dataclasses.dataclass
class Result:
    off_ms: float
    on_ms: float
    wall_ratio: float
    cpu_ratio: float


def bench(name: str, rounds: int) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        on = build(name, Path(tmp) / "on", instrument=True)
        off = build(name, Path(tmp) / "off", instrument=False)
        probe, _ = timed_block(off, 20)
        timed_block(on, 20)
        n = max(5, int(BLOCK_SECONDS / max(probe, 1e-6)))
        wall: list[float] = []
        cpu: list[float] = []
        t_on: list[float] = []
        t_off: list[float] = []
        for r in range(rounds):
            first, second = (off, on) if r % 2 == 0 else (on, off)
            a = timed_block(first, n)
            b = timed_block(second, n)
            m_off, m_on = (a, b) if first is off else (b, a)
            t_off.append(m_off[0])
            t_on.append(m_on[0])
            wall.append(m_on[0] / m_off[0])
            cpu.append(m_on[1] / m_off[1])
        on.close_writers("finished", 0)
        off.close_writers("finished", 0)
    med = statistics.median
    return Result(med(t_off) * 1e3, med(t_on) * 1e3, med(wall), med(cpu))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--configs", default="lstm_freq,tiny_gpt,mlp")
    a = p.parse_args()
    rounds = 8 if a.quick else 30
    print(f"median of {rounds} paired blocks of ~{BLOCK_SECONDS:g} s; baseline = the same "
          "config trained without instrumentation, in the same process")
    print(f"{'config':<12} {'off ms/step':>12} {'on ms/step':>12} {'wall on/off':>12} "
          f"{'cpu on/off':>11}")
    for name in a.configs.split(","):
        r = bench(name, rounds)
        print(f"{name:<12} {r.off_ms:>12.3f} {r.on_ms:>12.3f} {r.wall_ratio:>11.3f}x "
              f"{r.cpu_ratio:>10.3f}x", flush=True)
    print("target: on/off <= 1.02x for the default configs (lstm_freq, tiny_gpt)")


if __name__ == "__main__":
    main()
