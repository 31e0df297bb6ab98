"""The run supervisor: detached start, console capture, recorded ends, safe stop escalation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainwatch.trainer.supervise import (
    MARK,
    RUN_DIR_ENV,
    StopStep,
    SuperviseError,
    is_alive,
    proc_start_token,
    read_process,
    start_run,
    stop_run,
    wait_ended,
)

PY = sys.executable


def wait_for(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def console(run_dir: Path) -> str:
    p = run_dir / "console.log"
    return p.read_text() if p.exists() else ""


@pytest.fixture
def runs(tmp_path):
    """Run dirs handed out to a test; any run still alive afterwards is killed."""
    made: list[Path] = []

    def new(name: str = "run") -> Path:
        d = tmp_path / f"{name}{len(made)}"
        made.append(d)
        return d

    yield new
    for d in made:
        info = read_process(d)
        if info is not None and info.alive() and info.pgid:
            os.killpg(info.pgid, signal.SIGKILL)
            wait_ended(d, timeout=5)


def test_console_env_and_exit_code(runs):
    d = runs()
    code = "import os,sys; print('out', os.environ['%s']); print('err', file=sys.stderr); sys.exit(3)"
    h = start_run([PY, "-c", code % RUN_DIR_ENV], d)
    info = h.wait(timeout=15)
    assert info is not None and info.state == "exited" and info.exit_code == 3
    assert info.pid == h.pid and info.started_by == MARK and info.end_time >= info.start_time
    text = console(d)
    assert f"out {d.absolute()}" in text and "err" in text
    # process.json is whole JSON with the documented fields
    data = json.loads((d / "process.json").read_text())
    assert {"pid", "command", "cwd", "start_time", "state", "exit_code", "end_time"} <= set(data)
    assert data["command"][:2] == [PY, "-c"]


def test_console_appends_across_runs(runs):
    d = runs()
    for word in ("first", "second"):
        assert start_run([PY, "-c", f"print('{word}')"], d).wait(timeout=15) is not None
    assert console(d).index("first") < console(d).index("second")


def test_signal_death_recorded(runs):
    d = runs()
    h = start_run([PY, "-c", "import os,signal; os.kill(os.getpid(), signal.SIGKILL)"], d)
    info = h.wait(timeout=15)
    assert info is not None and info.state == "killed"
    assert info.signal == signal.SIGKILL and info.signal_name == "SIGKILL"
    assert info.exit_code is None


def test_start_failure_is_reported(runs):
    d = runs()
    with pytest.raises(SuperviseError, match="no-such-program-xyz"):
        start_run(["no-such-program-xyz"], d)
    info = read_process(d)
    assert info is not None and info.state == "failed" and info.error


def test_run_survives_launcher_death_and_hangup(runs, tmp_path):
    """The launcher (think: the TUI in a terminal) gets SIGHUP and dies; the run goes on and its
    end is still recorded by the detached monitor."""
    d = runs()
    go = tmp_path / "go"
    child = f"import os,time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)\nprint('done')"
    launcher_code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from trainwatch.trainer.supervise import start_run
        h = start_run([sys.executable, "-c", {child!r}], Path({str(d)!r}))
        print(h.pid, flush=True)
        time.sleep(60)
    """)
    launcher = subprocess.Popen([PY, "-c", launcher_code], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        pid = int(launcher.stdout.readline())
        os.killpg(launcher.pid, signal.SIGHUP)  # the terminal closing / SSH hanging up
        assert launcher.wait(timeout=10) == -signal.SIGHUP
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        launcher.stdout.close()
    assert is_alive(pid), "the run died with its launcher"
    info = read_process(d)
    assert info is not None and info.status() == "running"
    go.touch()
    final = wait_ended(d, timeout=15)
    assert final is not None and final.state == "exited" and final.exit_code == 0
    assert "done" in console(d)


def test_stop_escalates_to_sigterm(runs):
    d = runs()
    code = ("import signal,time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "print('ready', flush=True)\nwhile True: time.sleep(0.05)")
    start_run([PY, "-c", code], d)
    wait_for(lambda: "ready" in console(d), what="child ready")
    steps: list[StopStep] = []
    final = stop_run(d, grace=0.3, on_step=steps.append)
    sent = [s.signal_name for s in steps if s.action == "signal"]
    assert sent == ["SIGINT", "SIGTERM"]
    assert steps[-1].action == "exited"
    assert final is not None and final.state == "killed" and final.signal_name == "SIGTERM"


def test_stop_escalates_to_sigkill(runs):
    d = runs()
    code = ("import signal,time\nfor s in (signal.SIGINT, signal.SIGTERM): "
            "signal.signal(s, signal.SIG_IGN)\nprint('ready', flush=True)\n"
            "while True: time.sleep(0.05)")
    start_run([PY, "-c", code], d)
    wait_for(lambda: "ready" in console(d), what="child ready")
    steps: list[StopStep] = []
    final = stop_run(d, grace=0.2, on_step=steps.append)
    assert [s.signal_name for s in steps if s.action == "signal"] == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert final is not None and final.state == "killed" and final.signal == signal.SIGKILL


def test_stop_graceful_sigint(runs):
    d = runs()
    code = ("import sys,time\nprint('ready', flush=True)\ntry:\n    time.sleep(60)\n"
            "except KeyboardInterrupt:\n    print('bye'); sys.exit(130)")
    start_run([PY, "-c", code], d)
    wait_for(lambda: "ready" in console(d), what="child ready")
    steps: list[StopStep] = []
    final = stop_run(d, grace=10, on_step=steps.append)
    assert [s.signal_name for s in steps if s.action == "signal"] == ["SIGINT"]
    assert final is not None and final.state == "exited" and final.exit_code == 130
    assert "bye" in console(d)


def test_stop_an_ended_run_is_a_no_op(runs):
    d = runs()
    start_run([PY, "-c", "pass"], d).wait(timeout=15)
    steps: list[StopStep] = []
    info = stop_run(d, on_step=steps.append)
    assert info is not None and info.state == "exited"
    assert [s.action for s in steps] == ["not_running"]


def test_never_signals_a_recycled_pid(tmp_path):
    """process.json names a live pid whose start time differs: that process is a stranger."""
    stranger = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        d = tmp_path / "run"
        d.mkdir()
        rec = {"pid": stranger.pid, "pgid": stranger.pid, "command": ["x"], "cwd": "/",
               "start_time": 0.0, "state": "running", "started_by": MARK,
               "proc_start": "proc:1"}  # not the stranger's start time
        (d / "process.json").write_text(json.dumps(rec))
        assert proc_start_token(stranger.pid) != "proc:1"
        info = read_process(d)
        assert info is not None and not info.alive() and info.status() == "lost"
        steps: list[StopStep] = []
        stop_run(d, grace=0.1, on_step=steps.append)
        assert [s.action for s in steps] == ["not_running"]
        assert stranger.poll() is None, "a process trainwatch did not start was signalled"
    finally:
        stranger.kill()
        stranger.wait()


def test_refuses_runs_it_did_not_start(tmp_path):
    other = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        d = tmp_path / "run"
        d.mkdir()
        rec = {"pid": other.pid, "command": ["x"], "cwd": "/", "start_time": 0.0,
               "state": "running", "proc_start": proc_start_token(other.pid)}
        (d / "process.json").write_text(json.dumps(rec))
        with pytest.raises(SuperviseError, match="not started by trainwatch"):
            stop_run(d)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_refuses_to_start_over_a_live_run(runs, tmp_path):
    d = runs()
    go = tmp_path / "go"
    start_run([PY, "-c", f"import os,time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)"],
              d)
    with pytest.raises(SuperviseError, match="already active"):
        start_run([PY, "-c", "pass"], d)
    go.touch()
    assert wait_ended(d, timeout=15) is not None


def test_cli_start_status_stop(runs):
    d = runs()
    code = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)"
    mod = [PY, "-m", "trainwatch.trainer.supervise", "--run-dir", str(d)]
    r = subprocess.run([*mod, "--", PY, "-c", code], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "started pid" in r.stdout
    wait_for(lambda: "ready" in console(d), what="child ready")
    r = subprocess.run([*mod, "--status"], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "running"
    r = subprocess.run([*mod, "--stop", "--grace", "2"], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "sent SIGINT" in r.stdout and "run ended" in r.stdout
    info = read_process(d)
    assert info is not None and info.ended


def test_cli_without_command_is_a_usage_error(tmp_path):
    r = subprocess.run([PY, "-m", "trainwatch.trainer.supervise", "--run-dir", str(tmp_path)],
                       check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--" in r.stderr
