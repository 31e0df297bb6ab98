"""The block-median rules on whole files and live reads, and plateau's judgement of evaluations
and its LR peak against their definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_rules_data import clean, idx, parse_all, parse_live, set_loss, to_jsonl

from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.plateau import PlateauRule


def _runs() -> list[bytes]:
    out = []
    for seed in range(4):  # a plateau, a divergence and throughput dips, on clean and noisy losses
        run = clean(9000, ("exp", "heavy", "cosine", "step")[seed], noise=(0.01, 0.06)[seed % 2],
                    seed=40 + seed)
        m = run["mean"][idx(run, 2500)]
        set_loss(run, 2500, m)
        k = np.arange(9000 - idx(run, 6000))
        set_loss(run, 6000, m * 2 ** (k / 600))
        s = run["step"]
        run["throughput"][(s >= 3000) & (s < 4200) & ((s - 3000) % 300 < 90)] *= 0.5
        run["throughput"][s >= 7000] *= 0.6
        out.append(to_jsonl(run))
    return out


def _alerts(batches: list) -> list:
    e = RuleEngine(load_rules_config(), live=False)
    for b in batches:
        e.feed(b)
    return [a for a in e.alerts if a.rule in ("plateau", "divergence", "throughput_drop")]


@pytest.mark.parametrize("reads", ["whole", "live"])
def test_block_rules_fire_alike_whole_and_live(reads: str) -> None:
    """A plateau, a divergence and throughput dips on clean and noisy losses: the alerts of each
    file read whole (one frame) and read live (a few records a batch) are the same, and each of
    the three rules fires."""
    datas = _runs()
    live = [_alerts(parse_live(d, seed=3, max_lines=2000 if reads == "whole" else 15))
            for d in datas]
    whole = [_alerts(parse_all(d)) for d in datas]
    assert live == whole
    fired = {a.rule for run in whole for a in run}
    assert fired == {"plateau", "divergence", "throughput_drop"}, fired


# --------------------------------------------------------------------------- plateau on evaluations
def test_plateau_val_best_is_the_definitions() -> None:
    """An evaluation is a new best when it beats the best by max(val_min_delta, noise_factor x
    the evaluations' noise, refreshed every 4): the rule gets the definition's bests."""
    from trainwatch.rules.detectors.stats import noise_sd
    from trainwatch.rules.engine.base import Context, Points

    cfg = load_rules_config().rules["plateau"]
    rng = np.random.default_rng(11)
    n = 240  # (an evaluation every 100 steps: sparse, judged one by one)
    # a slow decay (0.2 % an evaluation, under val_min_delta) with steps down and some noise
    x = 3.0 * 0.998 ** np.arange(n) * np.where(np.arange(n) % 37 == 0, 0.97, 1.0).cumprod()
    x *= 1 + 0.002 * rng.standard_normal(n)
    rule = PlateauRule(cfg, Context())
    got = []
    for i, v in enumerate(x.tolist()):
        pts = Points("val_loss", np.array([100 * i]), np.array([v]), np.array([float(i)]),
                     np.array([i]))
        assert rule._val(None, pts) == []  # type: ignore[arg-type]
        got.append((rule.v_best, rule.v_best_step, rule.v_wait))
    want = []
    best, best_step, wait, window, recent = None, 0, 0, (), []
    for i, v in enumerate(x.tolist()):
        recent = (recent + [v])[-max(cfg.val_patience, 16):]
        if i % 4 == 0:
            window = tuple(recent)
        if best is None or v < best and v < best - max(
                cfg.val_min_delta, cfg.noise_factor * noise_sd(window)) * abs(best):
            best, best_step, wait = v, 100 * i, 0  # a clear improvement: the patience restarts
            want.append((best, best_step, wait))
            continue
        if v < best:
            best, best_step = v, 100 * i
        wait += 1
        want.append((best, best_step, wait))
    assert got == want
    assert sum(a[0] != b[0] for a, b in itertools.pairwise(want)) > n // 2  # (it moved often)
    assert 0 < sum(w == 0 for _b, _s, w in want) < n // 4  # (and clearly, now and then)


def test_plateau_lr_peak_is_the_highest_finite_lr_before_the_record() -> None:
    """plateau's LR peak, asked at a record of a frame, is the highest finite LR at or before
    it (over every frame so far)."""
    from trainwatch.rules.builtin.plateau import LrPeak
    from trainwatch.rules.engine.base import Frame, Points

    rng = np.random.default_rng(5)
    peak, seen, start = LrPeak(), np.empty(0), 0
    for f in range(20):
        n = int(rng.integers(1, 40))
        lr = rng.uniform(0.0, 1.0, n) * (10.0 if f == 1 else rng.uniform(0.0, 2.0))  # (an early peak)
        lr[rng.random(n) < 0.1] = np.nan
        lr[rng.random(n) < 0.05] = np.inf  # (not finite either: never a peak)
        idx_ = np.arange(start, start + n)
        pts = Points("lr", idx_, lr, idx_.astype(np.float64), idx_)
        frame = Frame(0, {"lr": "lr"}, {"lr": pts}, (), pts.steps, pts.times, pts.pos,
                      np.zeros(n, dtype=bool))
        for _ask in range(int(rng.integers(1, 3))):
            pos = int(rng.integers(start, start + n))
            upto = np.concatenate((seen, lr[:pos - start + 1]))
            upto = upto[np.isfinite(upto)]
            assert peak.at(frame, pos) == max(0.0, float(np.max(upto, initial=0.0)))
        peak.end_frame(frame)
        seen = np.concatenate((seen, lr))
        start += n
