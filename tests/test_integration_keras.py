"""The Keras 3 callback with real ``fit`` on the torch backend: a tiny model, 300 batches."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
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

# Keras reads its backend once, at its import: the one CI has (torch, CPU), whatever is set
os.environ["KERAS_BACKEND"] = "torch"
keras = pytest.importorskip(
    "keras", minversion="3.0", reason="keras>=3.0 cannot be imported (pip install '.[frameworks]')"
)
pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings(  # Keras' own, on numpy 2, at every batch
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

from trainwatch.integrations.keras import TrainwatchCallback

EPOCHS, BATCHES = 3, 100
"""300 training steps: 100 batches of 8 a epoch."""


class Probe(keras.callbacks.Callback):
    """Placed after ours: reads the file every 25 batches, fills the disk or raises when told."""

    def __init__(self, probe: LiveProbe, disk: DiskState | None = None, full_at: int = 0,
                 fail_at: int = 0) -> None:
        super().__init__()
        self.probe, self.disk, self.full_at, self.fail_at = probe, disk, full_at, fail_at
        self.step = 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.step += 1
        if self.step % 25 == 0:
            self.probe.look(self.step)
        if self.disk is not None and self.step == self.full_at:
            self.disk.full = True
        if self.step == self.fail_at:
            raise RuntimeError(f"boom at step {self.step}")


def fit(run_dir: Path, probe: Probe, callback: TrainwatchCallback | None = None,
        epochs: int = EPOCHS) -> Any:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(BATCHES * 8, 8)).astype("float32")
    y = x.sum(-1, keepdims=True) + 0.1 * rng.normal(size=(BATCHES * 8, 1)).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse", metrics=["mae"])
    return model.fit(x, y, batch_size=8, epochs=epochs, validation_data=(x[:64], y[:64]),
                     verbose=0, callbacks=[callback or TrainwatchCallback(run_dir), probe])


def test_records_arrive_batch_by_batch_and_check_reads_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    probe = LiveProbe(run_dir)
    fit(run_dir, Probe(probe))

    probe.assert_live(EPOCHS * BATCHES)
    rows = metric_rows(run_dir)
    steps = EPOCHS * BATCHES
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, steps + 1))
    assert [(r["step"], r["epoch"]) for r in rows if "val_loss" in r] == [
        (100, 0), (200, 1), (300, 2)
    ]
    assert {"loss", "mae", "learning_rate", "epoch"} <= rows[0].keys()
    assert {"val_loss", "val_mae"} <= rows[100].keys() and "loss" not in rows[100]
    assert roles_of(run_dir) == {
        "loss": "loss", "val_loss": "val_loss", "lr": "learning_rate", "epoch": "epoch"
    }
    assert run_end(run_dir)["status"] == "finished"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (config["max_steps"], config["backend"]) == (steps, "torch")
    assert config["optimizer"]["learning_rate"] == pytest.approx(1e-2)
    check_reads(run_dir)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_exception_that_kills_the_fit_thread_ends_the_run_crashed(tmp_path: Path) -> None:
    """Keras has no exception hook: the uncaught exception reaches ``threading.excepthook``
    (``sys.excepthook`` for a script: the HF test and the live-run tests run that one)."""
    run_dir = tmp_path / "run"
    returned: list[Any] = []
    probe = Probe(LiveProbe(run_dir), fail_at=120)
    t = threading.Thread(target=lambda: returned.append(fit(run_dir, probe)), name="fit")
    t.start()
    t.join(timeout=60)
    assert not t.is_alive() and not returned  # fit died
    assert_crashed(run_dir, "RuntimeError: boom at step 120")
    assert max(r["step"] for r in metric_rows(run_dir)) == 120


def test_with_the_callback_a_caught_exception_still_ends_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    callback = TrainwatchCallback(run_dir)
    with pytest.raises(RuntimeError, match="boom"), callback:
        fit(run_dir, Probe(LiveProbe(run_dir), fail_at=30), callback)
    assert_crashed(run_dir, "RuntimeError: boom at step 30")


@pytest.mark.parametrize("fault", DISK_FAULTS)
def test_a_disk_error_is_one_warning_and_training_goes_on(
    tmp_path: Path, disk: DiskState, fault: str
) -> None:
    run_dir = run_dir_for(tmp_path, fault)
    with pytest.warns() as caught:
        history = fit(run_dir, Probe(LiveProbe(run_dir), disk, full_at=50), epochs=1)
    assert len(history.history["loss"]) == 1
    assert_one_warning_for(fault, run_dir, caught.list, last_step=50)
