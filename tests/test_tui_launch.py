"""Starting and supervising runs from the TUI: the new-run screen (``n``), following the new
run, resume (``u``), the quit question, crashed runs, and read-only runs that are never signalled.

The pure parts (plans, the recent list, resume commands) are tested directly; the rest through
``make_app`` with Pilot, starting real processes through the supervisor. Every process a test
starts is stopped and waited for (the run's end recorded, its monitor gone) in teardown.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trainwatch.trainer.configfile import list_packaged, packaged_configs
from trainwatch.trainer.supervise import is_alive, read_process, stop_run, wait_ended
from trainwatch.tui.app import AppConfig, TrainwatchApp, make_app
from trainwatch.tui.confirm import ConfirmScreen
from trainwatch.tui.console_pane import ConsolePane
from trainwatch.tui.header import HeaderBar
from trainwatch.tui.launch import (
    FaultChoice,
    LaunchError,
    LaunchForm,
    LaunchOptions,
    fault_choices,
    has_checkpoint,
    local_choices,
    packaged_choices,
    plan_launch,
    resume_command,
    runs_base,
    spec_for,
)
from trainwatch.tui.new_run_screen import NewRunScreen
from trainwatch.tui.recent import RECENT_MAX, load_recent, recent_label, save_recent
from trainwatch.tui.target import RunSpec, WatchTarget, discover
from trainwatch.tui.testing import FakeEngine, wait_for, write_run

SIZE = (120, 40)
PY = sys.executable


# ---------------------------------------------------------------------------- helpers


def options(tmp_path: Path, grace: float = 2.0) -> LaunchOptions:
    return LaunchOptions(cwd=tmp_path, recent_file=tmp_path / "state" / "recent.json",
                         stop_grace=grace)


def app_for(path: Path, tmp_path: Path, grace: float = 2.0, **kw) -> TrainwatchApp:
    return make_app(AppConfig(path=path, engine_factory=FakeEngine, bell=False, notify=False,
                              **kw), launch=options(tmp_path, grace))


def writer_script(n: int, then: str = "wait") -> str:
    """A tiny external training script: ``n`` records into $TRAINWATCH_RUN_DIR/metrics.jsonl,
    then waits to be stopped (``wait``), waits ignoring SIGINT and SIGTERM (``stubborn``), or
    crashes with a traceback (``crash``)."""
    stubborn = ("import signal\n"
                "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n")
    tail = {
        "wait": "for _ in range(1200):\n    time.sleep(0.05)\n",
        "stubborn": stubborn + "for _ in range(1200):\n    time.sleep(0.05)\n",
        "crash": "print('epoch 1 done', flush=True)\nraise RuntimeError('boom in the loss')\n",
    }[then]
    return ("import json, os, time\n"
            "d = os.environ['TRAINWATCH_RUN_DIR']\n"
            "with open(os.path.join(d, 'metrics.jsonl'), 'a', buffering=1) as f:\n"
            f"    for i in range(1, {n + 1}):\n"
            "        f.write(json.dumps({'step': i, 'time': time.time(), 'loss': 1 / i}) + '\\n')\n"
            + tail)


def cleanup(run_dirs: list[Path]) -> None:
    """Stop every run a test started and wait until its end is recorded and its monitor gone."""
    for d in run_dirs:
        info = read_process(d)
        if info is None:
            continue
        if info.alive():
            stop_run(d, grace=1.0)
        wait_ended(d, timeout=10.0)
        info = read_process(d)
        deadline = time.monotonic() + 10.0
        while info and info.monitor_pid and is_alive(info.monitor_pid):
            assert time.monotonic() < deadline, f"monitor of {d} did not exit"
            time.sleep(0.02)  # polling another process's exit, bounded by the deadline


@pytest.fixture
def started() -> list[Path]:
    """Run directories the test started runs in; stopped and reaped afterwards."""
    dirs: list[Path] = []
    yield dirs
    cleanup(dirs)


def last_step(app: TrainwatchApp) -> int | None:
    model = app.current_model()
    return model.last_step if model is not None else None


async def open_new_run(pilot, app: TrainwatchApp) -> NewRunScreen:
    await wait_for(pilot, lambda: app._ingest_ready.is_set(), what="ingest started")
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, NewRunScreen), what="new-run screen")
    return app.screen  # type: ignore[return-value]


async def launch_command(pilot, app: TrainwatchApp, command: str) -> str:
    """Type ``command`` into the new-run screen, start it, and return the followed run's id."""
    screen = await open_new_run(pilot, app)
    field = screen.query_one("#command")
    field.focus()
    field.value = command
    await wait_for(pilot, lambda: screen.plan is not None and not screen.plan.trainer,
                   what=f"a plan for the command ({screen.error})")
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.launched, timeout=15, what="the run to start")
    return next(iter(app.launched))


# ---------------------------------------------------------------------------- pure: choices


def test_packaged_and_fault_choices_come_from_the_package():
    names = [c.ref for c in packaged_choices()]
    assert names == list_packaged() and "mlp" in names and "faults/nan" in names
    faults = {f.ref: f for f in fault_choices()}
    assert set(faults) == {n for n in names if n.startswith("faults/")}
    raw = yaml.safe_load((packaged_configs() / "faults" / "nan.yaml").read_text())["fault"]
    assert faults["faults/nan"].sets == tuple(f"fault.{k}={v}" for k, v in raw.items())
    assert "NaN" in faults["faults/nan"].about


def test_local_configs_are_listed_from_dot_configs(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("# my experiment\nbase: mlp\n")
    (tmp_path / "configs" / "notes.txt").write_text("not a config")
    [c] = local_choices(tmp_path)
    assert c.label == "./configs/mine.yaml" and c.about == "my experiment"
    assert Path(c.ref).is_absolute()
    assert local_choices(tmp_path / "nowhere") == []


# ---------------------------------------------------------------------------- pure: plans


def test_plan_for_a_packaged_config_with_overrides(tmp_path):
    faults = fault_choices()
    form = LaunchForm(config="mlp", lr="1e-3", steps="40", fault="faults/nan",
                      more="eval.every=10")
    plan = plan_launch(form, options(tmp_path), tmp_path / "runs", faults)
    assert plan.trainer and plan.name == "mlp" and plan.cwd == tmp_path
    cmd = list(plan.command)
    assert cmd[:4] == [PY, "-m", "trainwatch.trainer", "mlp"]
    assert cmd[cmd.index("--run-dir") + 1] == str(plan.run_dir)
    sets = cmd[cmd.index("--set") + 1:]
    nan = next(f for f in faults if f.ref == "faults/nan")
    assert sets == [*nan.sets, "train.lr=1e-3", "train.steps=40", "eval.every=10"]
    assert plan.run_dir.parent == tmp_path / "runs" and plan.run_dir.name.startswith("mlp-")
    # the trainer's own parser and loader accept exactly this command
    from trainwatch.trainer.__main__ import parse_args
    from trainwatch.trainer.configfile import load_config

    args = parse_args(cmd[3:])
    cfg = load_config(args.config, args.sets)
    assert (cfg.train.lr, cfg.train.steps, cfg.fault.kind, cfg.eval.every) == (1e-3, 40, "nan", 10)


def test_plan_with_a_typed_run_dir_is_relative_to_cwd(tmp_path):
    plan = plan_launch(LaunchForm(config="mlp", run_dir="exp/a"), options(tmp_path), tmp_path)
    assert plan.run_dir == tmp_path / "exp" / "a"
    assert "--set" not in plan.command


@pytest.mark.parametrize(("form", "words"), [
    (LaunchForm(), "pick a config"),
    (LaunchForm(config="mlp", lr="fast"), "learning rate: expected a positive number"),
    (LaunchForm(config="mlp", lr="-1"), "learning rate"),
    (LaunchForm(config="mlp", steps="1.5"), "steps: expected a whole number"),
    (LaunchForm(config="mlp", steps="0"), "steps"),
    (LaunchForm(config="mlp", more="eval.every"), "expected KEY=VALUE"),
    (LaunchForm(config="mlp", more="train.lrr=3"), "unknown key 'train.lrr'"),
    (LaunchForm(config="mlp", more="train.steps=many"), "train.steps must be int"),
    (LaunchForm(config="no_such_config"), "no_such_config: no such config"),
    (LaunchForm(config="mlp", fault="faults/nope"), "unknown fault config"),
    (LaunchForm(command="python 'unclosed"), "check the quotes"),
    (LaunchForm(command="no-such-program-xyz --flag"), "'no-such-program-xyz' is not a program"),
])
def test_bad_forms_say_what_to_fix_in_one_line(tmp_path, form, words):
    with pytest.raises(LaunchError) as e:
        plan_launch(form, options(tmp_path), tmp_path, fault_choices())
    assert words in str(e.value) and "\n" not in str(e.value)


def test_plan_for_an_external_command_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    form = LaunchForm(config="mlp", lr="not used", command=f"{PY} train.py --epochs '3 4'")
    plan = plan_launch(form, options(tmp_path), tmp_path / "runs")
    assert not plan.trainer and plan.name == "train"
    assert plan.command == (PY, "train.py", "--epochs", "3 4")
    assert plan.run_dir.parent == tmp_path / "runs" and plan.run_dir.name.startswith("train-")
    local = plan_launch(LaunchForm(command="./train.py"), options(tmp_path), tmp_path)
    assert local.command == ("./train.py",)


def test_runs_go_beside_the_watched_run_or_into_the_watched_folder(tmp_path):
    write_run(tmp_path / "runs" / "a", range(1, 3))
    cwd = tmp_path / "elsewhere"
    assert runs_base(discover(tmp_path / "runs"), cwd) == tmp_path / "runs"
    assert runs_base(discover(tmp_path / "runs" / "a"), cwd) == tmp_path / "runs"
    assert runs_base(discover(tmp_path / "runs" / "a" / "metrics.jsonl"), cwd) == cwd / "runs"
    assert runs_base(discover(tmp_path / "missing"), cwd) == cwd / "runs"
    assert runs_base(None, cwd) == cwd / "runs"


def test_a_new_run_is_named_as_a_rescan_would_name_it(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs / "a", range(1, 3))
    target = discover(runs)
    new = runs / "mlp-1"
    spec = spec_for(new, target, {s.run_id: s for s in target.runs})
    write_run(new, range(1, 3))
    found = {s.run_id: s for s in discover(runs).runs}
    assert found["mlp-1"] == spec  # so the rescan does not follow its files a second time
    # a name taken by another directory gets a suffix; the same directory is the same run
    other = spec_for(tmp_path / "x" / "a", target, {s.run_id: s for s in target.runs})
    assert other.run_id == "a (2)"
    same = spec_for(runs / "a", target, {s.run_id: s for s in target.runs})
    assert same == target.runs[0]


# ---------------------------------------------------------------------------- pure: recent


def test_recent_list_keeps_the_newest_first_without_duplicates(tmp_path):
    path = tmp_path / "state" / "trainwatch" / "recent.json"
    assert load_recent(path) == ([], None)
    a = LaunchForm(config="mlp", steps="50")
    b = LaunchForm(command="python train.py")
    assert save_recent(path, a) is None
    assert save_recent(path, b) is None
    assert save_recent(path, LaunchForm(config="mlp", steps="50", run_dir="x")) is None
    forms, problem = load_recent(path)
    assert problem is None and forms == [LaunchForm(config="mlp", steps="50", run_dir="x"), b]
    for i in range(RECENT_MAX + 3):
        save_recent(path, LaunchForm(config="mlp", steps=str(i + 1)))
    forms, _ = load_recent(path)
    assert len(forms) == RECENT_MAX and forms[0].steps == str(RECENT_MAX + 3)
    assert recent_label(LaunchForm(config="mlp", lr="1e-3", fault="faults/nan")) == \
        "mlp  lr=1e-3  fault=nan"
    assert recent_label(b) == "$ python train.py"


def test_a_damaged_recent_file_is_moved_aside_not_lost(tmp_path):
    path = tmp_path / "recent.json"
    path.write_text('[{"config": "mlp"},\n oops')
    forms, problem = load_recent(path)
    assert forms == [] and problem is not None and f"{path}:2:" in problem
    assert save_recent(path, LaunchForm(config="tiny_gpt")) is None
    assert (tmp_path / "recent.json.bad").read_text() == '[{"config": "mlp"},\n oops'
    assert load_recent(path)[0] == [LaunchForm(config="tiny_gpt")]
    path.write_text(json.dumps([{"config": "mlp"}, 3, {"config": 7}, {"command": "ls"}]))
    assert load_recent(path) == ([LaunchForm(config="mlp"), LaunchForm(command="ls")], None)


def test_recent_file_location_follows_xdg_state_home(tmp_path):
    opts = LaunchOptions.from_env({"XDG_STATE_HOME": str(tmp_path)}, cwd=tmp_path)
    assert opts.recent_file == tmp_path / "trainwatch" / "recent.json"
    home = LaunchOptions.from_env({}, cwd=tmp_path)
    assert home.recent_file == Path.home() / ".local" / "state" / "trainwatch" / "recent.json"


# ---------------------------------------------------------------------------- pure: resume


def test_resume_reuses_the_trainer_command(tmp_path):
    cmd = (PY, "-m", "trainwatch.trainer", "mlp", "--run-dir", "/r", "--set", "train.steps=5")
    assert resume_command(cmd, tmp_path) == (*cmd, "--resume")
    assert resume_command((*cmd, "--resume"), tmp_path) == (*cmd, "--resume")
    bare = ("trainwatch", "train", "mlp")
    assert resume_command(bare, tmp_path) == (*bare, "--run-dir", str(tmp_path), "--resume")
    assert resume_command((PY, "train.py"), tmp_path) is None
    assert not has_checkpoint(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-00000020.pt").write_bytes(b"x")
    assert has_checkpoint(tmp_path)


# ---------------------------------------------------------------------------- Pilot


async def test_new_run_screen_lists_packaged_configs_and_recent_runs(tmp_path):
    write_run(tmp_path / "runs" / "a", range(1, 20))
    save_recent(options(tmp_path).recent_file, LaunchForm(config="mlp", steps="77"))
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("# my experiment\nbase: mlp\n")
    app = app_for(tmp_path / "runs" / "a", tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "New run (n)" in titles and "Resume run (u)" in titles
        screen = await open_new_run(pilot, app)
        configs = screen.query_one("#new-run-configs")
        ids = [configs.get_option_at_index(i).id for i in range(configs.option_count)]
        assert [i.removeprefix("config:") for i in ids if i and i.startswith("config:")] == \
            [*list_packaged(), str(tmp_path / "configs" / "mine.yaml")]
        assert ids[1] == "recent:0"  # the last used, under its heading, highlighted first
        await wait_for(pilot, lambda: screen.query_one("#steps").value == "77")
        assert screen.plan is not None and "train.steps=77" in screen.plan.command
        # the form's run directory sits beside the watched run
        assert screen.plan.run_dir.parent == tmp_path / "runs"
        await pilot.press("r")  # an app key: must not open the runs list over the dialog
        await pilot.press("down")  # past the recent entry, onto the packaged configs
        await wait_for(pilot, lambda: screen.config == list_packaged()[0])
        screen.query_one("#more").focus()
        await pilot.press("q")  # typed into a field, q is a letter...
        await wait_for(pilot, lambda: screen.query_one("#more").value == "q")
        assert isinstance(app.screen, NewRunScreen)
        configs.focus()
        await pilot.press("q")  # ...elsewhere it closes the dialog (it does not quit the app)
        await wait_for(pilot, lambda: not isinstance(app.screen, NewRunScreen))
        assert app.is_running and not app.launched
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, NewRunScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, NewRunScreen))
        assert not app.launched


async def test_an_external_command_is_started_followed_and_kept_on_quit(tmp_path, started):
    write_run(tmp_path / "runs" / "old", range(1, 20))
    app = app_for(tmp_path / "runs", tmp_path)  # a folder of runs
    async with app.run_test(size=SIZE) as pilot:
        run_id = await launch_command(pilot, app, shlex.join([PY, "-c", writer_script(5)]))
        root = app.launched[run_id]
        started.append(root)
        assert root.parent == tmp_path / "runs" and run_id == root.name
        assert app.current == run_id
        await wait_for(pilot, lambda: last_step(app) == 5, timeout=10,
                       what="the new run's records")
        info = read_process(root)
        assert info.ours and info.alive() and info.cwd == str(tmp_path)
        forms, _ = load_recent(options(tmp_path).recent_file)
        assert forms[0].command.startswith(shlex.quote(PY))
        await wait_for(pilot, lambda: "started pid" in app.screen.query_one(HeaderBar).text)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="quit question")
        text = " ".join(str(s.render()) for s in app.screen.query("Static"))
        assert f"Run {run_id} is still training. Keep it running? [Y/n]" in text
        await pilot.press("enter")  # the default: keep it
        await wait_for(pilot, lambda: not app.is_running, what="the app to quit")
    assert read_process(root).alive(), "keeping the run must leave it running"


async def test_quit_and_stop_shows_each_step_and_ends_the_run(tmp_path, started):
    app = app_for(tmp_path / "nothing-yet", tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        run_id = await launch_command(pilot, app, shlex.join([PY, "-c", writer_script(3)]))
        root = app.launched[run_id]
        started.append(root)
        assert root.parent == tmp_path / "runs"
        await wait_for(pilot, lambda: last_step(app) == 3, timeout=10)
        steps = spy_notifications(app)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await wait_for(pilot, lambda: not app.is_running, timeout=15, what="stop, then quit")
    final = read_process(root)
    assert not final.alive() and final.ended
    assert any("sent SIGINT" in s for s in steps) and any("run ended" in s for s in steps)


def spy_notifications(app: TrainwatchApp) -> list[str]:
    seen: list[str] = []
    original = app.notify

    def spy(message, *a, **kw):
        seen.append(str(message))
        return original(message, *a, **kw)

    app.notify = spy  # type: ignore[method-assign]
    return seen


async def test_stop_escalates_to_sigterm_and_sigkill_showing_each_step(tmp_path, started):
    app = app_for(tmp_path / "runs", tmp_path, grace=0.3)
    async with app.run_test(size=SIZE) as pilot:
        run_id = await launch_command(pilot, app, shlex.join([PY, "-c",
                                                              writer_script(2, "stubborn")]))
        root = app.launched[run_id]
        started.append(root)
        await wait_for(pilot, lambda: last_step(app) == 2, timeout=10)
        seen = spy_notifications(app)
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: any("run ended" in s for s in seen), timeout=15,
                       what=f"the stop to finish (so far: {seen})")
        sent = [s for s in seen if s.startswith("sent SIG")]
        assert [s.split()[1] for s in sent] == ["SIGINT", "SIGTERM", "SIGKILL"]
        assert "after" in sent[1] and "after" in sent[2]  # each after its grace period
        assert "SIGKILL" in seen[-1]
        header = app.screen.query_one(HeaderBar)
        await wait_for(pilot, lambda: "run ended" in header.text)
        await wait_for(pilot, lambda: "crashed (SIGKILL)" in header.text, timeout=5,
                       what=f"the recorded end (header: {header.text!r})")
    assert read_process(root).signal_name == "SIGKILL"


async def test_a_crashed_run_shows_its_exit_status_and_console(tmp_path, started):
    app = app_for(tmp_path / "runs", tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:  # short: the console is on demand
        run_id = await launch_command(pilot, app, shlex.join([PY, "-c",
                                                              writer_script(4, "crash")]))
        started.append(app.launched[run_id])
        header = app.screen.query_one(HeaderBar)
        await wait_for(pilot, lambda: "crashed (exit 1)" in header.text, timeout=10,
                       what=f"the crash in the header (it says {header.text!r})")
        pane = app.screen.query_one(ConsolePane)
        try:
            await wait_for(pilot, lambda: pane.display and any("boom in the loss" in ln
                                                               for ln in pane.lines),
                           what="the traceback in the console pane")
        except AssertionError as e:
            raise AssertionError(f"{e}: {pane.display=} {pane.lines[-3:]} "
                                 f"{list(app.current_model().console)[-3:]} "
                                 f"{app.current_model().files}") from None
        assert any("Traceback" in ln for ln in pane.lines)
        await pilot.press("u")  # not the bundled trainer: nothing to resume
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        await pilot.press("q")  # nothing is running any more: no question
        await wait_for(pilot, lambda: not app.is_running)


async def test_runs_not_started_by_trainwatch_are_never_signalled(tmp_path):
    run = tmp_path / "run"
    write_run(run, range(1, 30))
    sleeper = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])  # noqa: ASYNC220
    try:
        # someone else's supervisor record, naming a live process
        (run / "process.json").write_text(json.dumps({
            "pid": sleeper.pid, "command": ["python", "train.py"], "cwd": str(run),
            "start_time": time.time(), "state": "running", "started_by": "someone-else"}))
        app = app_for(run, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, app.loaded.is_set)
            warnings = spy_notifications(app)
            for n, key in enumerate(("k", "R", "u"), 1):
                await pilot.press(key)
                await wait_for(pilot, lambda n=n: len(warnings) == n)
                assert not isinstance(app.screen, ConfirmScreen)
            assert all("not started by trainwatch" in w and "read-only" in w for w in warnings)
            (run / "process.json").unlink()  # no record at all: read-only too
            await pilot.press("k")
            await wait_for(pilot, lambda: len(warnings) == 4)
            assert "read-only" in warnings[-1]
            await pilot.press("q")  # not ours: quitting asks nothing
            await wait_for(pilot, lambda: not app.is_running)
        assert sleeper.poll() is None, "a run trainwatch did not start was signalled"
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)


async def test_opening_a_supervised_run_later_shows_how_it_is(tmp_path, started):
    from trainwatch.trainer.supervise import start_run

    live, dead = tmp_path / "live", tmp_path / "dead"
    started += [live, dead]
    start_run([PY, "-c", writer_script(3)], live, cwd=tmp_path)
    start_run([PY, "-c", writer_script(2, "crash")], dead, cwd=tmp_path)
    assert wait_ended(dead, timeout=10) is not None
    app = app_for(dead, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        header = app.screen.query_one(HeaderBar)
        await wait_for(pilot, lambda: "crashed (exit 1)" in header.text, timeout=5,
                       what=f"the recorded end (header: {header.text!r})")
        assert any("boom in the loss" in ln for ln in app.screen.query_one(ConsolePane).lines)
    app = app_for(live, tmp_path)
    app.adopt_run(live)  # as `trainwatch demo` would: started by the same command
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_step(app) == 3, timeout=10)
        # the records were there before we looked: only the live process says "running"
        await wait_for(pilot, lambda: app.state_of(app.current) == "running", timeout=5,
                       what="the live process to be seen")
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")  # changed my mind: stay
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.is_running
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running)
    assert read_process(live).alive()


@pytest.mark.slow
async def test_the_mlp_trainer_starts_from_the_form_and_resumes(tmp_path, started):
    app = app_for(tmp_path / "runs", tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_run(pilot, app)
        await wait_for(pilot, lambda: screen.config == "mlp", what="mlp highlighted")
        steps = screen.query_one("#steps")
        steps.focus()
        await pilot.press(*"12")
        await wait_for(pilot, lambda: screen.plan is not None
                       and "train.steps=12" in screen.plan.command)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.launched, timeout=15, what="the trainer to start")
        run_id, root = next(iter(app.launched.items()))
        started.append(root)
        assert app.current == run_id and root.name.startswith("mlp-")
        await wait_for(pilot, lambda: (last_step(app) or 0) >= 1, timeout=60,
                       what="the trainer's first records")
        await wait_for(pilot, lambda: read_process(root).ended, timeout=60, what="its end")
        assert read_process(root).exit_code == 0 and has_checkpoint(root)
        await wait_for(pilot, lambda: app.state_of(run_id) == "finished", timeout=10)
        await pilot.press("u")
        await wait_for(pilot, lambda: "--resume" in (read_process(root).command or ()),
                       timeout=15, what="the resumed run")
        await wait_for(pilot, lambda: read_process(root).ended, timeout=60, what="its end")
        assert read_process(root).exit_code == 0
        events = [json.loads(ln).get("event") for ln in
                  (root / "metrics.jsonl").read_text().splitlines()]
        assert "resume" in events
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


def test_from_env_is_what_make_app_uses(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    app = make_app(AppConfig(path=tmp_path, engine_factory=FakeEngine))
    assert app.launch_options.recent_file == tmp_path / "xdg" / "trainwatch" / "recent.json"
    assert app.launch_options.cwd == Path.cwd()


def test_fault_choice_sets_are_valid_overrides():
    from trainwatch.trainer.configfile import load_config

    for f in fault_choices():
        assert isinstance(f, FaultChoice)
        load_config("mlp", list(f.sets))  # every fault applies on top of a plain config


def test_a_run_in_a_folder_that_does_not_exist_yet_is_named_inside_it(tmp_path):
    target = WatchTarget(tmp_path / "runs", "waiting", (), False)
    spec = spec_for(tmp_path / "runs" / "r1", target, {})
    assert spec == RunSpec("r1", tmp_path / "runs" / "r1", (tmp_path / "runs" / "r1" /
                                                            "metrics.jsonl",),
                           tmp_path / "runs" / "r1" / "console.log")
