"""The TUI on stores and on framework files from someone else's folder, driven by Pilot through
the CLI's factory: a store of several runs opens as the runs list and follows a run as rows
arrive; a trainer_state.json takes no other run's console log, and a finished one never stalls."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

from trainwatch.rules import load_rules_config
from trainwatch.run_stores import open_store
from trainwatch.tui.app import AppConfig, make_app
from trainwatch.tui.runs_screen import RunsScreen
from trainwatch.tui.target import discover
from trainwatch.tui.testing import FakeEngine, wait_for

SIZE = (120, 40)
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HF_FILE = "hf_trainer_state__aigoncharov_trainer_state_viz.json"
NANOGPT_LOG = "nanogpt_stdout__ethellight565_nanogpt-seis.log"


def _hf_state() -> bytes:
    """The corpus file (a finished HF run), or a small one of the same shape without it."""
    p = CORPUS / HF_FILE
    if p.is_file():
        return p.read_bytes()
    return (b'{"global_step": 20, "max_steps": 20, "log_history": ['
            + b", ".join(b'{"epoch": %d, "loss": %g, "step": %d}' % (s, 1.0 / s, s)
                         for s in range(1, 21))
            + b', {"epoch": 20, "step": 20, "train_loss": 0.2, "train_runtime": 12.5}]}')


async def test_an_mlflow_db_opens_as_runs_and_a_run_is_followed_as_it_grows(tmp_path):
    db = tmp_path / "mlflow.db"
    shutil.copyfile(FIXTURES / "mlflow" / "mlflow.db", db)
    store = open_store(db)
    assert store is not None
    run_id = next(r.run_id for r in store.runs if r.name == "diverged")
    with sqlite3.connect(db) as conn:  # the diverged run, still running
        conn.execute("UPDATE runs SET status = 'RUNNING', end_time = NULL WHERE run_uuid = ?",
                     (run_id,))
    engines: list[FakeEngine] = []
    app = make_app(AppConfig(path=db, engine_factory=lambda: engines.append(FakeEngine())
                             or engines[-1]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.loaded.is_set(),
                       what="the runs list, loaded")
        assert set(app.models) == {"baseline", "noisy", "diverged"}
        await wait_for(pilot, lambda: app.models["diverged"].last_step == 119)
        t0 = int(time.time() * 1000)
        with sqlite3.connect(db) as conn:
            conn.executemany("INSERT INTO metrics VALUES ('loss', 0.5, ?, ?, ?, 0)",
                             [(t0 + s, run_id, s) for s in range(120, 131)])
        await wait_for(pilot, lambda: app.models["diverged"].last_step == 130, timeout=10,
                       what="the rows added to the database")
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE runs SET status = 'FAILED', end_time = ? WHERE run_uuid = ?",
                         (t0 + 200, run_id))
        await wait_for(pilot, lambda: app.models["diverged"].end is not None, timeout=10,
                       what="the run's end")
        assert app.models["diverged"].end["status"] == "crashed"
        assert app.models["baseline"].config["max_steps"] == 300  # params as the config


async def test_run_option_watches_one_run_of_a_store(tmp_path):
    app = make_app(AppConfig(path=FIXTURES / "mlflow" / "mlruns", run="noisy",
                             engine_factory=FakeEngine))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="loaded")
        assert list(app.models) == ["noisy"] and not isinstance(app.screen, RunsScreen)
        assert app.current_model().last_step == 299


def test_a_framework_file_takes_no_other_text_log_as_its_console(tmp_path):
    (tmp_path / "trainer_state.json").write_bytes(_hf_state())
    (tmp_path / "nanogpt.log").write_text("step 0: train loss 10.9, val loss 10.9\n")
    spec = discover(tmp_path / "trainer_state.json").runs[0]
    assert spec.console is None  # another run's stdout sat in the same folder
    (tmp_path / "console.log").write_text("training...\n")  # this run's own, by its name
    assert discover(tmp_path / "trainer_state.json").runs[0].console == tmp_path / "console.log"
    run_dir = discover(tmp_path).runs[0]
    assert run_dir.console == tmp_path / "console.log"
    (tmp_path / "console.log").unlink()
    assert discover(tmp_path).runs[0].console == tmp_path / "console.log"  # waited for, not .log
    if (CORPUS / HF_FILE).is_file() and (CORPUS / NANOGPT_LOG).is_file():
        assert discover(CORPUS / HF_FILE).runs[0].console is None


async def test_a_finished_trainer_state_never_stalls_in_the_tui(tmp_path):
    """The corpus file, last written 25 min ago: the TUI raised stalled_stream ('No new record
    for 24 min 45 s') on a run whose history ends with train()'s summary; check did not."""
    from trainwatch.rules import RuleEngine

    path = tmp_path / "trainer_state.json"
    path.write_bytes(_hf_state())
    old = time.time() - 25 * 60
    os.utime(path, (old, old))
    engines: list[CountingEngine] = []

    def factory() -> CountingEngine:
        engines.append(CountingEngine(RuleEngine(load_rules_config(None), live=True)))
        return engines[-1]

    app = make_app(AppConfig(path=path, engine_factory=factory))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, app.loaded.is_set, what="history loaded")
        model = app.current_model()
        assert model.end == {"status": "finished"}
        seen = engines[0].ticks
        await wait_for(pilot, lambda: engines[0].ticks >= seen + 2, timeout=10,
                       what="two clock ticks the rules see")
        assert not [e for e in model.alerts if e.alert.rule == "stalled_stream"]


class CountingEngine:
    """The real rule engine, counting the clock ticks it is given."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ticks = 0

    def feed(self, batch, now=None):
        return self.engine.feed(batch, now)

    def feed_rank(self, rank, batch, now=None):
        return self.engine.feed_rank(rank, batch, now)

    def feed_console(self, lines, first_line):
        return self.engine.feed_console(lines, first_line)

    def tick(self, now):
        self.ticks += 1
        return self.engine.tick(now)

    def mute(self, rule_id):
        self.engine.mute(rule_id)


def test_runs_started_from_a_store_go_to_the_runs_folder(tmp_path):
    from trainwatch.tui.launch import runs_base

    target = discover(FIXTURES / "mlflow" / "mlruns")
    assert target.kind == "sweep" and all(r.stored for r in target.runs)
    assert runs_base(target, tmp_path) == tmp_path / "runs"  # not inside mlruns/
