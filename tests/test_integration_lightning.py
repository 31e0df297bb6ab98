"""The Lightning logger with the real Trainer on CPU: a tiny model, a few hundred steps."""

from __future__ import annotations

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

L = pytest.importorskip(
    "lightning.pytorch", minversion="2.4",
    reason="lightning>=2.4 cannot be imported (pip install '.[frameworks]')",
)
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # Lightning's advice (workers...)

from trainwatch.integrations.lightning import TrainwatchLogger

STEPS = 300


class TinyRegression(L.LightningModule):
    """``y = sum(x) + noise`` with one linear layer; raises at ``fail_at`` when given."""

    def __init__(self, lr: float = 1e-2, fail_at: int = -1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(8, 1)

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.hparams.fail_at:
            raise RuntimeError(f"boom at step {self.global_step}")
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def _data(n: int, seed: int, batch_size: int) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x.sum(-1) + 0.1 * torch.randn(n, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size)


class Probe(L.Callback):
    """Reads the file every 25 batches. Lightning records a batch at ``global_step - 1`` (the
    optimizer steps before it), and writes it after the batch-end hooks."""

    def __init__(self, probe: LiveProbe, disk: DiskState | None = None, full_at: int = 0) -> None:
        self.probe, self.disk, self.full_at = probe, disk, full_at

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step % 25 == 0:
            self.probe.look(trainer.global_step - 1)
        if self.disk is not None and trainer.global_step == self.full_at:
            self.disk.full = True


def fit(run_dir: Path, probe: Probe, fail_at: int = -1, steps: int = STEPS) -> Any:
    torch.manual_seed(0)
    trainer = L.Trainer(
        max_steps=steps, logger=TrainwatchLogger(run_dir), callbacks=[probe], accelerator="cpu",
        log_every_n_steps=1, val_check_interval=100, check_val_every_n_epoch=None,
        limit_val_batches=2,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(TinyRegression(fail_at=fail_at), _data(512, 1, 8), _data(64, 2, 32))
    return trainer


def test_records_arrive_as_lightning_logs_and_check_reads_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    probe = LiveProbe(run_dir)
    fit(run_dir, Probe(probe))

    # Lightning writes a batch's metrics after its batch-end hooks: the probe sees the batch before
    probe.assert_live(STEPS, lag=1)
    rows = metric_rows(run_dir)
    assert [r["step"] for r in rows if "train_loss" in r] == list(range(STEPS))
    assert [r["step"] for r in rows if "val_loss" in r] == [99, 199, 299]
    assert roles_of(run_dir) == {"loss": "train_loss", "val_loss": "val_loss", "epoch": "epoch"}
    assert run_end(run_dir)["status"] == "finished"
    assert yaml.safe_load((run_dir / "config.yaml").read_text()) == {"lr": 1e-2, "fail_at": -1}
    check_reads(run_dir)


def test_an_exception_in_training_ends_the_run_crashed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="boom at step 120"):
        fit(run_dir, Probe(LiveProbe(run_dir)), fail_at=120)
    assert_crashed(run_dir, "RuntimeError: boom at step 120")
    assert max(r["step"] for r in metric_rows(run_dir)) == 119


@pytest.mark.parametrize("fault", DISK_FAULTS)
def test_a_disk_error_is_one_warning_and_training_goes_on(
    tmp_path: Path, disk: DiskState, fault: str
) -> None:
    run_dir = run_dir_for(tmp_path, fault)
    with pytest.warns() as caught:
        trainer = fit(run_dir, Probe(LiveProbe(run_dir), disk, full_at=50), steps=150)
    assert trainer.global_step == 150
    # the disk filled in the hooks of the batch recorded as step 49, before its record
    assert_one_warning_for(fault, run_dir, caught.list, last_step=48)
