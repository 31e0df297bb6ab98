"""Every real file in ../shared/corpus loads with the right format, metrics and point counts.

Expected counts are computed here by a separate, simple method for each file (``json`` /
``csv`` / a regex over the lines / a bare TFRecord frame walk), never by calling the readers,
and compared with what ``read_file`` returns. Rewinds are checked the same way: none where the
issue is a per-epoch counter or an epoch-valued step, the real ones where runs were appended.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainwatch.batch import RecordBatch
from trainwatch.formats.detect import detect_format, read_head
from trainwatch.formats.read import read_file

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(
        not CORPUS.is_dir(), reason=f"real-file corpus not found at {CORPUS} (../shared/corpus)"
    ),
]


def load(name: str) -> tuple[str, list[RecordBatch]]:
    path = CORPUS / name
    return detect_format(path, read_head(path)), read_file(path)


def counts(batches: list[RecordBatch]) -> Counter[str]:
    out: Counter[str] = Counter()
    for b in batches:
        for k, s in b.series.items():
            out[k] += len(s)
    return out


def all_rewinds(batches: list[RecordBatch]) -> list[tuple[int, int, int]]:
    return [(r.line, r.from_step, r.to_step) for b in batches for r in b.rewinds]


def malformed(batches: list[RecordBatch]) -> list[Any]:
    return [m for b in batches for m in b.malformed]


def is_number(v: Any) -> bool:
    return (type(v) in (int, float)) or (type(v) is str and v.lower() in ("nan", "inf", "-inf"))


def json_lines(name: str) -> list[tuple[int, dict[str, Any]]]:
    """(1-based line, object) of each non-empty line, with the stdlib."""
    text = (CORPUS / name).read_text()
    return [(i + 1, json.loads(ln)) for i, ln in enumerate(text.splitlines()) if ln.strip()]


def count_keys(rows: list[dict[str, Any]], skip: set[str], rename: dict[str, str],
               prefix: str = "", prefixed: set[str] | None = None) -> Counter[str]:
    out: Counter[str] = Counter()
    for row in rows:
        for k, v in row.items():
            if k in skip or not is_number(v):
                continue
            k = rename.get(k, k)
            out[prefix + k if prefixed is not None and k in prefixed else k] += 1
    return out


# ---------------------------------------------------------------------- JSON-lines frameworks
D2 = "detectron2_metrics__Kevindic0214_detectron2_training.json"


def test_detectron2_metrics_json() -> None:
    fmt, batches = load(D2)
    assert fmt == "detectron2"
    rows = [r for _, r in json_lines(D2)]
    expected = count_keys(rows, skip={"iteration"}, rename={"time": "time_per_iter"})
    got = counts(batches)
    assert got == expected
    assert {"total_loss", "lr", "loss_cls", "data_time", "time_per_iter"} <= got.keys()
    assert got["total_loss"] == len(rows) == 16
    assert not all_rewinds(batches) and not malformed(batches)  # equal iterations: no rewind
    steps = np.concatenate([b.steps for b in batches])
    assert steps.tolist() == [r["iteration"] for r in rows]


MMCV = [
    ("mmcv_log__zhaoyang97_mmdetection_fcos.log.json", "loss"),
    ("mmcv_log__zhaoyang97_mmdetection_carafe_voc.log.json", "mAP"),
    ("mmcv_log__zhaoyang97_mmdetection_carafed_coco_resumed.log.json", "bbox_mAP"),
]


@pytest.mark.parametrize(("name", "val_key"), MMCV)
def test_mmcv_log_json(name: str, val_key: str) -> None:
    fmt, batches = load(name)
    assert fmt == "mmcv"
    rows = [r for _, r in json_lines(name)]
    meta_rows = [r for r in rows if "mode" not in r]
    train = [r for r in rows if r.get("mode") == "train"]
    val = [r for r in rows if r.get("mode") == "val"]
    assert len(meta_rows) == 1 and len(train) + len(val) + 1 == len(rows)
    train_keys = {k for r in train for k in r} | {"time", "data_time", "memory", "loss"}
    expected = count_keys(train, skip={"mode", "iter"}, rename={"time": "time_per_iter"})
    expected += count_keys(val, skip={"mode", "iter", "lr"}, rename={}, prefix="val/",
                           prefixed=train_keys - {"epoch"})
    got = counts(batches)
    assert got == expected
    assert {"loss", "lr", "data_time", "time_per_iter", "memory", "epoch"} <= got.keys()
    meta: dict[str, Any] = {}
    for b in batches:
        meta.update(b.meta)
    assert meta["env_info"] == meta_rows[0]["env_info"] and meta["first_epoch"] == train[0]["epoch"]
    assert "env_info" not in got and not malformed(batches)
    # iter restarts every epoch: still no rewind, the global step only grows
    restarts = sum(r1["iter"] < r0["iter"] for r0, r1 in itertools.pairwise(train))
    assert restarts == len({r["epoch"] for r in train}) - 1
    steps = np.concatenate([b.steps for b in batches])
    assert not all_rewinds(batches) and np.all(np.diff(steps) >= 0)
    if val:
        # each validation row sits at the end of its epoch: the step of that epoch's last train row
        vs = [int(s) for b in batches for s in b.series[val_key].steps]
        loss_steps = [int(s) for b in batches for s in b.series["loss"].steps]
        epochs = [r["epoch"] for r in train]
        last_of_epoch = {e: loss_steps[max(i for i, x in enumerate(epochs) if x == e)]
                         for e in set(epochs)}
        assert vs == [last_of_epoch[r["epoch"]] for r in val]


MME = "mmengine_scalars__PKurnikov_mmdetection.json"


def test_mmengine_scalars_json() -> None:
    fmt, batches = load(MME)
    assert fmt == "mmengine"
    numbered = json_lines(MME)
    train = [r for _, r in numbered if "iter" in r]
    val = [r for _, r in numbered if "iter" not in r]
    assert len(val) == 7
    train_keys = {k for r in train for k in r} | {"time", "data_time", "memory", "loss"}
    rename = {"time": "time_per_iter"}
    expected = count_keys(train, skip={"step", "iter"}, rename=rename)
    expected += count_keys(val, skip={"step"}, rename=rename, prefix="val/",
                           prefixed={rename.get(k, k) for k in train_keys})
    got = counts(batches)
    assert got == expected
    assert {"loss", "lr", "grad_norm", "coco/bbox_mAP", "val/data_time"} <= got.keys()
    # genuine rewinds: a training step below the previous training step (appended runs);
    # validation rows' epoch-valued steps (0 here) are not rewinds
    expected_rewinds = []
    prev = None
    for line, r in numbered:
        if "iter" in r:
            if prev is not None and r["step"] < prev:
                expected_rewinds.append((line, prev, r["step"]))
            prev = r["step"]
    assert len(expected_rewinds) == 5
    assert all_rewinds(batches) == expected_rewinds
    assert max(b.segments.max() for b in batches) == 5


# ---------------------------------------------------------------------- HF Trainer
HF = [
    ("hf_trainer_state__aigoncharov_trainer_state_viz.json",
     {"loss", "learning_rate", "grad_norm", "epoch"} | {f"eval_g{i}_loss" for i in range(6)}),
    ("hf_trainer_state__ljh696_MetaMath.json",
     {"loss", "learning_rate", "grad_norm", "epoch", "train_loss"}),
]


@pytest.mark.parametrize(("name", "keys"), HF)
def test_hf_trainer_state(name: str, keys: set[str]) -> None:
    fmt, batches = load(name)
    assert fmt == "hf_trainer" and len(batches) == 1
    doc = json.loads((CORPUS / name).read_text())
    expected = count_keys(doc["log_history"], skip={"step"}, rename={})
    got = counts(batches)
    assert got == expected and keys <= got.keys()
    b = batches[0]
    # every entry, and the run_end a finished state ends with (both files are finished: one
    # ends with train()'s summary, the other is the final checkpoint, global_step == max_steps)
    assert b.n_records == len(doc["log_history"]) + 1
    assert [(e.name, e.fields, e.step) for e in b.events] == [
        ("run_end", {"status": "finished"}, doc["log_history"][-1]["step"])]
    assert b.meta["max_steps"] == doc["max_steps"]
    assert b.meta["num_train_epochs"] == doc["num_train_epochs"]
    assert not b.rewinds and not b.malformed


# ---------------------------------------------------------------------- Keras
KERAS = "keras_csvlogger__4hmetcakmak_BraTS2020.log"


def test_keras_csvlogger() -> None:
    fmt, batches = load(KERAS)
    assert fmt == "keras_csv"
    raw = (CORPUS / KERAS).read_bytes()
    assert b"\r\n" in raw
    rows = list(csv.DictReader(io.StringIO(raw.decode())))
    expected: Counter[str] = Counter()
    for row in rows:
        for k, v in row.items():
            if k != "epoch" and v not in ("", "NA"):
                expected[k] += 1
    got = counts(batches)
    assert got == expected
    assert {"loss", "val_loss", "accuracy", "val_accuracy", "lr"} <= got.keys()
    steps = np.concatenate([b.steps for b in batches])
    assert steps.tolist() == [int(r["epoch"]) for r in rows]
    assert not all_rewinds(batches) and not malformed(batches)


# ---------------------------------------------------------------------- text logs
def line_counts(name: str, rules: dict[str, str]) -> Counter[str]:
    """metric -> number of lines matching its regex."""
    lines = (CORPUS / name).read_text().splitlines()
    return Counter({k: sum(1 for ln in lines if re.search(rx, ln)) for k, rx in rules.items()})


def test_llmc_main_log() -> None:
    name = "llmc_main__SiddanthEmani_GPT-2-124M-CUDA.log"
    fmt, batches = load(name)
    assert fmt == "textlog"
    expected = line_counts(name, {k: rf"^s:\d+ (.* )?{k}:[-0-9.]" for k in
                                  ("trl", "lr", "norm", "tel", "eval")})
    got = counts(batches)
    assert got == expected
    assert got["trl"] > 19_000 and got["tel"] > 50
    assert not all_rewinds(batches) and not malformed(batches)


def test_nanogpt_stdout_with_warnings() -> None:
    name = "nanogpt_stdout__ethellight565_nanogpt-seis.log"
    fmt, batches = load(name)
    assert fmt == "textlog"
    train = r"^\[train\] iter \d+: loss [0-9.]+ [0-9]+ ms/iter$"
    evals = r"^\[eval\] iter \d+: train [0-9.]+ val [0-9.]+ lr "
    expected = line_counts(name, {"loss": train, "ms_per_iter": train, "train_loss": evals,
                                  "val_loss": evals, "lr": evals})
    got = counts(batches)
    assert got == expected and got["loss"] == 800 and got["val_loss"] == 17
    text = (CORPUS / name).read_text()
    assert "Not enough SMs" in text  # the warning lines are there, and ignored:
    assert not malformed(batches) and not all_rewinds(batches)


def test_modded_nanogpt_log() -> None:
    name = "modded_nanogpt__lolrazh_parameter-golf.log"
    fmt, batches = load(name)
    assert fmt == "textlog"
    keys = ["train_loss", "val_loss", "val_bpb", "lr_scale", "muon_mom", "swa_n"]
    rules = {k: rf"^step:\d+/\d+ (.* )?{k}:[-0-9.]" for k in keys}
    rules |= {f"{k}_ms": rf"^step:\d+/\d+ (.* )?{k}:[0-9.]+ms"
              for k in ("train_time", "step_avg", "this_step")}
    rules["mem_mib"] = r"^step:\d+/\d+ (.* )?mem:[0-9]+MiB"
    expected = line_counts(name, rules)
    got = counts(batches)
    assert got == expected and got["val_loss"] > 0 and got["train_loss"] > 100
    max_steps = {b.meta.get("max_steps") for b in batches} - {None}
    assert max_steps == {20000}
    assert not all_rewinds(batches) and not malformed(batches)


# ---------------------------------------------------------------------- TensorBoard
TB = "tfevents__Kevindic0214_detectron2_training.tfevents"


def test_tfevents_file() -> None:
    fmt, batches = load(TB)
    assert fmt == "tfevents"
    data = (CORPUS / TB).read_bytes()
    # bare frame walk (no CRC, no protobuf): a scalar's tag bytes are followed by the
    # simple_value field key 0x15
    payloads = []
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        payloads.append(data[pos + 12: pos + 12 + n])
        pos += 12 + n + 4
    assert pos == len(data)
    scalar_tag = re.compile(rb"\x0a[\x01-\x7f]\x0a.([\x20-\x7e]+)\x15", re.DOTALL)
    tags = {m.decode() for p in payloads for m in scalar_tag.findall(p)}
    expected: Counter[str] = Counter()
    for tag in tags:
        needle = bytes([len(tag)]) + tag.encode() + b"\x15"
        expected["time_per_iter" if tag == "time" else tag] = sum(needle in p for p in payloads)
    got = counts(batches)
    assert got == expected
    assert {"total_loss", "lr", "loss_cls", "time_per_iter"} <= got.keys()
    assert got["total_loss"] == 15
    assert not malformed(batches) and not all_rewinds(batches)  # every length and data CRC held
    times = np.concatenate([b.times for b in batches])
    assert np.all(times > 1.7e9) and np.all(np.isfinite(times))  # wall_time of the run (2025)
    # the same run's metrics.json: same steps (its iteration 19 written twice)
    d2 = sorted({r["iteration"] for _, r in json_lines(D2)})
    assert sorted({int(s) for b in batches for s in b.series["total_loss"].steps}) == d2
    tb_lr = np.concatenate([b.series["lr"].values for b in batches if "lr" in b.series])
    assert math.isclose(float(tb_lr[-1]), json_lines(D2)[-1][1]["lr"], rel_tol=1e-6)
