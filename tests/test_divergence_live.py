"""``divergence`` block by block against its definition (every block above the best computes
its bars from its noise, scatter, wander and MAD), and the alerts of a file read live against
those of the file read whole."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from test_rules_data import parse_live

from bench.synthetic import fault_run
from trainwatch.commands.check import feed_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.divergence import DivergenceRule
from trainwatch.rules.detectors.block_wander import EVERY, HISTORY, wander
from trainwatch.rules.detectors.blocks import Blocks
from trainwatch.rules.detectors.rise_bars import (
    bar_scale,
    error_levels,
    error_rise,
    multiplies,
    noise_levels,
    noise_rise,
)
from trainwatch.rules.engine.base import Context


def _median(xs: list[float]) -> float:
    v = sorted(xs)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def _scatter(seg: np.ndarray) -> float:
    """The between-block scatter at the segment's last block, by the definition: 1.0484 x the
    median of its last 16 relative jumps (at least 4)."""
    m = seg.tolist()
    jumps = [abs(x - p) / (abs(p) if p else 1.0) for p, x in itertools.pairwise(m)]
    return 1.0484 * _median(jumps[-16:]) if len(jumps) >= 4 else 0.0


def _reference_block(rule: DivergenceRule, b: Blocks, i: int, med: float, seg: np.ndarray,
                     held: list[int]) -> bool:
    """The reference as it reads by the definition: every block above the best computes its
    bars from its noise, scatter, wander and MAD (``seg``: the segment's block medians up to this
    one; ``held`` counts the blocks the wander alone kept down). Returns whether it fires."""
    cfg = rule.cfg
    rule.nblk += 1
    level = _median(seg[-3:].tolist())
    if rule.best is None or rule.nblk <= cfg.warmup_windows:
        rule._note_best(level, 0)
        return False
    best = rule.best
    # the loss's own wander: a rise above the best that came back down by half (in log terms)
    # is the least the bars ask from here on (the best's reset of it is _note_best's)
    if best > 0:
        r = max(0.0, (med - best) / best)
        if r > rule.peak:
            rule.peak = r
        elif rule.peak > 0 and math.log1p(r) <= 0.5 * math.log1p(rule.peak):
            rule.recovered, rule.peak = max(rule.recovered, rule.peak), r
    rec = rule.recovered
    rec_err = math.expm1(math.log1p(rec) * error_levels(cfg, rule.nblk) / cfg.noise_factor)
    if med < best and (cfg.cap is None or med <= cfg.cap):
        rule.up = 0
        rule.run_z = []
        rule.quiet += 1
        rule.active = rule.active and rule.quiet < 2
        rule._note_best(level, 0)
        return False
    short = max(float(b.noise[i]), _scatter(seg))
    wand = wander(seg[EVERY - 1::EVERY].tolist()[-HISTORY:])
    mad = float(b.mad[i])
    # a positive loss's noise multiplies: its noise rise is expm1 of the noise levels (the
    # wander's is taken as it is), its scale the MAD brought back to the best's level
    mult = multiplies(best, mad, med)
    no_wander = max(cfg.rise, noise_rise(cfg.noise_factor * short, mult), rec)
    rise = max(no_wander, cfg.noise_factor * wand)
    scale = bar_scale(best, mad, med)
    up = med > best and med >= best + rise * scale
    # (blocks the long wander or the recovered rise alone kept down)
    held[0] += med >= best + max(cfg.rise, noise_rise(cfg.noise_factor * short, mult)) * scale \
        and not up
    capped = cfg.cap is not None and med > cfg.cap
    # the error bar: error_rise, or the rise bar without the wander plus the luck of the best
    # over the segment's blocks when that is more
    err = capped or (med > best and med >= best + max(error_rise(
        cfg, no_wander, short, rule.nblk, mult), rec_err) * scale)
    if up or capped:
        rule.up += 1
        rule.quiet = 0
        if up:
            # or the last k blocks up in a row (k >= 2) each error_levels(k) noise levels above
            z = noise_levels((med - best) / scale, mult)
            rule.run_z = (rule.run_z + [z / short if short > 0 else math.inf])[-cfg.windows:]
            run = rule.run_z
            err = err or (med >= best + max(cfg.error_rise, rise) * scale and any(
                min(run[-k:]) >= error_levels(cfg, rule.nblk, k) for k in range(2, len(run) + 1)))
        else:
            rule.run_z = []
    else:
        rule.up = 0
        rule.run_z = []
        rule.quiet += 1
        rule.active = rule.active and rule.quiet < 2
    fired = False
    armed = rule.rearm_below is None
    if not rule.active and ((rule.up >= cfg.windows and armed) or (err and armed)):
        rule.active, rule.escalated, fired = True, err, True
        rule.rearm_below = best - rise * scale
    elif err and not rule.escalated:
        rule.escalated = fired = True
    rule._note_best(level, 0)
    return fired


def _core(rule: DivergenceRule) -> tuple:
    return (rule.nblk, rule.best, rule.up, rule.quiet, rule.active, rule.escalated,
            rule.rearm_below, tuple(rule.run_z), rule.peak, rule.recovered)


def _medians(rng: np.random.Generator, n: int) -> np.ndarray:
    """Block medians of a falling loss with quiet stretches (blocks a few % either side of the
    5 % bar), rises of a few % a block, jumps past the error bar, and drops that re-arm."""
    out, level = [], 1.0
    while len(out) < n:
        kind = rng.random()
        if kind < 0.5:  # quiet: small noise, now and then a block near the bar
            k = int(rng.integers(5, 20))
            x = level * (1.0 + rng.normal(0.0, 0.004, k))
            near = rng.random(k) < 0.25
            x[near] = level * rng.uniform(1.02, 1.08, int(near.sum()))
        elif kind < 0.8:  # a rise of a few % a block
            k = int(rng.integers(2, 8))
            x = level * (1.0 + rng.uniform(0.02, 0.1) * np.arange(1, k + 1))
        elif kind < 0.9:  # a jump past the error bar
            x = np.array([level * rng.uniform(1.3, 1.8)])
        else:  # progress: a lower level
            level *= rng.uniform(0.6, 0.95)
            x = level * (1.0 + rng.normal(0.0, 0.004, 3))
        out += x.tolist()
    return np.array(out[:n])


@pytest.mark.parametrize("seed", range(6))
def test_a_block_below_the_bars_changes_the_state_as_the_definition(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Blocks near the rise bars, with noise and MADs that raise the bars or not, taken one by
    one as live frames take them: the same state after every block, and the same blocks fire,
    as the definition."""
    monkeypatch.setattr(DivergenceRule, "_alert", lambda self, *a: "hit")
    rng = np.random.default_rng(seed)
    cfg = load_rules_config().rules["divergence"]
    rule = DivergenceRule(cfg, Context())  # type: ignore[arg-type]
    ref = DivergenceRule(cfg, Context())  # type: ignore[arg-type]
    meds = _medians(rng, 400)
    fired = checked = start = 0
    held = [0]
    while start < meds.shape[0]:
        n = int(rng.integers(1, 4))
        med = meds[start:start + n]
        n = med.shape[0]
        start += n
        mad = rng.uniform(0.0, 0.2, n) * np.where(rng.random(n) < 0.2, 1.0, 0.01)
        noise = rng.uniform(0.0, 0.012, n)
        b = Blocks(med, mad, noise, np.arange(n), np.zeros(n), np.arange(n))
        level, scatter = rule.levels.push(med.tolist())
        rule.wander.start_frame(rule.nblk, med)
        sd = np.maximum(noise, scatter)
        for i, m in enumerate(med.tolist()):
            before = rule.best
            got = rule._block(None, b, i, m, float(level[i]), float(mad[i]),  # type: ignore[arg-type]
                              float(sd[i]), 0) is not None
            want = _reference_block(ref, b, i, m, meds[:start - n + i + 1], held)
            assert got == want and _core(rule) == _core(ref), (seed, start, i)
            fired += got
            checked += before is not None and m >= before
    # (blocks the wanders alone kept down, and blocks that fired: both paths were checked)
    assert fired >= 1 and checked > 100 and held[0] > 0, (fired, checked, held)


@pytest.mark.parametrize("kind", ["divergence", "spike_sustained", "grad_explosion"])
def test_divergence_live_alerts_are_the_whole_files(kind: str) -> None:
    """A file read a few records at a time (frames of no block or one: the Python paths) gives
    the alerts of the file read whole (one frame: the array paths)."""
    cfg = load_rules_config()
    for seed in range(2):
        run = fault_run(kind, seed)
        whole = RuleEngine(cfg, live=False)
        feed_run(whole, LoadedRun(Path(run.name), "jsonl",
                                  parse_live(run.jsonl(), max_lines=10**6)))
        want = [(a.rule, a.step, a.message, sorted(a.evidence.items()))
                for a in whole.alerts if a.rule == "divergence"]
        assert want or kind != "divergence"
        for max_lines in (1, 15):
            live = RuleEngine(cfg, live=False)
            for batch in parse_live(run.jsonl(), seed=seed, max_lines=max_lines):
                live.feed(batch)
            got = [(a.rule, a.step, a.message, sorted(a.evidence.items()))
                   for a in live.alerts if a.rule == "divergence"]
            assert got == want, (kind, seed, max_lines)
