"""The real CLI, as a subprocess: exit codes, one-line errors, JSON shapes, --help examples."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "trainwatch" / "samples" / "sample_run.jsonl"


def tw(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trainwatch", *args],
        capture_output=True, text=True, check=False, timeout=timeout, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )


def test_top_level_help_lists_commands_with_examples():
    r = tw("--help")
    assert r.returncode == 0
    for cmd in ("inspect", "check", "report", "train", "demo"):
        assert f"trainwatch {cmd}" in r.stdout
    assert "examples:" in r.stdout


@pytest.mark.parametrize("cmd", ["inspect", "check", "report", "demo", "watch", "train"])
def test_every_command_help_has_an_example(cmd):
    r = tw(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert re.search(r"examples?:", r.stdout), r.stdout
    assert "trainwatch" in re.split(r"examples?:", r.stdout)[1]
    # each example is written as the command it documents (train's had read python -m ...)
    assert f"trainwatch {cmd} " in re.split(r"examples?:", r.stdout)[1] or cmd == "watch"


def test_inspect_json_on_the_shipped_sample():
    r = tw("inspect", str(SAMPLE), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["format"] == "jsonl"
    raw = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert out["records"] == len(raw)
    losses = [x["loss"] for x in raw if "loss" in x]
    loss = out["metrics"]["loss"]
    assert loss["role"] == "loss"
    assert loss["count"] == len(losses)
    assert loss["min"] == min(losses) and loss["max"] == max(losses) and loss["last"] == losses[-1]
    assert out["metrics"]["val_loss"]["count"] == sum(1 for x in raw if "val_loss" in x)
    assert out["events"] == {"run_start": 1, "run_end": 1}
    assert out["segments"] == 1 and out["malformed"] == 0


def test_inspect_reports_malformed_nonfinite_and_segments(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_bytes(
        b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": NaN}\nnope\n'
        b'{"step": 3, "loss": 0.5}\n{"step": 2, "loss": 0.7}\n{"step": 3, "loss": 0.6'  # partial last line
    )
    r = tw("inspect", str(f), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    m = out["metrics"]["loss"]
    # the unterminated last line of a closed file is parsed; being incomplete JSON, it is reported
    assert out["malformed"] == 2 and out["malformed_lines"] == [3, 6]
    assert out["segments"] == 2
    assert m["nonfinite"] == 1 and m["min"] == 0.5 and m["max"] == 1.0
    assert m["count"] == 4


def test_inspect_text_is_a_table_and_escapes_control_characters(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 1, "evil\\u001b[31mname": 1.5, "loss": 2}\n')
    r = tw("inspect", str(f))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout
    assert "loss" in r.stdout and "metric" in r.stdout


def test_missing_path_is_one_line_exit_2(tmp_path):
    r = tw("inspect", str(tmp_path / "nope.jsonl"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "nope.jsonl" in r.stderr and "no such file" in r.stderr


def test_unreadable_file_is_one_line_exit_2(tmp_path):
    f = tmp_path / "secret.jsonl"
    f.write_text('{"loss": 1}\n')
    f.chmod(0)
    if os.access(f, os.R_OK):
        pytest.skip("running as root: a chmod 000 file is still readable")
    r = tw("inspect", str(f))
    assert r.returncode == 2 and "permission denied" in r.stderr and r.stderr.count("\n") == 1


def test_unknown_option_is_one_line_exit_2():
    r = tw("inspect", str(SAMPLE), "--bogus")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--bogus" in r.stderr
