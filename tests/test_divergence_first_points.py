"""``divergence`` on a loss's first points, before its blocks can judge: a blow-up from the first
updates is an error on as few as 3 points (its evidence says how many, its confidence is lower);
the first steps' wobble, a noisy start and a loss that hovers after a fast fall are not; the
detector's maths on plain lists."""

from __future__ import annotations

import numpy as np
import pytest
from loss_records import CORPUS, check_file, check_jsonl, jsonl

from trainwatch.rules.detectors.first_points import FirstPoints, log_spread
from trainwatch.rules.detectors.lr_range import lr_outside, optimizer_of


def _divergence(alerts):
    return [a for a in alerts if a.rule == "divergence"]


def test_an_lr_of_5_blows_the_loss_up_at_its_second_step_an_error_on_3_points() -> None:
    # an HF run at learning_rate 5: 1.64 -> 11.8, then the loss of a uniform guess, 6 times
    loss = [1.64, 11.8] + [10.3735] * 6
    got = _divergence(check_jsonl(jsonl(range(1, 9), {"loss": loss, "learning_rate": [5.0] * 8})))
    assert len(got) == 1
    a = got[0]
    assert (a.severity, a.step) == ("error", 3)
    assert a.evidence["points"] == 3 and a.evidence["points_up"] == 2
    assert a.evidence["best"] == 1.64 and a.evidence["best_step"] == 1
    assert 0.5 <= a.evidence["confidence"] < 0.6  # few points: lower confidence
    assert "judged on 3 points" in a.message
    assert any("learning rate 5 is far above" in c.cause for c in a.causes)


def test_one_alert_for_a_blow_up_that_goes_on_past_the_blocks_warm_up() -> None:
    # the blocks re-arm only once the loss is back below where it blew up from
    n = 600
    loss = np.concatenate(([3.0, 3.0], 12.0 * (1 + 0.001 * np.arange(n - 2))))
    got = _divergence(check_jsonl(jsonl(range(n), {"loss": loss})))
    assert [(a.severity, a.step) for a in got] == [("error", 4)]


def test_the_first_steps_wobble_then_a_fall_is_no_divergence() -> None:
    loss = [8.31, 8.99, 8.88, 8.45, 8.23, 8.04, 7.78, 7.69, 7.4, 7.1, 6.8, 6.5]
    assert _divergence(check_jsonl(jsonl(range(1, 13), {"loss": loss}))) == []


@pytest.mark.parametrize("seed", range(5))
def test_a_clean_start_at_20_percent_noise_is_no_divergence(seed: int) -> None:
    rng = np.random.default_rng(seed)
    loss = 5.0 * np.exp(-np.arange(300) / 100) + 1.0
    loss *= 1 + 0.2 * rng.standard_normal(300)
    assert _divergence(check_jsonl(jsonl(range(300), {"loss": np.maximum(loss, 0.05)}))) == []


def test_first_points_reference_is_the_first_value_then_a_rolling_median() -> None:
    fp = FirstPoints(limit=200, ratio=3.0, noise_factor=5.0)
    # a per-epoch loss that falls, then climbs back 3x and stays: the lowest median of 7 before
    xs = [2.0, 1.6, 1.3, 1.0, 0.8, 0.6, 0.5, 0.45, 0.42, 0.4, 0.41, 0.4, 0.9, 1.3, 1.5, 1.6]
    got = fp.push(xs)
    assert len(got) == 1
    i, f = got[0]
    assert i == 15 and f.up == 3 and f.points == 16
    assert f.reference == pytest.approx(0.42) and f.reference_index > 0
    assert f.ratio == pytest.approx(1.3 / 0.42)
    assert fp.done and fp.push([9.0, 9.0, 9.0]) == []


def test_first_points_bar_rises_with_the_noise_of_the_points() -> None:
    # two points up that scatter as much as noise draws do not make a blow-up at x3
    fp = FirstPoints(limit=200, ratio=3.0, noise_factor=5.0)
    assert fp.push([1.0, 3.2, 9.0]) == []
    # nor do points up from a series whose own steps scatter by 50 %
    rng = np.random.default_rng(0)
    noisy = list(np.exp(0.5 * rng.standard_normal(12)))
    assert log_spread(noisy) > 0.3
    fp = FirstPoints(limit=200, ratio=3.0, noise_factor=5.0)
    assert fp.push(noisy + [3.5 * min(noisy)] * 3) == []


def test_first_points_stop_at_a_value_at_or_below_zero() -> None:
    fp = FirstPoints(limit=200, ratio=3.0, noise_factor=5.0)
    assert fp.push([1.0, -0.5, 9.0, 9.0, 9.0]) == [] and fp.done


def test_lr_outside_names_the_optimizer_of_the_lr_series() -> None:
    assert optimizer_of("lr-AdamW/pg1")[0] == "AdamW"
    assert optimizer_of("lr-SGD")[1][1] == 2.0
    assert optimizer_of("learning_rate") is None
    cause, conf = lr_outside(5.0, "lr-AdamW")
    assert "far above the usual range for AdamW" in cause and conf == 0.8
    assert lr_outside(5.0, "lr-SGD") is None  # large-batch SGD goes there
    assert lr_outside(3e-4, None) is None
    assert "Adam-type" in lr_outside(5.0, None)[0]
    assert "far below" in lr_outside(1e-9, "lr-Adam")[0]


corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"real-file corpus not found at {CORPUS}")


@corpus
def test_corpus_mup_width_blow_up_is_an_error_on_its_first_points() -> None:
    got = _divergence(check_file(CORPUS / "csv_log__KyroChi_nanoGPT-mup_width4096.csv"))
    assert len(got) == 1 and got[0].severity == "error" and got[0].metric == "train/loss"
    assert got[0].step <= 3 and got[0].evidence["points"] <= 4


@corpus
def test_corpus_parameter_golf_first_steps_wobble_is_quiet() -> None:
    alerts = check_file(CORPUS / "modded_nanogpt__lolrazh_parameter-golf.log")
    assert [a for a in alerts if a.severity != "info"] == []


@corpus
def test_corpus_a_loss_that_hovers_after_a_fast_fall_has_spikes_but_no_divergence() -> None:
    alerts = check_file(CORPUS / "modded_nanogpt__AkramjitS_gpt-lab-diffusion.log")
    assert _divergence(alerts) == []
    assert len([a for a in alerts if a.rule == "loss_spike"]) >= 5
