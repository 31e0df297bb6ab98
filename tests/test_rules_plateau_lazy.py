"""``plateau`` reads a block's noise level only where it can matter: where the block clears the
bar of ``min_delta`` alone below the best or the reference, or where the rule fires (the noise
only raises the bars). Given no noise, a block reads it there; the state and the alerts are
those of the block given its noise, block after block."""

from __future__ import annotations

import numpy as np
import pytest
from test_rules_blocks import _state

from trainwatch.rules import load_rules_config
from trainwatch.rules.builtin.plateau import PlateauRule
from trainwatch.rules.detectors.blocks import Blocks
from trainwatch.rules.engine.base import Context


def _rule(monkeypatch: pytest.MonkeyPatch) -> PlateauRule:
    # the alert itself is not this test's: its arguments are compared
    monkeypatch.setattr(PlateauRule, "_fire", lambda self, frame, *args: args)
    rule = PlateauRule(load_rules_config().rules["plateau"], Context())
    rule.fast = False
    return rule


@pytest.mark.parametrize("seed", range(6))
def test_a_block_reads_its_noise_where_it_matters(monkeypatch: pytest.MonkeyPatch,
                                                   seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    # a loss that falls in steps of about min_delta (1 %), flattens, falls again: blocks near
    # every bar, restarts by the level, new bests, and plateaus that fire
    drift = np.cumsum(rng.choice([0.0, -0.004, -0.012], n, p=[0.5, 0.3, 0.2]))
    drift[150:260] = drift[150]
    med = np.exp(drift) * (1.0 + 0.006 * rng.standard_normal(n))
    noise = rng.uniform(0.0, 0.006, n) * (rng.random(n) < 0.7)
    steps = np.arange(50, 50 * (n + 1), 50)
    given, lazy = _rule(monkeypatch), _rule(monkeypatch)
    reads = 0
    for start in range(0, n, 40):  # (frames of 40 blocks)
        sl = slice(start, start + 40)
        b = Blocks(med[sl], np.zeros(40), noise[sl], steps[sl], steps[sl].astype(float),
                   steps[sl])
        given._start_frame(b)
        lazy._start_frame(b)
        fired = 0
        for i in range(len(b)):
            m, s = float(b.med[i]), int(b.step[i])
            a = given._block(None, b, i, m, float(b.noise[i]), s)  # type: ignore[arg-type]
            c = lazy._block(None, b, i, m, None, s)  # type: ignore[arg-type]
            assert a == c, (seed, start + i)
            assert _state(given) == _state(lazy), (seed, start + i)
            fired += a is not None
        reads += lazy._cols is not None
        assert fired < 40
    assert 0 < reads < n // 40 or given.fired  # (some frames read the noise)
    assert given.fired, seed


def test_a_frame_with_no_clear_improvement_reads_no_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks within min_delta of the best, before the patience runs out: no noise read."""
    rule = _rule(monkeypatch)
    med = 1.0 + 0.001 * np.sin(np.arange(12.0))
    steps = np.arange(50, 650, 50)
    b = Blocks(med, np.zeros(12), np.full(12, 0.002), steps, steps.astype(float), steps)
    rule._start_frame(b)
    for i in range(12):
        rule._block(None, b, i, float(med[i]), None, int(steps[i]))  # type: ignore[arg-type]
    assert rule._cols is None and rule.best is not None
