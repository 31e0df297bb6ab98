"""A smooth ramp is not a spike: the spike detector's jump test (the excess over the recent level).

The shape comes from a real mmdetection log (mmengine scalars): during the LR warm-up the grad norm
falls for 30 steps, then grows smoothly tenfold over 70 steps while the loss keeps improving. The
rolling median lags the ramp by half a window, so against it alone the ramp's points looked like a
3x explosion that "stayed high for 10 points" (an error on a healthy run).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from spike_reference import Reference, median, ramps
from test_rules_data import parse_all, parse_live
from test_rules_spike_detector import reference, run

from trainwatch.rules import RuleEngine, load_rules_config

CFG = load_rules_config()
EARLY = load_rules_config(overrides={"grad_explosion": {"min_points": 64}})
"""Warm after 64 points, as the default was: the ramp (steps 30-98) then falls after the warm-up,
and only the jump test keeps it from firing (the default full window of warm-up hides it)."""


_KNOTS = ((1, 49.0), (10, 18.0), (20, 13.0), (30, 12.5), (40, 14.4), (50, 22.7), (60, 43.0),
          (70, 62.6), (80, 91.7), (90, 115.7), (98, 128.3), (150, 119.0), (300, 125.0))
"""(step, grad norm) the ramp passes through, read off the real log's curve."""


def warmup_ramp(seed: int, n: int = 300) -> dict[str, np.ndarray]:
    """Grad norm 49 -> 12.5 over steps 1-30, a smooth rise 12.5 -> 128 over steps 30-98 (slow,
    then doubling every ~10 steps, then linear), then a level around 125; the loss falls 42 -> 20
    throughout (seeded noise on both)."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, n + 1, dtype=np.float64)
    ks, kg = zip(*_KNOTS)
    grad = np.exp(np.interp(s, ks, np.log(kg))) * rng.lognormal(0, 0.005, n)
    loss = (20.0 + 22.0 * np.exp(-s / 120)) * (1 + 0.005 * rng.standard_normal(n))
    return {"step": s.astype(np.int64), "grad_norm": grad, "loss": loss}


def _jsonl(run: dict[str, np.ndarray]) -> bytes:
    rows = [f'{{"step":{st},"time":{1.7e9 + st!r},"lr":1e-05,"loss":{lo!r},"grad_norm":{g!r}}}'
            for st, lo, g in zip(run["step"].tolist(), run["loss"].tolist(),
                                 run["grad_norm"].tolist())]
    return ("\n".join(rows) + "\n").encode()


def _grad_alerts(data: bytes, *, live: bool) -> list[tuple[int, str]]:
    e = RuleEngine(EARLY, live=False)
    for b in parse_live(data, seed=1) if live else parse_all(data):
        e.feed(b)
    return [(a.step, a.severity) for a in e.alerts if a.rule == "grad_explosion"]


def test_the_shape_is_what_fooled_the_window_median() -> None:
    run = warmup_ramp(0)
    g = run["grad_norm"]
    assert np.all(np.diff(g[32:98]) > 0)  # monotone: the noise does not break the ramp
    assert g[97] / g[29] > 9 and run["loss"][-1] < run["loss"][0]
    # the point that fired before: 3x the median of the first 64 points, far above its MAD
    med = np.median(g[:64])
    assert g[64] > 3 * med


def test_a_warmup_ramp_with_an_improving_loss_raises_no_grad_explosion() -> None:
    for seed in range(5):
        data = _jsonl(warmup_ramp(seed))
        assert _grad_alerts(data, live=False) == [], seed
        assert _grad_alerts(data, live=True) == [], seed  # small reads: point by point


def test_jumps_after_the_ramp_still_fire() -> None:
    run = warmup_ramp(0, n=1500)
    # the ramp's points sat far from the lagging median: like heavy-tailed noise they raise the
    # tail guard's bar for tail_window points, so soon after it only a huge jump fires (10x the
    # early maximum: an error at once)...
    run["grad_norm"][159] *= 12.0
    # ...and once they are out of the tail window, a 4x spike and a persistent 4x step up do
    run["grad_norm"][1199] *= 4.0
    run["grad_norm"][1299:1310] *= 4.0
    assert _grad_alerts(_jsonl(run), live=False) == [(160, "error"), (1200, "warning"),
                                                      (1300, "warning"), (1309, "error")]


def test_the_reference_turns_ramps_away_by_the_jump_test() -> None:
    """The ramps' data (the detector is compared with the reference on it) holds points that
    pass every bar but the jump test."""
    for rule in ("loss_spike", "grad_explosion", "step_time_outlier"):
        cfg = CFG.rules[rule]
        rejected = 0
        for c in (cfg, dataclasses.replace(cfg, refresh=7, window=50, min_points=20,
                                           tail_guard=0.0)):
            for seed in (0, 1):
                rejected += _rejected_by_jump(c, ramps(seed))
        assert rejected > 0, rule


def _rejected_by_jump(cfg, x: np.ndarray) -> int:
    """Points that pass every bar but the jump test, fed point by point."""
    d = Reference(cfg)
    n = 0
    for i, v in enumerate(x.tolist()):
        if d.ok:
            e = (v - d.med) / (abs(d.med) or 1.0)
            recent = median(d.acc[-cfg.recent_points:])
            if (d.flags(v, d.med, d.mad) and e >= cfg.tail_guard * d.guard()
                    and not v - recent >= cfg.jump_share * (v - d.med)):
                n += 1
        d.push(v, i)
    return n


def test_the_jump_test_is_configurable(tmp_path) -> None:
    # jump_share 0 asks only that a point sit above the recent level: the ramp fires again
    # (warm after 64 points: see EARLY)
    f = tmp_path / "rules.yaml"
    f.write_text("grad_explosion:\n  jump_share: 0\n  min_points: 64\n")
    e = RuleEngine(load_rules_config(f), live=False)
    for b in parse_all(_jsonl(warmup_ramp(0))):
        e.feed(b)
    assert any(a.rule == "grad_explosion" for a in e.alerts)
    # another recent level and share: the detector still equals the definition
    cfg = dataclasses.replace(CFG.rules["grad_explosion"], recent_points=16, jump_share=0.3)
    x = ramps(2)
    want = reference(cfg, x)
    assert want[0] and run(cfg, x, [x.shape[0]]) == want
