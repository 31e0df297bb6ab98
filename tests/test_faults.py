"""Every packaged fault config, run for real, makes `trainwatch check` fire its ``expect_rule``;
the clean configs fire nothing at error level.

Runs go through the supervisor (so ``console.log`` is captured, as in real use), one at a time:
a small pool starts the next run as soon as the previous one ends, while its test runs `check`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainwatch.trainer.configfile import load_config, packaged_configs
from trainwatch.trainer.supervise import read_process, start_run, stop_run, wait_ended

PY = sys.executable
RUN_TIMEOUT = 90.0
PARALLEL = 1
"""Runs at a time. One: the step-time rules judge timings, and a second run sharing a 2-core
machine is exactly the kind of noise they should not fire on."""

LIVE_ONLY = {"stall", "slow_rank"}
"""Faults that need their own test: a stall is judged while it lasts, a slow rank needs DDP."""
FAULTS = sorted(p.stem for p in (packaged_configs() / "faults").glob("*.yaml")
                if p.stem not in LIVE_ONLY)
CLEAN = {
    "mlp": [],
    "lstm_freq": ["train.steps=2500", "checkpoint.every=0"],
    "tiny_gpt": ["train.steps=200", "eval.every=50", "checkpoint.every=0"],
}


def check(run_dir: Path, *extra: str) -> dict:
    r = subprocess.run([PY, "-m", "trainwatch", "check", str(run_dir), "--format", "json",
                        "--fail-on", "never", *extra], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"check failed ({r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout)


def fired(result: dict, min_severity: str = "info") -> set[str]:
    order = {"info": 0, "warning": 1, "error": 2}
    return {a["rule"] for a in result["alerts"] if order[a["severity"]] >= order[min_severity]}


def describe(result: dict) -> str:
    return "; ".join(f"{a['rule']}/{a['severity']}@{a['step']}: {a['message']}"
                     for a in result["alerts"]) or "no alerts"


class RunPool:
    """Starts supervised trainer runs ahead of the tests that need them, PARALLEL at a time."""

    def __init__(self, root: Path, jobs: list[tuple[str, list[str]]]) -> None:
        self.root = root
        self.queue = list(jobs)
        self.started: dict[str, Path] = {}

    def _launch(self) -> None:
        running = [d for d in self.started.values() if not _ended(d)]
        while self.queue and len(running) < PARALLEL:
            name, argv = self.queue.pop(0)
            d = self.root / name.replace("/", "_")
            start_run([PY, "-m", "trainwatch.trainer", *argv, "--run-dir", str(d),
                       "--device", "cpu"], d)
            self.started[name] = d
            running.append(d)

    def result(self, name: str) -> Path:
        deadline = time.monotonic() + RUN_TIMEOUT * (1 + len(self.queue) / PARALLEL)
        while True:
            self._launch()
            d = self.started.get(name)
            if d is not None and _ended(d):
                self._launch()  # keep the pool busy while the caller checks
                return d
            if time.monotonic() > deadline:
                raise AssertionError(f"run {name} did not finish in time")
            time.sleep(0.1)

    def kill_all(self) -> None:
        for d in self.started.values():
            _kill(d)


def _ended(d: Path) -> bool:
    info = read_process(d)
    return info is not None and (info.ended or info.status() == "lost")


def _kill(d: Path) -> None:
    info = read_process(d)
    if info is not None and info.alive() and info.pgid:
        os.killpg(info.pgid, signal.SIGKILL)
        wait_ended(d, timeout=10)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    jobs = [(f"faults/{f}", [f"faults/{f}"]) for f in FAULTS]
    jobs += [(name, [name, "--set", *sets] if sets else [name]) for name, sets in CLEAN.items()]
    p = RunPool(tmp_path_factory.mktemp("faults"), jobs)
    yield p
    p.kill_all()


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_fires_its_rule(pool, fault):
    expect = load_config(f"faults/{fault}").expect_rule
    d = pool.result(f"faults/{fault}")
    result = check(d)
    print(f"\n{fault}: expected {expect}; fired {sorted(fired(result))}")  # shown with -s
    assert expect in fired(result), (
        f"{fault}: expected {expect}; got {describe(result)}\n"
        f"console tail: {(d / 'console.log').read_text()[-1500:]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_config_has_no_errors(pool, name):
    d = pool.result(name)
    info = read_process(d)
    assert info is not None and info.exit_code == 0, (d / "console.log").read_text()[-1500:]
    result = check(d)
    print(f"\n{name} (clean): fired {sorted(fired(result))}")  # shown with -s
    assert not fired(result, "error"), f"{name}: {describe(result)}"


@pytest.mark.slow
def test_stall_fires_stalled_stream_while_it_lasts(tmp_path):
    """``stalled_stream`` waits max(60 s, 10x the median gap) by default; a rules file lowers the
    minimum so the test need not sit through a minute of silence."""
    expect = load_config("faults/stall").expect_rule
    rules = tmp_path / "rules.yaml"
    rules.write_text("stalled_stream:\n  min_seconds: 1.0\n")
    d = tmp_path / "stall"
    start_run([PY, "-m", "trainwatch.trainer", "faults/stall", "--run-dir", str(d)], d)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while "stalling for" not in _console(d):
            assert time.monotonic() < deadline, "the run never stalled"
            time.sleep(0.1)
        result: dict = {"alerts": []}
        while expect not in fired(result):
            assert time.monotonic() < deadline, f"{expect} never fired: {describe(result)}"
            result = check(d, "--rules", str(rules))
    finally:
        stop_run(d, grace=10)
        _kill(d)


@pytest.mark.slow
def test_slow_rank_fires_rank_straggler(tmp_path):
    expect = load_config("faults/slow_rank").expect_rule
    d = tmp_path / "slow_rank"
    # started as one process, as `trainwatch train` and the TUI start it: its dist.nproc (2)
    # launches both ranks through torch.distributed.run
    h = start_run([PY, "-m", "trainwatch.trainer", "faults/slow_rank", "--run-dir", str(d),
                   "--device", "cpu"], d)
    info = h.wait(timeout=RUN_TIMEOUT * 2)
    try:
        assert info is not None and info.exit_code == 0, _console(d)[-2000:]
        result = check(d)
        assert expect in fired(result), f"expected {expect}; got {describe(result)}"
    finally:
        _kill(d)


def _console(d: Path) -> str:
    p = d / "console.log"
    return p.read_text() if p.exists() else ""
