"""A custom threshold rule against its definition, a point at a time, after every frame."""

from __future__ import annotations

import numpy as np
import pytest
from rule_frames import frames_of

from trainwatch.rules.builtin.custom import CustomRule
from trainwatch.rules.config.loading import CustomRuleConfig
from trainwatch.rules.engine.base import Context


def _reference(cfg: CustomRuleConfig, values: np.ndarray) -> list[tuple[int, int]]:
    """(record, first step of the run) of each alert: a finite value above ``above`` (or below
    ``below``) continues a run of violations (a finite value within the bounds ends it); the run
    fires once, at its first point ``for_steps`` steps or more after its first one."""
    out = []
    first: int | None = None
    fired = False
    for i, v in enumerate(values.tolist()):
        if not np.isfinite(v):
            continue
        step = i + 1
        if (cfg.above is not None and v > cfg.above) or (cfg.below is not None and v < cfg.below):
            first = step if first is None else first
            if not fired and step - first + 1 >= cfg.for_steps:
                out.append((i, first))
                fired = True
        else:
            first, fired = None, False
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_custom_rule_follows_its_definition_point_by_point(seed: int) -> None:
    rng = np.random.default_rng(seed)
    fired = 0
    for _ in range(200):
        above = float(rng.choice([0.5, 0.8])) if rng.random() < 0.7 else None
        below = float(rng.choice([-0.5, -0.8])) if above is None or rng.random() < 0.3 else None
        cfg = CustomRuleConfig("mine", "acc", above, below, int(rng.choice([1, 3, 20])),
                               "warning", None)
        n = int(rng.integers(1, 600))
        values = np.repeat(rng.uniform(-1, 1, n), rng.integers(1, 30, n))[:n]
        values[rng.random(n) < rng.choice([0.0, 0.05, 0.5])] = np.nan
        cuts = sorted({0, n, *rng.integers(1, max(n, 2), int(rng.integers(0, 6))).tolist()})
        if rng.random() < 0.3:  # live-sized frames (some all NaN)
            cuts = [*range(0, n, int(rng.integers(1, 6))), n]
        rule = CustomRule(cfg, Context())
        got: list[tuple[int, int]] = []
        want = _reference(cfg, values)
        for frame in frames_of({"acc": values}, [c for c in cuts if c <= n]):
            got += [(h.pos, h.alert.evidence["since_step"]) for h in rule.update(frame)]
            assert got == [w for w in want if w[0] <= int(frame.rec_pos[-1])]
        fired += len(got)
    assert fired > 200, fired
