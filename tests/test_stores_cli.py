"""``inspect``, ``check`` and ``report`` on stores their own clients wrote, as a subprocess: the
only run taken, ``--run`` by name or id, and several runs listed with exit 2 and one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MLFLOW_DB = FIXTURES / "mlflow" / "mlflow.db"
MLRUNS = FIXTURES / "mlflow" / "mlruns"
TRACKIO_DB = FIXTURES / "trackio" / "fixtures.db"
TB_LOGS = FIXTURES / "tensorboard" / "logs"
MULTI = [MLFLOW_DB, MLRUNS, TRACKIO_DB]


@pytest.fixture(autouse=True)
def _copy_wal_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trackio's database is in WAL mode: readers create -wal and -shm files beside it, so the
    tests read a copy (the path the test gives is swapped for it in :func:`tw`)."""
    copy = tmp_path / "trackio" / "fixtures.db"
    copy.parent.mkdir()
    copy.write_bytes(TRACKIO_DB.read_bytes())
    monkeypatch.setitem(_SWAP, TRACKIO_DB, copy)


_SWAP: dict[Path, Path] = {}


def tw(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1"}
    args = tuple(_SWAP.get(a, a) if isinstance(a, Path) else a for a in args)
    return subprocess.run([sys.executable, "-m", "trainwatch", *map(str, args)],
                          capture_output=True, text=True, check=False, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("store", [*MULTI, TB_LOGS], ids=["mlflow.db", "mlruns", "trackio", "tb"])
def test_several_runs_without_run_are_listed_and_exit_2(store):
    r = tw("inspect", store, "--format", "json")
    assert r.returncode == 2 and r.stdout == ""
    *table, last = r.stderr.strip().splitlines()
    assert table[0].split() == ["NAME", "ID", "FORMAT", "STEPS", "LAST", "UPDATE"]
    assert len(table) == 4 if store != TB_LOGS else 4
    assert last.startswith("trainwatch: error: ") and "pick one with --run NAME_OR_ID" in last


@pytest.mark.parametrize("store", MULTI, ids=["mlflow.db", "mlruns", "trackio"])
def test_inspect_a_run_by_name_and_by_id(store):
    r = tw("inspect", store, "--run", "noisy", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["run"]["name"] == "noisy" and doc["records"] >= 300
    assert doc["metrics"]["loss"]["count"] == 300 and doc["metrics"]["loss"]["nonfinite"] == 1
    assert doc["metrics"]["loss"]["role"] == "loss" and doc["metrics"]["eval/loss"]["role"] == "val_loss"
    by_id = tw("inspect", store, "--run", doc["run"]["id"], "--format", "json")
    assert json.loads(by_id.stdout)["run"] == doc["run"]
    text = tw("inspect", store, "--run", "noisy")
    assert text.returncode == 0 and "run noisy" in text.stdout.splitlines()[0]


@pytest.mark.parametrize("store", MULTI, ids=["mlflow.db", "mlruns", "trackio"])
def test_check_each_run(store):
    ok = tw("check", store, "--run", "baseline", "--format", "json", "--fail-on", "never")
    assert ok.returncode == 0, ok.stderr
    noisy = tw("check", store, "--run", "noisy", "--format", "json")
    assert noisy.returncode == 1  # the NaN loss is an error
    alerts = json.loads(noisy.stdout)["alerts"]
    assert any(a["rule"] == "nan_inf" and a["step"] == 150 for a in alerts)


def test_check_an_mlflow_run_that_died_is_not_stalled_and_one_left_running_is(tmp_path):
    r = tw("check", MLFLOW_DB, "--run", "diverged", "--format", "json", "--fail-on", "never")
    assert r.returncode == 0, r.stderr
    assert not any(a["rule"] == "stalled_stream" for a in json.loads(r.stdout)["alerts"])
    import sqlite3

    db = tmp_path / "mlflow.db"
    db.write_bytes(MLFLOW_DB.read_bytes())
    with sqlite3.connect(db) as conn:  # the process killed: MLflow never set an end status
        conn.execute("UPDATE runs SET status = 'RUNNING', end_time = NULL WHERE name = 'diverged'")
    r = tw("check", db, "--run", "diverged", "--format", "json", "--fail-on", "never")
    assert any(a["rule"] == "stalled_stream" for a in json.loads(r.stdout)["alerts"])


@pytest.mark.parametrize("path", [FIXTURES / "dvclive" / "finished", TB_LOGS / "baseline"],
                         ids=["dvclive", "tb-run"])
def test_a_store_of_one_run_takes_it(path):
    r = tw("inspect", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["records"] >= 300
    assert tw("check", path, "--fail-on", "never").returncode == 0


def test_report_a_run_and_unknown_run_is_one_line():
    r = tw("report", MLRUNS, "--run", "diverged")
    assert r.returncode == 0, r.stderr
    assert "| status | crashed |" in r.stdout  # (MLflow's FAILED: it died of an exception)
    bad = tw("check", MLFLOW_DB, "--run", "nope")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].endswith("no run named or with the id nope; "
                                                        "it holds 3 runs")


def test_run_on_a_single_file_is_refused_and_every_help_shows_run():
    sample = FIXTURES.parents[1] / "trainwatch" / "samples" / "sample_run.jsonl"
    r = tw("inspect", sample, "--run", "x")
    assert r.returncode == 2 and "holds one run, not several" in r.stderr
    for cmd in ("inspect", "check", "report", "watch"):
        h = tw(cmd, "--help")
        assert "--run NAME_OR_ID" in h.stdout and "--run " in h.stdout.split("example")[1], cmd
    w = tw(MLFLOW_DB, "--run", "nope", "--once")
    assert w.returncode == 2 and "no run named or with the id nope" in w.stderr
