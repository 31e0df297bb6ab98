"""Stores of runs read from files their own clients wrote (tests/fixtures/<tool>/, made by each
folder's generate.py): values, steps and times as logged, run names, params, the end status,
several runs and the choice of one."""

from __future__ import annotations

import importlib.util
import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from trainwatch.batch import RecordBatch
from trainwatch.load import LoadError, RunChoiceError, load_run
from trainwatch.run_stores import open_store, select_run

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MLFLOW_DB = FIXTURES / "mlflow" / "mlflow.db"
MLRUNS = FIXTURES / "mlflow" / "mlruns"
TRACKIO_FIXTURE = FIXTURES / "trackio" / "fixtures.db"
"""In WAL mode, as trackio writes it: a reader (read-only too) creates ``-wal`` and ``-shm``
files beside it, so the tests read a copy."""


@pytest.fixture
def trackio_db(tmp_path: Path) -> Path:
    db = tmp_path / "fixtures.db"
    db.write_bytes(TRACKIO_FIXTURE.read_bytes())
    return db
DVCLIVE = FIXTURES / "dvclive"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


logged = _module(FIXTURES / "logged.py", "fixtures_logged")
mlflow_gen = _module(FIXTURES / "mlflow" / "generate.py", "fixtures_mlflow_generate")
RUNS = {name: (seed, lr0, nan_at, die_at) for name, seed, lr0, nan_at, die_at in mlflow_gen.RUNS}


def expected(name: str, loss_key: str = "loss", runs: dict | None = None) -> list[dict]:
    """What the generator logged for run ``name`` (up to the step it died at)."""
    seed, lr0, nan_at, die_at = (runs or RUNS)[name]
    recs = logged.values(seed, lr0, nan_at, loss_key=loss_key)
    return recs if die_at is None else recs[:die_at]


def series(batches: list[RecordBatch]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """name -> (steps, values, times) over every batch."""
    parts: dict[str, list] = {}
    for b in batches:
        for name, ch in b.series.items():
            parts.setdefault(name, []).append(ch)
    return {n: (np.concatenate([c.steps for c in cs]), np.concatenate([c.values for c in cs]),
                np.concatenate([c.times for c in cs])) for n, cs in parts.items()}


def events(batches: list[RecordBatch]) -> list:
    return [e for b in batches for e in b.events]


def assert_logged(batches: list[RecordBatch], recs: list[dict], keys: tuple[str, ...]) -> None:
    got = series(batches)
    assert set(got) == set(keys)
    for key in keys:
        want = [(r["step"], r[key]) for r in recs if key in r]
        steps, values, _times = got[key]
        assert steps.tolist() == [s for s, _v in want], key
        np.testing.assert_array_equal(values, np.array([v for _s, v in want]), err_msg=key)
    assert not any(b.malformed or b.rewinds for b in batches)


# ---------------------------------------------------------------------- MLflow, both stores
@pytest.mark.parametrize("path", [MLFLOW_DB, MLRUNS], ids=["sqlite", "files"])
def test_mlflow_runs_listed_with_names_status_and_last_step(path):
    store = open_store(path)
    assert store is not None and store.format == ("mlflow" if path == MLFLOW_DB else "mlflow_files")
    by_name = {r.name: r for r in store.runs}
    assert set(by_name) == {"baseline", "noisy", "diverged"}
    assert {n: r.status for n, r in by_name.items()} == {
        "baseline": "finished", "noisy": "finished", "diverged": "crashed"}
    assert by_name["baseline"].steps == logged.STEPS - 1 and by_name["diverged"].steps == 119
    assert all(len(r.run_id) == 32 for r in store.runs)


@pytest.mark.parametrize("path", [MLFLOW_DB, MLRUNS], ids=["sqlite", "files"])
@pytest.mark.parametrize("name", ["baseline", "noisy", "diverged"])
def test_mlflow_values_steps_and_times_exactly_as_logged(path, name):
    run = load_run(path, name)
    assert run.run_name == name and run.format in ("mlflow", "mlflow_files")
    recs = expected(name)
    assert_logged(run.main, recs, ("loss", "lr", "train/grad_norm", "eval/loss"))
    # one record per step (loss with grad_norm, lr logged apart, eval/loss), timed by the
    # step's first timestamp (loss's; lr was logged 1 ms after it, eval/loss 2 ms)
    got = series(run.main)
    stamps = json.loads((FIXTURES / "mlflow" / mlflow_gen.STAMPS_FILE).read_text())
    stamps = stamps["mlflow.db" if path == MLFLOW_DB else "mlruns"][name]
    for key in ("loss", "lr"):
        assert got[key][2].tolist() == [ms / 1000 for ms in stamps], key
    assert sum(b.n_records for b in run.main) == len(recs) + 2  # + run_start and run_end
    if name == "noisy":
        assert math.isnan(series(run.main)["loss"][1][150])


@pytest.mark.parametrize("path", [MLFLOW_DB, MLRUNS], ids=["sqlite", "files"])
def test_mlflow_params_become_the_config_and_the_status_a_run_end(path):
    for name, status in (("baseline", "finished"), ("diverged", "crashed")):
        evs = events(load_run(path, name).main)
        assert [e.name for e in evs] == ["run_start", "run_end"]
        start, end = evs
        assert start.fields["config"] == {"lr": RUNS[name][1], "batch_size": 32,
                                          "max_steps": logged.STEPS, "optimizer": "adamw"}
        assert start.fields["run_name"] == name
        assert end.fields["status"] == status
        assert end.step == (logged.STEPS - 1 if name == "baseline" else 119)  # after the last record
        assert end.time >= start.time


def test_mlflow_run_chosen_by_name_id_or_id_prefix_else_listed():
    store = open_store(MLFLOW_DB)
    assert store is not None
    run = next(r for r in store.runs if r.name == "noisy")
    assert select_run(store, "noisy") == run
    assert select_run(store, run.run_id) == run
    assert select_run(store, run.run_id[:8]) == run
    with pytest.raises(RunChoiceError) as e:
        load_run(MLFLOW_DB)
    assert "holds 3 runs: pick one with --run NAME_OR_ID" in str(e.value)
    assert len(e.value.runs) == 3
    with pytest.raises(RunChoiceError, match="no run named or with the id nope; it holds 3 runs"):
        load_run(MLFLOW_DB, "nope")
    with pytest.raises(RunChoiceError, match="no run named or with the id x; it holds 1 run"):
        load_run(FIXTURES / "dvclive" / "finished", "x")
    sample = FIXTURES.parents[1] / "trainwatch" / "samples" / "sample_run.jsonl"
    with pytest.raises(LoadError, match="holds one run, not several; --run picks"):
        load_run(sample, "x")


def test_mlflow_db_opened_read_only_is_never_written(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(MLFLOW_DB.read_bytes())
    before = db.stat().st_mtime_ns
    load_run(tmp_path, "baseline")  # a folder holding mlflow.db opens it
    assert db.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no journal, no wal


def test_mlflow_db_infinities_come_back_from_the_largest_double(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(MLFLOW_DB.read_bytes())
    store = open_store(db)
    assert store is not None
    run_id = next(r.run_id for r in store.runs if r.name == "baseline")
    with sqlite3.connect(db) as conn:  # what MLflow's SQL store writes for +-inf
        conn.execute("INSERT INTO metrics VALUES ('gn', 1.7976931348623157e308, 1, ?, 400, 0)",
                     (run_id,))
        conn.execute("INSERT INTO metrics VALUES ('gn', -1.7976931348623157e308, 2, ?, 401, 0)",
                     (run_id,))
    steps, values, _t = series(load_run(db, "baseline").main)["gn"]
    assert steps.tolist() == [400, 401] and values.tolist() == [math.inf, -math.inf]


# ---------------------------------------------------------------------- trackio
TRACKIO_RUNS = {"baseline": (1, 3e-4, None, None), "noisy": (2, 1e-3, 150, None),
                "diverged": (3, 3e-2, None, 120)}


def test_trackio_runs_values_steps_and_times(trackio_db):
    TRACKIO_DB = trackio_db
    store = open_store(TRACKIO_DB)
    assert store is not None and store.format == "trackio"
    assert [r.name for r in store.runs] == ["baseline", "noisy", "diverged"]
    times = json.loads((FIXTURES / "trackio" / "times.json").read_text())
    for name in TRACKIO_RUNS:
        run = load_run(TRACKIO_DB, name)
        recs = expected(name, runs=TRACKIO_RUNS)
        assert_logged(run.main, recs, ("loss", "lr", "train/grad_norm", "eval/loss"))
        steps, _v, t = series(run.main)["loss"]
        # trackio stamps a row when its sender takes it, just after the log call
        for s, ts in zip(steps.tolist(), t.tolist()):
            before, _after = times[name][str(s)]
            assert before <= ts <= before + 1.0, (name, s)
        assert not events(run.main)  # trackio keeps no run status: no run_end, no run_start
        assert next(iter(run.main)).meta == {"lr": TRACKIO_RUNS[name][1], "batch_size": 32,
                                    "max_steps": logged.STEPS}


# ---------------------------------------------------------------------- DVCLive
DVC_RUNS = {"finished": (1, 3e-4, 150, None), "crashed": (3, 3e-2, None, 120)}


@pytest.mark.parametrize("name", ["finished", "crashed"])
def test_dvclive_folder_is_one_run_with_nested_names_from_folders(name):
    folder = DVCLIVE / name
    store = open_store(folder)
    assert store is not None and store.format == "dvclive" and len(store.runs) == 1
    run = load_run(folder)
    recs = expected(name, loss_key="train/loss", runs=DVC_RUNS)
    assert_logged(run.main, recs, ("train/loss", "lr", "train/grad_norm", "eval/loss"))
    assert next(iter(run.main)).meta["max_steps"] == logged.STEPS
    assert not events(run.main)  # DVCLive keeps no status


def test_dvclive_found_in_the_folder_that_holds_it(tmp_path):
    import shutil

    shutil.copytree(DVCLIVE / "finished", tmp_path / "dvclive")
    assert load_run(tmp_path).format == "dvclive"


# ---------------------------------------------------------------------- TensorBoard log dirs
def test_tensorboard_log_dir_sub_folders_are_runs():
    tb = FIXTURES / "tensorboard" / "logs"
    store = open_store(tb)
    assert store is not None and store.format == "folder"
    names = sorted(r.name for r in store.runs)
    assert names == ["baseline", "noisy/eval", "noisy/train"]
    assert all(r.format == "tfevents" for r in store.runs)
    run = load_run(tb, "baseline")
    got = series(run.main)
    assert {"Loss/train", "train/lr", "loss/val"} <= set(got)
    assert got["Loss/train"][0].tolist() == list(range(logged.STEPS))
    # one folder with event files directly inside is one run, as before
    assert open_store(tb / "baseline") is None
    assert load_run(tb / "baseline").format == "tfevents"


def test_a_run_directory_beside_a_store_stays_a_run_directory(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (tmp_path / "mlflow.db").write_bytes(MLFLOW_DB.read_bytes())
    assert open_store(tmp_path) is None
    assert load_run(tmp_path).format == "jsonl"
