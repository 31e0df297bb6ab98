"""The trainer as a supervised process: SIGINT / SIGTERM save a checkpoint and end the run
"interrupted" with exit code 130 / 143, even in the middle of a stall."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainwatch.trainer.checkpoint import list_checkpoints
from trainwatch.trainer.supervise import read_process, start_run, stop_run, wait_ended


def wait_for(cond, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def metric_steps(run_dir: Path) -> int:
    p = run_dir / "metrics.jsonl"
    return p.read_text().count('"loss"') if p.exists() else 0


def tail_records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def cleanup():
    dirs: list[Path] = []
    yield dirs.append
    for d in dirs:
        info = read_process(d)
        if info is not None and info.alive() and info.pgid:
            os.killpg(info.pgid, signal.SIGKILL)
            wait_ended(d, timeout=10)


def test_sigint_checkpoints_and_exits_130(tmp_path, cleanup):
    d = tmp_path / "run"
    cleanup(d)
    # TRAINWATCH_RUN_DIR (set by the supervisor) is the trainer's default run directory
    start_run([sys.executable, "-m", "trainwatch.trainer", "mlp", "--set", "train.steps=1000000",
               "eval.every=0"], d)
    wait_for(lambda: metric_steps(d) > 50, what="training progress")
    steps = []
    final = stop_run(d, grace=30, on_step=steps.append)
    assert [s.signal_name for s in steps if s.action == "signal"] == ["SIGINT"]
    assert final is not None and final.state == "exited" and final.exit_code == 130
    recs = tail_records(d)
    end, ck = recs[-1], recs[-2]
    assert end["event"] == "run_end" and end["status"] == "interrupted" and end["exit_code"] == 130
    last_step = [r for r in recs if "loss" in r][-1]["step"]
    assert ck["event"] == "checkpoint" and ck["step"] == last_step
    assert list_checkpoints(d)[-1][0] == last_step
    assert "SIGINT received" in (d / "console.log").read_text()


def test_sigterm_during_a_stall_exits_143_promptly(tmp_path, cleanup):
    d = tmp_path / "stall"
    cleanup(d)
    h = start_run([sys.executable, "-m", "trainwatch.trainer", "faults/stall", "--run-dir",
                   str(d), "--set", "fault.step=20"], d)
    wait_for(lambda: "stalling for" in (d / "console.log").read_text(), what="the stall")
    t0 = time.monotonic()
    os.killpg(h.pid, signal.SIGTERM)
    final = wait_ended(d, timeout=30)
    assert time.monotonic() - t0 < 20  # the 3600 s sleep was cut short
    assert final is not None and final.exit_code == 143
    recs = tail_records(d)
    assert recs[-1]["status"] == "interrupted" and recs[-1]["exit_code"] == 143
    assert list_checkpoints(d)[-1][0] == 20  # the stalled step finished, then it stopped


@pytest.mark.slow
def test_demo_shows_progress_then_its_fault(tmp_path, cleanup):
    """`trainwatch demo`'s run: records within seconds, the state_detach fault within a minute."""
    from trainwatch.trainer.demo import launch_demo

    d = launch_demo(tmp_path / "demo")
    cleanup(d)
    t0 = time.monotonic()
    wait_for(lambda: metric_steps(d) > 0, timeout=30, what="the first record")
    first = time.monotonic() - t0
    wait_for(lambda: '"state_attached":1.0' in (d / "metrics.jsonl").read_text(), timeout=90,
             what="the fault")
    print(f"demo: first record after {first:.1f} s, fault after {time.monotonic() - t0:.1f} s")
    info = read_process(d)
    assert info is not None and info.status() == "running" and info.ours
    final = stop_run(d, grace=30)
    assert final is not None and final.exit_code == 130
