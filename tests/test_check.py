"""``trainwatch check``'s logic: exit codes, the documented JSON, the human table, and the whole
path (load a run directory, feed every stream through the engine) on labelled synthetic runs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from trainwatch.commands.check import (
    CheckResult,
    count_steps,
    exit_code,
    format_check_json,
    format_check_text,
    run_check,
    summarize,
)
from trainwatch.commands.tally import RunTally
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.load import load_run
from trainwatch.rules import load_rules_config
from trainwatch.rules.engine.alert import Alert, Cause

# bench/ is not a package of the project: make the repository root importable
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.synthetic import FAULT_RULES, clean_run, fault_run


def _alert(rule: str = "loss_spike", severity: str = "warning", step: int = 1200, **kw) -> Alert:
    base = {
        "rule": rule, "severity": severity, "step": step, "time": 1.7e9, "metric": "loss",
        "message": "loss jumped to 9.1, 4.2x its recent median",
        "evidence": {"value": 9.1, "median": 2.17, "ratio": 4.2, "threshold": 0.00034,
                  "gap_s": 12.0, "window_steps": 1234, "points": 2500, "recent": [1.0, 2.0],
                     "step_time": 0.25, "last_record_time": 1.7e9},
        "causes": (Cause("a bad batch", 0.6), Cause("learning rate too high", 0.25)),
        "fixes": ("clip gradients (max_norm 1.0)", "lower the learning rate"),
    }
    base.update(kw)
    return Alert(**base)  # type: ignore[arg-type]


def _result(*alerts: Alert) -> CheckResult:
    by = {"info": 0, "warning": 0, "error": 0}
    for a in alerts:
        by[a.severity] += 1
    return CheckResult(Path("runs/exp1"), tuple(alerts), {"records": 12345, "steps": 10000,
                                                          "by_severity": by})


@pytest.mark.parametrize(
    ("severities", "fail_on", "code"),
    [
        ((), "error", 0),
        ((), "info", 0),
        (("warning",), "error", 0),
        (("warning",), "warning", 1),
        (("info",), "warning", 0),
        (("info",), "info", 1),
        (("error",), "error", 1),
        (("error", "info"), "never", 0),
        (("info", "warning", "error"), "warning", 1),
    ],
)
def test_exit_code_follows_fail_on(severities: tuple[str, ...], fail_on: str, code: int) -> None:
    res = _result(*(_alert(severity=s, step=i) for i, s in enumerate(severities)))
    assert exit_code(res, fail_on) == code


def test_exit_code_defaults_to_error_and_rejects_unknown_levels() -> None:
    assert exit_code(_result(_alert(severity="warning"))) == 0
    assert exit_code(_result(_alert(severity="error"))) == 1
    with pytest.raises(ValueError, match="--fail-on"):
        exit_code(_result(), "fatal")


def _strict(text: str) -> dict:
    def bad(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=bad)


def test_json_has_exactly_the_documented_shape() -> None:
    a = _alert(evidence={"value": math.nan, "median": 2.5, "inf": -math.inf})
    doc = _strict(format_check_json(_result(a, _alert(severity="error", step=1500))))
    assert list(doc) == ["path", "alerts", "summary"]
    assert doc["path"] == "runs/exp1"
    assert doc["summary"] == {"records": 12345, "steps": 10000,
                              "by_severity": {"info": 0, "warning": 1, "error": 1},
                              "malformed": 0, "first_malformed": None}
    assert doc["alerts"][0] == json.loads(json.dumps(a.to_dict()))
    assert doc["alerts"][0]["evidence"] == {"value": None, "median": 2.5, "inf": None}
    assert [x["step"] for x in doc["alerts"]] == [1200, 1500]


def test_json_of_a_clean_run_has_zero_counts() -> None:
    doc = _strict(format_check_json(_result()))
    assert doc["alerts"] == []
    assert doc["summary"]["by_severity"] == {"info": 0, "warning": 0, "error": 0}


def test_text_lists_a_table_then_each_diagnosis_with_human_numbers() -> None:
    text = format_check_text(_result(_alert(), _alert("nan_inf", "error", 20000, message="NaN")))
    lines = text.splitlines()
    assert lines[0] == "runs/exp1: 12,345 records, 10,000 steps"
    assert lines[1] == "2 alerts: 1 error, 1 warning, 0 info"
    header = next(i for i, ln in enumerate(lines) if ln.startswith("SEVERITY"))
    assert lines[header].split() == ["SEVERITY", "STEP", "RULE", "MESSAGE"]
    row = lines[header + 1].split()
    assert row[:3] == ["warning", "1,200", "loss_spike"]
    assert lines[header + 2].split()[:3] == ["error", "20,000", "nan_inf"]
    # columns line up: every row's rule starts where the header's RULE does
    col = lines[header].index("RULE")
    assert lines[header + 1][col:].startswith("loss_spike")
    assert lines[header + 2][col:].startswith("nan_inf")
    assert "[1] warning · loss_spike · step 1,200 · loss" in text
    ev = next(ln for ln in lines if "evidence:" in ln)
    assert ev.startswith("    ")
    for part in ("value=9.1", "median=2.17", "threshold=3.4e-4", "gap_s=12 s",
                 "window_steps=1,234", "points=2,500", "recent=[1, 2]", "step_time=250 ms",
                 "last_record_time=2023-11-14 22:13:20 UTC"):
        assert part in ev
    assert "       60%  a bad batch" in text
    assert "       25%  learning rate too high" in text
    assert "      - clip gradients (max_norm 1.0)" in text


def test_text_of_a_clean_run_says_so() -> None:
    text = format_check_text(_result())
    assert text.splitlines() == ["runs/exp1: 12,345 records, 10,000 steps", "No problems found."]


def test_summary_counts_records_distinct_steps_and_severities() -> None:
    p = JsonlParser("m.jsonl")
    data = b"".join(
        b'{"step":%d,"loss":1.0}\n' % s for s in [1, 2, 3, 4, 5, 3, 4, 5, 6]  # resumed at 3
    ) + b'{"event":"run_end"}\n'
    cut = data.index(b"\n", data.index(b"\n", 30) + 1) + 1  # whole lines, two reads
    batches = [p.parse(data[:cut]), p.parse(data[cut:], 1 + data[:cut].count(b"\n"))]
    assert not any(b.malformed for b in batches)
    assert count_steps(batches) == 6

    tally = RunTally()  # (what run_check counts as it feeds the rules)
    for b in batches:
        tally.add(b)
    s = summarize(tally, [_alert(), _alert(severity="info"), _alert(severity="info")])
    assert s == {"records": 10, "steps": 6, "by_severity": {"info": 2, "warning": 1, "error": 0}}


# ------------------------------------------------------------------- whole path, real engine


CFG = load_rules_config(None)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_check_passes_a_clean_run(tmp_path: Path, seed: int) -> None:
    syn = clean_run(seed, 3000)
    run = load_run(syn.write(tmp_path / "run"))
    res = run_check(run, CFG, now=syn.now)
    assert exit_code(res, "error") == 0
    assert not [a for a in res.alerts if a.severity == "error"]
    assert res.summary["steps"] == 3000
    assert res.summary["records"] == syn.jsonl().count(b"\n")
    assert sum(res.summary["by_severity"].values()) == len(res.alerts)


@pytest.mark.parametrize(
    "kind",
    ["nan", "spike", "grad_explosion", "overfit", "frozen", "detach_probe", "stall_gap",
     "stall_end", "lr_exhausted", "straggler"],
)
def test_check_finds_the_injected_fault(tmp_path: Path, kind: str) -> None:
    syn = fault_run(kind, 2, n_before=600)
    run = load_run(syn.write(tmp_path / "run"))
    res = run_check(run, CFG, now=syn.now)
    lab = syn.label
    hits = [a for a in res.alerts if a.rule == FAULT_RULES[kind]
            and lab.step <= a.step <= lab.step + lab.delta_max]
    assert hits, [(a.rule, a.step) for a in res.alerts]
    assert list(res.alerts) == sorted(res.alerts, key=lambda a: a.step)
    doc = _strict(format_check_json(res))
    assert len(doc["alerts"]) == len(res.alerts)
    assert f"{hits[0].step:,}" in format_check_text(res)
    if kind == "nan":
        assert exit_code(res) == 1  # NaN is an error: CI fails


def test_check_reads_the_console_log(tmp_path: Path) -> None:
    syn = clean_run(5, 1500)
    d = syn.write(tmp_path / "run")
    (d / "console.log").write_text(
        "epoch 1\nTraceback (most recent call last):\n  File \"train.py\", line 9\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    res = run_check(load_run(d), CFG, now=syn.now)
    errs = [a for a in res.alerts if a.rule == "console_error"]
    assert errs and errs[0].severity == "error"
    assert exit_code(res) == 1
