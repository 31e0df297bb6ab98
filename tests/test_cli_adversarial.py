"""The real CLI fed hostile files, as a person at 2 a.m. would: every bad input is a clear line,
never a traceback, a hang, a lost record or an escape sequence reaching the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BOM = b"\xef\xbb\xbf"


def tw(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trainwatch", *args],
        capture_output=True, text=True, check=False, timeout=timeout, env=env,
        stdin=subprocess.DEVNULL, errors="replace",
    )


def _lines(n: int, **extra: object) -> bytes:
    return b"".join(
        json.dumps({"step": s, "loss": 2.0 / (1 + s), **extra}).encode() + b"\n" for s in range(n)
    )


def _no_control(text: str) -> None:
    """Nothing a terminal would act on: no ESC, BEL, or other C0 control besides newline."""
    bad = [ch for ch in text if ord(ch) < 0x20 and ch != "\n" or 0x7F <= ord(ch) < 0xA0]
    assert not bad, f"control characters reach the terminal: {bad!r}"


def test_a_line_with_invalid_utf8_in_a_key_is_skipped_and_counted(tmp_path):
    # the fast path's msgspec decoder raises UnicodeDecodeError for a bad unknown key: it took the
    # whole file down with a message naming neither the file nor the line
    p = tmp_path / "m.jsonl"
    p.write_bytes(_lines(5) + b'{"step": 5, "lo\xffss": 1, "loss": 0.3}\n' + b'{"step": 6, "loss": 0.2}\n')
    r = tw("inspect", str(p), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["malformed_lines"] == [6]
    assert out["metrics"]["loss"]["count"] == 6
    assert out["metrics"]["loss"]["last"] == 0.2


def test_a_line_of_raw_bytes_is_skipped_and_counted(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(_lines(3) + b"\xff\xfe\x00garbage\n" + _lines(2).replace(b'"step": 0', b'"step": 7'))
    r = tw("check", str(p), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["records"] == 5


def test_a_byte_order_mark_does_not_cost_the_first_record(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(BOM + _lines(4))
    r = tw("inspect", str(p), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["malformed"] == 0
    assert out["records"] == 4
    assert out["metrics"]["loss"]["first_step"] == 0


def test_a_byte_order_mark_on_a_crlf_file_with_nan_tokens(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(BOM + b'{"step": 0, "loss": NaN}\r\n{"step": 1, "loss": 1.5}\r\n')
    out = json.loads(tw("inspect", str(p), "--format", "json").stdout)
    assert (out["malformed"], out["records"], out["metrics"]["loss"]["nonfinite"]) == (0, 2, 1)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("cmd", ["inspect", "check", "report"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, cmd):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    r = tw(cmd, str(fifo), timeout=30)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and str(fifo) in r.stderr
    assert "not a regular file" in r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_rules_file_is_refused_not_waited_on(tmp_path):
    run = tmp_path / "m.jsonl"
    run.write_bytes(_lines(3))
    fifo = tmp_path / "rules.yaml"
    os.mkfifo(fifo)
    r = tw("check", str(run), "--rules", str(fifo), timeout=30)
    assert r.returncode == 2
    assert str(fifo) in r.stderr and r.stderr.count("\n") == 1


def _hostile_run(d: Path) -> Path:
    """A run whose watched metric name and console output carry escapes and markup."""
    d.mkdir()
    name = "\x1b[31mred\x07[bold]x[/]\nnext"
    rows = [{"step": s, "loss": 2.0 / (1 + s), name: float("nan") if s == 50 else 1.0} for s in range(100)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "console.log").write_text(
        "epoch 1\n\x1b[31mRuntimeError: CUDA out of memory.\x1b[0m [bold]Tried[/]\x1b]0;pwned\x07\x1b[2J\n"
    )
    rules = d / "rules.yaml"
    rules.write_text(f"nan_inf:\n  metrics: [{json.dumps(name)}]\n")
    return rules


def test_check_text_never_prints_escape_sequences_from_the_files(tmp_path):
    rules = _hostile_run(tmp_path / "run")
    r = tw("check", str(tmp_path / "run"), "--rules", str(rules))
    assert r.returncode == 1, r.stderr
    assert "CUDA out of memory" in r.stdout and "nan_inf" in r.stdout
    _no_control(r.stdout)
    # colour codes are dropped, not shown as debris; the markup is plain text and stays
    assert "[31m" not in r.stdout and "[bold]Tried[/]" in r.stdout
    # one alert is one table row: a newline inside a metric name does not break it
    table = r.stdout.split("\n\n")[1].splitlines()
    assert len(table) == 1 + 2, table


def test_report_markdown_never_prints_escape_sequences_from_the_files(tmp_path):
    rules = _hostile_run(tmp_path / "run")
    r = tw("report", str(tmp_path / "run"), "--rules", str(rules))
    assert r.returncode == 0, r.stderr
    assert "CUDA out of memory" in r.stdout
    _no_control(r.stdout)


def test_json_output_keeps_the_names_exactly(tmp_path):
    rules = _hostile_run(tmp_path / "run")
    out = json.loads(tw("check", str(tmp_path / "run"), "--rules", str(rules), "--format", "json").stdout)
    assert "\x1b[31mred\x07[bold]x[/]\nnext" in {a["metric"] for a in out["alerts"]}


def test_help_command_shows_that_commands_help():
    r = tw("help", "check")
    assert r.returncode == 0
    assert "--fail-on" in r.stdout and "example:" in r.stdout


def test_a_step_past_int64_counts_as_absent_not_as_a_huge_negative(tmp_path):
    # a float step of 1e20 was cast to int64's minimum (a numpy RuntimeWarning on stderr, a
    # first_step of -9.2e18, and a rewind); an int that large broke the same way
    p = tmp_path / "m.jsonl"
    p.write_bytes(
        b'{"step": 0, "loss": 1}\n{"step": 1e20, "loss": 0.9}\n'
        b'{"step": 99999999999999999999999, "loss": 0.8}\n{"step": 3, "loss": 0.7}\n'
    )
    r = tw("inspect", str(p), "--format", "json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = json.loads(r.stdout)
    loss = out["metrics"]["loss"]
    # absent steps take the record index (docs/format.md): 0, 1, 2, 3
    assert (loss["first_step"], loss["last_step"], loss["count"], out["segments"]) == (0, 3, 4, 1)


def test_an_absurd_timestamp_reads_as_a_short_duration_not_300_digits(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"step": 0, "time": 1700000000, "loss": 1}\n{"step": 1, "time": 1e300, "loss": 0.9}\n')
    r = tw("report", str(p))
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) < 200, r.stdout


@pytest.mark.parametrize("max_bytes", [1, 7, 8, 9, 64, 10_000])
def test_a_runaway_console_log_is_read_from_its_end_with_true_line_numbers(tmp_path, max_bytes):
    # it was read whole into memory (a 370 MB console.log took 1.4 GB and 13 s) before the
    # last lines were kept
    from trainwatch.load import read_console

    p = tmp_path / "console.log"
    lines = [f"line {i}" for i in range(1, 101)]  # "line 1".."line 100", numbers = line numbers
    p.write_text("\n".join(lines) + "\n")
    got, first = read_console(p, limit=30, max_bytes=max_bytes)
    offsets = np.cumsum([0] + [len(ln) + 1 for ln in lines[:-1]])
    start = max(0, p.stat().st_size - max_bytes)
    # the whole lines inside the last max_bytes, at most the last 30 of them
    expected = [ln for ln, at in zip(lines, offsets) if at >= start][-30:]
    assert got == expected
    if expected:
        assert first == int(expected[0].split()[1])
    assert read_console(p, limit=30) == (lines[70:], 71)  # the default bound holds it all


def test_check_says_which_lines_it_skipped(tmp_path):
    # check printed "No problems found." and exit 0 over a file whose every line was garbage:
    # a CI gate passed on a corrupt file, and the skipped lines were never mentioned
    p = tmp_path / "m.jsonl"
    p.write_bytes(_lines(3) + b"garbage\n" + b'{"step": 9, "loss": 1\n')
    r = tw("check", str(p))
    assert r.returncode == 0, r.stderr
    assert f"2 malformed lines skipped; the first, {p}:4: not valid JSON" in r.stdout
    assert "trainwatch inspect" in r.stdout
    summary = json.loads(tw("check", str(p), "--format", "json").stdout)["summary"]
    assert summary["malformed"] == 2 and summary["first_malformed"].startswith(f"{p}:4: ")


def test_report_says_which_lines_it_skipped(tmp_path):
    # the report's figures are of the lines it could read: it says what it left out, as check does
    p = tmp_path / "m.jsonl"
    p.write_bytes(_lines(3) + b"garbage\n" + _lines(2))
    r = tw("report", str(p))
    assert r.returncode == 0, r.stderr
    assert f"| malformed lines | 1 skipped; the first, {p}:4: not valid JSON" in r.stdout
    d = json.loads(tw("report", str(p), "--format", "json").stdout)
    assert d["malformed"] == 1 and d["first_malformed"].startswith(f"{p}:4: not valid JSON")


def test_check_on_a_file_without_records_does_not_say_all_is_well(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b"garbage\nmore garbage\n")
    r = tw("check", str(p))
    assert r.returncode == 0, r.stderr
    assert "No problems found" not in r.stdout
    assert "no metric records" in r.stdout.lower()


def test_a_folder_of_runs_names_a_run_to_give(tmp_path):
    # the TUI takes a folder of runs; check/report need one run, and said only "no metrics file".
    # The only run is taken; of several, they are listed and the error line says how to pick
    (tmp_path / "runs" / "exp1").mkdir(parents=True)
    (tmp_path / "runs" / "exp1" / "metrics.jsonl").write_bytes(_lines(3))
    r = tw("check", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stderr
    assert str(tmp_path / "runs" / "exp1") in r.stdout
    (tmp_path / "runs" / "exp2").mkdir()
    (tmp_path / "runs" / "exp2" / "metrics.jsonl").write_bytes(_lines(3))
    r = tw("check", str(tmp_path / "runs"))
    assert r.returncode == 2
    *listed, last = r.stderr.strip().splitlines()
    assert [ln.split()[0] for ln in listed] == ["NAME", "exp1", "exp2"] or \
        [ln.split()[0] for ln in listed] == ["NAME", "exp2", "exp1"]
    assert last.startswith("trainwatch: error: ") and "--run NAME_OR_ID" in last
    assert tw("check", str(tmp_path / "runs"), "--run", "exp2").returncode == 0


def test_a_corrupt_event_file_is_named_without_a_line_zero(tmp_path):
    p = tmp_path / "events.out.tfevents.1.host"
    p.write_bytes(bytes(range(256)) * 2)
    r = tw("check", str(p))
    assert r.returncode == 0, r.stderr
    assert f"the first, {p}: corrupt" in r.stdout


def test_a_pipe_in_a_metric_name_does_not_break_the_report_table(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"step": s, "my|loss": 1 / (s + 1)}) + "\n" for s in range(60)))
    rules = tmp_path / "rules.yaml"
    rules.write_text('roles:\n  loss: ["my|loss"]\n')
    r = tw("report", str(p), "--rules", str(rules))
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("| train loss"))
    assert row.replace("\\|", "").count("|") == 3, row  # two cells: | name | value |


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("cmd", [("check",), ("report",), ("inspect",), ("check", "--format", "json")])
def test_a_full_disk_is_one_line_and_exit_2_not_a_traceback(tmp_path, cmd):
    # `trainwatch report run > REPORT.md` on a full disk: a traceback, and for check exit 1,
    # which a CI script reads as "an alert fired"
    p = tmp_path / "m.jsonl"
    p.write_bytes(_lines(3))
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "trainwatch", cmd[0], str(p), *cmd[1:]],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "No space left on device" in r.stderr


def test_a_custom_rule_on_a_metric_the_run_never_logged_is_named(tmp_path):
    # a typo in a custom rule's metric watched nothing, silently: check said "No problems found"
    p = tmp_path / "m.jsonl"
    p.write_bytes(_lines(5))
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "custom:\n  - id: loss_high\n    metric: los\n    above: 10\n"
        "  - id: by_role\n    metric: loss\n    above: 10\n"
    )
    r = tw("check", str(p), "--rules", str(rules))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr  # only the typo, not the rule given by role
    assert "loss_high" in r.stderr and "'los'" in r.stderr and "loss" in r.stderr.split("'los'")[1]


def test_inspect_names_a_non_finite_last_value_as_it_was(tmp_path):
    # the text view printed "nan" for a last value of +inf (strict JSON has null for both)
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"step": 1, "big": 1e309, "n": NaN, "m": -Infinity, "ok": 1}\n')
    rows = {line.split()[0]: line.split() for line in tw("inspect", str(p)).stdout.splitlines()
            if line[:3] in ("big", "n  ", "m  ", "ok ")}
    assert [rows[k][-3] for k in ("big", "n", "m", "ok")] == ["inf", "nan", "-inf", "1"]
    metrics = json.loads(tw("inspect", str(p), "--format", "json").stdout)["metrics"]
    assert {k: (v["last"], v["last_nonfinite"]) for k, v in metrics.items()} == {
        "big": (None, "inf"), "n": (None, "nan"), "m": (None, "-inf"), "ok": (1.0, None)}
