"""The framework readers on small files each test writes itself (tmp_path), one format at a time:
normal case, CRLF, nan/NA cells, half-written and rewritten snapshots, truncated event frames,
text logs with junk lines. Real files are in test_corpus.py; detection in test_detect.py."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from trainwatch.batch import RecordBatch
from trainwatch.formats._crc32c import crc32c, masked_crc32c
from trainwatch.formats.detectron2 import Detectron2Reader
from trainwatch.formats.hf_trainer import HfTrainerStateReader, newest_trainer_state
from trainwatch.formats.keras_csv import KerasCsvReader
from trainwatch.formats.lightning_csv import LightningCsvReader
from trainwatch.formats.mmcv import MmcvLogReader
from trainwatch.formats.mmengine import MmengineScalarsReader
from trainwatch.formats.read import read_file
from trainwatch.formats.textlog import TextLogReader
from trainwatch.formats.tfevents import TfEventsReader

NOW = 1_700_000_000.0


def clock() -> float:
    return NOW


def points(batches: list[RecordBatch] | RecordBatch) -> dict[str, list[tuple[int, float]]]:
    """name -> [(step, value)] over batches (NaN compared by identity of repr below)."""
    if isinstance(batches, RecordBatch):
        batches = [batches]
    out: dict[str, list[tuple[int, float]]] = {}
    for b in batches:
        for name, s in b.series.items():
            out.setdefault(name, []).extend(zip(s.steps.tolist(), s.values.tolist()))
    return out


def rewinds(batches: list[RecordBatch]) -> list[tuple[int, int, int]]:
    return [(r.line, r.from_step, r.to_step) for b in batches for r in b.rewinds]


# ---------------------------------------------------------------------- detectron2
def test_detectron2_iteration_is_step_and_time_is_per_iter() -> None:
    r = Detectron2Reader("m.json", clock=clock)
    lines = [
        {"data_time": 0.01, "iteration": 19, "lr": 1e-4, "time": 0.35, "total_loss": 2.1,
         "loss_cls": 0.7, "fast_rcnn/cls_accuracy": 0.5},
        {"iteration": 19, "total_loss": 2.0, "time": 0.34},  # same iteration twice: no rewind
        {"iteration": 39, "total_loss": float("nan"), "time": 0.33},
        {"bbox/AP": 12.5, "bbox/AP50": 30.0, "iteration": 39},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode() + b"{oops\n"
    b = r.parse(data)
    p = points(b)
    assert p["total_loss"][:2] == [(19, 2.1), (19, 2.0)]
    assert math.isnan(p["total_loss"][2][1])  # Python's bare NaN token is a real NaN value
    assert p["time_per_iter"] == [(19, 0.35), (19, 0.34), (39, 0.33)]
    assert "time" not in p and np.all(b.times == NOW)  # never read as a 1970 timestamp
    assert p["bbox/AP"] == [(39, 12.5)] and p["fast_rcnn/cls_accuracy"] == [(19, 0.5)]
    assert not b.rewinds
    assert [m.line for m in b.malformed] == [5]
    # a run resumed in the same output dir appends lower iterations: a genuine rewind
    b2 = r.parse(b'{"iteration": 9, "total_loss": 3.0}\n', first_line=6)
    assert [(rw.line, rw.from_step, rw.to_step, rw.segment) for rw in b2.rewinds] == [(6, 39, 9, 1)]


# ---------------------------------------------------------------------- mmcv
def _mmcv_train(epoch: int, it: int, loss: float) -> dict[str, object]:
    return {"mode": "train", "epoch": epoch, "iter": it, "lr": 0.01, "memory": 2703,
            "data_time": 0.1, "loss": loss, "time": 0.4}


def _mmcv_lines(rows: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(x) + "\n" for x in rows).encode()


def test_mmcv_global_step_val_rows_and_meta() -> None:
    meta = {"env_info": "sys.platform: linux", "config": "model = dict()", "seed": 0,
            "exp_name": "x.py"}
    rows: list[dict[str, object]] = [meta]
    for epoch in (1, 2):
        rows += [_mmcv_train(epoch, it, 1.0 / it) for it in (50, 100, 150)]
        rows.append({"mode": "val", "epoch": epoch, "iter": 157, "lr": 0.01, "mAP": 0.5 * epoch,
                     "loss": 0.9})
    r = MmcvLogReader("a.log.json", clock=clock)
    b = r.parse(_mmcv_lines(rows))
    assert b.meta["exp_name"] == "x.py" and b.meta["first_epoch"] == 1
    p = points(b)
    # epoch 2 starts where epoch 1's last logged iteration (150) ended: no per-epoch rewind
    assert [s for s, _ in p["loss"]] == [50, 100, 150, 200, 250, 300]
    assert not b.rewinds
    assert p["mAP"] == [(150, 0.5), (300, 1.0)]  # val rows at the end of their epoch
    assert p["val/loss"] == [(150, 0.9), (300, 0.9)]  # a validation loss never joins "loss"
    assert len(p["lr"]) == 6  # the lr a val row repeats is dropped
    assert [v for _, v in p["epoch"]] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert "time_per_iter" in p and "iter" not in p and "mode" not in p


def test_mmcv_resumed_in_same_file_is_a_genuine_rewind() -> None:
    rows: list[dict[str, object]] = [{"env_info": "a"}]
    rows += [_mmcv_train(e, it, 1.0) for e in (1, 2, 3) for it in (100, 200)]
    rows += [{"env_info": "b", "seed": 1}]  # the resumed run's meta line, same file
    rows += [_mmcv_train(3, 100, 0.5), _mmcv_train(3, 200, 0.4), _mmcv_train(4, 100, 0.3)]
    r = MmcvLogReader("a.log.json", clock=clock)
    first = r.parse(_mmcv_lines(rows[:5]))
    second = r.parse(_mmcv_lines(rows[5:]), first_line=6)  # chunked like a tailer would
    assert second.meta == {"env_info": "b", "seed": 1}
    steps = [s for s, _ in points([first, second])["loss"]]
    assert steps == [100, 200, 300, 400, 500, 600, 500, 600, 700]
    assert rewinds([first, second]) == [(9, 600, 500)]


def test_mmcv_file_starting_after_epoch_one() -> None:
    rows = [{"env_info": "x"}] + [_mmcv_train(24, it, 0.5) for it in (50, 100)]
    rows.append(_mmcv_train(25, 50, 0.4))
    b = MmcvLogReader("a.log.json", clock=clock).parse(_mmcv_lines(rows))
    assert b.meta["first_epoch"] == 24
    assert b.steps.tolist() == [50, 100, 150]


# ---------------------------------------------------------------------- mmengine
def test_mmengine_epoch_valued_val_steps_are_not_rewinds() -> None:
    def train(step: int) -> dict[str, object]:
        return {"lr": 0.01, "data_time": 0.1, "loss": 1.0 / step, "time": 0.5, "epoch": 1,
                "iter": step, "memory": 700, "step": step}

    val = {"coco/bbox_mAP": 0.3, "data_time": 0.02, "time": 0.1, "step": 1}
    rows = [train(s) for s in (10, 20, 30)] + [val] + [train(40)]
    rows += [train(10), train(20)]  # a second run appended: genuine rewind
    data = "".join(json.dumps(x) + "\n" for x in rows).encode()
    b = MmengineScalarsReader("scalars.json", clock=clock).parse(data)
    p = points(b)
    assert p["coco/bbox_mAP"] == [(30, 0.3)]  # at the last training step, not at epoch 1
    assert p["val/data_time"] == [(30, 0.02)] and p["val/time_per_iter"] == [(30, 0.1)]
    assert [s for s, _ in p["data_time"]] == [10, 20, 30, 40, 10, 20]
    assert [(r.line, r.from_step, r.to_step) for r in b.rewinds] == [(6, 40, 10)]
    assert "iter" not in p and "epoch" in p


# ---------------------------------------------------------------------- HF Trainer
def _hf_state(history: list[dict[str, object]], **top: object) -> bytes:
    doc = {"epoch": 1.0, "global_step": 30, "max_steps": 100, "num_train_epochs": 3,
           "log_history": history, **top}
    return json.dumps(doc, indent=2, sort_keys=True).encode()


def _hf_train(step: int) -> dict[str, object]:
    return {"epoch": step / 100, "grad_norm": 1.5, "learning_rate": 1e-5, "loss": 2.0 - step / 100,
            "step": step}


def test_hf_snapshots_return_only_new_records_and_reset_on_changed_history() -> None:
    r = HfTrainerStateReader("trainer_state.json", clock=clock)
    h1 = [_hf_train(10), _hf_train(20),
          {"epoch": 0.2, "eval_loss": 1.9, "eval_a_loss": 1.8, "eval_b_accuracy": 0.5, "step": 20}]
    b1 = r.parse_snapshot(_hf_state(h1))
    assert b1 is not None and not b1.reset
    assert b1.meta["max_steps"] == 100 and b1.meta["num_train_epochs"] == 3
    assert "log_history" not in b1.meta
    p1 = points(b1)
    assert p1["loss"] == [(10, 1.9), (20, 1.8)] and p1["eval_a_loss"] == [(20, 1.8)]
    assert p1["eval_b_accuracy"] == [(20, 0.5)] and len(p1["epoch"]) == 3

    # half-written (the Trainer rewrites the file in place): retry later
    full = _hf_state(h1 + [_hf_train(30)])
    assert r.parse_snapshot(full[: len(full) // 2]) is None
    assert r.parse_snapshot(b"") is None

    b2 = r.parse_snapshot(full)
    assert b2 is not None and not b2.reset and points(b2)["loss"] == [(30, 1.7)]
    assert b2.first_record == 3
    b3 = r.parse_snapshot(full)  # unchanged: nothing new
    assert b3 is not None and b3.n_records == 0

    # the run restarted without resuming: earlier history differs -> everything again, reset
    b4 = r.parse_snapshot(_hf_state([_hf_train(10) | {"loss": 5.0}]))
    assert b4 is not None and b4.reset and b4.first_record == 0
    assert points(b4)["loss"] == [(10, 5.0)]


def test_hf_nan_and_bad_entries_and_not_a_trainer_state() -> None:
    r = HfTrainerStateReader("t.json", clock=clock)
    data = _hf_state([_hf_train(1), "oops", _hf_train(2) | {"loss": float("nan")}])  # type: ignore[list-item]
    assert b"NaN" in data
    b = r.parse_snapshot(data)
    assert b is not None
    assert math.isnan(points(b)["loss"][1][1])
    assert len(b.malformed) == 1 and "log_history[1]" in b.malformed[0].reason
    other = HfTrainerStateReader("x.json", clock=clock).parse_snapshot(b'{"a": 1}')
    assert other is not None and "log_history" in other.malformed[0].reason


def test_newest_trainer_state_orders_checkpoints_by_step(tmp_path: Path) -> None:
    assert newest_trainer_state(tmp_path) is None
    for n in (500, 1000, 90):
        d = tmp_path / f"checkpoint-{n}"
        d.mkdir()
        (d / "trainer_state.json").write_bytes(_hf_state([_hf_train(n)]))
    (tmp_path / "checkpoint-2000").mkdir()  # being written: no state yet
    assert newest_trainer_state(tmp_path) == tmp_path / "checkpoint-1000" / "trainer_state.json"


# ---------------------------------------------------------------------- Lightning
def test_lightning_sparse_rows_and_rewrite_with_new_column() -> None:
    r = LightningCsvReader("metrics.csv", clock=clock)
    v1 = b"epoch,step,train_loss\r\n0,0,2.5\r\n0,1,nan\r\n"
    b1 = r.parse_snapshot(v1)
    assert b1 is not None
    p1 = points(b1)
    assert p1["train_loss"][0] == (0, 2.5) and math.isnan(p1["train_loss"][1][1])
    assert p1["epoch"] == [(0, 0.0), (1, 0.0)]
    # a metric appears: the logger rewrites the file with a wider header; old rows keep empty cells
    v2 = (b"epoch,step,train_loss,val_loss\r\n0,0,2.5,\r\n0,1,nan,\r\n"
          b"0,1,,2.25\r\n1,2,inf,\r\n")
    b2 = r.parse_snapshot(v2)
    assert b2 is not None and not b2.reset
    p2 = points(b2)
    assert p2["val_loss"] == [(1, 2.25)]  # empty cells are absent, not zero
    assert p2["train_loss"] == [(2, math.inf)]
    assert b2.meta["columns"] == ["epoch", "step", "train_loss", "val_loss"]


def test_lightning_torn_writes_wait_and_changed_history_resets() -> None:
    r = LightningCsvReader("metrics.csv", clock=clock)
    full = b"epoch,step,loss\n0,0,1.0\n0,1,0.9\n0,2,0.8\n"
    b = r.parse_snapshot(full[:-6])  # cut inside the last row: that row is not complete
    assert b is not None and points(b)["loss"] == [(0, 1.0), (1, 0.9)]
    assert r.parse_snapshot(b"") is None
    assert r.parse_snapshot(b"epoch,step,loss\n0,0,1.0\n") is None  # shorter prefix: torn rewrite
    assert r.parse_snapshot(b"epoch,st") is None
    b = r.parse_snapshot(full)
    assert b is not None and points(b)["loss"] == [(2, 0.8)]
    b = r.parse_snapshot(b"epoch,step,loss\n0,0,7.0\n")  # disagrees with what we returned
    assert b is not None and b.reset and points(b)["loss"] == [(0, 7.0)]


# ---------------------------------------------------------------------- Keras
def test_keras_csvlogger_crlf_nan_na_inf() -> None:
    r = KerasCsvReader("training.log", clock=clock)
    data = (b"epoch,accuracy,loss,lr,val_loss\r\n"
            b"0,0.5,1.2,0.001,1.3\r\n"
            b"1,0.6,nan,0.001,NA\r\n"
            b"2,0.7,inf,0.001,-inf\r\n")
    b = r.parse(data)
    p = points(b)
    assert p["accuracy"] == [(0, 0.5), (1, 0.6), (2, 0.7)]
    assert math.isnan(p["loss"][1][1]) and p["loss"][2] == (2, math.inf)
    assert p["val_loss"] == [(0, 1.3), (2, -math.inf)]  # NA is absent
    assert "epoch" not in p and b.steps.tolist() == [0, 1, 2]
    assert not b.notes  # NA is neither a value nor a note
    assert not b.malformed and b.meta["columns"][0] == "epoch"


def test_keras_header_again_is_a_new_segment_and_bad_rows_are_reported() -> None:
    r = KerasCsvReader("training.log", clock=clock)
    b1 = r.parse(b"epoch;loss\n0;1.0\n1;0.9\n")  # separator=";"
    b2 = r.parse(b"1;0.8;5\nepoch;loss;acc\n0;1.1;0.2\n1;1.0;0.3\n", first_line=4)
    assert [(m.line, "3 cells" in m.reason) for m in b2.malformed] == [(4, True)]
    assert rewinds([b1, b2]) == [(6, 1, 0)]
    assert points([b1, b2])["acc"] == [(0, 0.2), (1, 0.3)]
    assert b2.segments.tolist() == [1, 1]
    headless = KerasCsvReader("t.log", clock=clock).parse(b"3,0.5\n")
    assert "before the CSV header" in headless.malformed[0].reason


def test_a_bare_cr_inside_a_quoted_csv_row_is_reported_not_raised() -> None:
    # the csv module refuses a CR in a row ("new-line character seen in unquoted field"): a
    # mangled or binary file must cost that row, not the reader
    b = KerasCsvReader("training.log", clock=clock).parse(
        b'epoch,loss\n0,1.0\n1,2\r"x"\n2,0.5\n')
    assert points(b)["loss"] == [(0, 1.0), (2, 0.5)]
    assert [dict(f) for _row, f in b.notes] == [{"loss": '2\r"x"'}]  # kept, as text
    lit = LightningCsvReader("metrics.csv", clock=clock).parse_snapshot(
        b'epoch,step,loss\n0,0,1.0\n0,1,"a\rb",7\n0,2,0.8\n')
    assert lit is not None and points(lit)["loss"] == [(0, 1.0), (2, 0.8)]


# ---------------------------------------------------------------------- text logs
def test_text_logs_three_dialects_with_junk_lines() -> None:
    r = TextLogReader("main.log", clock=clock)
    data = (
        b"W0323 21:13:20.851000 46776 torch/distributed/run.py:803] *****\r\n"
        b"s:0 tel:11.0095\r\n"
        b"s:0 trl:11.0116 lr:0.000001 norm:14.96\r\n"
        b"warmup_step:3/20\n"
        b"[eval] iter 0: train 9.85 val 9.84 lr 7.50e-07\n"
        b"iter 100: loss 2.3000, time 45.00ms, mfu 3.00%\n"
        b"step 100: train loss 2.1000, val loss 2.2000\n"
        b"step:200/20000 train_loss:nan train_time:5210ms step_avg:10.4ms mem:1234MiB\n"
        b"[train] iter 210: loss 8.7390 11136 ms/iter\n"
        b" 40%|####      | 4/10 [00:01<00:02]\rstep 220: loss 1.5\r 50%|#####     |\n"
        b"saving checkpoint to out, step 300 of the pipeline\n"
        b"final_int8_zlib_roundtrip val_loss:2.2 val_bpb:1.3\n"
    )
    b = r.parse(data)
    p = points(b)
    assert not b.malformed and not b.rewinds
    assert p["tel"] == [(0, 11.0095)] and p["trl"] == [(0, 11.0116)] and p["norm"] == [(0, 14.96)]
    assert p["lr"] == [(0, 1e-6), (0, 7.5e-7)]
    assert p["train_loss"][:2] == [(0, 9.85), (100, 2.1)] and math.isnan(p["train_loss"][2][1])
    assert p["val_loss"] == [(0, 9.84), (100, 2.2)]
    assert p["loss"] == [(100, 2.3), (210, 8.739), (220, 1.5)]
    assert p["iter_time_ms"] == [(100, 45.0)] and p["mfu"] == [(100, 3.0)]
    assert p["train_time_ms"] == [(200, 5210.0)] and p["mem_mib"] == [(200, 1234.0)]
    assert p["ms_per_iter"] == [(210, 11136.0)]
    assert b.meta["max_steps"] == 20000
    assert b.n_records == 8  # every junk line ignored, none malformed


# ---------------------------------------------------------------------- TensorBoard
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(fn: int, payload: bytes) -> bytes:
    return _varint(fn << 3 | 2) + _varint(len(payload)) + payload


def _value(tag: str, simple: float | None = None, tensor: bytes | None = None,
           plugin: str | None = None) -> bytes:
    v = _len_field(1, tag.encode())
    if simple is not None:
        v += _varint(2 << 3 | 5) + struct.pack("<f", simple)
    if tensor is not None:
        v += _len_field(8, tensor)
    if plugin is not None:
        v += _len_field(9, _len_field(1, _len_field(1, plugin.encode())))
    return v


def _event(step: int, wall: float, *values: bytes, version: str | None = None,
           session: int | None = None) -> bytes:
    e = _varint(1 << 3 | 1) + struct.pack("<d", wall) + _varint(2 << 3 | 0) + _varint(step)
    if version is not None:
        e += _len_field(3, version.encode())
    if values:
        e += _len_field(5, b"".join(_len_field(1, v) for v in values))
    if session is not None:
        e += _len_field(7, _varint(1 << 3 | 0) + _varint(session))
    return e


def _frame(data: bytes) -> bytes:
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc32c(n)) + data + struct.pack("<I", masked_crc32c(data))


def _tensor(dtype: int, content: bytes | None = None, float_val: float | None = None,
            dims: tuple[int, ...] = ()) -> bytes:
    t = _varint(1 << 3) + _varint(dtype)
    if dims:
        t += _len_field(2, b"".join(_len_field(2, _varint(1 << 3) + _varint(d)) for d in dims))
    else:
        t += _len_field(2, b"")
    if content is not None:
        t += _len_field(4, content)
    if float_val is not None:
        t += _len_field(5, struct.pack("<f", float_val))
    return t


def _tb_file() -> bytes:
    frames = [
        _event(0, NOW, version="brain.Event:2"),
        _event(1, NOW + 1, _value("loss", 2.5)),
        _event(1, NOW + 1, _value("lr", 0.25)),  # same step: merged into one record
        _event(2, NOW + 2, _value("loss", float("nan"))),
        _event(2, NOW + 2, _value("val/acc", tensor=_tensor(2, content=struct.pack("<d", 0.75)),
                                  plugin="scalars")),
        _event(2, NOW + 2, _value("hist", tensor=_tensor(1, float_val=1.0, dims=(3,)),
                                  plugin="histograms")),
        _event(3, NOW + 3, _value("val/acc", tensor=_tensor(1, float_val=0.5))),
        _event(3, NOW + 3, _value("time", 0.3)),
        _event(3, NOW + 3, _value("hist", tensor=_tensor(1, float_val=2.0))),  # plugin remembered
        _event(4, NOW + 4, session=3),
    ]
    return b"".join(_frame(f) for f in frames)


def test_crc32c_known_answer() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_tfevents_scalars_tensors_plugins_and_merging() -> None:
    r = TfEventsReader("events.out.tfevents.1", clock=clock)
    b = r.feed(_tb_file())
    p = points(b)
    assert p["loss"][0] == (1, 2.5) and math.isnan(p["loss"][1][1])
    assert p["lr"] == [(1, 0.25)]
    assert p["val/acc"] == [(2, 0.75), (3, 0.5)]
    assert p["time_per_iter"] == [(3, pytest.approx(0.3))]
    assert "hist" not in p and "time" not in p
    assert b.meta == {"file_version": "brain.Event:2"}
    assert b.steps.tolist() == [1, 2, 3, 4]  # one record per step, plus the checkpoint event
    assert b.times.tolist()[:3] == [NOW + 1, NOW + 2, NOW + 3]
    assert [(e.name, e.step) for e in b.events] == [("checkpoint", 4)]
    assert r.buffered == 0 and not b.malformed


def test_tfevents_incomplete_frames_are_kept_until_complete() -> None:
    data = _tb_file()
    whole = points(TfEventsReader("a", clock=clock).feed(data))
    r = TfEventsReader("a", clock=clock)
    batches = [r.feed(data[i:i + 7]) for i in range(0, len(data), 7)]
    assert not any(b.malformed for b in batches)
    got = points(batches)
    assert got.keys() == whole.keys()
    for k in whole:
        assert [s for s, _ in got[k]] == [s for s, _ in whole[k]]
    # a file cut inside its last frame: kept, then reported only when the file is finished
    r2 = TfEventsReader("b", clock=clock)
    cut = data + _frame(_event(9, NOW, _value("loss", 1.0)))[:-5]
    b = r2.feed(cut)
    assert r2.buffered > 0 and not b.malformed
    end = r2.finish()
    assert "truncated final record" in end.malformed[0].reason and r2.buffered == 0


def test_tfevents_corrupt_header_and_payload_are_reported_and_skipped() -> None:
    good1 = _frame(_event(1, NOW, _value("loss", 1.0)))
    bad_payload = bytearray(_frame(_event(2, NOW, _value("loss", 2.0))))
    bad_payload[-8] ^= 0xFF  # flip a byte of the float: data CRC no longer matches
    bad_header = bytearray(_frame(_event(3, NOW, _value("loss", 3.0))))
    bad_header[9] ^= 0xFF  # the length's CRC
    good2 = _frame(_event(4, NOW, _value("loss", 4.0)))
    b = TfEventsReader("c", clock=clock).feed(good1 + bytes(bad_payload) + bytes(bad_header) + good2)
    assert points(b)["loss"] == [(1, 1.0), (4, 4.0)]
    reasons = [m.reason for m in b.malformed]
    assert len(reasons) == 2
    assert "data CRC mismatch" in reasons[0] and f"byte {len(good1)}" in reasons[0]
    assert "corrupt frame header" in reasons[1]


def test_read_file_tfevents_and_truncation(tmp_path: Path) -> None:
    f = tmp_path / "events.out.tfevents.123.host"
    f.write_bytes(_tb_file() + b"\x10\x00")
    batches = read_file(f, chunk_bytes=16)
    assert points(batches)["lr"] == [(1, 0.25)]
    assert sum(len(b.malformed) for b in batches) == 1


# ---------------------------------------------------------------------- read_file
def test_read_file_chunks_whole_lines_and_parses_last_line_without_newline(tmp_path: Path) -> None:
    f = tmp_path / "main.log"
    lines = [f"s:{i} trl:{10 - i * 0.01:.4f} lr:0.001 norm:1.5" for i in range(500)]
    f.write_text("banner\n" + "\n".join(lines))  # no final newline: the run is over
    small = read_file(f, chunk_bytes=1000)
    assert len(small) > 10
    p = points(small)
    assert [s for s, _ in p["trl"]] == list(range(500))
    assert p == points(read_file(f))
    bad = [m for b in small for m in b.malformed]
    assert not bad


def test_read_file_line_numbers_across_chunks(tmp_path: Path) -> None:
    f = tmp_path / "metrics.json"
    rows = [json.dumps({"iteration": i, "total_loss": 1.0}) for i in range(200)]
    rows[150] = "{broken"
    f.write_text("\n".join(rows) + "\n")
    batches = read_file(f, chunk_bytes=512)
    assert [m.line for b in batches for m in b.malformed] == [151]
    assert batches[0].format == "detectron2"


def test_read_file_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_file(tmp_path / "nope.jsonl")
    half = tmp_path / "trainer_state.json"
    half.write_text('{"log_history": [')
    with pytest.raises(ValueError, match="trainer_state.json"):
        read_file(half)
