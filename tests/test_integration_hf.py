"""The HF Trainer callback with the real Trainer on CPU: a tiny model, a few hundred steps."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from disk_faults import DiskState
from framework_runs import (
    DISK_FAULTS,
    LiveProbe,
    assert_crashed,
    assert_one_warning_for,
    check_reads,
    metric_rows,
    roles_of,
    run_dir_for,
    run_end,
)

transformers = pytest.importorskip(
    "transformers", minversion="4.41",
    reason="transformers>=4.41 cannot be imported (pip install '.[frameworks]')",
)
pytest.importorskip(  # the Trainer needs it
    "accelerate", reason="accelerate cannot be imported (pip install '.[frameworks]')"
)
torch = pytest.importorskip("torch")

from trainwatch.integrations.hf import TrainwatchCallback

STEPS = 300

from tiny_hf import make_trainer


class Probe(transformers.TrainerCallback):
    """Placed after ours: reads the file at every log, and fills the disk when told."""

    def __init__(self, probe: LiveProbe, disk: DiskState | None = None, full_at: int = 0) -> None:
        self.probe, self.disk, self.full_at = probe, disk, full_at

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if state.global_step % 25 == 0:
            self.probe.look(state.global_step)
        if self.disk is not None and state.global_step == self.full_at:
            self.disk.full = True


def test_records_arrive_as_the_trainer_logs_and_check_reads_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    probe = LiveProbe(run_dir)
    trainer = make_trainer(tmp_path / "out", [TrainwatchCallback(run_dir), Probe(probe)], STEPS)
    trainer.train()

    probe.assert_live(STEPS)
    rows = metric_rows(run_dir)
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1))
    assert [r["step"] for r in rows if "eval_loss" in r] == [100, 200, 300]
    assert {"loss", "grad_norm", "learning_rate", "epoch"} <= rows[0].keys()
    roles = roles_of(run_dir)
    assert {r: roles.get(r) for r in ("loss", "val_loss", "lr", "grad_norm", "epoch")} == {
        "loss": "loss", "val_loss": "eval_loss", "lr": "learning_rate", "grad_norm": "grad_norm",
        "epoch": "epoch",
    }
    assert run_end(run_dir)["status"] == "finished"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["max_steps"] == STEPS
    assert config["training_args"]["learning_rate"] == 1e-2
    assert config["model_config"]["width"] == 8
    check_reads(run_dir)


@pytest.mark.slow  # a fresh interpreter imports torch and transformers: ~10 s of CPU
def test_an_exception_that_kills_the_script_ends_the_run_crashed(tmp_path: Path) -> None:
    """The Trainer has no exception hook: the uncaught exception reaches ``sys.excepthook``."""
    run_dir = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from tiny_hf import make_trainer
        from transformers import TrainerCallback
        from trainwatch.integrations.hf import TrainwatchCallback

        class Boom(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == 120:
                    raise RuntimeError("boom at step 120")

        make_trainer({str(tmp_path / "out")!r}, [TrainwatchCallback({str(run_dir)!r}), Boom()],
                     {STEPS}).train()
    '''))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 1, out.stderr
    assert "Traceback" in out.stderr and "boom at step 120" in out.stderr  # the default hook ran
    assert_crashed(run_dir, "RuntimeError: boom at step 120")
    assert max(r["step"] for r in metric_rows(run_dir)) == 119  # step 120 died before its log


def test_with_the_callback_a_caught_exception_still_ends_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"

    class Boom(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 30:
                raise ValueError("bad batch")

    callback = TrainwatchCallback(run_dir)
    with pytest.raises(ValueError, match="bad batch"), callback:
        make_trainer(tmp_path / "out", [callback, Boom()], STEPS).train()
    assert_crashed(run_dir, "ValueError: bad batch")


@pytest.mark.parametrize("fault", DISK_FAULTS)
def test_a_disk_error_is_one_warning_and_training_goes_on(
    tmp_path: Path, disk: DiskState, fault: str
) -> None:
    run_dir = run_dir_for(tmp_path, fault)
    callbacks = [TrainwatchCallback(run_dir), Probe(LiveProbe(run_dir), disk, full_at=50)]
    with pytest.warns() as caught:
        result = make_trainer(tmp_path / "out", callbacks, 150).train()
    assert result.global_step == 150
    assert_one_warning_for(fault, run_dir, caught.list, last_step=50)
