"""The spike detector (loss_spike, grad_explosion, step_time_outlier): the vectorised stream
against its point-by-point reference, and the three rules end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_rules_data import SHAPES, clean, idx, parse_all, to_jsonl

from trainwatch.rules import ConfigError, RuleEngine, load_rules_config
from trainwatch.rules.detectors.spike_detector import SpikeDetector

CFG = load_rules_config()


def _series(seed: int, n: int = 6000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 2 + 4 * np.exp(-np.arange(n) / 800) + 0.05 * rng.standard_t(3, n)
    x[:3] *= 20  # huge first values: the early maximum and warm-up
    spikes = rng.choice(np.arange(200, n), 25, replace=False)
    x[spikes] *= rng.uniform(1.3, 6.0, 25)
    x[40] *= 30  # during warm-up
    x[4000:4300] += 5.0  # a level shift longer than rebase_points
    return x


def _run(cfg, x: np.ndarray, *, vectorized: bool, chunks: list[int]):
    d = SpikeDetector(cfg, vectorized=vectorized)
    steps = np.arange(x.shape[0]) * 3
    events, flagged, i, k = [], [], 0, 0
    while i < x.shape[0]:
        n = chunks[k % len(chunks)]
        ev, fl = d.update(x[i:i + n], steps[i:i + n])
        events += [e._replace(index=e.index + i) for e in ev]
        flagged += (fl + i).tolist()
        i, k = i + n, k + 1
    return events, flagged


@pytest.mark.parametrize("rule", ["loss_spike", "grad_explosion", "step_time_outlier"])
@pytest.mark.parametrize("seed", [0, 1])
def test_vectorised_equals_reference(rule: str, seed: int) -> None:
    cfg = CFG.rules[rule]
    variants = [cfg, dataclasses.replace(cfg, refresh=7, window=50, min_points=20,
                                         tail_guard=0.0, min_ratio=1.0)]
    x = _series(seed)
    for c in variants:
        ref = _run(c, x, vectorized=False, chunks=[1])
        assert ref[0], "the data must contain alerts for the comparison to mean anything"
        for chunks in ([x.shape[0]], [1, 5, 300], [4097], [13]):
            assert _run(c, x, vectorized=True, chunks=chunks) == ref


def test_flagged_points_stay_out_of_the_baseline() -> None:
    x = np.full(2000, 2.0) + 0.01 * np.random.default_rng(3).standard_normal(2000)
    x[1000:1009] = 8.0  # a 9-point episode: escalates (persist 10 is not reached... 9 < 10)
    d = SpikeDetector(CFG.loss_spike)
    events, flagged = d.update(x, np.arange(2000))
    assert [(e.index, e.kind) for e in events] == [(1000, "start")]
    assert flagged.tolist() == list(range(1000, 1009))
    assert d.med == pytest.approx(2.0, abs=0.01)  # the spike never entered the median
    x[1500:1530] = 8.0  # a 30-point one escalates at its 10th point
    events, _ = SpikeDetector(CFG.loss_spike).update(x, np.arange(2000))
    assert [(e.index, e.kind) for e in events][-2:] == [(1500, "start"), (1509, "escalate")]


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
