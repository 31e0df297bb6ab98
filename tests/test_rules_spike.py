"""The spike rules (loss_spike, grad_explosion, step_time_outlier) end to end: what fires, with
which evidence and text (the detector itself: test_rules_spike_detector.py)."""

from __future__ import annotations

import pytest
from test_rules_data import SHAPES, clean, idx, parse_all, to_jsonl

from trainwatch.rules import ConfigError, RuleEngine, load_rules_config

CFG = load_rules_config()


def _alerts(data: bytes, cfg=CFG):
    e = RuleEngine(cfg, live=False)
    for b in parse_all(data):
        e.feed(b)
    return e.alerts


def test_loss_spike_fires_once_with_grad_evidence() -> None:
    run = clean(3000, "exp", noise=0.03, seed=5)
    i = idx(run, 1500)
    run["loss"][i] *= 3.0
    run["grad_norm"][i - 2] *= 8.0  # the gradient spiked first
    alerts = _alerts(to_jsonl(run))
    spikes = [a for a in alerts if a.rule == "loss_spike"]
    assert [(a.step, a.severity) for a in spikes] == [(1500, "warning")]
    a = spikes[0]
    assert a.evidence["grad_spiked_first"] is True and a.evidence["grad_spike_step"] == 1498
    assert a.evidence["robust_z"] > 6 and a.evidence["ratio_to_median"] > 2.5
    assert "gradient norm spiked first" in a.causes[0].cause
    assert a.message.startswith("The loss spiked to ")
    # the 8x grad spike is an explosion by robust z, but not an error (not 10x the early max)
    assert [(x.step, x.severity) for x in alerts if x.rule == "grad_explosion"] == [
        (1498, "warning")]


def test_loss_spike_escalates_when_huge_or_persistent() -> None:
    run = clean(3000, "cosine", noise=0.01, seed=6)
    run["loss"][idx(run, 1000)] = 1e4  # far above 10x the early maximum
    run["loss"][idx(run, 2000):idx(run, 2030)] *= 4.0
    spikes = [(a.step, a.severity) for a in _alerts(to_jsonl(run)) if a.rule == "loss_spike"]
    assert spikes == [(1000, "error"), (2000, "warning"), (2009, "error")]


def test_grad_explosion() -> None:
    run = clean(3000, "exp", noise=0.03, seed=7)
    i = idx(run, 1200)
    run["grad_norm"][i:i + 5] *= 200.0
    alerts = [a for a in _alerts(to_jsonl(run)) if a.rule == "grad_explosion"]
    assert [(a.step, a.severity) for a in alerts] == [(1200, "error")]  # >= 10x early max
    assert "learning rate" in alerts[0].causes[0].cause
    assert alerts[0].evidence["lr"] == pytest.approx(3e-4)


def test_step_time_outlier_is_a_note() -> None:
    run = clean(3000, "exp", noise=0.03, seed=8)
    run["step_time"][idx(run, 2000)] *= 10
    alerts = [a for a in _alerts(to_jsonl(run)) if a.rule == "step_time_outlier"]
    assert (2000, "info") in [(a.step, a.severity) for a in alerts]
    assert all(a.severity == "info" for a in alerts)


def test_step_time_jitter_of_a_fast_loop_is_not_an_outlier() -> None:
    # a 1 ms step that takes 5 ms on a shared CPU is jitter; one that stalls for 0.5 s is not
    run = clean(3000, "exp", noise=0.03, seed=8)
    run["step_time"][:] = run["step_time"] / run["step_time"].mean() * 1e-3
    run["step_time"][idx(run, 1500)] = 5e-3
    run["step_time"][idx(run, 2410):idx(run, 2500):7] = 8e-3  # a loaded CPU, just before it
    run["step_time"][idx(run, 2500)] = 0.5
    alerts = [a for a in _alerts(to_jsonl(run)) if a.rule == "step_time_outlier"]
    assert [a.step for a in alerts] == [2500]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("noise", [0.01, 0.06])
def test_no_spike_alerts_on_clean_runs(shape: str, noise: float) -> None:
    for seed in range(2):
        run = clean(4000, shape, noise=noise, seed=seed)
        bad = [a for a in _alerts(to_jsonl(run))
               if a.rule in ("loss_spike", "grad_explosion") or
               (a.rule == "step_time_outlier" and a.severity != "info")]
        assert bad == [], (shape, noise, seed, [(a.rule, a.step, a.message) for a in bad])


def test_spike_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"loss_spike\.min_ratio: expected a number >= 1"):
        load_rules_config(overrides={"loss_spike": {"min_ratio": 0.5}})
    with pytest.raises(ConfigError, match=r"grad_explosion\.early_max_fires: expected true or"):
        load_rules_config(overrides={"grad_explosion": {"early_max_fires": "yes"}})
    with pytest.raises(ConfigError, match=r"step_time_outlier\.refresh: expected an integer >= 1"):
        load_rules_config(overrides={"step_time_outlier": {"refresh": 0}})


@pytest.mark.parametrize("rule", ["loss_spike", "grad_explosion"])
def test_the_rule_judges_the_finite_non_zero_points_as_the_reference(rule: str) -> None:
    """NaN, infinities and exact zeros in the series are no spike and no part of the baseline:
    the rule's alerts, fed frames of 1 to 300 records, are the reference's on the other
    points."""
    import numpy as np
    from rule_frames import frames_of
    from spike_reference import reference_run, spikes

    from trainwatch.rules.builtin.grad_explosion import GradExplosionRule
    from trainwatch.rules.builtin.loss_spike import LossSpikeRule
    from trainwatch.rules.engine.base import Context

    cfg = CFG.rules[rule]
    rng = np.random.default_rng(9)
    x = spikes(0)
    x[rng.random(x.shape[0]) < 0.05] = np.nan
    x[rng.random(x.shape[0]) < 0.02] = np.inf
    x[rng.random(x.shape[0]) < 0.1] = 0.0
    kept = np.flatnonzero(np.isfinite(x) & (x != 0))
    want = [int(kept[e[0]]) for e in reference_run(cfg, x[kept], kept + 1)[0]]
    assert want
    role = "loss" if rule == "loss_spike" else "grad_norm"
    cuts = np.cumsum(np.resize([1, 17, 300, 5, 64], x.shape[0]))
    cuts = [0, *cuts[cuts < x.shape[0]].tolist(), x.shape[0]]
    r = (LossSpikeRule if rule == "loss_spike" else GradExplosionRule)(cfg, Context())
    got = []
    for frame in frames_of({role: x}, cuts):
        r.ctx.frame = frame
        got += [h.pos for h in r.update(frame)]
        r.ctx.end_frame(frame)
    assert got == want


@pytest.mark.parametrize("lines_per_read", [1, 7, 64])
def test_a_zero_early_maximum_reads_the_same_live_and_whole(lines_per_read: int) -> None:
    """An early maximum of zero is -0.0 or 0.0 as the points came: the alert's evidence says 0.0
    either way. (The rules keep exact zeros out of the detector, so a loss of zeros makes no
    alert: the detector fed directly does.)"""
    import json

    import numpy as np

    from trainwatch.formats.jsonl import JsonlParser
    from trainwatch.rules.builtin.loss_spike import LossSpikeRule
    from trainwatch.rules.engine.base import Context

    vals = ["-0.0"] + ["0.0"] * 299 + ["50.0"] + ["0.0"] * 20
    lines = [f'{{"step":{i},"time":{i}.0,"loss":{v}}}\n'.encode() for i, v in enumerate(vals)]

    def evidence(k: int, live: bool) -> list[str]:
        p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
        e = RuleEngine(CFG, live=live)
        for i in range(0, len(lines), k):
            e.feed(p.parse(b"".join(lines[i:i + k]), i + 1))
        e.finish(now=0.0)
        return [json.dumps(a.to_dict()["evidence"]) for a in e.alerts if a.rule == "loss_spike"]

    assert evidence(len(lines), live=False) == evidence(lines_per_read, live=True) == []
    x = np.array([float(v) for v in vals])
    got = []
    for k in (len(vals), lines_per_read):
        rule = LossSpikeRule(CFG.loss_spike, Context())
        evs = []
        for i in range(0, len(vals), k):
            evs += rule.det.update(x[i:i + k], np.arange(i, min(i + k, len(vals))))[0]
        got.append([rule.evidence(ev)["early_max"] for ev in evs])
    assert got[0] and len(got[0]) == len(got[1])
    assert {str(v) for g in got for v in g} == {"0.0"}
