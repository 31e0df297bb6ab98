"""Stores followed live while they grow: rows added to an MLflow database (rollback journal, as
MLflow writes it, and WAL, as trackio does), lines appended to ``mlruns/`` metric files and
DVCLive TSVs, each written the way its client writes them, starting from the clients' own files
(tests/fixtures). The follower runs with file events and its backstop, as in the TUI; every wait
has a deadline, none is a fixed sleep."""

from __future__ import annotations

import math
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from test_tailer import wait_until

from trainwatch.batch import RecordBatch
from trainwatch.follower import Follower
from trainwatch.formats.dvclive import DvcLiveRun
from trainwatch.formats.mlflow_db import MlflowDbRun
from trainwatch.formats.mlflow_files import MlflowFilesRun
from trainwatch.run_stores import open_store
from trainwatch.tailer import TailStatus

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[RecordBatch] = []
        self.status: list[TailStatus] = []

    def on_batch(self, _name: str, b: RecordBatch) -> None:
        with self.lock:
            self.batches.append(b)

    def on_status(self, s: TailStatus) -> None:
        with self.lock:
            self.status.append(s)

    def points(self, key: str) -> list[tuple[int, float]]:
        with self.lock:
            return [(int(s), float(v)) for b in self.batches if key in b.series
                    for s, v in zip(b.series[key].steps, b.series[key].values)]

    def events(self) -> list[str]:
        with self.lock:
            return [e.name for b in self.batches for e in b.events]

    def rewinds(self) -> int:
        with self.lock:
            return sum(len(b.rewinds) for b in self.batches)


def _run_id(db: Path, name: str) -> str:
    store = open_store(db)
    assert store is not None
    return next(r.run_id for r in store.runs if r.name == name)


# ---------------------------------------------------------------------- MLflow's database
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_mlflow_db_rows_added_while_followed(tmp_path, journal):
    db = tmp_path / "mlflow.db"
    shutil.copyfile(FIXTURES / "mlflow" / "mlflow.db", db)
    run_id = _run_id(db, "baseline")
    writer = sqlite3.connect(db, isolation_level=None)  # open all along, as a tracking server
    writer.execute(f"PRAGMA journal_mode = {journal}")
    # the run as it was at step 99: still running, later rows not written yet
    writer.execute("UPDATE runs SET status = 'RUNNING', end_time = NULL WHERE run_uuid = ?",
                   (run_id,))
    writer.execute("DELETE FROM metrics WHERE run_uuid = ? AND step >= 100", (run_id,))
    sink = Sink()
    with Follower(on_batch=sink.on_batch, on_status=sink.on_status) as f:
        f.follow_source(MlflowDbRun(db, run_id, "baseline"))
        # the newest step is held back while another key may join it, then handed on
        wait_until(lambda: sink.points("lr")[-1:] and sink.points("lr")[-1][0] == 99,
                   timeout=10, what="the backlog to step 99")
        t0 = int(time.time() * 1000)
        for step in range(100, 150):  # what MLflow writes: loss with grad_norm, then lr apart
            writer.execute("BEGIN")
            for key, value in (("loss", 0.5), ("train/grad_norm", 1.5)):
                writer.execute("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, 0)",
                               (key, value, t0 + step, run_id, step))
            writer.execute("COMMIT")
            writer.execute("INSERT INTO metrics VALUES ('lr', 0.001, ?, ?, ?, 0)",
                           (t0 + step + 1, run_id, step))
            if step == 120:  # a NaN as MLflow stores it
                writer.execute("INSERT INTO metrics VALUES ('loss_nan', 0, ?, ?, ?, 1)",
                               (t0 + step, run_id, step))
        wait_until(lambda: sink.points("lr")[-1][0] == 149, timeout=10, what="the live rows to step 149")
        assert "run_end" not in sink.events()
        writer.execute("UPDATE runs SET status = 'FINISHED', end_time = ? WHERE run_uuid = ?",
                       (t0 + 200, run_id))
        wait_until(lambda: "run_end" in sink.events(), timeout=10, what="run_end once the run finished")
    writer.close()
    assert sink.events() == ["run_start", "run_end"]
    assert [s for s, _v in sink.points("lr")] == list(range(150))
    assert [s for s, _v in sink.points("loss")] == list(range(150))
    (nan_step, nan_value), = sink.points("loss_nan")
    assert nan_step == 120 and math.isnan(nan_value)
    assert sink.rewinds() == 0  # lr read after loss of the next step never looked like one
    assert not [s for s in sink.status if s.state == "error"]


def test_mlflow_db_replaced_is_read_again_from_the_start(tmp_path):
    db = tmp_path / "mlflow.db"
    shutil.copyfile(FIXTURES / "mlflow" / "mlflow.db", db)
    run_id = _run_id(db, "diverged")
    source = MlflowDbRun(db, run_id, "diverged")
    first = source.poll(final=True)
    assert not first[0].reset and first[0].last_step == 119
    with sqlite3.connect(db) as conn:  # a cleaned store: the run's rows deleted, fewer rows
        conn.execute("DELETE FROM metrics WHERE step >= 50")
    again = source.poll(final=True)
    assert again[0].reset and max(again[0].series["loss"].steps) == 49


# ---------------------------------------------------------------------- appended text stores
def _mlruns_run(tmp_path: Path, name: str) -> Path:
    shutil.copytree(FIXTURES / "mlflow" / "mlruns", tmp_path / "mlruns")
    store = open_store(tmp_path / "mlruns")
    assert store is not None
    run = next(r for r in store.runs if r.name == name)
    return next((tmp_path / "mlruns").glob(f"*/{run.run_id}"))


def test_mlruns_lines_appended_while_followed(tmp_path):
    folder = _mlruns_run(tmp_path, "baseline")
    meta = folder / "meta.yaml"
    meta.write_text(meta.read_text().replace("status: 3", "status: 1"))
    sink = Sink()
    with Follower(on_batch=sink.on_batch, on_status=sink.on_status) as f:
        f.follow_source(MlflowFilesRun(folder, folder.name, "baseline"))
        wait_until(lambda: sink.points("lr")[-1:] and sink.points("lr")[-1][0] == 299,
                   timeout=10, what="the backlog")
        t0 = int(time.time() * 1000)
        for step in range(300, 340):
            for key in ("loss", "lr", "train/grad_norm"):
                with open(folder / "metrics" / key, "a") as fh:
                    fh.write(f"{t0 + step} {0.25} {step}\n")
        (folder / "metrics" / "late").write_text(f"{t0} 7.0 339\n")  # a key first logged now
        wait_until(lambda: sink.points("late") == [(339, 7.0)], timeout=10, what="a new metric file")
        assert sink.points("lr")[-1][0] == 339
        meta.write_text(meta.read_text().replace("status: 1", "status: 4"))
        wait_until(lambda: "run_end" in sink.events(), timeout=10, what="run_end from meta.yaml")
    assert sink.rewinds() == 0
    assert [s for s, _v in sink.points("loss")] == list(range(340))


def test_dvclive_rows_appended_while_followed(tmp_path):
    folder = tmp_path / "dvclive"
    shutil.copytree(FIXTURES / "dvclive" / "crashed", folder)
    sink = Sink()
    with Follower(on_batch=sink.on_batch, on_status=sink.on_status) as f:
        f.follow_source(DvcLiveRun(folder))
        wait_until(lambda: sink.points("lr")[-1:] and sink.points("lr")[-1][0] == 119,
                   timeout=10, what="the backlog")
        for step in range(120, 160):
            for key in ("train/loss", "lr", "train/grad_norm"):
                with open(folder / "plots" / "metrics" / f"{key}.tsv", "a") as fh:
                    fh.write(f"{step}\t0.5\n")
        wait_until(lambda: sink.points("train/loss")[-1][0] == 159, timeout=10, what="the live rows")
    assert [s for s, _v in sink.points("train/loss")] == list(range(160))
    assert sink.rewinds() == 0
