"""``nan_inf``'s rows (one per record carrying a watched series) laid out over the records' span,
against the reference that sorts the series' positions together."""

from __future__ import annotations

import numpy as np
import pytest
from rule_frames import fast_and_reference, feed_alike, frames_of

from trainwatch.rules.builtin.nan_inf import _rows, _rows_sorted
from trainwatch.rules.engine.base import Points

ROLES = ("loss", "val_loss", "grad_norm", "lr", "extra")


@pytest.mark.parametrize("seed", range(4))
def test_rows_match_the_sorted_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nonfinite = 0
    for _ in range(300):
        n = int(rng.integers(1, 200))
        base = int(rng.integers(0, 10_000))
        rec_steps = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)  # (repeated steps too)
        watched = []
        for role in rng.permutation(ROLES)[: int(rng.integers(1, 6))].tolist():
            keep = np.flatnonzero(rng.random(n) < rng.choice([1.0, 0.5, 0.05]))
            if not keep.shape[0]:
                continue
            values = rng.normal(0, 1, keep.shape[0])
            if rng.random() < 0.5:
                values[rng.random(keep.shape[0]) < 0.1] = rng.choice([np.nan, np.inf, -np.inf])
            # (a series may give a record another step: the first series' step wins)
            steps = rec_steps[keep] + (1000 if rng.random() < 0.2 else 0)
            watched.append((role, Points(role, steps, values, steps.astype(float), keep + base)))
        if not watched:
            continue
        got, want = _rows(watched), _rows_sorted(watched)
        for g, w in zip(got, want):
            assert g.tolist() == w.tolist()
        nonfinite += int(want[2].sum())
    assert nonfinite > 100


@pytest.mark.parametrize("seed", range(4))
def test_rule_matches_the_sorted_reference(seed: int) -> None:
    """The whole rule, frame by frame (episodes that span frames, escalations, cooldowns)."""
    from trainwatch.rules.builtin.nan_inf import NanInfRule
    from trainwatch.rules.config.loading import load_rules_config

    cfg = load_rules_config().rules["nan_inf"]
    rng = np.random.default_rng(seed)
    fired = 0
    for _ in range(40):
        n = int(rng.integers(20, 3000))
        cols = {r: rng.uniform(0.5, 2.0, n) for r in ("loss", "val_loss", "grad_norm", "lr")}
        keep = {r: rng.random(n) < (0.05 if r == "val_loss" else 0.97) for r in cols}
        for v in cols.values():
            for _k in range(int(rng.integers(0, 4))):  # stretches of NaN / inf
                a = int(rng.integers(0, n))
                v[a:a + int(rng.integers(1, 40))] = rng.choice([np.nan, np.inf])
        cuts = sorted({0, n, *rng.integers(1, n, int(rng.integers(0, 6))).tolist()})
        if rng.random() < 0.3:  # live-sized frames: episodes end in frames all finite
            cuts = [*range(0, n, int(rng.integers(1, 8))), n]
        rules = fast_and_reference(NanInfRule, cfg)
        for frame in frames_of(cols, cuts, keep):
            fired += len(feed_alike(rules, frame, lambda r: r.episode))
    assert fired > 50, fired
