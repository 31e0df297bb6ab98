"""``run_crashed``: the run's own end (a ``run_end`` with a status other than a clean finish, a
non-zero exit code or an error text) is an alert with ``console_error``'s diagnosis of its text;
one cause seen in the console and in the end is told once; ``report`` says how the run ended."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.console_error import KNOWN
from trainwatch.rules.builtin.run_crashed import exit_signal
from trainwatch.rules.engine.alert import Alert

CFG = load_rules_config()
OOM_TEXT = "CUDA out of memory. Tried to allocate 2.00 GiB"
OOM = next(k for k in KNOWN if k.kind == "cuda_oom")


def run_lines(end: dict[str, Any] | None, steps: int = 60) -> list[bytes]:
    """A short healthy run written as the trainer writes one: run_start, a falling loss, then
    ``end`` (a run_end's fields) unless None."""
    out = [{"event": "run_start", "time": 1000.0}]
    out += [{"step": s, "time": 1000.0 + s, "loss": 2.0 / (1 + 0.05 * s), "lr": 1e-3}
            for s in range(1, steps + 1)]
    if end is not None:
        out.append({"event": "run_end", "time": 1000.0 + steps + 0.5, **end})
    return [json.dumps(r).encode() + b"\n" for r in out]


def alerts_of(lines: list[bytes], chunks: list[int] | None = None, console: list[str] = (),
              console_first: bool = False, live: bool = False) -> list[Alert]:
    """Every alert of the stream fed in pieces of ``chunks`` lines (whole by default), with the
    console before or after it, then the end of the backfill (live: a tick)."""
    engine = RuleEngine(CFG, live=live)
    parser = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    if console and console_first:
        engine.feed_console(list(console), 1)
    cuts = [0, *(chunks or []), len(lines)]
    line = 1
    for lo, hi in itertools.pairwise(cuts):
        if hi > lo:
            engine.feed(parser.parse(b"".join(lines[lo:hi]), line))
            line += hi - lo
    if console and not console_first:
        engine.feed_console(list(console), 1)
    if live:
        engine.tick(2000.0)
    else:
        engine.finish(2000.0)
    return engine.alerts


def crashes(alerts: list[Alert]) -> list[Alert]:
    return [a for a in alerts if a.rule in ("run_crashed", "console_error")]


def test_a_crash_with_an_oom_text_is_one_error_with_the_oom_diagnosis() -> None:
    lines = run_lines({"status": "crashed", "exit_code": 1,
                       "error": f"OutOfMemoryError: {OOM_TEXT}"})
    [a] = crashes(alerts_of(lines))
    assert (a.rule, a.severity, a.step, a.metric) == ("run_crashed", "error", 60, None)
    assert a.message == ("The run crashed (status crashed, exit code 1): The GPU ran out of "
                         "memory (tried to allocate 2.00 GiB).")
    assert a.evidence["kind"] == "cuda_oom" and a.evidence["exit_code"] == 1
    assert [c.cause for c in a.causes] == [c for c, _p in sorted(OOM.causes, key=lambda c: -c[1])]
    assert a.fixes == OOM.fixes


@pytest.mark.parametrize("end", [{"status": "finished", "exit_code": 0},
                                 {"status": "finished"}, {}, {"status": "Success"}])
def test_a_clean_end_is_quiet(end: dict[str, Any]) -> None:
    assert crashes(alerts_of(run_lines(end))) == []


def test_a_non_zero_exit_without_text_is_a_generic_error() -> None:
    [a] = crashes(alerts_of(run_lines({"status": "finished", "exit_code": 3})))
    assert (a.rule, a.severity, a.evidence["kind"]) == ("run_crashed", "error", "unsaid")
    assert a.message == "The run ended in failure (status finished, exit code 3), with no error text."
    assert "console" in a.causes[0].cause and a.fixes


def test_an_unknown_error_text_is_told_as_it_is() -> None:
    [a] = crashes(alerts_of(run_lines({"status": "crashed", "exit_code": 1,
                                       "error": "KeyError: 'labels'"})))
    assert (a.severity, a.evidence["kind"]) == ("error", "error")
    assert a.message == "The run crashed (status crashed, exit code 1): KeyError: 'labels'"


@pytest.mark.parametrize(("end", "severity", "kind"), [
    ({"status": "interrupted", "exit_code": 130, "error": "KeyboardInterrupt"}, "warning",
     "stopped"),
    ({"status": "crashed", "exit_code": 143}, "warning", "stopped"),  # SIGTERM: a scheduler
    ({"status": "crashed", "exit_code": 137}, "error", "signal_sigkill"),
    ({"status": "crashed", "exit_code": -11}, "error", "signal_sigsegv"),
    ({"status": "unknown", "exit_code": None}, "info", "unclear"),
])
def test_how_the_end_is_read(end: dict[str, Any], severity: str, kind: str) -> None:
    [a] = crashes(alerts_of(run_lines(end)))
    assert (a.rule, a.severity, a.evidence["kind"]) == ("run_crashed", severity, kind)


def test_exit_codes_that_are_signals() -> None:
    assert [exit_signal(c) for c in (0, 1, 2, 130, 137, 143, -9, 255, None)] == [
        None, None, None, 2, 9, 15, 9, None, None]


@pytest.mark.parametrize("chunks", [[1], [5, 30, 61], list(range(1, 63))])
def test_fed_record_by_record_equals_fed_whole(chunks: list[int]) -> None:
    for end in ({"status": "crashed", "exit_code": 1, "error": f"RuntimeError: {OOM_TEXT}"},
                {"status": "crashed", "exit_code": 1}, {"status": "interrupted",
                                                        "exit_code": 130}):
        lines = run_lines(end)
        assert alerts_of(lines, chunks) == alerts_of(lines)


TRACEBACK = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
             f"torch.OutOfMemoryError: {OOM_TEXT}"]


@pytest.mark.parametrize("console_first", [False, True])
def test_one_cause_in_the_console_and_the_end_is_told_once(console_first: bool) -> None:
    """``check`` reads the end first (the run's end tells it); live, the console often comes
    first (the console tells it). Either way one alert, with the OOM diagnosis."""
    lines = run_lines({"status": "crashed", "exit_code": 1,
                       "error": f"OutOfMemoryError: {OOM_TEXT}"})
    [a] = crashes(alerts_of(lines, console=TRACEBACK, console_first=console_first))
    assert a.rule == ("console_error" if console_first else "run_crashed")
    assert a.evidence["kind"] == "cuda_oom" and a.severity == "error"


@pytest.mark.parametrize("live", [False, True])
def test_an_end_without_text_defers_to_the_console(live: bool) -> None:
    """W&B's exit record has an exit code and no text; its console says what happened."""
    lines = run_lines({"status": "crashed", "exit_code": 1})
    [a] = crashes(alerts_of(lines, console=TRACEBACK, live=live))
    assert (a.rule, a.evidence["kind"]) == ("console_error", "cuda_oom")
    # an exception the console does not know: its guess (a warning: a printed exception may
    # have been caught) and the end's confirmation, which names it (an error: check fails)
    other = [*TRACEBACK[:2], "ValueError: bad shape (3, 4)"]
    printed, crashed = crashes(alerts_of(lines, console=other, live=live))
    assert (printed.rule, printed.severity) == ("console_error", "warning")
    assert (crashed.rule, crashed.severity) == ("run_crashed", "error")
    assert crashed.message == ("The run crashed (status crashed, exit code 1): the console's "
                               "last exception was ValueError: bad shape (3, 4)")


def test_the_console_leaves_an_exception_the_end_told() -> None:
    lines = run_lines({"status": "crashed", "exit_code": 1, "error": "ValueError: bad shape"})
    console = [*TRACEBACK[:2], "builtins.ValueError: bad shape"]
    [a] = crashes(alerts_of(lines, console=console))
    assert (a.rule, a.severity) == ("run_crashed", "error")


def test_a_second_crash_after_a_resume_is_told_again() -> None:
    """Resumed from step 1, the run crashes again further on: a new alert. (The same crash at
    the same step again is the engine's replay guard's: an alert already raised for the steps a
    resume replays is not raised again.)"""
    end = {"status": "crashed", "exit_code": 1, "error": f"OutOfMemoryError: {OOM_TEXT}"}
    lines = run_lines(end, steps=40) + run_lines(end, steps=50)[1:]
    assert [a.step for a in crashes(alerts_of(lines))] == [40, 50]


def test_disabled_it_says_nothing_and_the_console_still_tells() -> None:
    cfg = load_rules_config(overrides={"run_crashed": {"enabled": False}})
    engine = RuleEngine(cfg, live=False)
    lines = run_lines({"status": "crashed", "exit_code": 1,
                       "error": f"OutOfMemoryError: {OOM_TEXT}"})
    engine.feed(JsonlParser("m.jsonl", clock=lambda: 0.0).parse(b"".join(lines), 1))
    engine.feed_console(TRACEBACK, 1)
    engine.finish(2000.0)
    assert [(a.rule, a.evidence["kind"]) for a in engine.alerts] == [("console_error", "cuda_oom")]


# ---------------------------------------------------------------------------- check and report
def tw(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainwatch", *map(str, args)],
                          capture_output=True, text=True, check=False, timeout=120,
                          stdin=subprocess.DEVNULL)


def write_run(d: Path, end: dict[str, Any]) -> Path:
    d.mkdir()
    (d / "metrics.jsonl").write_bytes(b"".join(run_lines(end)))
    return d


def test_check_exits_1_on_a_crashed_run_and_0_on_a_finished_one(tmp_path: Path) -> None:
    crashed = write_run(tmp_path / "crashed", {"status": "crashed", "exit_code": 1,
                                               "error": f"OutOfMemoryError: {OOM_TEXT}"})
    r = tw("check", crashed, "--format", "json")
    assert r.returncode == 1, r.stderr
    [a] = json.loads(r.stdout)["alerts"]
    assert (a["rule"], a["severity"], a["evidence"]["kind"]) == ("run_crashed", "error", "cuda_oom")
    finished = write_run(tmp_path / "finished", {"status": "finished", "exit_code": 0})
    r = tw("check", finished)
    assert r.returncode == 0 and "No problems found." in r.stdout, r.stdout + r.stderr


def test_report_says_how_the_run_ended(tmp_path: Path) -> None:
    from trainwatch.commands.report import build_report, format_report_markdown
    from trainwatch.load import load_run

    def status_of(name: str, end: dict[str, Any]) -> tuple[str, Any]:
        rep = build_report(load_run(write_run(tmp_path / name, end)), CFG)
        line = next(ln for ln in format_report_markdown(rep).splitlines()
                    if ln.startswith("| status |"))
        return line, rep.to_dict()["end"]

    line, end = status_of("oom", {"status": "crashed", "exit_code": 1,
                                  "error": f"OutOfMemoryError: {OOM_TEXT}"})
    assert line == f"| status | crashed, exit code 1: OutOfMemoryError: {OOM_TEXT} |"
    assert end == {"status": "crashed", "exit_code": 1, "error": f"OutOfMemoryError: {OOM_TEXT}"}
    assert status_of("ok", {"status": "finished", "exit_code": 0})[0] == (
        "| status | finished (run_end seen) |")
    assert status_of("stop", {"status": "interrupted", "exit_code": 143})[0] == (
        "| status | interrupted, exit code 143: SIGTERM |")
    assert status_of("killed", {"status": "killed"})[0] == "| status | killed |"


def test_a_crash_of_a_state_never_detached_defers_to_the_probe() -> None:
    """The trainer's probe said the state was attached (state_detach, an error) before the run
    died of PyTorch's second-backward error: the crash is the symptom, told once."""
    error = ("RuntimeError: Trying to backward through the graph a second time (or directly "
             "access saved tensors after they have already been freed).")
    lines = [json.dumps(r).encode() + b"\n" for r in (
        {"event": "run_start", "time": 1000.0},
        {"step": 1, "time": 1001.0, "loss": 2.0, "state_attached": 0},
        {"step": 2, "time": 1002.0, "loss": 1.9, "state_attached": 1},
        {"event": "run_end", "time": 1003.0, "status": "crashed", "exit_code": 1, "error": error})]
    assert [(a.rule, a.step) for a in alerts_of(lines)] == [("state_detach", 2)]
    for chunks in ([1], [2], [3]):
        assert alerts_of(lines, chunks) == alerts_of(lines)
    without_probe = [ln for ln in lines if b"state_attached\": 1" not in ln]
    [a] = crashes(alerts_of(without_probe))
    assert (a.rule, a.evidence["kind"]) == ("run_crashed", "backward_twice")
