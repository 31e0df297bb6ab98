"""Distributed data parallel on two CPU processes (gloo) under torch.distributed.run."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def run_ddp(run_dir, *sets: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "trainwatch.trainer", "mlp", "--run-dir", str(run_dir), "--device", "cpu",
           "--set", "eval.every=10", *sets]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=240)


def load(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_two_ranks_write_main_and_rank_streams(tmp_path):
    d = tmp_path / "ddp"
    r = run_ddp(d, "train.steps=40", "fault.kind=slow_rank", "fault.rank=1",
                "fault.seconds=0.02")
    assert r.returncode == 0, r.stderr[-3000:]
    main = load(d / "metrics.jsonl")
    steps = [x for x in main if "loss" in x]
    assert [x["step"] for x in steps] == list(range(1, 41))
    assert main[-1]["event"] == "run_end" and main[-1]["status"] == "finished"
    assert [x["step"] for x in steps if "val_loss" in x] == [10, 20, 30, 40]
    busy = {}
    for rank in (0, 1):
        recs = load(d / f"metrics.rank{rank}.jsonl")
        assert recs[0]["event"] == "run_start" and recs[0]["rank"] == rank
        assert recs[-1]["event"] == "run_end" and recs[-1]["status"] == "finished"
        rsteps = [x for x in recs if "loss" in x]
        assert [x["step"] for x in rsteps] == list(range(1, 41))
        assert all({"step_time", "sync_wait", "loss"} <= set(x) for x in rsteps)
        busy[rank] = statistics.median(x["step_time"] for x in rsteps[5:])
    # rank 1 sleeps 20 ms a step; rank 0 waits for it, and that wait is not its own step time
    assert busy[1] > 0.02 and busy[1] > 1.5 * busy[0]
    # each rank trains on its own batches: their losses differ
    l0 = [x["loss"] for x in load(d / "metrics.rank0.jsonl") if "loss" in x]
    l1 = [x["loss"] for x in load(d / "metrics.rank1.jsonl") if "loss" in x]
    assert l0 != l1
    assert (d / "checkpoints").is_dir()
