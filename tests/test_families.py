"""Series families: every name real frameworks write, classified from the name alone; val series
paired with their train series; every series of the corpus files (read with the project's own
reader) classified, and no accuracy, lr or time series taken for a loss."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from trainwatch.families import FAMILIES, FamilyTable, classify, classify_run
from trainwatch.load import load_run
from trainwatch.roles import DEFAULT_ROLES

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

# (name, family, split, set, base): what frameworks write (HF Trainer and its TensorBoard/W&B
# rewrite, Lightning, Keras and its TensorBoard callback, detectron2, mmcv/mmengine, YOLO,
# nanoGPT, llm.c, modded-nanogpt) and what people write by hand
NAMES = [
    # train losses
    ("loss", "train_loss", "train", None, "loss"),
    ("train_loss", "train_loss", "train", None, "loss"),
    ("train/loss", "train_loss", "train", None, "loss"),
    ("train/train_loss", "train_loss", "train", None, "loss"),  # HF's rewrite of its summary
    ("Loss/train", "train_loss", "train", None, "Loss"),
    ("loss/train", "train_loss", "train", None, "loss"),
    ("loss_train", "train_loss", "train", None, "loss"),
    ("trainLoss", "train_loss", "train", None, "Loss"),
    ("training_loss", "train_loss", "train", None, "loss"),
    ("total_loss", "train_loss", "train", None, "total_loss"),
    ("train/total_loss", "train_loss", "train", None, "total_loss"),
    ("loss_cls", "train_loss", "train", None, "loss_cls"),
    ("loss_bbox", "train_loss", "train", None, "loss_bbox"),
    ("loss_rpn_cls", "train_loss", "train", None, "loss_rpn_cls"),
    ("loss_box_reg", "train_loss", "train", None, "loss_box_reg"),
    ("loss_giou_dn_pre", "train_loss", "train", None, "loss_giou_dn_pre"),
    ("train/box_loss", "train_loss", "train", None, "box_loss"),
    ("train_loss_step", "train_loss", "train", None, "loss"),
    ("train_loss_epoch", "train_loss", "train", None, "loss"),
    ("train/loss_step", "train_loss", "train", None, "loss"),
    ("epoch_loss", "train_loss", "train", None, "loss"),  # Keras TensorBoard
    ("batch_loss", "train_loss", "train", None, "loss"),
    ("trl", "train_loss", "train", None, "loss"),  # llm.c main.log
    ("nll_loss", "train_loss", "train", None, "nll_loss"),
    ("losses/recon", "train_loss", "train", None, "losses/recon"),
    # val / eval / test losses
    ("val_loss", "val_loss", "val", None, "loss"),
    ("val/loss", "val_loss", "val", None, "loss"),
    ("loss/val", "val_loss", "val", None, "loss"),
    ("Loss/validation", "val_loss", "val", None, "Loss"),
    ("validation/epoch_loss", "val_loss", "val", None, "loss"),  # Keras TensorBoard
    ("evaluation_loss_vs_iterations", "val_loss", "eval", None, "loss"),
    ("valid_loss", "val_loss", "val", None, "loss"),
    ("validation_loss", "val_loss", "val", None, "loss"),
    ("dev_loss", "val_loss", "val", None, "loss"),
    ("valLoss", "val_loss", "val", None, "Loss"),
    ("loss_val", "val_loss", "val", None, "loss"),
    ("eval_loss", "val_loss", "eval", None, "loss"),
    ("eval/loss", "val_loss", "eval", None, "loss"),
    ("eval_g3_loss", "val_loss", "eval", "g3", "loss"),  # HF, several eval sets
    ("eval/g3_loss", "val_loss", "eval", "g3", "loss"),  # ...rewritten for W&B/TensorBoard
    ("eval_validation_matched_loss", "val_loss", "eval", "validation_matched", "loss"),
    ("eval_ce_loss", "val_loss", "eval", None, "ce_loss"),  # a component, not a set
    ("test_loss", "val_loss", "test", None, "loss"),
    ("test/loss", "val_loss", "test", None, "loss"),
    ("val_loss_epoch", "val_loss", "val", None, "loss"),
    ("val_loss/dataloader_idx_1", "val_loss", "val", "dataloader_idx_1", "loss"),  # Lightning
    ("val/box_loss", "val_loss", "val", None, "box_loss"),  # YOLO
    ("val/cls_loss", "val_loss", "val", None, "cls_loss"),
    ("tel", "val_loss", "val", None, "loss"),  # llm.c main.log
    # val / eval metrics
    ("val_accuracy", "val_metric", "val", None, "accuracy"),
    ("val/acc", "val_metric", "val", None, "acc"),
    ("val_acc_epoch", "val_metric", "val", None, "acc"),
    ("eval_accuracy", "val_metric", "eval", None, "accuracy"),
    ("eval_g0_accuracy", "val_metric", "eval", None, "g0_accuracy"),  # alone: no set known
    ("eval/f1", "val_metric", "eval", None, "f1"),
    ("test_acc", "val_metric", "test", None, "acc"),
    ("val_dice_coef", "val_metric", "val", None, "dice_coef"),
    ("val_mean_io_u_5", "val_metric", "val", None, "mean_io_u_5"),
    ("val_bpb", "val_metric", "val", None, "bpb"),
    ("val_ppl", "val_metric", "val", None, "ppl"),
    ("mAP", "val_metric", "val", None, "mAP"),  # mmcv val rows
    ("bbox_mAP_50", "val_metric", "val", None, "bbox_mAP_50"),
    ("coco/bbox_mAP", "val_metric", "val", None, "coco/bbox_mAP"),  # mmengine
    ("bbox/AP50", "val_metric", "val", None, "bbox/AP50"),  # detectron2 evaluation
    ("metrics/mAP50-95(B)", "val_metric", "val", None, "metrics/mAP50-95(B)"),  # YOLO
    ("eval_bleu", "val_metric", "eval", None, "bleu"),
    ("eval", "val_metric", "eval", None, "eval"),  # llm.c's HellaSwag accuracy
    # train metrics
    ("accuracy", "train_metric", "train", None, "accuracy"),
    ("acc", "train_metric", "train", None, "acc"),
    ("train/acc", "train_metric", "train", None, "acc"),
    ("train_acc_step", "train_metric", "train", None, "acc"),
    ("fast_rcnn/cls_accuracy", "train_metric", "train", None, "fast_rcnn/cls_accuracy"),
    ("mask_rcnn/false_negative", "train_metric", "train", None, "mask_rcnn/false_negative"),
    ("dice_coef", "train_metric", "train", None, "dice_coef"),
    ("metrics/precision(B)", "train_metric", "train", None, "metrics/precision(B)"),
    # learning rate
    ("lr", "lr", "train", None, "lr"),
    ("learning_rate", "lr", "train", None, "learning_rate"),
    ("train/learning_rate", "lr", "train", None, "learning_rate"),
    ("train/lr", "lr", "train", None, "lr"),
    ("lr-AdamW", "lr", "train", None, "lr-AdamW"),
    ("lr-AdamW/pg1", "lr", "train", None, "lr-AdamW/pg1"),
    ("lr-SGD", "lr", "train", None, "lr-SGD"),
    ("lr/pg0", "lr", "train", None, "lr/pg0"),  # YOLO
    ("x/lr0", "lr", "train", None, "x/lr0"),  # YOLOv5
    ("base_lr", "lr", "train", None, "base_lr"),  # mmengine
    ("lr_scale", "lr", "train", None, "lr_scale"),
    ("epoch_learning_rate", "lr", "train", None, "learning_rate"),
    # grad norm
    ("grad_norm", "grad_norm", "train", None, "grad_norm"),
    ("train/grad_norm", "grad_norm", "train", None, "grad_norm"),
    ("norm", "grad_norm", "train", None, "norm"),
    ("gnorm", "grad_norm", "train", None, "gnorm"),
    ("grad_2.0_norm_total", "grad_norm", "train", None, "grad_2.0_norm_total"),
    ("grad_2.0_norm/layer1.weight", "grad_norm", "train", None, "grad_2.0_norm/layer1.weight"),
    ("gradient_norm", "grad_norm", "train", None, "gradient_norm"),
    # throughput
    ("tokens_per_sec", "throughput", "train", None, "tokens_per_sec"),
    ("tok_per_s", "throughput", "train", None, "tok_per_s"),
    ("tok/s", "throughput", "train", None, "tok/s"),
    ("train_samples_per_second", "throughput", "train", None, "samples_per_second"),
    ("eval_samples_per_second", "throughput", "eval", None, "samples_per_second"),
    ("eval_steps_per_second", "throughput", "eval", None, "steps_per_second"),
    ("mfu", "throughput", "train", None, "mfu"),
    # step time
    ("time", "step_time", "train", None, "time"),
    ("data_time", "step_time", "train", None, "data_time"),
    ("time_per_iter", "step_time", "train", None, "time_per_iter"),
    ("step_avg_ms", "step_time", "train", None, "step_avg_ms"),
    ("this_step_ms", "step_time", "train", None, "this_step_ms"),
    ("ms", "step_time", "train", None, "ms"),
    ("dt", "step_time", "train", None, "dt"),
    ("iter_time", "step_time", "train", None, "iter_time"),
    ("eval_runtime", "step_time", "eval", None, "runtime"),
    ("val/data_time", "step_time", "val", None, "data_time"),
    # memory
    ("memory", "memory", "train", None, "memory"),
    ("mem_mib", "memory", "train", None, "mem_mib"),
    ("max_memory_allocated", "memory", "train", None, "max_memory_allocated"),
    ("system/proc.memory.rssMB", "memory", "train", None, "system/proc.memory.rssMB"),
    # epoch
    ("epoch", "epoch", "train", None, "epoch"),
    ("train/epoch", "epoch", "train", None, "epoch"),
    # system and other
    ("system/gpu.0.gpu", "system", "train", None, "system/gpu.0.gpu"),
    ("gpu_util", "system", "train", None, "gpu_util"),
    ("eta_seconds", "other", "train", None, "eta_seconds"),
    ("iter", "other", "train", None, "iter"),
    ("step", "other", "train", None, "step"),
    ("global_step", "other", "train", None, "global_step"),
    ("train/global_step", "other", "train", None, "global_step"),
    ("total_flos", "other", "train", None, "total_flos"),
    ("roi_head/num_fg_samples", "other", "train", None, "roi_head/num_fg_samples"),
    ("loss_scale", "other", "train", None, "loss_scale"),  # fp16 loss scaling
    ("train/loss_scale", "other", "train", None, "loss_scale"),
    ("loss_weight", "other", "train", None, "loss_weight"),
    ("muon_mom", "other", "train", None, "muon_mom"),
    ("lr-SGD-momentum", "other", "train", None, "lr-SGD-momentum"),  # Lightning's momentum
    ("num_input_tokens_seen", "other", "train", None, "num_input_tokens_seen"),
    ("", "other", "train", None, ""),
]


@pytest.mark.parametrize(("name", "family", "split", "set_", "base"), NAMES,
                         ids=[n[0] or "empty" for n in NAMES])
def test_framework_names(name, family, split, set_, base):
    f = classify(name)
    assert (f.family, f.split, f.set, f.base) == (family, split, set_, base)
    assert f.family in FAMILIES


def test_reductions():
    assert classify("train_loss_step").reduction == "step"
    assert classify("val_acc_epoch").reduction == "epoch"
    assert classify("epoch_loss").reduction == "epoch"
    assert classify("batch_loss").reduction == "step"
    assert classify("global_step").reduction is None
    assert classify("time_per_step").reduction is None


def test_higher_is_better():
    assert classify("val_accuracy").higher_is_better
    assert classify("coco/bbox_mAP").higher_is_better
    assert classify("val_mean_io_u_5").higher_is_better
    assert classify("eval_g0_samples_per_second").higher_is_better  # throughput
    assert classify("eval_steps_per_second").higher_is_better
    assert not classify("val_loss").higher_is_better
    assert not classify("val_bpb").higher_is_better
    assert not classify("val_ppl").higher_is_better


def test_roles_win_and_user_aliases_count():
    assert classify("norm").role == "grad_norm" and classify("tel").role == "val_loss"
    table = FamilyTable(DEFAULT_ROLES.extended({"loss": ["objective"], "val_loss": ["holdout"]}))
    assert table.classify("objective").family == "train_loss"
    assert table.classify("holdout").family == "val_loss"
    assert table.classify("holdout").split == "val"
    assert classify("objective").family == "other"  # the default table is untouched


def run_of(*names: str, points: dict[str, int] | None = None) -> dict[str, str | None]:
    return {n: f.pair for n, f in classify_run(names, points=points).items()}


def test_pairs():
    hf = ["loss", "train_loss", "learning_rate", "eval_loss", "eval_accuracy", "eval_runtime"]
    got = run_of(*hf, points={"loss": 30, "train_loss": 1, "eval_loss": 5, "eval_accuracy": 5})
    assert got["eval_loss"] == "loss" and got["eval_accuracy"] is None
    assert got["loss"] is None  # train series have no pair
    assert run_of("train/loss", "val/loss", "train/acc", "val/acc") == {
        "train/loss": None, "val/loss": "train/loss", "train/acc": None, "val/acc": "train/acc"}
    assert run_of("loss", "val_loss")["val_loss"] == "loss"
    assert run_of("train_loss", "val_loss")["val_loss"] == "train_loss"
    assert run_of("Loss/train", "Loss/validation")["Loss/validation"] == "Loss/train"
    assert run_of("accuracy", "val_accuracy")["val_accuracy"] == "accuracy"
    assert run_of("trl", "tel")["tel"] == "trl"
    lightning = run_of("train_loss_step", "train_loss_epoch", "val_loss_epoch", "val_loss_step")
    assert lightning["val_loss_epoch"] == "train_loss_epoch"
    assert lightning["val_loss_step"] == "train_loss_step"
    assert run_of("val_loss", "lr")["val_loss"] is None  # nothing to pair with


def test_hf_sets_found_from_the_columns_hf_writes_with_them():
    names = ["loss"] + [f"eval_g{i}_{m}" for i in range(3)
                        for m in ("loss", "accuracy", "runtime", "samples_per_second")]
    fams = classify_run(names)
    acc = fams["eval_g1_accuracy"]
    assert (acc.family, acc.split, acc.set, acc.base) == ("val_metric", "eval", "g1", "accuracy")
    assert fams["eval_g2_runtime"].set == "g2" and fams["eval_g2_runtime"].base == "runtime"
    assert all(fams[f"eval_g{i}_loss"].pair == "loss" for i in range(3))
    # without the companions a multi-word middle is part of the base
    assert classify_run(["eval_g1_accuracy"])["eval_g1_accuracy"].set is None


def test_classify_run_is_remembered_but_each_caller_gets_its_own_dict():
    a = classify_run(["loss", "val_loss"])
    a.clear()
    assert classify_run(["loss", "val_loss"])["val_loss"].pair == "loss"


# ---------------------------------------------------------------- the corpus
NOT_A_LOSS = ("acc", "accuracy", "lr", "learning_rate", "time", "runtime", "ms", "per_second",
              "mAP", "norm", "memory", "epoch", "scale")


@cache
def corpus_series() -> dict[str, dict[str, int]]:
    out = {}
    for p in sorted(CORPUS.iterdir()):
        if p.is_dir() or p.suffix in (".md", ".tsv"):
            continue
        pts: dict[str, int] = {}
        for b in load_run(p).main:
            for n, c in b.series.items():
                pts[n] = pts.get(n, 0) + len(c)
        out[p.name] = pts
    return out


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"real-file corpus not found at {CORPUS}")
def test_every_corpus_series_is_classified():
    seen = {}
    for file, pts in corpus_series().items():
        fams = classify_run(pts, points=pts)
        for n, f in fams.items():
            seen[n] = f.family
            assert f.family in FAMILIES
            looks_like_loss = "loss" in n.lower() and "scale" not in n.lower()
            assert f.is_loss == looks_like_loss or f.role in ("loss", "val_loss"), (file, n)
            if f.is_loss and f.role is None:
                assert not any(w in n for w in NOT_A_LOSS if w != "loss"), (file, n)
            if f.family == "val_loss":
                assert f.pair is not None and fams[f.pair].family == "train_loss", (file, n)
    fam = {n: seen[n] for n in ("trl", "tel", "norm", "total_loss", "loss_cls", "eval_g3_loss",
                                "val/loss", "train/loss", "mAP", "coco/bbox_mAP", "base_lr",
                                "lr_scale", "eval_g0_runtime", "data_time", "mem_mib", "mfu",
                                "fast_rcnn/cls_accuracy", "val_bpb", "eval", "muon_mom")}
    assert fam == {
        "trl": "train_loss", "tel": "val_loss", "norm": "grad_norm", "total_loss": "train_loss",
        "loss_cls": "train_loss", "eval_g3_loss": "val_loss", "val/loss": "val_loss",
        "train/loss": "train_loss", "mAP": "val_metric", "coco/bbox_mAP": "val_metric",
        "base_lr": "lr", "lr_scale": "lr", "eval_g0_runtime": "step_time",
        "data_time": "step_time", "mem_mib": "memory", "mfu": "throughput",
        "fast_rcnn/cls_accuracy": "train_metric", "val_bpb": "val_metric",
        "eval": "val_metric", "muon_mom": "other"}


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"real-file corpus not found at {CORPUS}")
def test_corpus_val_losses_pair_with_the_train_loss():
    pairs = {}
    for file, pts in corpus_series().items():
        for n, f in classify_run(pts, points=pts).items():
            if f.family == "val_loss":
                pairs[(file.split("__")[0], n)] = (f.set, f.pair)
    assert pairs[("hf_trainer_state", "eval_g0_loss")] == ("g0", "loss")
    assert pairs[("hf_trainer_state", "eval_g5_loss")] == ("g5", "loss")
    assert pairs[("llmc_main", "tel")] == (None, "trl")
    assert pairs[("csv_log", "val/loss")] == (None, "train/loss")
    assert pairs[("modded_nanogpt", "val_loss")] == (None, "train_loss")
    assert pairs[("keras_csvlogger", "val_loss")] == (None, "loss")
    assert pairs[("nanogpt_stdout", "val_loss")] == (None, "loss")
