"""``trainwatch report`` on a run whose roles move to another series mid-run.

A script that logs ``train_loss`` and later also ``loss`` (8x the scale) moves the loss role to
``loss`` at that record (docs/format.md, "Metric roles"). A best across the two series would mix
scales, so the report's figures stay those of the series the run ended on, and the report says
where the role moved from, to and at which step, for every role it shows a figure of.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainwatch.commands.report import (
    build_report,
    format_report_json,
    format_report_markdown,
)
from trainwatch.commands.run_summary import RoleMove, role_moves
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.load import load_run
from trainwatch.roles import RoleTable
from trainwatch.rules import load_rules_config

MOVE = 1001
"""First step that logs the new names (``loss``, ``lr``, ``throughput``, ``step_time``; the first
``val_loss`` comes at the next evaluation)."""
N = 2000


def _lines(*, move_all: bool = True) -> list[dict]:
    out: list[dict] = []
    for s in range(1, N + 1):
        level = 2.0 * math.exp(-s / 1500) + 0.5
        d: dict = {"step": s, "time": 1.7e9 + s, "train_loss": level,
                   "learning_rate": 1e-3, "samples_per_second": 100.0, "iter_time": 0.5}
        if s >= MOVE:
            d["loss"] = 8 * level
            if move_all:
                d["lr"] = 2e-3 * (1 - (s - MOVE) / (N - MOVE + 1))
                d["throughput"] = 5000.0
                d["step_time"] = 0.25
        if s % 100 == 0:
            d["eval_loss" if s < MOVE or not move_all else "val_loss"] = level + 0.1
        out.append(d)
    out.append({"event": "run_end", "step": N, "time": 1.7e9 + N + 1})
    return out


def _write(tmp_path: Path, lines: list[dict]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def _batches(lines: list[dict], chunk: int) -> list:
    data = [json.dumps(x).encode() + b"\n" for x in lines]
    parser = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    return [parser.parse(b"".join(data[lo:lo + chunk]), lo + 1)
            for lo in range(0, len(data), chunk)]


# --------------------------------------------------------------------------- the moves
@pytest.mark.parametrize("chunk", [1, 7, 5000])
def test_role_moves_are_found_at_the_record_the_new_name_first_appears(chunk: int) -> None:
    got = role_moves(_batches(_lines(), chunk), RoleTable())
    assert got == (
        RoleMove("loss", "train_loss", "loss", MOVE),
        RoleMove("lr", "learning_rate", "lr", MOVE),
        RoleMove("throughput", "samples_per_second", "throughput", MOVE),
        RoleMove("step_time", "iter_time", "step_time", MOVE),
        RoleMove("val_loss", "eval_loss", "val_loss", 1100),
    )


def test_names_first_seen_at_one_record_are_no_move() -> None:
    lines = [{"step": s, "train_loss": 1.0, "loss": 2.0} for s in range(1, 50)]
    assert role_moves(_batches(lines, 10), RoleTable()) == ()


def test_a_role_moving_twice_gives_two_moves() -> None:
    lines = [{"step": s, "total_loss": 1.0, **({"train_loss": 2.0} if s >= 20 else {}),
              **({"loss": 3.0} if s >= 40 else {})} for s in range(1, 60)]
    assert role_moves(_batches(lines, 9), RoleTable()) == (
        RoleMove("loss", "total_loss", "train_loss", 20),
        RoleMove("loss", "train_loss", "loss", 40))


def test_a_name_ranked_lower_that_comes_later_is_no_move() -> None:
    lines = [{"step": s, "loss": 1.0, **({"train_loss": 2.0} if s >= 20 else {})}
             for s in range(1, 40)]
    assert role_moves(_batches(lines, 1), RoleTable()) == ()


# --------------------------------------------------------------------------- the report
CFG = load_rules_config(None)


def test_the_report_says_the_loss_moved_and_keeps_the_final_series(tmp_path: Path) -> None:
    rep = build_report(load_run(_write(tmp_path, _lines())), CFG)
    assert rep.loss is not None and rep.loss.name == "loss"
    # the best and final are of ``loss`` alone (8x train_loss: never below 8 * 0.5)
    assert rep.loss.best > 4 and rep.loss.best_step >= MOVE and rep.loss.first > 8 * 1.0
    md = format_report_markdown(rep)
    assert ("| train loss series | moved from train_loss to loss at step 1,001: final, best and"
            " first are of loss alone (the series may differ in scale) |") in md
    assert "| val loss series | moved from eval_loss to val_loss at step 1,100:" in md
    assert "| learning rate series | moved from learning_rate to lr at step 1,001: the schedule" \
        in md
    assert "| throughput series | moved from samples_per_second to throughput at step 1,001:" in md
    assert "| step time series | moved from iter_time to step_time at step 1,001:" in md
    assert md.index("| train loss (loss) |") < md.index("| train loss series |")


def test_the_json_report_adds_the_moves_and_keeps_its_fields(tmp_path: Path) -> None:
    rep = build_report(load_run(_write(tmp_path, _lines())), CFG)
    doc = json.loads(format_report_json(rep))
    assert doc["role_moves"][0] == {"role": "loss", "from_series": "train_loss",
                                    "to_series": "loss", "step": MOVE}
    assert [m["role"] for m in doc["role_moves"]] == ["loss", "lr", "throughput", "step_time",
                                                 "val_loss"]
    # the existing fields say what they said before: the final series' figures
    assert doc["loss"]["name"] == "loss" and doc["val_loss"]["name"] == "val_loss"
    assert doc["throughput_unit"] == "/s (median of throughput)" and doc["throughput"] == 5000.0
    assert doc["lr"]["peak"] == pytest.approx(2e-3) and doc["step_time_s"] == 0.25


def test_a_run_without_a_move_reports_none(tmp_path: Path) -> None:
    lines = [{k: v for k, v in d.items() if k not in ("loss",)} for d in _lines(move_all=False)]
    rep = build_report(load_run(_write(tmp_path, lines)), CFG)
    assert rep.role_moves == ()
    assert json.loads(format_report_json(rep))["role_moves"] == []
    assert " series | moved from" not in format_report_markdown(rep)
