"""What every framework integration shares, without a framework: the run's life, the crash hooks,
one warning then quiet."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from disk_faults import DiskState
from framework_runs import metric_rows, our_warnings, records, run_end

from trainwatch.integrations.live_run import EndsOnException, LiveRun, TrainwatchWarning, json_safe


def _script_run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from trainwatch.integrations.live_run import LiveRun
        run = LiveRun({str(tmp_path / "run")!r}, "test")
        run.start({{"lr": 0.1}})
        run.log({{"loss": 1.0}}, step=1)
    """) + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize(
    ("body", "status", "exit_code", "error"),
    [
        ('raise RuntimeError("boom")', "crashed", 1, "RuntimeError: boom"),
        ("raise KeyboardInterrupt", "interrupted", 130, "KeyboardInterrupt"),
        # a hook installed after ours that does not chain (rich's traceback.install does that):
        # the next run's start puts ours in front again
        (
            (
                'sys.excepthook = lambda *a: print("their hook", file=sys.stderr)\n'
                'LiveRun(run.run_dir.parent / "second", "test").start()\n'
                'raise RuntimeError("boom")'
            ),
            "crashed", 1, "RuntimeError: boom",
        ),
    ],
    ids=["exception", "ctrl-c", "hook replaced"],
)
def test_an_uncaught_exception_ends_the_run_and_the_previous_hook_still_runs(
    tmp_path: Path, body: str, status: str, exit_code: int, error: str
) -> None:
    out = _script_run(tmp_path, body)
    # (Python ends itself with SIGINT after an uncaught KeyboardInterrupt)
    assert out.returncode == (-2 if status == "interrupted" else 1), out.stderr
    if "their hook" in body:
        assert "their hook" in out.stderr
        assert run_end(tmp_path / "second")["status"] == status
    else:
        assert "Traceback" in out.stderr
    end = run_end(tmp_path / "run")
    assert (end["status"], end["exit_code"], end["error"]) == (status, exit_code, error)
    assert metric_rows(tmp_path / "run") == [{"step": 1, "time": pytest.approx(end["time"], abs=60),
                                              "loss": 1.0}]


def test_a_script_that_ends_normally_leaves_an_unfinished_run_unknown(tmp_path: Path) -> None:
    """No exception and no end: the writer's exit hook says ``unknown``, as for any writer."""
    out = _script_run(tmp_path, "")
    assert out.returncode == 0, out.stderr
    assert run_end(tmp_path / "run")["status"] == "unknown"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dying_thread_ends_the_runs_it_started_and_no_other(tmp_path: Path) -> None:
    mine = LiveRun(tmp_path / "main", "test")
    mine.start()
    theirs = LiveRun(tmp_path / "thread", "test")

    def train() -> None:
        theirs.start()
        theirs.log({"loss": 1.0}, step=1)
        raise ValueError("bad batch")

    t = threading.Thread(target=train, name="train")
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()
    end = run_end(tmp_path / "thread")
    assert (end["status"], end["error"]) == ("crashed", "ValueError: bad batch")
    assert mine.is_open
    mine.end("finished")
    assert run_end(tmp_path / "main")["status"] == "finished"


@pytest.mark.parametrize(
    ("exc", "status"), [(RuntimeError("oops"), "crashed"), (KeyboardInterrupt(), "interrupted")]
)
def test_the_context_manager_ends_the_run_as_the_exception_says(
    tmp_path: Path, exc: BaseException, status: str
) -> None:
    class Callback(EndsOnException):
        def __init__(self) -> None:
            self.run = LiveRun(tmp_path, "test")

    callback = Callback()
    with pytest.raises(type(exc)), callback:
        callback.run.start()
        raise exc
    assert run_end(tmp_path)["status"] == status


def test_an_end_then_a_start_appends_a_second_run(tmp_path: Path) -> None:
    run = LiveRun(tmp_path, "test")
    for stage in ("fit", "test"):
        run.start({"stage": stage})
        run.log({"loss": 1.0}, step=1)
        run.end("finished")
    run.log({"loss": 2.0}, step=2)  # no run open: nothing
    assert [r.get("event") for r in records(tmp_path)] == [
        "run_start", None, "run_end", "run_start", None, "run_end"
    ]


class _Broken(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("a broken mapping")

    def __len__(self) -> int:
        return 1


def test_an_internal_error_is_one_warning_then_quiet_but_the_run_still_ends(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    run = LiveRun(tmp_path, "test")
    run.start()
    run.log(_Broken(), step=1)
    run.log({"loss": 1.0}, step=2)  # quiet from now on
    run.log(_Broken(), step=3)
    warned = our_warnings(recwarn.list)
    assert len(warned) == 1 and "the test integration stopped writing" in warned[0], warned
    run.end("finished")
    assert [r.get("event") for r in records(tmp_path)] == ["run_start", "run_end"]


def test_a_config_that_cannot_be_built_is_one_warning_and_no_run(tmp_path: Path) -> None:
    def config() -> dict[str, Any]:
        raise AttributeError("no such argument")

    run = LiveRun(tmp_path / "run", "test")
    with pytest.warns(TrainwatchWarning, match="AttributeError: no such argument"):
        run.start(config)
    run.log({"loss": 1.0}, step=1)
    run.end("finished")
    assert not (tmp_path / "run").exists()


def test_a_full_disk_is_one_warning_per_outage(
    tmp_path: Path, disk: DiskState, recwarn: pytest.WarningsRecorder
) -> None:
    run = LiveRun(tmp_path, "test")
    run.start()
    disk.full = True
    for step in range(100):
        run.log({"loss": 1.0}, step=step)
    run.end("finished")
    warned = our_warnings(recwarn.list)
    assert len(warned) == 1 and "No space left on device" in warned[0], warned


def test_warnings_turned_into_errors_never_reach_training(
    tmp_path: Path, disk: DiskState, capsys: pytest.CaptureFixture[str]
) -> None:
    run = LiveRun(tmp_path, "test")
    run.start()
    disk.full = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # python -W error
        run.log({"loss": 1.0}, step=1)
        run.end("finished")
    assert "No space left on device" in capsys.readouterr().err


def test_json_safe_config() -> None:
    class Odd:
        def __repr__(self) -> str:
            return "<odd>"

    config = {"lr": np.float32(0.5), "steps": np.int64(3), ("a", 1): [Odd(), None, float("nan")]}
    safe = json_safe(config)
    assert safe["lr"] == 0.5 and safe["steps"] == 3
    assert safe["('a', 1)"][:2] == ["<odd>", None]
    assert json_safe(None) is None
