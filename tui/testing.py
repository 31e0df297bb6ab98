"""Helpers shared by the TUI's tests and its benchmark: a predictable rule engine, run files,
and waiting on a condition with a deadline (never a fixed sleep)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from trainwatch.batch import RecordBatch
from trainwatch.rules.engine.alert import Alert, Cause


class FakeEngine:
    """Alerts on every non-finite value (``nan_inf``, error) and on ``Traceback`` in the console
    (``crash``, error); records what it was asked to do. Thread-safe enough for one feeder."""

    def __init__(self) -> None:
        self.muted: set[str] = set()
        self.ticks = 0
        self.fed = 0

    def _nan(self, batch: RecordBatch) -> list[Alert]:
        out = []
        if "nan_inf" in self.muted:
            return out
        for name, ch in batch.series.items():
            for step, v, t in zip(ch.steps, ch.values, ch.times):
                if not math.isfinite(v):
                    out.append(Alert(
                        "nan_inf", "error", int(step), float(t), name, f"{name} is {v}",
                        evidence={"value": float(v), "last_finite": 1.25, "window": [1.0, 1.5]},
                        causes=(Cause("learning rate too high", 0.7), Cause("bad batch", 0.2)),
                        fixes=("lower the learning rate", "clip gradients"),
                    ))
        return out

    def feed(self, batch: RecordBatch, now: float | None = None) -> list[Alert]:
        self.fed += batch.n_records
        return self._nan(batch)

    def feed_rank(self, rank: int, batch: RecordBatch, now: float | None = None) -> list[Alert]:
        return self._nan(batch)

    def feed_console(self, lines: list[str], first_line: int) -> list[Alert]:
        if "crash" in self.muted:
            return []
        return [Alert("crash", "error", 0, 0.0, None, f"console line {first_line + i}: {ln}")
                for i, ln in enumerate(lines) if "Traceback" in ln]

    def tick(self, now: float) -> list[Alert]:
        self.ticks += 1
        return []

    def mute(self, rule_id: str) -> None:
        self.muted.add(rule_id)


def record(step: int, t0: float = 1.7e9, **values: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"step": step, "time": t0 + step * 0.1}
    rec.update(values)
    return rec


def train_record(step: int, t0: float = 1.7e9) -> dict[str, Any]:
    """A plausible training record (loss decays, LR warms up and decays, grad norm noisy)."""
    lr = 1e-3 * min(1.0, step / 50) * (0.5 + 0.5 * math.cos(math.pi * min(step, 5000) / 5000))
    return record(step, t0, loss=2.5 * math.exp(-step / 300) + 0.3 + 0.05 * math.sin(step * 1.3),
                  val_loss=None, lr=lr, grad_norm=1.0 + 0.3 * math.sin(step * 0.7) ** 2,
                  throughput=20000 + 500 * math.sin(step / 10))


def lines(records: Iterable[dict[str, Any]]) -> str:
    out = []
    for r in records:
        r = {k: v for k, v in r.items() if v is not None}
        out.append(json.dumps(r))  # NaN/Infinity as bare tokens, like json.dumps writers
    return "".join(x + "\n" for x in out)


def write_run(run_dir: Path, steps: range, *, console: str | None = None) -> Path:
    """A run directory with ``metrics.jsonl`` (and ``console.log``); returns the metrics path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "metrics.jsonl"
    start = {"event": "run_start", "time": 1.7e9, "config": {"train": {"steps": 1000}}}
    path.write_text(json.dumps(start) + "\n" + lines(train_record(s) for s in steps))
    if console is not None:
        (run_dir / "console.log").write_text(console)
    return path


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


async def wait_for(pilot: Pilot, cond: Callable[[], object], timeout: float = 5.0,
                   what: str = "condition") -> None:
    """Let the app run until ``cond()`` is true; fails with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.01)
