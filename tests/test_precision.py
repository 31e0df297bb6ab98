"""Logging precision: rounding found on seeded series written as real writers write them
(``%.4f``, ``round(x, 4)``, ``%.3g``, float32 in TensorBoard), never in float noise; and the
precision floor that explains a run of equal values. Corpus series read with the project's own
reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainwatch.load import load_run
from trainwatch.precision import Precision, at_precision_floor, logging_precision, quantum

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def loss_curve(n: int = 500, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 2.5 * np.exp(-np.arange(n) / 150) + 0.3 + rng.normal(0, 0.02, n)


def printed(values: np.ndarray, fmt: str) -> np.ndarray:
    """What a reader gets back from a text log: each value printed with ``fmt`` and parsed."""
    return np.array([float(fmt % v) for v in values])


@pytest.mark.parametrize(("fmt", "decimals"), [("%.4f", 4), ("%.2f", 2), ("%.6f", 6),
                                               ("%.0f", 0)])
def test_fixed_decimals(fmt, decimals):
    x = printed(loss_curve() * (100 if decimals == 0 else 1), fmt)
    assert logging_precision(x) == Precision(decimals=decimals)
    assert quantum(x) == 10.0**-decimals


def test_hf_round_to_4():
    x = np.array([round(v, 4) for v in loss_curve()])
    assert quantum(x) == pytest.approx(1e-4)


def test_significant_digits():
    lr = 3e-4 * np.exp(-np.arange(300) / 40)  # spans four decades
    x = printed(lr, "%.3g")
    assert logging_precision(x) == Precision(significant=3)
    assert quantum(x) == pytest.approx(10.0 ** (np.floor(np.log10(x[-1])) - 2))
    assert Precision(significant=3).quantum(1.23) == pytest.approx(0.01)


def test_float_noise_is_not_rounding():
    x = loss_curve(seed=1)
    assert logging_precision(x) is None  # float64 in full
    assert logging_precision(x.astype(np.float32).astype(np.float64)) is None  # float32 in full
    rng = np.random.default_rng(2)
    for n in (5, 30, 1000):
        noise = rng.normal(1.0, 0.3, n).astype(np.float32).astype(np.float64)
        assert logging_precision(noise) is None, n
        # float32 printed at its shortest (8-9 digits) is no rounding a person chose either
        assert logging_precision(printed(noise, "%.9g")) is None, n


def test_float32_of_rounded_values_keeps_the_rounding():
    # TensorBoard stores float32: HF's 4-decimal loss comes back as 0.12340000271797180
    x = printed(loss_curve(seed=3), "%.4f").astype(np.float32).astype(np.float64)
    assert logging_precision(x) == Precision(decimals=4)


def test_nothing_to_tell():
    assert logging_precision(np.array([])) is None
    assert logging_precision(np.array([0.0, 0.0, np.nan, np.inf])) is None
    assert logging_precision(np.array([1.0, 2.0, 3.0, 10.0])) == Precision(decimals=0)


def test_at_precision_floor():
    # a loss that falls 2e-5 a step, logged at 4 decimals: runs of 4-5 equal values
    slow = np.round(1.5 - 2e-5 * np.arange(400), 4)
    assert at_precision_floor(float(slow[-1]), slow)
    # near zero: the loss has hit what the log can show
    # (it fell by a hundred quanta a step: only the value says so)
    tiny = np.round(np.maximum(0.5 - 0.01 * np.arange(200), 0.0002), 4)
    assert at_precision_floor(0.0002, tiny)
    assert not at_precision_floor(0.0005, np.round(np.maximum(0.5 - 0.01 * np.arange(200),
                                                              0.0005), 4))
    # a loss that moved by many quanta a step and then stopped dead: a real stall
    rng = np.random.default_rng(4)
    moving = np.round(2.0 - 0.01 * np.arange(200) + rng.normal(0, 0.02, 200), 4)
    stalled = np.concatenate([moving, np.full(100, moving[-1])])
    assert not at_precision_floor(float(moving[-1]), stalled)
    assert not at_precision_floor(2.3026, np.full(300, 2.3026))  # never moved: stuck
    # not rounded: equal values are equal
    full = loss_curve(seed=5)
    assert not at_precision_floor(float(full[-1]), np.concatenate([full, np.full(50, full[-1])]))
    assert not at_precision_floor(float("nan"), slow)
    assert at_precision_floor(1.4921, slow, Precision(decimals=4))


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"real-file corpus not found at {CORPUS}")
@pytest.mark.parametrize(("file", "name", "expected"), [
    ("hf_trainer_state__ljh696_MetaMath.json", "loss", Precision(decimals=4)),
    ("hf_trainer_state__aigoncharov_trainer_state_viz.json", "loss", Precision(decimals=4)),
    ("hf_trainer_state__aigoncharov_trainer_state_viz.json", "eval_g0_loss", None),
    ("hf_trainer_state__ljh696_MetaMath.json", "grad_norm", None),
    ("nanogpt_stdout__ethellight565_nanogpt-seis.log", "loss", Precision(decimals=4)),
    ("nanogpt_stdout__ethellight565_nanogpt-seis.log", "lr", Precision(significant=3)),
    ("llmc_main__SiddanthEmani_GPT-2-124M-CUDA.log", "trl", Precision(decimals=4)),
    ("llmc_main__SiddanthEmani_GPT-2-124M-CUDA.log", "norm", Precision(decimals=2)),
    ("mmcv_log__zhaoyang97_mmdetection_carafe_voc.log.json", "loss", Precision(decimals=5)),
    ("keras_csvlogger__4hmetcakmak_BraTS2020.log", "val_loss", None),
    ("detectron2_metrics__Kevindic0214_detectron2_training.json", "total_loss", None),
    ("tfevents__Kevindic0214_detectron2_training.tfevents", "total_loss", None),  # float32
    ("tfevents__Kevindic0214_detectron2_training.tfevents", "loss_cls", None),
])
def test_corpus_precision(file, name, expected):
    run = load_run(CORPUS / file)
    values = np.concatenate([b.series[name].values for b in run.main if name in b.series])
    assert logging_precision(values) == expected
