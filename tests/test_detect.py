"""Format detection from names and first bytes, ``make_reader``, and ``find_metric_files``."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from trainwatch.formats._crc32c import masked_crc32c
from trainwatch.formats.detect import (
    FORMATS,
    detect_format,
    find_metric_files,
    make_reader,
    read_head,
)
from trainwatch.formats.detectron2 import Detectron2Reader
from trainwatch.formats.hf_trainer import HfTrainerStateReader
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.formats.keras_csv import KerasCsvReader
from trainwatch.formats.lightning_csv import LightningCsvReader
from trainwatch.formats.mmcv import MmcvLogReader
from trainwatch.formats.mmengine import MmengineScalarsReader
from trainwatch.formats.textlog import TextLogReader
from trainwatch.formats.tfevents import TfEventsReader


def _tfrecord(data: bytes) -> bytes:
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc32c(n)) + data + struct.pack("<I", masked_crc32c(data))


HF = json.dumps({"global_step": 1, "log_history": [{"loss": 1.0, "step": 1}]}, indent=2).encode()
MMCV_META = json.dumps({"env_info": "sys.platform: linux", "config": "x"}).encode() + b"\n"
MMCV_ROW = b'{"mode": "train", "epoch": 1, "iter": 50, "lr": 0.01, "loss": 1.0}\n'
D2_ROW = b'{"data_time": 0.01, "iteration": 19, "lr": 0.001, "total_loss": 2.0}\n'
MME_ROW = b'{"lr": 0.01, "data_time": 0.2, "loss": 1.0, "epoch": 1, "iter": 1, "step": 1}\n'
JSONL_ROW = b'{"step": 1, "time": 1700000000.0, "loss": 2.0}\n'

# (file name, content, expected format, reader class): content decides where it is clear
CASES = [
    ("events.out.tfevents.1.host", b"", "tfevents", TfEventsReader),
    ("run.tfevents", _tfrecord(b"\x09" + b"\x00" * 8), "tfevents", TfEventsReader),
    ("trainer_state.json", HF, "hf_trainer", HfTrainerStateReader),
    ("hf_copy.json", HF, "hf_trainer", HfTrainerStateReader),
    ("trainer_state.json", b"", "hf_trainer", HfTrainerStateReader),
    ("compact.json", json.dumps({"log_history": []}).encode(), "hf_trainer", HfTrainerStateReader),
    ("20201022.log.json", MMCV_ROW, "mmcv", MmcvLogReader),
    ("copy.json", MMCV_META + MMCV_ROW, "mmcv", MmcvLogReader),
    ("rows.json", MMCV_ROW, "mmcv", MmcvLogReader),
    ("metrics.json", D2_ROW, "detectron2", Detectron2Reader),
    ("d2_copy.json", D2_ROW, "detectron2", Detectron2Reader),
    ("scalars.json", MME_ROW, "mmengine", MmengineScalarsReader),
    ("renamed.json", MME_ROW, "mmengine", MmengineScalarsReader),
    ("metrics.jsonl", JSONL_ROW, "jsonl", JsonlParser),
    ("metrics.jsonl", b"", "jsonl", JsonlParser),
    ("mine.jsonl", D2_ROW, "jsonl", JsonlParser),  # .jsonl is always trainwatch's JSON lines
    ("anything.out", JSONL_ROW, "jsonl", JsonlParser),
    ("metrics.csv", b"epoch,step,train_loss\r\n0,0,1.0\r\n", "lightning_csv", LightningCsvReader),
    ("metrics.csv", b"", "lightning_csv", LightningCsvReader),
    ("other.txt", b"lr,step,val_loss\n", "lightning_csv", LightningCsvReader),
    ("training.log", b"epoch,accuracy,loss\r\n0,0.5,1.0\r\n", "keras_csv", KerasCsvReader),
    ("hist.csv", b"epoch;loss\n0;1.0\n", "keras_csv", KerasCsvReader),
    ("main.log", b"s:0 tel:11.0\ns:0 trl:11.0 lr:0.001 norm:1.0\n", "textlog", TextLogReader),
    ("stdout", b"banner, with commas\n[rank0]: warn\niter 10: loss 2.0, time 5ms\n", "textlog",
     TextLogReader),
    ("train.log", b"loading data...\n", "textlog", TextLogReader),  # metric lines come later
    ("empty.log", b"", "textlog", TextLogReader),
]


@pytest.mark.parametrize(("name", "content", "fmt", "cls"), CASES)
def test_detect_and_make_reader(tmp_path: Path, name: str, content: bytes, fmt: str,
                                cls: type) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    assert detect_format(f, read_head(f)) == fmt
    assert fmt in FORMATS
    reader = make_reader(f)
    assert isinstance(reader, cls) and reader.format == fmt
    assert make_reader(f, "shown-name").source == "shown-name"  # type: ignore[union-attr]


def test_rank_files_get_their_rank(tmp_path: Path) -> None:
    f = tmp_path / "metrics.rank3.jsonl"
    f.write_bytes(JSONL_ROW)
    reader = make_reader(f)
    assert isinstance(reader, JsonlParser)
    assert reader.parse(JSONL_ROW).rank == 3


@pytest.mark.parametrize(
    ("name", "content"),
    [("weights.bin", b"\x00\x01\x02garbage"), ("notes.md", b"# hello\nsome text\n"),
     ("config.json", b'{\n  "lr": 0.1\n}\n'), ("blank.bin", b"")],
)
def test_unknown_format_names_file_and_lists_supported(tmp_path: Path, name: str,
                                                       content: bytes) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(ValueError) as e:
        make_reader(f)
    msg = str(e.value)
    assert name in msg and "supported" in msg
    assert all(fmt in msg for fmt in FORMATS)
    assert "\n" not in msg


def test_forced_format_skips_detection(tmp_path: Path) -> None:
    f = tmp_path / "weird.bin"
    f.write_bytes(b"iter 1: loss 2.0\n")
    assert isinstance(make_reader(f, fmt="textlog"), TextLogReader)
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        make_reader(f, fmt="nope")


def test_missing_and_unreadable_files_raise_os_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        make_reader(tmp_path / "gone.jsonl")
    if os.geteuid() == 0:
        pytest.skip("root reads any file: permission errors cannot be provoked")
    f = tmp_path / "locked.jsonl"
    f.write_bytes(JSONL_ROW)
    f.chmod(0)
    with pytest.raises(PermissionError, match="locked.jsonl"):
        make_reader(f)


# ---------------------------------------------------------------------- run folders
def _touch(p: Path, content: bytes = b"") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(content)
    return p


def test_find_metric_files_order_and_newest_only(tmp_path: Path) -> None:
    run = tmp_path
    _touch(run / "metrics.rank10.jsonl", JSONL_ROW)
    _touch(run / "metrics.rank2.jsonl", JSONL_ROW)
    main = _touch(run / "metrics.jsonl", JSONL_ROW)
    _touch(run / "alerts.jsonl", JSONL_ROW)  # not metrics
    _touch(run / "checkpoint-500" / "trainer_state.json", HF)
    hf = _touch(run / "checkpoint-1000" / "trainer_state.json", HF)
    _touch(run / "lightning_logs" / "version_2" / "metrics.csv", b"epoch,step,a\n")
    pl = _touch(run / "lightning_logs" / "version_10" / "metrics.csv", b"epoch,step,a\n")
    _touch(run / "20240101_000000" / "vis_data" / "scalars.json", MME_ROW)
    mme = _touch(run / "20240102_000000" / "vis_data" / "scalars.json", MME_ROW)
    _touch(run / "20240101_000000.log.json", MMCV_META)
    mmcv = _touch(run / "20240102_000000.log.json", MMCV_META)
    d2 = _touch(run / "metrics.json", D2_ROW)
    ev = _touch(run / "events.out.tfevents.1.host", _tfrecord(b""))
    ev_val = _touch(run / "validation" / "events.out.tfevents.2.host", _tfrecord(b""))
    keras = _touch(run / "training.log", b"epoch,loss\n0,1.0\n")
    _touch(run / "console.log", b"iter 1: loss 2.0\n")  # console output beside real metrics
    _touch(run / "notes.txt", b"nothing here\n")

    got = find_metric_files(run)
    ranks = [run / "metrics.rank2.jsonl", run / "metrics.rank10.jsonl"]
    rest = sorted([hf, pl, mme, mmcv, d2, ev, ev_val, keras])
    assert got == [main, *ranks, *rest]


def test_find_metric_files_text_logs_only_when_nothing_structured(tmp_path: Path) -> None:
    log = _touch(tmp_path / "main.log", b"s:0 trl:11.0 lr:0.001 norm:1.0\n")
    _touch(tmp_path / "readme.txt", b"hello\n")
    assert find_metric_files(tmp_path) == [log]
    out = _touch(tmp_path / "lightning_logs" / "version_0" / "metrics.csv", b"step,loss\n")
    assert find_metric_files(tmp_path) == [out]


def test_find_metric_files_in_a_folder_that_is_not_one(tmp_path: Path) -> None:
    assert find_metric_files(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        find_metric_files(tmp_path / "missing")
    with pytest.raises(NotADirectoryError):
        find_metric_files(_touch(tmp_path / "f.jsonl", JSONL_ROW))
