"""The spike detector's fast paths against its point-by-point reference, on data made to reach
them: a pass that stops mid-row (the tail guard then learns from part of a row), a bar set by
deep dips (the lower tail), and anomalous runs whose ends fall on either side of the chunks the
run's length is looked for in."""

from __future__ import annotations

import dataclasses

import numpy as np
from test_rules_spike import _run

from trainwatch.rules import load_rules_config

CFG = load_rules_config()


def _dips_and_spikes(seed: int, n: int = 6000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 5.0 + 0.05 * rng.standard_normal(n)
    dips = rng.random(n) < 0.01
    x[dips] *= rng.uniform(0.05, 0.8, int(dips.sum()))  # the tail guard's bar comes from below
    spikes = rng.random(n) < 0.03  # passes stop often, mostly mid-row
    x[spikes] *= rng.uniform(2.0, 8.0, int(spikes.sum()))
    at = 1000
    for length in (15, 16, 17, 200):  # runs ending around the first chunk's end (16)
        x[at:at + length] = 50.0 + rng.random(length)
        at += 600
    return x


def test_vectorised_equals_reference_with_dips_and_frequent_spikes() -> None:
    longest = 0
    for rule in ("loss_spike", "grad_explosion", "step_time_outlier"):
        cfg = CFG.rules[rule]
        for c in (cfg, dataclasses.replace(cfg, min_ratio=1.1, z_threshold=3.0)):
            for seed in range(3):
                x = _dips_and_spikes(seed)
                ref = _run(c, x, vectorized=False, chunks=[1])
                assert len(ref[0]) >= 3
                longest = max(longest, len(ref[1]))
                for chunks in ([x.shape[0]], [1, 5, 300], [13], [4097]):
                    assert _run(c, x, vectorized=True, chunks=chunks) == ref, (rule, seed, chunks)
    assert longest > 400  # the long runs were flagged (by step_time_outlier: no tail guard)
