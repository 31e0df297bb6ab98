"""The spike detector's vectorised pass against its point-by-point reference on the edge cases its
shortcuts lean on: windows whose median is exactly 0 (a frozen grad norm: the relative deviation
then divides by 1), and a pass that restarts mid-block after a deep dip (the block's largest
deviation so far must carry into the tail guard's bar)."""

from __future__ import annotations

import numpy as np
from test_rules_spike import _run

from trainwatch.rules import load_rules_config

CFG = load_rules_config()
RULES = ("loss_spike", "grad_explosion", "step_time_outlier")
CHUNKS = ([10**6], [1, 5, 300], [13], [4097])


def _mostly_zero(seed: int, n: int = 3000) -> np.ndarray:
    """Exact zeros (a frozen parameter's grad norm) with small blips that keep the median and
    MAD at 0, and real spikes."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    x[rng.random(n) < 0.1] = 0.05  # below every rule's ratio bar against a median of 0
    x[rng.choice(np.arange(300, n), 8, replace=False)] = 5.0
    return x


def test_windows_with_a_zero_median_match_the_reference() -> None:
    x = _mostly_zero(0)
    spikes = set(np.flatnonzero(x == 5.0).tolist())
    for rule in RULES:
        cfg = CFG.rules[rule]
        ref = _run(cfg, x, vectorized=False, chunks=[1])
        flagged = set(ref[1])
        assert flagged and flagged <= spikes, rule  # the spikes, never a blip
        for chunks in CHUNKS:
            assert _run(cfg, x, vectorized=True, chunks=chunks) == ref, (rule, chunks)


def _dip_then_spike(seed: int, n: int = 2000) -> tuple[np.ndarray, int, int]:
    """Quiet noise around 5; mid-block, a deep dip (accepted: only upward points are anomalous)
    and, two points later, a spike that ends the pass; later a moderate spike that the dip's
    deviation, in the tail guard's bar, hides. Returns the series and the two spikes' indices."""
    rng = np.random.default_rng(seed)
    x = 5.0 + 0.002 * rng.standard_normal(n)
    dip = 32 * 20 + 9  # mid-block once the first blocks are in (a whole pass reaches it)
    x[dip] = 2.5  # a relative deviation of 0.5 (the bar becomes 2 x 0.5 = 1.0)
    x[dip + 2] = 50.0
    late = dip + 300  # well within tail_window of the dip
    x[late] = 8.0  # 1.6x the median: above min_ratio, below the dip's bar
    return x, dip + 2, late


def test_a_pass_restarted_mid_block_keeps_the_block_deviation() -> None:
    cfg = CFG.loss_spike
    for seed in range(3):
        x, spike, late = _dip_then_spike(seed)
        ref = _run(cfg, x, vectorized=False, chunks=[1])
        assert spike in ref[1] and late not in ref[1]
        for chunks in CHUNKS:
            assert _run(cfg, x, vectorized=True, chunks=chunks) == ref, (seed, chunks)
