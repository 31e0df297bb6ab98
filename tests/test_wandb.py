"""W&B ``.wandb`` logs, on files the real client wrote (tests/fixtures/wandb, see its README).

Expected values come from ``<run id>.expected.json``: what wandb's own protobuf classes read
from the same files. Covered: values, steps and times as logged (NaN kept), system stats,
console text, run_start / run_end, a file cut mid-record, a corrupt block, the path forms
(``wandb/latest-run``, a run folder, the file, the ``wandb/`` folder of runs), the CLI as a
subprocess, and live tailing of a file that grows in pieces.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from trainwatch.batch import RecordBatch, join_batches
from trainwatch.formats._leveldb import BLOCK
from trainwatch.formats._wandb_rows import HistoryColumns
from trainwatch.formats.detect import detect_format, find_metric_files, read_file
from trainwatch.formats.wandb import WandbReader
from trainwatch.inspect import format_text, summarize
from trainwatch.load import RunChoiceError, load_run
from trainwatch.tailer import FileTailer, Follower, TextChunk

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "wandb"
ROOT = FIXTURES / "wandb"
OK = next(ROOT.glob("offline-run-*-fixtok"))
CRASH = next(ROOT.glob("offline-run-*-fixtcrash"))
OK_FILE = OK / "run-fixtok.wandb"
CRASH_FILE = CRASH / "run-fixtcrash.wandb"
CUT_FILE = FIXTURES / "cut" / "run-fixtcut.wandb"


def expected(run_id: str) -> dict:
    return json.loads((FIXTURES / f"{run_id}.expected.json").read_text())


def joined(batches: list[RecordBatch]) -> RecordBatch:
    """A stream's batches as one (its meta merged)."""
    (one,) = join_batches(batches)
    return one


def read_all(path: Path, pieces: list[int] | None = None) -> tuple[RecordBatch, list[str], list]:
    """One reader fed ``path``'s bytes whole or in pieces of these sizes (cycled): the joined
    batch, the console lines (checked to be numbered without gaps) and every malformed entry."""
    data = path.read_bytes()
    r = WandbReader(str(path))
    out, console, pos, i = [], [], 0, 0
    while pos < len(data):
        n = pieces[i % len(pieces)] if pieces else len(data)
        out.append(r.feed(data[pos : pos + n]))
        pos, i = pos + n, i + 1
        if (got := r.take_text()) is not None:
            assert got[1] == len(console) + 1
            console.extend(got[0])
    out.append(r.finish())
    if (got := r.take_text()) is not None:
        console.extend(got[0])
    return joined(out), console, [m for b in out for m in b.malformed]


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def console_of(run_id: str) -> list[str]:
    """The output pieces joined: the prints are whole lines, so the text splits into them."""
    text = "".join(o["line"] for o in expected(run_id)["output"])
    return text.rstrip("\n").split("\n")


# ---------------------------------------------------------------------- values
def test_history_values_steps_and_times_exactly_as_logged() -> None:
    b, _, bad = read_all(OK_FILE)
    assert bad == []
    rows = expected("fixtok")["history"]
    assert len(rows) == 300
    steps = [int(r["items"]["_step"]) for r in rows]
    times = [float(r["items"]["_timestamp"]) for r in rows]
    for name in ("loss", "lr", "train/acc", "val_loss"):
        mine = [(r, float(r["items"][name])) for r in rows if name in r["items"]]
        s = b.series[name]
        assert s.steps.tolist() == [int(r["items"]["_step"]) for r, _ in mine], name
        assert s.times.tolist() == [float(r["items"]["_timestamp"]) for r, _ in mine], name
        np.testing.assert_array_equal(s.values, [v for _, v in mine])  # NaN == NaN here
    assert math.isnan(b.series["loss"].values[120]) and b.series["loss"].nonfinite == 1
    assert b.series["val_loss"].steps.tolist() == [50, 100, 150, 200, 250]
    metric_rows = [i for i in range(b.n_records) if b.steps[i] in steps]
    assert len(metric_rows) >= 300 and steps == list(range(300))
    assert b.times[b.series["loss"].rows].tolist() == times
    assert not any(k.startswith("_") or "runtime" in k for k in b.series)


def test_system_stats_ride_on_the_next_history_row() -> None:
    b, _, _ = read_all(OK_FILE)
    samples = expected("fixtok")["stats"]
    assert samples, "the fixture has system stats"
    cpu = [float(s["items"]["cpu"]) for s in samples if "cpu" in s["items"]]
    got = b.series["system/cpu"].values.tolist()
    assert got and set(got) <= set(cpu) and len(got) <= len(cpu)
    assert got[-1] in cpu
    # on rows that are training steps: no record of their own, at the history's steps
    assert set(b.series["system/cpu"].rows.tolist()) <= set(b.series["lr"].rows.tolist())


def test_run_start_run_end_and_config() -> None:
    ok, _, _ = read_all(OK_FILE)
    crash, _, _ = read_all(CRASH_FILE)
    start = ok.events[0]
    assert start.name == "run_start"
    want = expected("fixtok")["run"]
    assert start.fields["run_id"] == "fixtok" and start.fields["name"] == want["name"]
    assert start.fields["project"] == want["project"]
    assert start.fields["config"] == {"lr": 3e-4, "model": {"layers": 2}}
    assert start.time == want["start_time"]
    assert ok.meta["config"] == {"lr": 3e-4, "model": {"layers": 2}, "batch_size": 32}
    assert ok.meta["wandb_version"].startswith("0.31.0")
    end_ok, end_crash = ok.events[-1], crash.events[-1]
    assert (end_ok.name, end_ok.fields) == ("run_end", {"exit_code": 0, "status": "finished"})
    assert (end_crash.name, end_crash.fields) == ("run_end", {"exit_code": 1, "status": "crashed"})
    assert end_ok.step == 299 and end_crash.step == 39


def test_console_text_in_whole_lines() -> None:
    _, ok, _ = read_all(OK_FILE)
    assert ok == ["step 0 loss 2.8000", "step 100 loss 1.0112", "step 200 loss 0.4965"]
    _, crash, _ = read_all(CRASH_FILE)
    assert crash == console_of("fixtcrash")
    assert crash[0] == "step 0 loss 2.8000" and "Traceback (most recent call last):" in crash
    assert crash[-1] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.mark.parametrize("pieces", [[1, 2, 3, 5], [7, 64], [3, 250, 1, 4096], [BLOCK - 7, 9]])
def test_pieces_read_as_the_whole(pieces: list[int]) -> None:
    path = CRASH_FILE if pieces[0] == 1 else OK_FILE  # nearly byte by byte on the small one
    whole, console, _ = read_all(path)
    b, c, bad = read_all(path, pieces)
    assert bad == [] and c == console
    assert b.steps.tolist() == whole.steps.tolist() and b.times.tolist() == whole.times.tolist()
    assert sorted(b.series) == sorted(whole.series)
    for k, s in whole.series.items():
        np.testing.assert_array_equal(b.series[k].values, s.values)
    assert [(e.name, e.step, dict(e.fields)) for e in b.events] == [
        (e.name, e.step, dict(e.fields)) for e in whole.events]


# ---------------------------------------------------------------------- the bulk row path
def exact_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every history row through the exact decoder and the builder's generic path."""
    monkeypatch.setattr(HistoryColumns, "add", lambda *a, **k: False)


def same(a: RecordBatch, b: RecordBatch) -> None:
    assert a.steps.tolist() == b.steps.tolist() and a.times.tolist() == b.times.tolist()
    assert sorted(a.series) == sorted(b.series)
    for k, s in a.series.items():
        np.testing.assert_array_equal(b.series[k].values, s.values, err_msg=k)
        assert b.series[k].steps.tolist() == s.steps.tolist(), k
    assert [(e.name, e.step, dict(e.fields)) for e in a.events] == [
        (e.name, e.step, dict(e.fields)) for e in b.events]
    assert [dict(n) for _r, n in a.notes] == [dict(n) for _r, n in b.notes]


@pytest.mark.parametrize("path", [OK_FILE, CRASH_FILE], ids=["fixtok", "fixtcrash"])
def test_bulk_rows_equal_the_exact_decoder(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, _, _ = read_all(path)
    exact_only(monkeypatch)
    same(fast, read_all(path)[0])


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def history(step: int, items: list[tuple[list[str], str]], own_step: bool = True) -> bytes:
    """A ``Record`` holding a ``HistoryRecord`` (as wandb-core lays one out); ``own_step``:
    with the ``_step`` item (else the step is in the record's step field alone)."""
    reserved = [(["_step"], str(step))] if own_step else []
    body = b"".join(
        field(1, b"".join(field(2, k.encode()) for k in keys) + field(16, value.encode()))
        for keys, value in [*items, *reserved, (["_timestamp"], f"{1.7e9 + step}")]
    )
    return b"\x08" + varint(step + 1) + field(2, body + field(2, b"\x08" + varint(step) if step else b""))


def wandb_log(records: list[bytes]) -> bytes:
    """Records framed as a .wandb file: the W&B header, 32 KiB blocks, chunks split over them."""
    out = bytearray(b":W&B\xe1\xbe\x00")
    for rec in records:
        first = True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += bytes(left)
                continue
            piece, rec = rec[: left - 7], rec[left - 7 :]
            kind = (1 if first else 4) if not rec else (2 if first else 3)
            out += struct.pack("<IHB", zlib.crc32(bytes([kind]) + piece), len(piece), kind) + piece
            first = False
            if not rec:
                break
    return bytes(out)


def test_bulk_rows_refuse_what_they_cannot_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of every shape the bulk path must leave to the exact one, between common rows;
    and a row longer than a block (FIRST, MIDDLE, LAST chunks)."""
    odd = [
        [(["loss"], "1.5"), (["phase"], '"train"')],                    # a string
        [(["loss"], "1.25"), (["ok"], "true"), (["gone"], "null")],      # a boolean, a null
        [(["loss"], "NaN"), (["a", "b", "c"], "-Infinity")],            # nested three deep
        [(["loss"], "2"), (["tëmp₂"], "3")],                             # non-ASCII (0x82 byte)
        [(["loss"], "2"), (["k" * 200], "4")],                           # a key past 127 bytes
        [(["loss"], "2"), (["long"], "1" + "0" * 130)],                  # a value past 127
        [(["loss"], "2"), (['qu"ote'], "5")],                            # a quote in a key
        [(["loss"], "2"), (["img"], '{"_type": "image-file", "path": "x.png"}')],
        [(["loss"], "2"), (["huge"], '"' + "x" * 70_000 + '"')],         # over two blocks
        [(["loss"], "2"), (["step"], "7"), (["time"], "8")],             # reserved names
    ]
    rows = []
    for i in range(60):
        rows.append(history(i, odd[i // 3] if i % 3 == 1 and i // 3 < len(odd) else
                            [(["loss"], f"{1 / (i + 1)}"), (["train", "acc"], f"{i / 60}")],
                            own_step=i != 50))  # (row 50: its step only in the step field)
    f = tmp_path / "run-odd.wandb"
    f.write_bytes(wandb_log(rows))
    fast, _, bad = read_all(f)
    assert bad == []
    assert fast.series["loss"].steps.tolist() == list(range(60))
    assert fast.series["a/b/c"].values.tolist() == [-math.inf]
    assert "tëmp₂" in fast.series and "k" * 200 in fast.series and 'qu"ote' in fast.series
    assert fast.series["step_value"].values.tolist() == [7.0] and "time_value" in fast.series
    assert "img" not in fast.series and "img/path" not in fast.series
    assert {"phase": "train"} in [dict(n) for _r, n in fast.notes]
    exact_only(monkeypatch)
    same(fast, read_all(f)[0])


# ---------------------------------------------------------------------- damaged files
def test_a_file_cut_mid_record_is_the_records_before_the_cut() -> None:
    want = expected("fixtok")
    size = CUT_FILE.stat().st_size
    assert size == want["cut"]["bytes"]
    start, end = want["cut"]["record"]
    assert start < BLOCK * 2 < size < end  # cut inside a record split over two blocks
    whole_rows = [r for r in want["history"] if r["bytes"][1] <= size]
    batches = read_file(CUT_FILE)
    b = joined(batches)
    assert [m for x in batches for m in x.malformed] == []  # being written is not an error
    assert b.series["lr"].steps.tolist() == [int(r["items"]["_step"]) for r in whole_rows]
    assert b.meta["unfinished"] == (start, size - start)
    # the rest of the bytes completes it, as when tailing a file being written
    r = WandbReader(str(CUT_FILE))
    first = r.feed(CUT_FILE.read_bytes())
    rest = r.feed(OK_FILE.read_bytes()[size:])
    assert first.series["lr"].steps.tolist() + rest.series["lr"].steps.tolist() == list(range(300))


def test_a_corrupt_block_is_reported_once_and_skipped(tmp_path: Path) -> None:
    data = bytearray(OK_FILE.read_bytes())
    rows = expected("fixtok")["history"]
    hit = next(r for r in rows if r["bytes"][0] > BLOCK + 1000)  # a row inside block 1
    data[hit["bytes"][0] + 20] ^= 0xFF
    f = tmp_path / "run-broken.wandb"
    f.write_bytes(bytes(data))
    b = joined(read_file(f))
    bad = [m for x in read_file(f) for m in x.malformed]
    assert len(bad) == 1
    assert f"corrupt data at byte {hit['bytes'][0]} (checksum mismatch)" in bad[0].reason
    assert f"next block at byte {2 * BLOCK}" in bad[0].reason
    lost = {int(r["items"]["_step"]) for r in rows
            if r["bytes"][0] < 2 * BLOCK and r["bytes"][1] > hit["bytes"][0]}
    kept = b.series["lr"].steps.tolist()
    assert kept == [s for s in range(300) if s not in lost]
    assert 0 < len(lost) < 100  # the rest of one block, nothing else
    assert b.events[-1].name == "run_end"
    text = format_text(summarize(load_run(f)))  # `trainwatch inspect` says where
    assert f"malformed 1 (first: {f}: corrupt data at byte {hit['bytes'][0]}" in text


def test_a_file_that_is_not_a_wandb_log(tmp_path: Path) -> None:
    f = tmp_path / "run-x.wandb"
    f.write_bytes(b"hello, not a log\n" * 100)
    assert detect_format(f, f.read_bytes()[:64]) == "wandb"
    bad = [m for b in read_file(f) for m in b.malformed]
    assert len(bad) == 1 and "not a W&B log" in bad[0].reason


# ---------------------------------------------------------------------- paths
def test_detected_by_name_and_by_content(tmp_path: Path) -> None:
    head = CRASH_FILE.read_bytes()[:64]
    assert detect_format(CRASH_FILE, head) == "wandb"
    renamed = tmp_path / "copy.bin"
    assert detect_format(renamed, head) == "wandb"
    assert detect_format(tmp_path / "run-new.wandb", b"") == "wandb"  # not written yet


def test_path_forms_read_the_same_run() -> None:
    latest = ROOT / "latest-run"
    assert latest.is_symlink()
    # through the link, the run it points at now: W&B re-points it when a run starts
    assert find_metric_files(latest) == [latest.parent / os.readlink(latest) / CRASH_FILE.name]
    for path in (latest, CRASH, CRASH_FILE):
        run = load_run(path)
        assert run.format == "wandb" and run.records == 42, path
        assert run.console[-1].startswith("RuntimeError: CUDA out of memory"), path
        assert run.files[0].resolve() == CRASH_FILE.resolve()


def test_the_wandb_folder_is_a_folder_of_runs() -> None:
    with pytest.raises(RunChoiceError) as e:
        load_run(ROOT)
    msg = str(e.value)  # (the one line every store of several runs says; the runs are listed)
    assert "\n" not in msg and "holds 2 runs: pick one with --run NAME_OR_ID" in msg
    assert sorted(r.name for r in e.value.runs) == sorted([OK.name, CRASH.name])  # latest-run once
    run = load_run(ROOT, CRASH.name)
    assert run.console == []  # the console comes with the records: known once they are walked
    assert run.records == 42 and run.console[-1].startswith("RuntimeError: CUDA out of memory")
    from trainwatch.tui.target import discover

    target = discover(ROOT)
    assert target.kind == "sweep"
    assert sorted(s.root.name for s in target.runs) == sorted([OK.name, CRASH.name])
    assert all(s.metric_files[0].suffix == ".wandb" for s in target.runs)
    one = discover(ROOT / "latest-run")
    assert one.kind == "run" and one.runs[0].metric_files[0].name == CRASH_FILE.name
    assert one.runs[0].run_id == CRASH.name  # the run the link points at
    # the project folder that holds wandb/ shows its runs too
    ids = {s.run_id for s in discover(FIXTURES).runs}
    assert {f"wandb/{OK.name}", f"wandb/{CRASH.name}"} <= ids and "wandb/latest-run" not in ids


def test_latest_run_moving_to_a_new_run_is_another_run(tmp_path: Path) -> None:
    """W&B points latest-run at each new run: the one being watched stays (its file is read
    through the old target) and the app's rescan finds the new run under its own name."""
    from trainwatch.tui.target import discover

    root = tmp_path / "wandb"
    shutil.copytree(ROOT, root, symlinks=True)
    before = discover(root / "latest-run").runs[0]
    (root / "latest-run").unlink()
    (root / "latest-run").symlink_to(OK.name)
    after = discover(root / "latest-run").runs[0]
    assert (before.run_id, after.run_id) == (CRASH.name, OK.name)
    assert before.metric_files[0].is_file()  # still readable where it was followed
    assert after.metric_files[0] == root / OK.name / OK_FILE.name


# ---------------------------------------------------------------------- CLI
def tw(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainwatch", *map(str, args)],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)


def test_cli_check_and_inspect() -> None:
    r = tw("check", ROOT / "latest-run", "--format", "json")
    assert r.returncode == 1, r.stderr
    alerts = json.loads(r.stdout)["alerts"]
    assert [(a["rule"], a["evidence"]["kind"]) for a in alerts] == [("console_error", "cuda_oom")]
    r = tw("inspect", OK_FILE, "--format", "json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["format"] == "wandb" and info["malformed"] == 0
    assert info["metrics"]["loss"]["role"] == "loss" and info["metrics"]["loss"]["nonfinite"] == 1
    assert info["metrics"]["loss"]["last_step"] == 299
    assert info["events"] == {"run_start": 1, "run_end": 1}
    r = tw("check", ROOT)  # the runs listed, then one line saying how to pick
    assert r.returncode == 2 and "holds 2 runs: pick one with --run" in r.stderr.splitlines()[-1]
    assert OK.name in r.stderr and CRASH.name in r.stderr


def test_check_finds_the_nan_in_a_run_folder() -> None:
    from trainwatch.commands.check import run_check
    from trainwatch.rules import load_rules_config

    alerts = run_check(load_run(OK), load_rules_config(None)).alerts
    assert [(a.rule, a.step) for a in alerts] == [("nan_inf", 120)]


# ---------------------------------------------------------------------- live
def test_tailer_hands_on_console_after_the_batch(tmp_path: Path) -> None:
    f = tmp_path / "run-fixtcrash.wandb"
    data = CRASH_FILE.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    t = FileTailer(f, lambda p: WandbReader(str(p)))
    items = t.read()
    append_bytes(f, data[len(data) // 2 :])
    items += t.read()
    text = [line for i in items if isinstance(i, TextChunk) for line in i.lines]
    assert text == console_of("fixtcrash")
    steps = [s for i in items if isinstance(i, RecordBatch) for s in i.series["lr"].steps.tolist()]
    assert steps == list(range(40))


def test_follower_reads_a_growing_file(tmp_path: Path) -> None:
    """The writer appends the real file's bytes in random pieces; the follower (on its thread,
    file events and polling) hands on every step once and the console, as a whole read does."""
    import threading
    import time

    run = tmp_path / "wandb" / "offline-run-x"
    run.mkdir(parents=True)
    f = run / "run-fixtok.wandb"
    f.touch()
    data = OK_FILE.read_bytes()
    whole, console, _ = read_all(OK_FILE)
    got: list[RecordBatch] = []
    text: list[str] = []
    lock = threading.Lock()

    def on_batch(_p: str, b: RecordBatch) -> None:
        with lock:
            got.append(b)

    def on_text(_p: str, lines: list[str], first: int) -> None:
        with lock:
            assert first == len(text) + 1
            text.extend(lines)

    rng = random.Random(3)
    with Follower(on_batch=on_batch, on_text=on_text, poll_interval=0.01) as fol:
        fol.follow(f, lambda p: WandbReader(str(p)))
        pos = 0
        while pos < len(data):
            n = rng.choice([1, 13, 700, 5000])
            append_bytes(f, data[pos : pos + n])
            pos += n
            if rng.random() < 0.05:
                time.sleep(0.02)  # let a poll land mid-record now and then
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with lock:
                if any(e.name == "run_end" for b in got for e in b.events):
                    break
            time.sleep(0.01)  # polling for the follower's thread, bounded by the deadline
        fol.poll_now()
    b = joined(got)
    assert b.steps.tolist() == whole.steps.tolist()
    np.testing.assert_array_equal(b.series["loss"].values, whole.series["loss"].values)
    assert text == console


async def test_tui_follows_a_wandb_run_as_it_grows(tmp_path: Path) -> None:
    from trainwatch.tui.app import AppConfig, make_app
    from trainwatch.tui.console_pane import ConsolePane
    from trainwatch.tui.testing import FakeEngine, wait_for

    root = tmp_path / "wandb"
    shutil.copytree(ROOT, root, symlinks=True)
    f = root / CRASH.name / CRASH_FILE.name
    data = f.read_bytes()
    half = len(data) // 2
    f.write_bytes(data[:half])
    app = make_app(AppConfig(path=root / "latest-run", engine_factory=FakeEngine))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        first = app.current_model().last_step
        assert first is not None and first < 39
        append_bytes(f, data[half:])
        await wait_for(pilot, lambda: app.current_model().last_step == 39, what="step 39")
        pane = app.screen.query_one(ConsolePane)
        await wait_for(pilot, lambda: any("CUDA out of memory" in ln for ln in pane.lines),
                       what="the traceback in the console pane")
        await wait_for(pilot, lambda: app.state_of(app.current).startswith("crashed"),
                       what="the run shown as crashed")
