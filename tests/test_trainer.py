"""The bundled trainer on tiny configs, run in-process (one in a process of its own): what it logs,
checkpoints and resumes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.trainer.__main__ import main
from trainwatch.trainer.checkpoint import list_checkpoints

STEP_FIELDS = {"step", "time", "epoch", "loss", "lr", "grad_norm", "step_time", "throughput",
               "memory"}


def records(run_dir: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def metrics(recs: list[dict]) -> list[dict]:
    return [r for r in recs if "event" not in r]


def events(recs: list[dict], name: str) -> list[dict]:
    return [r for r in recs if r.get("event") == name]


def run(run_dir: Path, config: str, *sets: str, resume: bool = False) -> int:
    argv = [config, "--run-dir", str(run_dir), "--device", "cpu"]
    if sets:
        argv += ["--set", *sets]
    if resume:
        argv.append("--resume")
    return main(argv)


def test_mlp_logs_every_step_with_evals_and_checkpoints(tmp_path, capsys):
    d = tmp_path / "run"
    rc = run(d, "mlp", "train.steps=30", "eval.every=10", "checkpoint.every=10",
             "checkpoint.keep=2")
    assert rc == 0
    out = capsys.readouterr().out
    assert "task mlp, 30 steps" in out and str(d) in out  # the config summary
    recs = records(d)
    start = recs[0]
    assert start["event"] == "run_start"
    assert start["config"]["train"]["steps"] == 30 and start["config"]["task"] == "mlp"
    steps = metrics(recs)
    assert [r["step"] for r in steps] == list(range(1, 31))
    for r in steps:
        assert STEP_FIELDS <= set(r), set(r)
        assert r["step_time"] > 0 and r["throughput"] == pytest.approx(64 / r["step_time"])
        assert r["memory"] > 10  # RSS in MB
        assert r["epoch"] == pytest.approx(r["step"] * 64 / 4096, abs=1e-4)
    assert [r["step"] for r in steps if "val_loss" in r] == [10, 20, 30]
    assert [e["step"] for e in events(recs, "eval")] == [10, 20, 30]
    assert [e["step"] for e in events(recs, "checkpoint")] == [10, 20, 30]
    assert [s for s, _ in list_checkpoints(d)] == [20, 30]  # keep=2
    end = recs[-1]
    assert end["event"] == "run_end" and end["status"] == "finished" and end["exit_code"] == 0
    # learning happened
    assert steps[-1]["val_loss"] < steps[9]["val_loss"] or steps[-1]["loss"] < steps[0]["loss"]
    assert (d / "config.yaml").is_file()


def test_resume_continues_exactly_and_shows_a_new_segment(tmp_path):
    straight = tmp_path / "straight"
    assert run(straight, "mlp", "train.steps=30", "eval.every=0") == 0
    d = tmp_path / "resumed"
    assert run(d, "mlp", "train.steps=25", "eval.every=0", "checkpoint.every=10") == 0
    # pretend the run died after step 25 without its final checkpoint: resume from step 20
    (d / "checkpoints" / "ckpt-00000025.pt").unlink()
    assert run(d, "mlp", "train.steps=30", "eval.every=0", resume=True) == 0
    recs = records(d)
    resumed = events(recs, "resume")
    assert len(resumed) == 1 and resumed[0]["step"] == 20
    assert len(events(recs, "run_start")) == 2 and len(events(recs, "run_end")) == 2
    # the reader sees the rewind from 25 to 21 as a new segment
    batch = JsonlParser(str(d / "metrics.jsonl")).parse((d / "metrics.jsonl").read_bytes())
    assert [(r.from_step, r.to_step) for r in batch.rewinds] == [(25, 21)]
    # model, optimizer, RNG and data order restored: the same losses as an uninterrupted run
    want = {r["step"]: r["loss"] for r in metrics(records(straight))}
    got = [r for r in metrics(recs)][-10:]
    assert [r["step"] for r in got] == list(range(21, 31))
    for r in got:
        assert r["loss"] == pytest.approx(want[r["step"]], rel=1e-6)


def test_resume_without_config_uses_the_runs_own(tmp_path):
    d = tmp_path / "run"
    assert run(d, "mlp", "train.steps=5", "eval.every=0", "model.hidden=8") == 0
    assert main(["--resume", "--run-dir", str(d), "--set", "train.steps=8"]) == 0
    recs = records(d)
    assert recs[-1]["status"] == "finished"
    assert [r["step"] for r in metrics(recs)][-3:] == [6, 7, 8]
    assert events(recs, "run_start")[-1]["config"]["model"]["hidden"] == 8


def test_lstm_logs_state_probe_and_graph_size(tmp_path):
    d = tmp_path / "lstm"
    small = ["train.steps=40", "train.batch_size=4", "model.hidden=8", "data.seq_len=15",
             "data.train_sequences=8", "data.val_sequences=2", "eval.every=20",
             "log.graph_every=5", "checkpoint.every=0"]
    assert run(d, "lstm_freq", *small) == 0
    steps = metrics(records(d))
    assert all(r["state_attached"] == 0.0 for r in steps)  # detached after every backward
    sizes = [r["graph_size"] for r in steps if "graph_size" in r]
    assert len(sizes) == 8 and len(set(sizes)) == 1  # one step's graph, every time
    assert [r["step"] for r in steps if "val_loss" in r] == [20, 40]
    # the retain-graph bug from step 10: the probe flips and the graph grows step after step
    d2 = tmp_path / "leaky"
    assert run(d2, "lstm_freq", *small, "fault.kind=no_detach_retain",
               "fault.step=10") == 0
    steps = metrics(records(d2))
    assert [r["state_attached"] for r in steps[:10]] == [0.0] * 10
    assert all(r["state_attached"] == 1.0 for r in steps[10:])
    grown = [r["graph_size"] for r in steps if "graph_size" in r and r["step"] >= 10]
    assert grown == sorted(grown) and grown[-1] > 5 * grown[0]


def test_plain_no_detach_dies_with_pytorchs_error(tmp_path, capsys):
    d = tmp_path / "nd"
    rc = run(d, "faults/no_detach", "train.batch_size=4", "model.hidden=8", "data.seq_len=15",
             "data.train_sequences=8", "data.val_sequences=2")
    assert rc == 1
    assert "Trying to backward through the graph a second time" in capsys.readouterr().err
    recs = records(d)
    # the failing step's forward is still logged: its probe shows the attached state
    assert metrics(recs)[-1]["state_attached"] == 1.0
    assert recs[-1]["status"] == "crashed" and recs[-1]["exit_code"] == 1


def test_tiny_gpt_counts_tokens(tmp_path):
    d = tmp_path / "gpt"
    assert run(d, "tiny_gpt", "train.steps=6", "train.batch_size=2", "model.seq_len=16",
               "model.d_model=16", "model.layers=1", "data.train_sequences=32",
               "data.val_sequences=4", "eval.every=3", "train.warmup_steps=2") == 0
    steps = metrics(records(d))
    assert steps[0]["lr"] == pytest.approx(1e-3 / 2)  # warmup
    assert steps[0]["throughput"] == pytest.approx(2 * 16 / steps[0]["step_time"])
    assert steps[0]["loss"] == pytest.approx(math.log(32), rel=0.15)  # starts near uniform


def test_oom_is_reported_with_a_checkpoint(tmp_path, capsys):
    d = tmp_path / "oom"
    assert run(d, "faults/oom", "fault.step=7", "train.steps=20") == 1
    err = capsys.readouterr().err
    assert "out of memory at step 7" in err and "--resume" in err
    recs = records(d)
    oom = events(recs, "oom")
    assert len(oom) == 1 and oom[0]["step"] == 7 and "CUDA out of memory" in oom[0]["message"]
    assert events(recs, "checkpoint")[-1]["step"] == 6
    assert [s for s, _ in list_checkpoints(d)] == [6]
    assert recs[-1]["status"] == "crashed" and recs[-1]["exit_code"] == 1
    assert check_crash(d) == ("run_crashed", "error", "cuda_oom")


def check_crash(run_dir: Path) -> tuple[str, str, str]:
    """`trainwatch check` on a run the trainer ended crashed (no console.log: it went to the
    terminal): exit code 1 and one alert, the run's end with its diagnosis."""
    r = subprocess.run([sys.executable, "-m", "trainwatch", "check", str(run_dir), "--format",
                        "json"], capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    [a] = json.loads(r.stdout)["alerts"]
    return a["rule"], a["severity"], a["evidence"]["kind"]


def test_crash_fault_leaves_traceback_and_crashed_end(tmp_path, capsys):
    d = tmp_path / "crash"
    assert run(d, "faults/crash", "fault.step=4") == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "Expected all tensors to be on the same device" in err
    recs = records(d)
    assert metrics(recs)[-1]["step"] == 3
    assert recs[-1]["status"] == "crashed" and "InjectedCrash" in recs[-1]["error"]
    assert check_crash(d) == ("run_crashed", "error", "device_mismatch")


def test_nan_fault_logs_non_finite_loss(tmp_path):
    d = tmp_path / "nan"
    assert run(d, "faults/nan", "fault.step=5", "train.steps=8") == 0
    steps = metrics(records(d))
    assert all(math.isfinite(r["loss"]) for r in steps[:4])
    assert all(math.isnan(r["loss"]) for r in steps[4:])


def test_frozen_fault_keeps_loss_exactly_constant(tmp_path):
    d = tmp_path / "frozen"
    assert run(d, "faults/frozen", "train.steps=10", "eval.every=0") == 0
    steps = metrics(records(d))
    assert len({r["loss"] for r in steps}) == 1
    assert all(r["grad_norm"] > 0 for r in steps)


def test_memory_leak_fault_grows_rss(tmp_path):
    d = tmp_path / "leak"
    # in a process of its own: inside the test process the kept tensors fill memory that earlier
    # tests freed, and the RSS need not grow at all
    r = subprocess.run([sys.executable, "-m", "trainwatch.trainer", "faults/memory_leak",
                        "--run-dir", str(d), "--device", "cpu", "--set", "train.steps=200",
                        "eval.every=0"], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    mem = np.asarray([r["memory"] for r in metrics(records(d))], dtype=float)
    # about 0.05 MB kept per step; judge the trend, not three points
    steps = np.arange(mem.shape[0])
    slope = np.polyfit(steps[10:], mem[10:], 1)[0]
    assert slope > 0.025, f"RSS grew {slope:.3f} MB/step"
    assert np.median(mem[-20:]) - np.median(mem[10:30]) > 5


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    assert main(["mlp", "--run-dir", str(tmp_path / "x"), "--set", "train.lrr=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train.lrr" in err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["mlp", "--run-dir", str(blocker / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not writable" in err and str(blocker / "run") in err
    assert main([]) == 2 and "CONFIG" in capsys.readouterr().err
    assert main(["no-such-config"]) == 2 and "no-such-config" in capsys.readouterr().err


def test_no_validation_set_is_warned_about(tmp_path, capsys):
    assert run(tmp_path / "r", "mlp", "train.steps=2", "eval.every=0") == 0
    assert "WARNING: no validation set" in capsys.readouterr().err


def test_help_shows_an_example(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "--set" in out and "torchrun" in out


def test_list_and_print_config(capsys):
    assert main(["--list"]) == 0
    names = capsys.readouterr().out.split()
    assert "lstm_freq" in names and "faults/nan" in names
    assert main(["faults/nan", "--print-config", "--set", "train.steps=3"]) == 0
    out = capsys.readouterr().out
    assert "steps: 3" in out and "expect_rule: \"nan_inf\"" in out


def test_resume_with_a_mismatched_config_is_a_usage_error(tmp_path, capsys):
    d = tmp_path / "run"
    assert run(d, "mlp", "train.steps=5", "eval.every=0") == 0
    capsys.readouterr()
    before = (d / "metrics.jsonl").read_text()
    assert run(d, "mlp", "train.steps=8", "model.hidden=8", resume=True) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot resume" in err and "ckpt-00000005.pt" in err and "size mismatch" in err
    assert err.count("\n") == 0
    assert (d / "metrics.jsonl").read_text() == before  # nothing written
