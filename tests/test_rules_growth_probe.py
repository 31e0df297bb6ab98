"""The trainer's detach probe, frame after frame: a frame where the probe says attached from
some point to its end is taken as one run (Episode.run) instead of scanned for runs; the hits
and the episode's state are those of the scan, whatever came before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainwatch.rules import load_rules_config
from trainwatch.rules.builtin.growth_alerts import probe_hits
from trainwatch.rules.config.models import DetachConfig
from trainwatch.rules.detectors.episode import START, START_ESCALATED, Episode
from trainwatch.rules.engine.base import Points


@pytest.mark.parametrize("seed", range(4))
def test_probe_hits_are_the_scans(seed: int) -> None:
    det = load_rules_config().rules["state_detach"]
    assert isinstance(det, DetachConfig)
    rng = np.random.default_rng(seed)
    mine, ref = Episode(rearm=10, cooldown=0), Episode(rearm=10, cooldown=0)
    step = 0
    all_attached = tails = 0
    for _ in range(300):
        n = int(rng.choice([1, 3, 15, 40]))
        # all attached, none, mixed, mostly attached, attached from some point on
        kind = rng.integers(5)
        vals = {0: np.ones(n), 1: np.zeros(n), 2: (rng.random(n) < 0.5) * 1.0,
                3: (rng.random(n) < 0.9) * 1.0,
                4: (np.arange(n) >= rng.integers(n)) * 1.0}[int(kind)]
        all_attached += bool((vals >= 0.5).all())
        tails += kind == 4 and not vals[0] and vals[-1]
        steps = np.arange(step, step + n)
        step += n
        pts = Points("state_attached", steps, vals, steps * 1.0, steps + 1000)
        got = [h.alert.step for h in probe_hits(det, mine, pts)]
        want = [int(steps[i]) for i, k in ref.scan(steps, vals >= 0.5)
                if k in (START, START_ESCALATED)]
        assert got == want
        assert dataclasses.asdict(mine) == dataclasses.asdict(ref)
    assert all_attached > 50 and tails > 10  # (the cases this is about)
