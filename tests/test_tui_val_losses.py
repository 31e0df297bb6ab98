"""The loss chart draws every val/eval loss series (found by family, not only the ``val_loss``
role): HF's six ``eval_g{i}_loss`` sets, at most five of them, the worst by their last value to
their best. Driven by Pilot through the CLI's factory, on a real file appended while it runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

from test_tui_app import app_for, chart_for, drawn, loaded

from trainwatch.formats.read import read_file
from trainwatch.tui.chart_data import (
    MAX_VAL_LINES,
    ROLE_COLORS,
    VAL_COLORS,
    distinct_labels,
    loss_lines,
)
from trainwatch.tui.run_model import RunModel
from trainwatch.tui.target import RunSpec
from trainwatch.tui.testing import append, wait_for

SIZE = (160, 44)
SETS = 6


def eval_losses(step: int, rising: int | None = None) -> dict[str, float]:
    """Six sets' losses: set i bottoms out later the higher i is (as in the HF corpus file);
    ``rising`` blows up one set."""
    out = {}
    for i in range(SETS):
        x = step / 100
        v = 2.0 + 0.05 * i + 0.3 * (x - (2 + i)) ** 2 / (2 + i)
        out[f"eval_g{i}_loss"] = v * (5.0 if i == rising else 1.0)
    return out


def records(steps: range, *, rising: int | None = None, val: bool = True) -> str:
    lines = []
    for s in steps:
        rec: dict[str, float] = {"step": s, "time": 1.7e9 + s, "loss": 3.0 * math.exp(-s / 200)}
        if val and s % 25 == 0:
            rec.update(eval_losses(s, rising))
        lines.append(json.dumps(rec) + "\n")
    return "".join(lines)


def shown(app) -> list[str]:
    return [line.name for chart, panel in app.screen._panels
            if panel is not None and panel.key == "loss" for line in panel.lines]


async def test_every_eval_set_is_drawn_on_the_loss_chart(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(records(range(1, 801)))
    app, _ = app_for(path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        spec = await drawn(pilot, app, "loss", lambda s: len(s.traces) == 1 + MAX_VAL_LINES,
                           "the train loss and five eval losses")
        names = shown(app)
        assert names[0] == "loss" and len(names) == 1 + MAX_VAL_LINES
        # at step 800 the early-bottoming sets have risen most from their best: g5 is left out
        assert names[1:] == [f"eval_g{i}_loss" for i in range(5)]
        styles = [t.style for t in spec.traces]
        assert styles[0] == ROLE_COLORS["loss"] and styles[1:] == list(VAL_COLORS[:5])
        # the legend (the chart's title) names each set by what tells it apart
        title = str(chart_for(app, "loss").border_title)
        assert "━ loss" in title and "━ g0" in title and "━ g1" in title
        # g5 blows up: it is now among the worst five, and keeps its own colour
        append(path, records(range(801, 826), rising=5))
        await wait_for(pilot, lambda: "eval_g5_loss" in shown(app), what="g5 drawn once it rises")
        spec = await drawn(pilot, app, "loss", lambda s: any(t.style == VAL_COLORS[5]
                                                             for t in s.traces),
                           "g5's line in its colour")
        assert len(spec.traces) == 1 + MAX_VAL_LINES and "eval_g5_loss" in shown(app)


async def test_one_val_series_keeps_the_old_look(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(
        json.dumps({"step": s, "time": 1.7e9 + s, "loss": 3.0 / s,
                    **({"val_loss": 3.5 / s} if s % 10 == 0 else {})}) + "\n"
        for s in range(1, 101)))
    app, _ = app_for(path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        spec = await drawn(pilot, app, "loss", lambda s: len(s.traces) == 2, "loss and val_loss")
        assert [t.style for t in spec.traces] == [ROLE_COLORS["loss"], ROLE_COLORS["val_loss"]]
        assert shown(app) == ["loss", "val_loss"]


def model_of(path: Path, text: str) -> RunModel:
    """A run model fed through the same reader as the app (no app running)."""
    path.write_text(text)
    m = RunModel(RunSpec(path.name, path.parent, (path,), None))
    for b in read_file(path):
        m.apply_batch(b, main=True)
    return m


def test_labels_of_several_val_losses():
    assert distinct_labels([f"eval_g{i}_loss" for i in range(3)]) == {
        "eval_g0_loss": "g0", "eval_g1_loss": "g1", "eval_g2_loss": "g2"}
    assert distinct_labels(["val/box_loss", "val/cls_loss"]) == {"val/box_loss": "box",
                                                                 "val/cls_loss": "cls"}
    assert distinct_labels(["val_loss", "test_loss"]) == {"val_loss": "val", "test_loss": "test"}
    # nothing of its own left: the whole name
    assert distinct_labels(["eval_loss", "eval_a_loss"]) == {"eval_loss": "eval_loss",
                                                             "eval_a_loss": "a"}
    assert distinct_labels(["val_loss"]) == {"val_loss": "val_loss"}


def test_loss_lines_without_a_loss_role(tmp_path):
    text = "".join(json.dumps({"step": s, "Loss/train": 1.0 / s,
                               **({"Loss/validation": 1.2 / s} if s % 5 == 0 else {})}) + "\n"
                   for s in range(1, 51))
    m = model_of(tmp_path / "metrics.jsonl", text)
    names = m.view.names()
    lines = loss_lines(m, names, {})
    assert [ln.name for ln in lines] == ["Loss/train", "Loss/validation"]
