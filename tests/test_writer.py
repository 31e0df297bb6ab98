"""RunWriter: what it writes (read back by the JSONL parser), under threads, failures and exits."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from disk_faults import DiskState

import trainwatch.writer as writer_mod
from trainwatch import RunWriter, plainvalues
from trainwatch.batch import RecordBatch
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.writer import rank_filename, to_yaml

DEADLINE_S = 5.0
"""How long a poll waits for something that should happen within a flush interval."""


# ---------------------------------------------------------------------------- helpers
@pytest.fixture
def writers():
    """Makes writers and closes every one at teardown (the flusher thread must not leak)."""
    made: list[RunWriter] = []

    def make(*args: Any, **kw: Any) -> RunWriter:
        w = RunWriter(*args, **kw)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def parse(path: Path, rank: int | None = None) -> RecordBatch:
    return JsonlParser(str(path), rank=rank).parse(path.read_bytes())


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def wait_for(cond: Any, what: str, deadline_s: float = DEADLINE_S) -> float:
    """Poll ``cond()`` until true; returns the seconds it took, fails after ``deadline_s``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > deadline_s:
            pytest.fail(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.005)
    return time.monotonic() - t0


def warnings_in(err: str, word: str = "dropping") -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("trainwatch:") and word in ln]


# ---------------------------------------------------------------------------- records
def test_records_round_trip_through_the_jsonl_parser(tmp_path: Path, writers) -> None:
    config = {"lr": 3e-4, "model": {"layers": 2}}
    w = writers(tmp_path / "runs" / "x", config=config)
    losses = [1.0 / (i + 1) for i in range(50)]
    for i, loss in enumerate(losses):
        if i % 2:
            w.log(step=i, loss=loss, lr=1e-3, train={"acc": i / 50})
        else:
            w.log({"loss": loss, "lr": 1e-3, "train": {"acc": i / 50}}, step=i)
    w.event("checkpoint", step=49, path="ckpt/49.pt")
    w.close()

    assert w.path == tmp_path / "runs" / "x" / "metrics.jsonl"
    b = parse(w.path)
    assert not b.malformed and not b.rewinds
    assert b.series["loss"].values.tolist() == losses
    assert b.series["loss"].steps.tolist() == list(range(50))
    assert b.series["train/acc"].values.tolist() == [i / 50 for i in range(50)]
    assert [e.name for e in b.events] == ["run_start", "checkpoint", "run_end"]
    start, ckpt, end = b.events
    assert start.fields["config"] == config
    assert start.fields["pid"] == os.getpid() and start.fields["argv"] == sys.argv
    assert isinstance(start.fields["host"], str) and start.fields["host"]
    assert (ckpt.step, ckpt.fields["path"]) == (49, "ckpt/49.pt")
    assert end.fields == {"status": "finished", "exit_code": 0}
    # every record carries a unix time, in order
    times = [r["time"] for r in records(w.path)]
    assert times == sorted(times) and abs(times[-1] - time.time()) < 60
    assert w.dropped == 0


def test_step_keyword_wins_and_time_can_be_given(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=0)
    w.log({"step": 1, "loss": 1.0}, step=7)
    w.log(loss=2.0, time=123.5)
    recs = records(w.path)[1:]
    assert recs[0]["step"] == 7 and "step" not in recs[1]
    assert recs[1]["time"] == 123.5


def test_non_finite_values_are_bare_tokens_the_parser_reads(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=0)
    w.log(step=0, a=math.nan, b=math.inf, c=-math.inf, d=np.float32("nan"), e=np.float64("-inf"))
    line = w.path.read_text().splitlines()[-1]
    assert '"a":NaN' in line and '"b":Infinity' in line and '"c":-Infinity' in line
    assert '"d":NaN' in line and '"e":-Infinity' in line
    b = parse(w.path)
    assert math.isnan(b.series["a"].values[0]) and math.isnan(b.series["d"].values[0])
    assert b.series["b"].values[0] == math.inf
    assert b.series["c"].values[0] == -math.inf and b.series["e"].values[0] == -math.inf
    assert b.series["a"].nonfinite == 1


def test_numpy_scalars_and_small_arrays_are_numbers(tmp_path: Path, writers, capsys) -> None:
    w = writers(tmp_path, flush_interval=0)
    values = {
        "f32": np.float32(0.1),
        "f64": np.float64(0.2),
        "i64": np.int64(-3),
        "u8": np.uint8(200),
        "zero_d": np.array(2.5),
        "one_el": np.array([[4.0]], dtype=np.float32),
    }
    w.log(step=np.int64(5), flag=np.bool_(True), **values)
    rec = records(w.path)[-1]
    assert rec["step"] == 5 and type(rec["step"]) is int
    assert rec["flag"] is True
    for k, v in values.items():
        assert rec[k] == v.item(), k
    assert type(rec["i64"]) is int and type(rec["f32"]) is float
    assert capsys.readouterr().err == ""  # nothing here needed repr()
    b = parse(w.path)
    assert b.series["f32"].values[0] == float(np.float32(0.1))
    assert b.series["u8"].steps.tolist() == [5]


class FakeScalar:
    """What a torch 0-d tensor looks like to the writer: an .item() that returns a number."""

    def __init__(self, v: float) -> None:
        self.v = v

    def item(self) -> float:
        return self.v


class FloatOnly:
    """A number-like whose .item() fails (a multi-element tensor would) but float() works."""

    def item(self) -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")

    def __float__(self) -> float:
        return 1.5


class Opaque:
    def item(self) -> str:
        return "not a number"

    def __repr__(self) -> str:
        return "Opaque()"


def test_duck_typed_scalars_and_repr_fallback(tmp_path: Path, writers, capsys) -> None:
    w = writers(tmp_path, flush_interval=0)
    w.log(
        step=FakeScalar(3),
        loss=FakeScalar(0.25),
        grad=FloatOnly(),
        weird=Opaque(),
        nested={"a": FakeScalar(1.0), "b": [FakeScalar(2.0), Opaque()]},
        path=Path("ckpt") / "x.pt",
    )
    w.log(step=4, weird=Opaque(), other=object())
    recs = records(w.path)[1:]
    assert recs[0]["step"] == 3 and recs[0]["loss"] == 0.25 and recs[0]["grad"] == 1.5
    assert recs[0]["weird"] == "Opaque()" and recs[0]["path"] == str(Path("ckpt") / "x.pt")
    assert recs[0]["nested"] == {"a": 1.0, "b": [2.0, "Opaque()"]}
    assert recs[1]["other"].startswith("<object object at")
    assert w.coerced == 4
    err = capsys.readouterr().err
    assert len(warnings_in(err, "repr")) == 1, err  # reported once, however many
    assert str(w.path) in err


def test_odd_records_never_raise(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=0)
    cyclic: dict[str, Any] = {"x": 1.0}
    cyclic["self"] = cyclic
    w.log(step=1, table={(1, 2): 3.0, None: 1, 2: "two"})
    w.log(step=2, cyc=cyclic)
    w.log(step=3, big=np.zeros(10_000))  # a whole array: a bounded repr, not a 10k-number line
    w.log(step=4, tup=(1, 2), empty={})
    recs = records(w.path)[1:]
    assert recs[0]["table"] == {"(1, 2)": 3.0, "null": 1, "2": "two"}
    assert recs[1]["step"] == 2 and recs[1]["cyc"]["x"] == 1.0
    assert isinstance(recs[2]["big"], str) and len(recs[2]["big"]) <= plainvalues.MAX_REPR
    assert recs[3]["tup"] == [1, 2] and recs[3]["empty"] == {}
    assert w.dropped == 0


def test_log_rejects_a_non_mapping_positional(tmp_path: Path, writers) -> None:
    w = writers(tmp_path)
    with pytest.raises(TypeError, match="mapping"):
        w.log([("loss", 1.0)])


def test_nested_dicts_become_slash_series_and_lists_notes(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=0)
    w.log(step=1, train={"loss": 0.5, "opt": {"lr": 1e-3}}, shapes=[3, 4], name="run-a")
    b = parse(w.path)
    assert b.series["train/loss"].values.tolist() == [0.5]
    assert b.series["train/opt/lr"].values.tolist() == [1e-3]
    assert b.notes and b.notes[0][1] == {"shapes": [3, 4], "name": "run-a"}


# ---------------------------------------------------------------------------- threads, flushing
def test_eight_threads_write_only_whole_lines(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=0.002)
    n_threads, per_thread = 8, 1500
    start = threading.Barrier(n_threads + 1)
    torn_seen: list[str] = []

    def worker(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            w.log(step=i, thread=t, i=i, loss=random.Random(t * 10_000 + i).random())

    threads = [
        threading.Thread(target=worker, args=(t,), name=f"log-{t}") for t in range(n_threads)
    ]
    for th in threads:
        th.start()
    start.wait()
    # a concurrent reader: every complete line it ever sees parses
    while any(th.is_alive() for th in threads):
        data = w.path.read_bytes()
        for ln in data[: data.rfind(b"\n") + 1].splitlines():
            try:
                json.loads(ln)
            except ValueError:
                torn_seen.append(ln.decode("utf-8", "replace"))
    for th in threads:
        th.join()
    w.close()

    assert not torn_seen, torn_seen[:3]
    recs = records(w.path)  # json.loads on every line
    metric = [r for r in recs if "event" not in r]
    assert len(metric) == n_threads * per_thread
    for t in range(n_threads):  # each thread's records, complete and in its order
        assert [r["i"] for r in metric if r["thread"] == t] == list(range(per_thread))
    assert recs[0]["event"] == "run_start" and recs[-1]["event"] == "run_end"
    b = parse(w.path)
    assert not b.malformed and len(b.series["loss"]) == n_threads * per_thread


def test_flushes_within_the_interval_while_the_loop_stalls(tmp_path: Path, writers) -> None:
    interval = 0.2
    w = writers(tmp_path, flush_interval=interval)
    w.log(step=1, loss=0.5)  # ...and then no more calls: a long eval, a hang
    took = wait_for(lambda: b'"loss":0.5' in w.path.read_bytes(), "the record to be flushed")
    assert took < interval + 1.0  # a loaded CI box may wake the thread late, not 1 s late


def test_events_are_written_promptly_even_with_a_long_interval(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=60.0)
    w.log(step=3, loss=1.0)
    w.event("checkpoint", step=3, path="c.pt")
    wait_for(lambda: b'"checkpoint"' in w.path.read_bytes(), "the event to be flushed")
    recs = records(w.path)
    assert [r.get("event") for r in recs] == ["run_start", None, "checkpoint"]


def test_a_fast_loop_wakes_the_flusher_before_its_interval(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=60.0)
    for i in range(writer_mod.WAKE_PENDING + 1):
        w.log(step=i, loss=1.0)
    wait_for(lambda: w.path.read_bytes().count(b"\n") > writer_mod.WAKE_PENDING, "an early flush")


def test_run_start_is_on_disk_when_the_constructor_returns(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=60.0)
    assert records(w.path)[0]["event"] == "run_start"


def test_close_is_idempotent_and_stops_the_thread(tmp_path: Path, capsys) -> None:
    w = RunWriter(tmp_path, flush_interval=0.05)
    w.log(step=1, loss=1.0)
    thread = w._thread
    assert thread is not None and thread.daemon and thread.is_alive()
    w.close(status="finished", exit_code=0)
    assert not thread.is_alive()
    w.close(status="crashed", exit_code=1)
    w.log(step=2, loss=2.0)
    w.log(step=3, loss=2.0)
    recs = records(w.path)
    assert [r.get("event") for r in recs] == ["run_start", None, "run_end"]
    assert recs[-1]["status"] == "finished"
    assert len(warnings_in(capsys.readouterr().err, "after close")) == 1


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (ValueError("boom\nsecond line"), "crashed", 1),
        (KeyboardInterrupt(), "interrupted", 130),
        (SystemExit(3), "crashed", 3),
        (SystemExit(0), "finished", 0),
    ],
)
def test_context_manager_records_how_the_run_ended(
    tmp_path: Path, exc: BaseException, status: str, code: int
) -> None:
    with pytest.raises(type(exc)), RunWriter(tmp_path, flush_interval=0.05) as w:
        w.log(step=1, loss=1.0)
        raise exc
    end = records(w.path)[-1]
    assert (end["event"], end["status"], end["exit_code"]) == ("run_end", status, code)
    if isinstance(exc, ValueError):
        assert end["error"] == "ValueError: boom"
    assert w._thread is not None and not w._thread.is_alive()


def test_context_manager_clean_exit_is_finished(tmp_path: Path) -> None:
    with RunWriter(tmp_path) as w:
        w.log(step=1, loss=1.0)
    end = records(w.path)[-1]
    assert (end["event"], end["status"], end["exit_code"]) == ("run_end", "finished", 0)
    assert "error" not in end


def test_synchronous_mode_writes_each_record_at_once(tmp_path: Path, writers) -> None:
    w = writers(tmp_path, flush_interval=0)
    assert w._thread is None
    for i in range(3):
        w.log(step=i, loss=float(i))
        assert records(w.path)[-1]["step"] == i


# ---------------------------------------------------------------------------- I/O failures
def test_disk_full_warns_once_counts_drops_and_recovers(
    tmp_path: Path, writers, disk: DiskState, capsys
) -> None:
    w = writers(tmp_path, flush_interval=0.02)
    for i in range(5):
        w.log(step=i, loss=1.0)
    w.flush()
    disk.full = True
    for i in range(5, 15):  # training goes on: no exception reaches it
        w.log(step=i, loss=1.0)
        w.flush()
    assert w.dropped == 10
    # still full when the writer retries: the outage is still reported only once
    opened = len(disk.opened)
    step = itertools.count(15)
    wait_for(lambda: w.log(step=next(step), loss=1.0) or len(disk.opened) > opened + 1, "retries")
    err = capsys.readouterr().err
    warned = warnings_in(err)
    assert len(warned) == 1, err
    assert str(w.path) in warned[0] and "No space left on device" in warned[0]
    disk.full = False
    # the writer reopens the file after its retry delay; keep training until records land
    wait_for(
        lambda: w.log(step=next(step), loss=2.0) or b'"loss":2.0' in w.path.read_bytes(),
        "recovery",
    )
    w.close()
    steps = [r["step"] for r in records(w.path) if "step" in r and "event" not in r]
    assert steps[:5] == list(range(5)) and b'"loss":2.0' in w.path.read_bytes()
    lost = [s for s in range(max(steps) + 1) if s not in steps]
    assert len(lost) == w.dropped
    err = capsys.readouterr().err
    assert not warnings_in(err) and "again" in err  # recovery is said, the failure not repeated
    assert len(disk.opened) >= 2


def test_say_takes_the_writer_messages_instead_of_stderr(
    tmp_path: Path, writers, disk: DiskState, capsys
) -> None:
    """The framework integrations turn them into warnings: every message goes to ``say``."""
    said: list[str] = []
    w = writers(tmp_path, flush_interval=0, say=said.append)
    disk.full = True
    w.log(step=1, loss=object())  # a repr() note, then a failed write
    disk.full = False
    step = itertools.count(2)
    wait_for(lambda: w.log(step=next(step), loss=1.0) or len(said) >= 3, "the recovery message")
    assert "repr()" in said[0] and "No space left on device" in said[1], said
    assert said[2].startswith(f"trainwatch: writing {w.path} again"), said
    assert not capsys.readouterr().err


def test_a_short_write_costs_one_malformed_line_not_the_next_records(
    tmp_path: Path, writers, disk: DiskState
) -> None:
    w = writers(tmp_path, flush_interval=0.02)
    w.log(step=0, loss=1.0)
    w.flush()
    disk.full, disk.short = True, True
    w.log(step=1, loss=1.0, pad="x" * 200)
    w.flush()
    assert w.dropped == 1
    disk.full = False
    step = iter(range(2, 10_000))
    wait_for(
        lambda: w.log(step=next(step), loss=3.0) or b'"loss":3.0' in w.path.read_bytes(), "recovery"
    )
    w.close()
    b = parse(w.path)
    assert len(b.malformed) == 1  # the half-written record, ended by a newline
    assert b.series["loss"].values.tolist()[0] == 1.0 and 3.0 in b.series["loss"].values
    assert b.events[-1].name == "run_end"


def test_directory_removed_mid_run_then_restored(tmp_path: Path, writers, capsys) -> None:
    run = tmp_path / "run"
    w = writers(run, flush_interval=0.02)
    w.log(step=0, loss=1.0)
    w.flush()
    shutil.rmtree(run)
    for i in range(1, 6):
        w.log(step=i, loss=1.0)
    w.flush()
    assert w.dropped == 5  # not silently written into the deleted file
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if ln.startswith("trainwatch:")]) == 1, err
    assert str(w.path) in err and "deleted" in err
    run.mkdir()
    step = iter(range(100, 10_000))
    wait_for(lambda: w.log(step=next(step), loss=2.0) or w.path.exists(), "the new file")
    w.close()
    recs = records(w.path)
    assert recs[0]["event"] == "run_start"  # the new file starts like a run
    assert recs[-1]["event"] == "run_end" and recs[1]["step"] >= 100


def test_unwritable_run_directory_never_raises(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    w = RunWriter(blocker / "run", config={"lr": 0.1}, flush_interval=0.02)
    w.log(step=1, loss=1.0)
    w.event("checkpoint", step=1)
    w.close(status="finished")
    assert w.dropped == 4  # run_start, the record, the event, run_end
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("trainwatch:")]
    assert len(lines) == 1 and str(blocker / "run") in lines[0], err
    assert blocker.read_text() == "not a directory"


def test_a_torn_last_line_from_an_earlier_run_is_ended(tmp_path: Path, writers) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    w = writers(tmp_path, flush_interval=0)
    w.log(step=3, loss=3.0)
    b = parse(w.path)
    assert [m.line for m in b.malformed] == [2]
    assert b.series["loss"].values.tolist() == [1.0, 3.0]
    assert b.events[0].name == "run_start"


# ---------------------------------------------------------------------------- config.yaml
class FrozenMap(Mapping):
    def __init__(self, d: dict[str, Any]) -> None:
        self._d = d

    def __getitem__(self, k: str) -> Any:
        return self._d[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


class FrozenSeq(Sequence):
    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class TrainCfg:
    lr: float = 1e-5
    layers: tuple[int, ...] = (64, 64)


def test_config_yaml_is_atomic_and_read_back_by_pyyaml(
    tmp_path: Path, monkeypatch, writers
) -> None:
    config = {
        "lr": 1e-5,
        "wd": 1.5e20,
        "tiny": 5e-324,
        "neg": -0.0,
        "big": 2**70,
        "nan": math.nan,
        "inf": math.inf,
        "ninf": -math.inf,
        "on": True,
        "n": False,
        "null": None,
        "yes": "no",
        "strings": ["1e3", "null", "- x", "a: b", "#c", "'q'", '"d"', "", " pad ", "~", "0x1F"],
        "unicode": "naïve – 東京 \U0001f600",
        "controls": "tab\tnl\ncr\r nel\x85 ls\u2028 bom\ufeff del\x7f bell\x07",
        "nested": {"opt": {"name": "adam", "betas": [0.9, 0.999]}, "empty": {}, "none": []},
        "list_of_dicts": [{"a": 1, "b": [1, [2, 3]]}, {"c": None}],
        "paths": Path("data") / "train",
        "np": np.float32(0.5),
        1: "int key",
        "with space": 1,
        "model.lr": 2,
    }
    target = tmp_path / "config.yaml"
    target.write_text("old: true\n")
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy_replace(src: Any, dst: Any) -> None:
        # at the moment of the rename the target is still the old file, the temp file is whole
        seen.append((Path(dst).read_text(), Path(src).read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(writer_mod.os, "replace", spy_replace)
    w = writers(tmp_path, config=config)
    assert len(seen) == 1 and seen[0][0] == "old: true\n" and seen[0][1] == target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "metrics.jsonl"]

    loaded = yaml.safe_load(target.read_text(encoding="utf-8"))
    expected = {
        **{k: v for k, v in config.items() if k not in ("nan", "paths", "np", 1)},
        "paths": str(Path("data") / "train"),
        "np": 0.5,
        "1": "int key",
    }
    assert math.isnan(loaded.pop("nan"))
    assert loaded == expected
    assert math.copysign(1.0, loaded["neg"]) == -1.0
    assert list(loaded) == [k for k in map(str, config) if k != "nan"]  # order kept
    # the same config (as JSON) rides in the run_start record
    start = records(w.path)[0]
    assert start["config"]["lr"] == 1e-5 and start["config"]["nested"] == config["nested"]


def test_to_yaml_round_trips_random_configs() -> None:
    rng = random.Random(20240531)
    alphabet = [chr(c) for c in (*range(0x250), 0x2028, 0x2029, 0xFEFF, 0x1F600, 0x10FFFF)]

    def value(depth: int) -> Any:
        kind = rng.randrange(8 if depth < 3 else 6)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.randint(-(10**20), 10**20)
        if kind == 2:
            return rng.choice([rng.uniform(-1e6, 1e6), 10 ** rng.uniform(-300, 300), -1e-7, 0.0])
        if kind in (3, 4, 5):
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        if kind == 6:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {
            "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 6))): value(depth + 1)
            for _ in range(rng.randrange(4))
        }

    for _ in range(300):
        cfg = {f"k{i}": value(0) for i in range(rng.randrange(1, 6))}
        text = to_yaml(cfg)
        assert yaml.safe_load(text) == cfg, text


def test_config_accepts_a_dataclass_and_is_written_once_per_run(tmp_path: Path, writers) -> None:
    writers(tmp_path / "a", config=TrainCfg())
    assert yaml.safe_load((tmp_path / "a" / "config.yaml").read_text()) == {
        "lr": 1e-5,
        "layers": [64, 64],
    }
    # OmegaConf-like containers (a Mapping and a Sequence that are not dict/list), a Namespace
    cfg = FrozenMap({"opt": FrozenMap({"betas": FrozenSeq([0.9, 0.99])}), "name": "x"})
    w = writers(tmp_path / "m", config=argparse.Namespace(cfg=cfg, seed=3))
    expected = {"cfg": {"opt": {"betas": [0.9, 0.99]}, "name": "x"}, "seed": 3}
    assert yaml.safe_load((tmp_path / "m" / "config.yaml").read_text()) == expected
    assert records(w.path)[0]["config"] == expected
    writers(tmp_path / "b", config={"x": 1}, rank=1)  # only rank 0 (or no rank) writes it
    assert not (tmp_path / "b" / "config.yaml").exists()
    writers(tmp_path / "c")  # no config: no file
    assert not (tmp_path / "c" / "config.yaml").exists()


# ---------------------------------------------------------------------------- ranks, process life
def test_each_rank_writes_its_own_stream(tmp_path: Path, writers) -> None:
    assert rank_filename("metrics.jsonl", None) == "metrics.jsonl"
    assert rank_filename("metrics.jsonl", 3) == "metrics.rank3.jsonl"
    assert rank_filename("log", 0) == "log.rank0"
    ws = [writers(tmp_path, config={"x": 1}, rank=r, flush_interval=0) for r in range(2)]
    for r, w in enumerate(ws):
        w.log(step=1, loss=float(r))
    assert [w.path.name for w in ws] == ["metrics.rank0.jsonl", "metrics.rank1.jsonl"]
    for r, w in enumerate(ws):
        b = parse(w.path, rank=r)
        assert b.series["loss"].values.tolist() == [float(r)] and b.rank == r
        assert b.events[0].fields["rank"] == r
    with pytest.raises(ValueError, match="rank"):
        RunWriter(tmp_path, rank=-1)


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_importing_trainwatch_and_writing_is_stdlib_only(tmp_path: Path) -> None:
    proc = run_python(
        """
        import sys
        import trainwatch
        from trainwatch import RunWriter
        import trainwatch.probes
        with RunWriter("run", config={"lr": 1e-3}) as w:
            w.log(step=1, loss=0.5)
        heavy = ("numpy", "torch", "yaml", "msgspec", "textual", "rich")
        heavy = [m for m in heavy if m in sys.modules]
        print("heavy:", heavy)
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "heavy: []"


def test_a_forgotten_writer_is_closed_at_exit_as_unknown(tmp_path: Path) -> None:
    proc = run_python(
        """
        from trainwatch import RunWriter
        w = RunWriter("run", flush_interval=60)
        w.log(step=1, loss=0.5)
        del w
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    recs = records(tmp_path / "run" / "metrics.jsonl")
    assert [r.get("event") for r in recs] == ["run_start", None, "run_end"]
    assert recs[-1]["status"] == "unknown" and recs[-1]["exit_code"] is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_writes_nothing(tmp_path: Path) -> None:
    proc = run_python(
        """
        import os, sys
        from trainwatch import RunWriter
        w = RunWriter("run", flush_interval=60)
        w.log(step=1, loss=0.5)  # pending in memory when the process forks
        pid = os.fork()
        if pid == 0:
            w.log(step=99, loss=9.0)
            sys.exit(0)  # a normal exit: atexit runs in the child too
        os.waitpid(pid, 0)
        w.log(step=2, loss=0.25)
        w.close()
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    recs = records(tmp_path / "run" / "metrics.jsonl")
    assert [r.get("event") or r["step"] for r in recs] == ["run_start", 1, 2, "run_end"]
    assert "belongs to the parent process" in proc.stderr
