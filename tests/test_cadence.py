"""A series' logging interval and per-epoch cadence, on generated steps (seeded) and corpus
series read with the project's own reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainwatch.cadence import Cadence, cadence, epochs_at, is_per_epoch, logging_interval
from trainwatch.load import load_run

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def test_interval_of_a_regular_series():
    assert logging_interval(np.arange(0, 1000, 25)) == 25
    assert logging_interval(np.arange(1, 11)) == 1


def test_interval_too_short_or_never_moving():
    assert logging_interval(np.array([], dtype=np.int64)) is None
    assert logging_interval(np.array([7])) is None
    assert logging_interval(np.array([7, 7, 7])) is None


def test_first_evaluation_off_the_grid():
    assert logging_interval(np.array([24, 50, 75, 100, 125])) == 25
    assert logging_interval(np.array([0, 24, 49, 74, 99])) == 25


def test_resumed_run_rewinds_and_repeats():
    # logged every 10 to step 500, resumed from the checkpoint at 300, a step written twice
    steps = np.concatenate([np.arange(0, 510, 10), np.arange(300, 800, 10), [790]])
    assert logging_interval(steps) == 10
    # runs appended into one file: each restarts at 1
    assert logging_interval(np.tile(np.arange(1, 51), 6)) == 1


def test_interval_is_a_gap_that_happened():
    rng = np.random.default_rng(7)
    steps = np.cumsum(rng.choice([10, 20], size=101))  # even count of gaps: the lower median
    gaps = np.diff(steps)
    assert logging_interval(steps) in set(gaps.tolist())
    assert logging_interval(steps) == int(np.sort(gaps)[(gaps.size - 1) // 2])


def test_mostly_every_step_with_a_sparse_tail():
    steps = np.concatenate([np.arange(1, 11), np.arange(50, 5001, 50)])
    assert logging_interval(steps) == 50


def test_epochs_at():
    got = epochs_at(np.array([0, 5, 10, 15, 30]), np.array([5, 10, 20]), np.array([0.5, 1.0, 2.0]))
    assert np.isnan(got[0]) and got[1:].tolist() == [0.5, 1.0, 1.0, 2.0]
    assert np.isnan(epochs_at(np.array([1, 2]), np.array([], dtype=np.int64), np.array([]))).all()


def test_per_epoch():
    steps = np.arange(0, 10)
    assert is_per_epoch(steps, step_is_epoch=True)
    assert not is_per_epoch(steps)  # nothing says what an epoch is
    assert is_per_epoch(steps, steps.astype(float))  # the step is the epoch (0-based)
    assert is_per_epoch(steps + 1, steps.astype(float))  # ...or 1-based
    # an evaluation at the end of every 400-step epoch; HF's float epoch drifts
    evals = np.arange(1, 11) * 400
    assert is_per_epoch(evals, np.arange(1, 11) + np.array([0, 0.01, -0.02, 0, 0, 0, 0, 0, 0, 0]))
    # a per-step loss: the epoch barely moves between points, or moves by 1 only at a boundary
    assert not is_per_epoch(np.arange(1, 4001), np.arange(1, 4001) / 400)
    assert not is_per_epoch(np.arange(1, 4001, 50), np.repeat(np.arange(10.0), 8))
    assert not is_per_epoch(evals, np.arange(1, 11) * 0.5)  # every half epoch
    assert not is_per_epoch(evals, np.full(10, np.nan))
    assert cadence(evals, np.arange(1.0, 11.0)) == Cadence(400, True)


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"real-file corpus not found at {CORPUS}")
@pytest.mark.parametrize(("file", "name", "expected"), [
    ("llmc_main__SiddanthEmani_GPT-2-124M-CUDA.log", "tel", Cadence(250, False)),
    ("llmc_main__SiddanthEmani_GPT-2-124M-CUDA.log", "trl", Cadence(1, False)),
    ("keras_csvlogger__4hmetcakmak_BraTS2020.log", "val_loss", Cadence(1, True)),
    ("mmcv_log__zhaoyang97_mmdetection_carafe_voc.log.json", "mAP", Cadence(6200, True)),
    ("mmcv_log__zhaoyang97_mmdetection_carafe_voc.log.json", "loss", Cadence(50, False)),
    ("detectron2_metrics__Kevindic0214_detectron2_training.json", "total_loss",
     Cadence(20, False)),
    ("modded_nanogpt__lolrazh_parameter-golf.log", "train_loss", Cadence(50, False)),
    ("mmengine_scalars__PKurnikov_mmdetection.json", "loss", Cadence(1, False)),
    ("nanogpt_stdout__ethellight565_nanogpt-seis.log", "val_loss", Cadence(500, False)),
])
def test_corpus_cadence(file, name, expected):
    run = load_run(CORPUS / file)

    def series(n: str) -> tuple[np.ndarray, np.ndarray]:
        chunks = [b.series[n] for b in run.main if n in b.series]
        if not chunks:
            return np.empty(0, dtype=np.int64), np.empty(0)
        return np.concatenate([c.steps for c in chunks]), np.concatenate([c.values for c in chunks])

    steps, _ = series(name)
    es, ev = series("epoch")
    epochs = epochs_at(steps, es, ev) if es.size and np.all(np.diff(es) >= 0) else None
    assert cadence(steps, epochs, step_is_epoch=run.format == "keras_csv") == expected
