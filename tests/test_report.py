"""``trainwatch report``: the series maths (LR schedule, tail trend, best values), the verdict and
its recommendations, the formatters, and whole reports of labelled synthetic runs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from trainwatch.commands.report import (
    Series,
    build_report,
    classify_lr,
    collect_series,
    format_report_json,
    format_report_markdown,
    judge,
    moving_average,
    sparkline,
    summarize_metric,
    tail_trend,
)
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.load import load_run
from trainwatch.rules import load_rules_config
from trainwatch.rules.engine.alert import Alert, Cause

# bench/ is not a package of the project: make the repository root importable
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.synthetic import clean_run, fault_run

STEPS = np.arange(1, 2001, dtype=np.int64)


def _cosine(n: int, warm: int, floor: float = 0.0) -> np.ndarray:
    s = np.arange(1, n + 1, dtype=np.float64)
    frac = np.clip((s - warm) / (n - warm), 0, 1)
    return np.where(s <= warm, s / warm, floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * frac)))


@pytest.mark.parametrize(
    ("lr", "kind"),
    [
        (np.full(2000, 3e-4), "constant"),
        (np.minimum(1.0, STEPS / 100) * 3e-4, "warmup + constant"),
        (3e-4 * _cosine(2000, 100), "warmup + cosine decay"),
        (3e-4 * _cosine(2000, 100, 0.1), "warmup + cosine decay"),
        (1e-3 * np.where(STEPS < 1000, 1, np.where(STEPS < 1500, 0.1, 0.01)), "step decay"),
        (1e-3 * (1 - (STEPS - 1) / 2000), "linear decay"),
        (1e-3 * np.where(STEPS <= 60, STEPS / 60, 1 - (STEPS - 60) / 1940), "warmup + linear decay"),
        (1e-3 * (0.55 + 0.45 * np.cos(2 * np.pi * STEPS / 500)), "cyclic"),
        (1e-3 * 0.999 ** STEPS, "decay"),
    ],
)
def test_classify_lr_names_the_schedule(lr: np.ndarray, kind: str) -> None:
    sched = classify_lr(STEPS, lr)
    assert sched is not None
    assert sched.kind == kind
    assert sched.peak == pytest.approx(lr.max())
    assert sched.start == lr[0] and sched.final == lr[-1]


def test_classify_lr_reports_warmup_length_and_peak_step() -> None:
    lr = 3e-4 * _cosine(2000, 100)
    sched = classify_lr(STEPS, lr)
    assert sched is not None
    assert sched.peak_step == 100 and sched.warmup_steps == 100
    assert classify_lr(STEPS[:0], lr[:0]) is None


def test_tail_trend_sees_improvement_and_ignores_noise() -> None:
    rng = np.random.default_rng(0)
    falling = 3.0 * np.exp(-STEPS / 1500) * (1 + 0.05 * rng.standard_normal(2000)) + 1.0
    tr = tail_trend(STEPS, falling)
    assert tr is not None
    expect = (1 + 3 * math.exp(-1950 / 1500)) / (1 + 3 * math.exp(-1650 / 1500)) - 1
    assert tr.change == pytest.approx(expect, abs=0.02) and tr.change < -0.05
    assert tr.significant and tr.improving and tr.steps == 399
    flat = 2.0 * (1 + 0.05 * rng.standard_normal(2000))
    tr = tail_trend(STEPS, flat)
    assert tr is not None and not tr.significant and not tr.improving
    assert abs(tr.change) < 0.02
    assert tail_trend(STEPS[:50], flat[:50]) is None


def test_moving_average_matches_a_direct_computation() -> None:
    v = np.random.default_rng(1).standard_normal(100)
    got = moving_average(v, 7)
    want = [v[max(0, i - 6):i + 1].mean() for i in range(100)]
    np.testing.assert_allclose(got, want)


def test_summarize_metric_smooths_train_loss_and_keeps_raw_evaluations() -> None:
    v = np.concatenate([np.linspace(5, 1, 1000), [np.nan], np.full(999, 1.0)])
    v[500] = 0.01  # one lucky batch is not the best loss
    m = summarize_metric("loss", Series(STEPS, v, STEPS * 1.0))
    assert m.window == 50 and m.nonfinite == 1 and m.first == 5
    assert m.best == pytest.approx(1.0) and m.final == pytest.approx(1.0)
    e = summarize_metric("val_loss", Series(STEPS[:5], np.array([3, 2, 1.5, 1.7, 1.9]),
                                            STEPS[:5] * 1.0), smooth=False)
    assert (e.best, e.best_step, e.final, e.window) == (1.5, 3, 1.9, 1)


def test_collect_series_lets_a_resumed_segment_replace_what_it_rewrites() -> None:
    p = JsonlParser("m.jsonl")
    lines = [{"step": s, "loss": float(s)} for s in range(1, 11)]
    lines += [{"step": s, "loss": 100.0 + s} for s in range(6, 13)]  # resumed from step 6
    b = p.parse(("\n".join(json.dumps(x) for x in lines) + "\n").encode())
    s = collect_series([b])["loss"]
    assert s.steps.tolist() == list(range(1, 13))
    assert s.values.tolist() == [1, 2, 3, 4, 5] + [100.0 + i for i in range(6, 13)]


def test_sparkline_shape_and_nonfinite_marker() -> None:
    assert sparkline(np.arange(8.0), 8) == "▁▂▃▄▅▆▇█"
    assert len(sparkline(np.arange(1000.0), 40)) == 40
    line = sparkline(np.array([1.0, 2.0, np.nan, 4.0]), 4)
    assert line[2] == "×" and line[3] == "█"
    assert sparkline(np.array([]), 10) == ""


def _a(rule: str, severity: str = "warning", step: int = 500, fixes: tuple[str, ...] = ()) -> Alert:
    return Alert(rule, severity, step, 0.0, "loss", f"{rule} fired", {}, (Cause("x", 0.5),),  # type: ignore[arg-type]
                 fixes)


def _loss(kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    noise = 1 + 0.03 * rng.standard_normal(2000)
    if kind == "falling":
        return STEPS, (1 + 4 * np.exp(-STEPS / 1000)) * noise
    return STEPS, (1 + 4 * np.exp(-STEPS / 150)) * noise  # flat for the last 80 %


def _val(rise: bool) -> tuple[np.ndarray, np.ndarray]:
    s = np.arange(100, 2001, 100)
    v = 1.2 + 4 * np.exp(-s / 150)
    if rise:
        v = np.where(s > 1000, v[9] * (1 + 0.03 * (s - 1000) / 100), v)
    return s, v


def _judge(**kw):  # type: ignore[no-untyped-def]
    args = {"loss": _loss("flat"), "val": _val(False), "alerts": (), "lr_peak": 3e-4, "lr_final": 3e-5,
                "warmup_steps": 100, "last_step": 2000}
    args.update(kw)
    return judge(**args)  # type: ignore[arg-type]


def test_verdict_converged_recommends_the_held_out_test() -> None:
    v = _judge()
    assert v.verdict == "converged"
    assert "within its noise" in v.reason
    assert "held-out test set" in v.recommendations[0]


def test_verdict_unstable_recommends_clipping_lower_lr_and_warmup() -> None:
    v = _judge(alerts=(_a("loss_spike", step=700), _a("grad_explosion", step=690)))
    assert v.verdict == "unstable"
    assert "grad_explosion at step 690" in v.reason
    text = " ".join(v.recommendations)
    assert "clip_grad_norm_" in text
    assert "it was 3e-4; try 1e-4 to 1.5e-4" in text  # two significant digits
    assert "was 100 steps; try 200" in text
    assert "checkpoint before" not in text  # the run recovered: no restart needed


def test_verdict_diverged_on_a_nan_error_points_at_its_step() -> None:
    v = _judge(alerts=(_a("nan_inf", "error", step=1234),))
    assert v.verdict == "diverged"
    assert "step 1,234" in v.recommendations[0]
    assert "Restart from the last checkpoint before step 1,234" in v.recommendations[-1]


def test_info_alerts_do_not_change_the_verdict() -> None:
    assert _judge(alerts=(_a("loss_spike", "info"),)).verdict == "converged"


def test_verdict_overfitting_from_the_validation_curve_gives_the_early_stop_step() -> None:
    v = _judge(val=_val(True))
    assert v.verdict == "overfitting"
    assert "best at step 1,000" in v.reason
    assert "checkpoint from step 1,000" in v.recommendations[0]


def test_verdict_underfitting_when_the_loss_is_still_falling() -> None:
    v = _judge(loss=_loss("falling"))
    assert v.verdict == "underfitting"
    assert "still falling" in v.reason
    assert v.recommendations[0].startswith("Train longer")


def test_verdict_stalled_names_the_lr_fixes() -> None:
    v = _judge(alerts=(_a("lr_exhausted", step=900), _a("plateau", step=950)))
    assert v.verdict == "stalled"
    text = " ".join(v.recommendations)
    assert "ran out at step 900" in text and "peak was 3e-4; try 9e-4" in text


def test_system_alerts_add_their_own_fix() -> None:
    v = _judge(alerts=(_a("memory_growth", step=300, fixes=("free the tensors you keep",)),))
    assert v.verdict == "converged"
    assert "memory_growth at step 300: free the tensors you keep" in v.recommendations


def test_a_bug_error_is_the_verdict_with_its_fixes_first() -> None:
    # a recurrent state never detached (the demo): its curves read "underfitting", which is not
    # what to act on first
    detach = _a("state_detach", "error", step=15_001, fixes=("h = h.detach() between chunks",))
    again = _a("state_detach", "warning", step=15_030, fixes=("h = h.detach() between chunks",))
    v = _judge(loss=_loss("falling"), alerts=(detach, again))
    assert v.verdict == "broken" and v.reason.startswith("state_detach at step 15,001")
    assert v.recommendations[0] == "h = h.detach() between chunks"
    assert sum("h = h.detach()" in r for r in v.recommendations) == 1
    assert any("still falling" in r for r in v.recommendations)
    # a warning from the stream alone does not decide it, and instability still comes first
    assert _judge(alerts=(_a("state_detach", "warning"),)).verdict == "converged"
    both = (_a("nan_inf", "error", step=100), detach)
    assert _judge(alerts=both).verdict == "diverged"


def test_too_short_to_tell() -> None:
    assert _judge(loss=(STEPS[:30], np.ones(30)), val=None).verdict == "too short to tell"


def test_classify_lr_notes_a_schedule_that_ran_out() -> None:
    lr = 1e-3 * np.clip(1 - (STEPS - 1) / 1000, 0, 1)  # sized for 1,000 of 2,000 steps
    sched = classify_lr(STEPS, lr)
    assert sched is not None
    assert sched.kind == "linear decay, then ~0 from step 1,001"
    assert classify_lr(STEPS, 1e-3 * (1 - (STEPS - 1) / 1999)).kind == "linear decay"  # type: ignore[union-attr]


# ------------------------------------------------------------------- whole path, real engine


CFG = load_rules_config(None)


def _report(tmp_path: Path, syn):  # type: ignore[no-untyped-def]
    return build_report(load_run(syn.write(tmp_path / syn.name)), CFG)


def _strict(text: str) -> dict:
    def bad(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=bad)


def test_report_of_a_clean_run(tmp_path: Path) -> None:
    syn = clean_run(1, 3000)  # warmup + cosine
    rep = _report(tmp_path, syn)
    assert rep.steps == 3000 and rep.last_step == 3000 and rep.ended
    assert rep.duration_s == pytest.approx(float(syn.train["time"][-1] - syn.train["time"][0]) + 1.0
                                           + float(syn.train["step_time"][0]), rel=1e-3)
    assert rep.lr is not None and rep.lr.kind == "warmup + cosine decay"
    assert rep.val_loss is not None and rep.val_loss.points == len(syn.val["step"])
    assert rep.verdict.verdict in ("converged", "underfitting")
    md = format_report_markdown(rep)
    for part in ("# Training report", "**Verdict:", "## Summary", "| learning rate | warmup + cosine",
                 "## Curves", "## Alerts", "## Recommendations"):
        assert part in md
    doc = _strict(format_report_json(rep))
    assert doc["verdict"]["verdict"] == rep.verdict.verdict
    assert doc["loss"]["best_step"] == rep.loss.best_step  # type: ignore[union-attr]


def test_report_of_an_overfit_run_names_the_early_stop_step(tmp_path: Path) -> None:
    syn = fault_run("overfit", 4, n_before=600)
    rep = _report(tmp_path, syn)
    assert rep.verdict.verdict == "overfitting"
    every = int(syn.label.params["eval_every"])
    assert rep.val_loss is not None
    assert abs(rep.val_loss.best_step - syn.label.step) <= every
    assert f"checkpoint from step {rep.val_loss.best_step:,}" in rep.verdict.recommendations[0]


def test_report_of_a_nan_run_is_diverged_and_shows_it(tmp_path: Path) -> None:
    syn = fault_run("nan", 0, n_before=600)
    rep = _report(tmp_path, syn)
    assert rep.verdict.verdict == "diverged"
    assert rep.loss is not None and rep.loss.nonfinite > 0
    md = format_report_markdown(rep)
    assert "ended nan (last finite:" in md
    assert rep.sparklines["loss"].endswith("×")
    assert any(a.rule == "nan_inf" for a in rep.alerts)
    _strict(format_report_json(rep))


def test_report_of_a_run_whose_lr_ran_out(tmp_path: Path) -> None:
    syn = fault_run("lr_exhausted", 0, n_before=600)
    rep = _report(tmp_path, syn)
    assert rep.lr is not None and "then ~0 from step" in rep.lr.kind
    assert rep.verdict.verdict == "stalled"
    assert any("ran out" in r for r in rep.verdict.recommendations)
