"""Trainer configs and schedules: pure, no torch needed (except the import-contract check)."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys

import pytest
import yaml

from trainwatch.trainer.config import FAULT_KINDS, ConfigError, FaultCfg, TrainCfg
from trainwatch.trainer.configfile import (
    list_packaged,
    load_config,
    packaged_configs,
    resolve_config,
)
from trainwatch.trainer.schedule import EXHAUSTED_FLOOR, fault_lr_factor, lr_at, lr_factor

RULE_IDS = {
    "nan_inf", "loss_spike", "grad_explosion", "grad_vanishing", "learning_stalled", "plateau",
    "divergence", "overfit", "lr_exhausted", "stalled_stream", "step_time_outlier",
    "throughput_drop", "memory_growth", "state_detach", "rank_straggler", "console_error",
    "run_crashed",
}


@pytest.mark.parametrize("name", list_packaged())
def test_every_packaged_config_loads(name):
    cfg = load_config(name)
    assert cfg.task in ("mlp", "lstm_freq", "tiny_gpt")
    if name.startswith("faults/"):
        assert cfg.fault.kind in FAULT_KINDS and cfg.fault.kind != "none"
        assert cfg.expect_rule in RULE_IDS, f"{name}: expect_rule {cfg.expect_rule!r}"
        assert cfg.name == name.split("/")[1]


def test_packaged_lookup_by_name_and_path():
    assert resolve_config("mlp") == packaged_configs() / "mlp.yaml"
    assert resolve_config("faults/nan") == packaged_configs() / "faults" / "nan.yaml"
    assert resolve_config("nan") == packaged_configs() / "faults" / "nan.yaml"
    with pytest.raises(ConfigError, match="no-such-config"):
        resolve_config("no-such-config")


def test_base_and_overrides_layer_in_order(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("base: mlp\ntrain: {steps: 7, lr: 3e-4}\nfault: {kind: nan, step: 3}\n")
    cfg = load_config(str(f), ["train.steps=9", "model.hidden=8", "data.full_batch=true"])
    assert cfg.name == "mine"
    assert cfg.train.steps == 9  # --set wins over the file
    assert cfg.train.lr == pytest.approx(3e-4)  # "3e-4" (a YAML 1.1 string) read as a float
    assert cfg.train.batch_size == 64  # from the base
    assert cfg.model.hidden == 8 and cfg.data.full_batch is True
    assert cfg.fault.kind == "nan" and cfg.fault.step == 3


def test_task_switch_brings_its_own_sections():
    cfg = load_config(None, ["task=lstm_freq", "data.seq_len=10"])
    assert cfg.task == "lstm_freq" and cfg.data.seq_len == 10
    assert cfg.data.freqs == [1.0, 3.0, 5.0, 7.0]
    # a file's model section belongs to its task: switching the task under it is an error
    with pytest.raises(ConfigError, match="unknown key 'model.in_dim'"):
        load_config("mlp", ["task=lstm_freq"])


@pytest.mark.parametrize("sets, pattern", [
    (["train.lrr=1"], r"unknown key 'train.lrr' \(known: .*lr"),
    (["nope=1"], "unknown key 'nope'"),
    (["train.steps=ten"], "train.steps must be int"),
    (["train.steps=1.5"], "train.steps must be int"),
    (["data.full_batch=maybe"], "data.full_batch must be bool"),
    (["task=lstm_freq", "data.freqs=[1, x]"], r"data.freqs\[1\] must be float"),
    (["train"], "expected KEY=VALUE"),
    (["train=1"], "is a section"),
    (["fault.kind=gremlins"], "fault.kind: 'gremlins' is not one of"),
    (["train.steps=0"], "train.steps: must be > 0"),
    (["task=resnet"], "unknown task 'resnet'"),
])
def test_bad_overrides_name_the_key(sets, pattern):
    with pytest.raises(ConfigError, match=pattern) as e:
        load_config(None if sets[0].startswith("task=") else "mlp", sets)
    assert "\n" not in str(e.value)


def test_file_errors_name_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("task: mlp\ntrain:\n  steps: 10\n  lrr: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:4: unknown key 'train.lrr'"):
        load_config(str(f))
    f.write_text("task: mlp\ntrain: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: invalid YAML"):
        load_config(str(f))
    f.write_text("base: bad\n")
    with pytest.raises(ConfigError, match="loops back"):
        load_config(str(f))


def test_string_keys_take_text_verbatim():
    cfg = load_config("mlp", ["fault.message=on", "description=null"])
    assert cfg.fault.message == "on" and cfg.description == "null"


def test_written_config_round_trips(tmp_path):
    """The run's config.yaml (written by RunWriter from to_dict) loads back as the same config,
    which is what --resume without CONFIG relies on."""
    from trainwatch.writer import to_yaml

    cfg = load_config("faults/lr_spike", ["train.lr=1e-5"])
    p = tmp_path / "config.yaml"
    p.write_text(to_yaml(cfg.to_dict()))
    assert load_config(str(p)) == cfg
    assert yaml.safe_load(p.read_text())["train"]["lr"] == pytest.approx(1e-5)


# ---------------------------------------------------------------------------- schedules


def test_warmup_then_cosine_reference():
    t = TrainCfg(steps=110, lr=1.0, schedule="cosine", warmup_steps=10, min_lr_ratio=0.1)
    for s in range(1, 111):
        if s <= 10:
            want = s / 10
        else:
            p = (s - 10) / 100
            want = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
        assert lr_factor(s, t) == pytest.approx(want)
    assert lr_factor(110, t) == pytest.approx(0.1)


def test_linear_and_constant():
    t = TrainCfg(steps=100, schedule="linear", decay_steps=50)
    assert lr_factor(25, t) == pytest.approx(0.5)
    assert lr_factor(80, t) == pytest.approx(0.0)
    assert lr_factor(80, TrainCfg(steps=100)) == 1.0


def test_fault_lr_factors():
    t = TrainCfg(lr=0.01)
    spike = FaultCfg(kind="lr_spike", step=5, factor=100.0, duration=2)
    assert [fault_lr_factor(s, spike) for s in (4, 5, 6, 7)] == [1.0, 100.0, 100.0, 1.0]
    assert lr_at(5, t, spike) == pytest.approx(1.0)
    zero = FaultCfg(kind="lr_zero", step=3)
    assert [fault_lr_factor(s, zero) for s in (2, 3, 99)] == [1.0, 0.0, 0.0]
    ex = FaultCfg(kind="lr_exhausted", step=100)
    vals = [fault_lr_factor(s, ex) for s in range(1, 200)]
    assert all(a >= b for a, b in itertools.pairwise(vals))  # never rises
    assert vals[-1] == EXHAUSTED_FLOOR and vals[0] > 0.99
    div = FaultCfg(kind="diverge", step=10, factor=3.0)
    assert fault_lr_factor(110, div) == pytest.approx(3.0)
    assert fault_lr_factor(FaultCfg().step + 5, FaultCfg()) == 1.0


def test_trainer_entry_points_do_not_import_torch():
    code = ("import sys, trainwatch.trainer, trainwatch.trainer.supervise, "
            "trainwatch.trainer.demo, trainwatch.trainer.config, trainwatch.trainer.configfile, "
            "trainwatch.trainer.schedule, trainwatch.trainer.steplog, trainwatch.trainer.sysmem, "
            "trainwatch.trainer.process, "
            "trainwatch.trainer.__main__\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_rank_fault_needs_its_ranks(tmp_path):
    """slow_rank slows rank 1: with one process there is no rank 1. The packaged config asks for
    two (dist.nproc), which the trainer launches itself; started as one process with fewer, it
    says what to set in one line, before torch is imported."""
    assert load_config("faults/slow_rank").dist.nproc == 2
    with pytest.raises(ConfigError, match=r"dist\.nproc: must be >= 1"):
        load_config("mlp", ["dist.nproc=0"])
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    r = subprocess.run([sys.executable, "-m", "trainwatch.trainer", "faults/slow_rank",
                        "--set", "dist.nproc=1", "--run-dir", str(tmp_path / "r")], check=False,
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "set dist.nproc=2" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_a_config_for_more_ranks_than_torchrun_started_is_refused(tmp_path):
    """Under torchrun (WORLD_SIZE set) the trainer does not launch again: a world size other
    than dist.nproc is one line naming both ways out, before torch is imported."""
    env = {**os.environ, "WORLD_SIZE": "3", "RANK": "0"}
    r = subprocess.run([sys.executable, "-m", "trainwatch.trainer", "faults/slow_rank",
                        "--run-dir", str(tmp_path / "r")], check=False, capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 2
    assert "dist.nproc is 2 but torchrun started 3 processes" in r.stderr
    assert "--nproc_per_node=2" in r.stderr and not (tmp_path / "r").exists()
