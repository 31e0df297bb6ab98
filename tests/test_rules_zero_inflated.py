"""A zero-inflated loss: exactly 0 on a large share of steps, positive otherwise (hinge, margin and
triplet losses on easy batches, detection losses on batches with no positives). Its zeros are no
spike and no baseline (loss_spike, grad_explosion) and no part of the smoothed level whose rise
is a divergence, a smoothed 0 is no "not improved by 1 % of 0" (plateau), and its runs of zeros
are no bug (learning_stalled, with ``mixed_points`` set for such a loss; by default its first
run of zeros is told once, naming that case) unless the loss held none just before. Each rule
still fires on what it is for, and the engine says the same whole and fed in pieces.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_stalled_runs import check_against_reference

from bench.synthetic import SyntheticRun, clean_run, zero_clean_run
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import ConfigError, RuleEngine, load_rules_config
from trainwatch.rules.builtin.spike_rule import times_median


def _records(loss: np.ndarray, grad: np.ndarray | None = None) -> list[dict]:
    out = []
    for i, x in enumerate(loss.tolist()):
        d: dict = {"step": i + 1, "time": 1.7e9 + i, "lr": 1e-3, "loss": x}
        if grad is not None:
            d["grad_norm"] = float(grad[i])
        out.append(d)
    return out


def _alerts(lines: list[dict], chunk: int | None = None, overrides: dict | None = None
            ) -> list[tuple]:
    """(rule, step, severity, message) of the engine fed ``chunk`` lines a batch (None: whole)."""
    data = [json.dumps(x).encode() + b"\n" for x in lines]
    chunk = chunk or len(data)
    parser = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    engine = RuleEngine(load_rules_config(None, overrides=overrides), live=chunk < len(data))
    for lo in range(0, len(data), chunk):
        engine.feed(parser.parse(b"".join(data[lo:lo + chunk]), lo + 1))
    engine.finish(now=1.7e9 + len(lines) + 2)
    return [(a.rule, a.step, a.severity, a.message) for a in engine.alerts]


MIXED = {"learning_stalled": {"mixed_points": 100}}
"""The setting for a loss that is 0 on easy batches (the default, 0, judges every run of zeros)."""


def _serious(alerts: list[tuple]) -> list[tuple]:
    return [a for a in alerts if a[2] != "info"]


def _zero_inflated(n: int, p: float, seed: int = 0, level: float = 0.3,
                   noise: float = 0.05) -> np.ndarray:
    """0 with probability ``p``, else ``level`` with a little Gaussian noise."""
    rng = np.random.default_rng(seed)
    zero = rng.random(n) < p
    return np.where(zero, 0.0, level * (1 + noise * rng.standard_normal(n)))


def _longest_zero_run(v: np.ndarray) -> int:
    best = run = 0
    for x in v.tolist():
        run = run + 1 if x == 0.0 else 0
        best = max(best, run)
    return best


# ------------------------------------------------------------------------------ loss_spike


def test_zeros_are_no_spike_and_no_baseline() -> None:
    loss = _zero_inflated(3000, 0.6, seed=1)
    grad = np.where(loss == 0.0, 0.0, 1.0 + 0.05 * np.random.default_rng(2).standard_normal(3000))
    # with the zeros in the window its median was 0 and every non-zero value "spiked"
    assert _serious(_alerts(_records(loss, grad), overrides=MIXED)) == []


def test_a_spike_in_a_zero_inflated_loss_fires_against_the_non_zero_values() -> None:
    loss = _zero_inflated(3000, 0.6, seed=1)
    at = int(np.flatnonzero(loss[1500:])[0]) + 1500
    loss[at] = 20 * 0.3
    spikes = [a for a in _alerts(_records(loss)) if a[0] == "loss_spike"]
    assert [a[1] for a in spikes] == [at + 1]
    assert "20x the median 0.3" in spikes[0][3]


def test_a_zero_window_median_is_said_without_infinity() -> None:
    assert times_median(2.0, 0.0, "0") == "the window median being 0"
    assert times_median(2.0, 0.5, "0.5") == "4x the median 0.5"


# ------------------------------------------------------------------------------ divergence


def _divergence(loss: np.ndarray, chunk: int | None = None, overrides: dict | None = None
                ) -> list[tuple]:
    return [a for a in _alerts(_records(loss), chunk, overrides) if a[0] == "divergence"]


def test_zeros_stay_out_of_the_smoothed_level() -> None:
    # near half zeros: with them in, the block medians flipped between 0 (or the lowest non-zero
    # values) and the non-zero level, a rise of hundreds of % from a near-0 best
    loss = _zero_inflated(4000, 0.5, seed=3)
    assert _divergence(loss) == []


def test_a_healthy_zero_inflated_run_does_not_diverge() -> None:
    # the bench's run that "diverged": 1.4 at step 225, 462 % above its best (0.25 at step 125)
    lines = _run_lines(zero_clean_run(0, n_steps=10000))
    assert [a for a in _alerts(lines) if a[0] == "divergence"] == []


@pytest.mark.parametrize("chunk", [None, 1, 7, 300])
def test_a_zero_inflated_loss_diverges_by_its_non_zero_level(chunk: int | None) -> None:
    # the zeros' share changes nothing: the non-zero values rise 30 % (a warning after 3
    # windows of 25 of them), then double (an error at once); the same fed in pieces
    loss = _zero_inflated(6000, 0.5, seed=10)
    loss[3000:4500] *= 1.3
    loss[4500:] *= 2.0
    div = _divergence(loss, chunk)
    assert [a[2] for a in div] == ["warning", "error"]
    assert 3000 < div[0][1] <= 3000 + 5 * 2 * 25 and 4500 < div[1][1] <= 4500 + 2 * 2 * 25
    best = float(re.search(r"above its best \(([0-9.]+) at step", div[0][3]).group(1))
    assert 0.25 < best < 0.3  # (the non-zero level's luckiest low, not a near-0 block)


def test_a_zero_inflated_loss_diverges_past_the_cap() -> None:
    # (with the zeros in the blocks, a best of 0 made the cap its only bar: now the rise is
    # also one by the relative bars; the cap, first, names it)
    loss = _zero_inflated(4000, 0.5, seed=3)
    loss[2500:] = 5.0 * (1 + 0.05 * np.random.default_rng(4).standard_normal(1500))
    div = _divergence(loss, overrides={"divergence": {"cap": 1.0}})
    assert div and div[0][2] == "error" and 2500 < div[0][1] <= 2600
    assert "above the cap 1" in div[0][3]


@pytest.mark.parametrize("chunk", [None, 1, 13])
def test_a_loss_that_turns_into_zeros_does_not_diverge(chunk: int | None) -> None:
    # zeros altogether make no block (learning_stalled tells them); a loss that comes back
    # goes on against its best before: at its level, nothing; at twice it, an error
    rng = np.random.default_rng(11)
    level = 0.3 * (1 + 0.05 * rng.standard_normal(4000))
    back = np.concatenate((level[:1500], np.zeros(1000), level[2500:]))
    assert _divergence(back, chunk) == []
    worse = back.copy()
    worse[2500:] *= 2.0
    div = _divergence(worse, chunk)
    assert [a[2] for a in div] == ["error"] and 2500 < div[0][1] <= 2500 + 2 * 25


def test_a_positive_best_keeps_its_relative_bars() -> None:
    rng = np.random.default_rng(5)
    loss = 1.0 * (1 + 0.02 * rng.standard_normal(4000))
    loss[2500:] *= 1.6
    div = [a for a in _alerts(_records(loss)) if a[0] == "divergence"]
    assert div and div[0][2] == "error" and 2500 < div[0][1] <= 2600


# ------------------------------------------------------------------------------ plateau


def test_a_smoothed_loss_at_zero_is_no_plateau() -> None:
    loss = _zero_inflated(4000, 0.7, seed=6)
    assert [a for a in _alerts(_records(loss)) if a[0] == "plateau"] == []


def test_a_flat_positive_loss_is_still_a_plateau() -> None:
    loss = 0.3 * (1 + 0.02 * np.random.default_rng(6).standard_normal(4000))
    assert [a[2] for a in _alerts(_records(loss)) if a[0] == "plateau"][:1] == ["warning"]


# ------------------------------------------------------------------------ grad_vanishing


def _vanishing(loss: np.ndarray, grad: np.ndarray) -> list[tuple]:
    return [a for a in _alerts(_records(loss, grad)) if a[0] == "grad_vanishing"]


def test_no_gradient_on_the_steps_a_zero_inflated_loss_is_zero_is_no_vanishing() -> None:
    # near half zeros: the loss's and the grad norm's window medians flip between 0 and their
    # non-zero levels, the noise bar of "improving" beyond reach
    for seed in range(6):
        loss = _zero_inflated(3000, 0.5, seed=seed, noise=0.5)
        grad = np.where(loss == 0.0, 0.0, 5.0)
        assert _vanishing(loss, grad) == [], seed


def test_a_gradient_gone_under_a_loss_stuck_above_zero_is_vanishing() -> None:
    rng = np.random.default_rng(10)
    loss = 0.5 * (1 + 0.02 * rng.standard_normal(3000))
    grad = np.where(np.arange(3000) < 1000, 5.0, 0.0)
    hits = _vanishing(loss, grad)
    assert hits and 1000 < hits[0][1] <= 1300 and "fallen to 0" in hits[0][3]


# ------------------------------------------------------------------------ learning_stalled


def test_runs_of_zeros_in_a_loss_that_mixes_them_in_are_no_bug_with_mixed_points() -> None:
    loss = _zero_inflated(3000, 0.75, seed=7)
    assert _longest_zero_run(loss) >= 10  # (the rule's bar: the test can fail)
    assert [a for a in _alerts(_records(loss), overrides=MIXED) if a[0] == "learning_stalled"] == []


def test_by_default_a_loss_that_mixes_zeros_in_is_told_once_naming_that_case() -> None:
    # the rule cannot tell a margin loss from a masking bug that zeroes most batches: one story
    loss = _zero_inflated(3000, 0.75, seed=7)
    engine = RuleEngine(load_rules_config(None), live=False)
    data = b"".join(json.dumps(x).encode() + b"\n" for x in _records(loss))
    engine.feed(JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1))
    hits = [a for a in engine.alerts if a.rule == "learning_stalled"]
    assert len(hits) == 1 and "exactly 0" in hits[0].message
    assert any("mixed_points: 100" in c.cause for c in hits[0].causes)


@pytest.mark.parametrize("chunk", [None, 1, 7, 64])
@pytest.mark.parametrize("before", ["clean", "mixed"])
def test_zeros_after_a_stretch_without_any_fire_at_the_tenth(chunk: int | None, before: str
                                                              ) -> None:
    rng = np.random.default_rng(8)
    head = (_zero_inflated(1000, 0.6, seed=8) if before == "mixed"
            else 0.3 * (1 + 0.05 * rng.standard_normal(1000)))
    clean = 0.3 * (1 + 0.05 * rng.standard_normal(150))  # 150 >= mixed_points non-zero values
    loss = np.concatenate((head, clean, np.zeros(40)))
    hits = [a for a in _alerts(_records(loss), chunk, MIXED) if a[0] == "learning_stalled"]
    assert [(a[1], a[2]) for a in hits] == [(1150 + 10, "warning")]


@pytest.mark.parametrize("chunk", [None, 1, 7, 64])
def test_a_loss_that_mixed_zeros_in_and_turns_into_zeros_fires_at_mixed_points(
        chunk: int | None) -> None:
    loss = np.concatenate((_zero_inflated(1000, 0.75, seed=7), np.zeros(150)))
    # (the run's length: the zeros that end the mixed stretch, then the 150)
    before = 1000 - int(np.flatnonzero(loss[:1000])[-1]) - 1
    hits = [a for a in _alerts(_records(loss), chunk, MIXED) if a[0] == "learning_stalled"]
    assert [(a[1], a[2]) for a in hits] == [(1000 - before + 100, "warning")]
    assert "(100 points)" in hits[0][3]


def test_zeros_soon_after_others_do_not_fire() -> None:
    loss = np.concatenate((_zero_inflated(1000, 0.6, seed=9),
                           0.3 * np.ones(50) + 0.01 * np.arange(50), np.zeros(40)))
    assert [a for a in _alerts(_records(loss), overrides=MIXED)
            if a[0] == "learning_stalled"] == []


@pytest.mark.parametrize("seed", range(4))
def test_the_mixed_bar_follows_its_definition_point_by_point(seed: int) -> None:
    """The stalled rule against its definition a point at a time (the reference), after every
    frame, whatever the frames and bars."""
    base = load_rules_config().rules["learning_stalled"]
    rng = np.random.default_rng(seed)
    fired = 0
    for _ in range(40):
        cfg = dataclasses.replace(base, zero_points=int(rng.choice([1, 3, 10])),
                                  rearm_points=int(rng.choice([1, 5, 50])),
                                  mixed_points=int(rng.choice([0, 5, 30, 100])))
        n = int(rng.integers(50, 1500))
        parts = [_zero_inflated(n, float(rng.uniform(0.2, 0.9)), seed=int(rng.integers(1 << 30))),
                 0.3 + np.arange(int(rng.integers(0, 200))) * 1e-3,
                 np.zeros(int(rng.integers(0, 150)))]
        loss = np.concatenate([parts[i] for i in rng.permutation(3)])
        n = loss.shape[0]
        cuts = sorted({0, n, *rng.integers(1, max(n, 2), int(rng.integers(0, 8))).tolist()})
        if rng.random() < 0.3:  # live-sized frames
            cuts = [*range(0, n, int(rng.integers(1, 10))), n]
        fired += len(check_against_reference(cfg, loss, cuts))
    assert fired > 10


def test_mixed_points_must_be_a_count(tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text("learning_stalled:\n  mixed_points: -1\n")
    with pytest.raises(ConfigError, match=r"rules\.yaml: learning_stalled\.mixed_points: "
                                          r"expected an integer >= 0, got -1"):
        load_rules_config(f)


# --------------------------------------------------------------------- the bench's shape


def _run_lines(run: SyntheticRun) -> list[dict]:
    return [json.loads(x) for x in run.jsonl().splitlines()]


def test_the_zero_inflated_clean_run_is_what_it_says() -> None:
    run = zero_clean_run(1, n_steps=4000)
    loss = run.train["loss"]
    share = float(np.mean(loss == 0.0))
    assert 0.4 < share < 0.85 and float(loss.min()) == 0.0
    assert np.mean(loss[-1000:] == 0.0) > np.mean(loss[:1000] == 0.0)  # more easy batches later
    assert zero_clean_run(1, n_steps=4000).jsonl() == run.jsonl()
    # its own random stream: the clean run of the same seed has no zero
    assert float(clean_run(1, n_steps=4000).train["loss"].min()) > 0.0


@pytest.mark.parametrize("chunk", [1, 13, 300])
def test_a_zero_inflated_run_raises_nothing_and_the_same_whole_and_in_pieces(chunk: int) -> None:
    lines = _run_lines(zero_clean_run(2, n_steps=3000))
    whole = _alerts(lines, overrides=MIXED)
    assert _serious(whole) == []
    assert _alerts(lines, chunk, MIXED) == whole
    # by default: its runs of zeros told once, the same whole and in pieces
    told = _alerts(lines)
    assert [a[0] for a in _serious(told)] == ["learning_stalled"]
    assert _alerts(lines, chunk) == told
