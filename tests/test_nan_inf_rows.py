"""``nan_inf`` against plain references: its rows (one per record carrying a watched series)
against a walk over the records, and the whole rule, frame after frame, against the episode fed
record by record."""

from __future__ import annotations

import numpy as np
import pytest
from rule_frames import frames_of

from trainwatch.rules.builtin.nan_inf import NanInfRule, rows
from trainwatch.rules.config.loading import load_rules_config
from trainwatch.rules.detectors.episode import ESCALATE, START_ESCALATED, Episode
from trainwatch.rules.engine.base import Context, Points

ROLES = ("loss", "val_loss", "grad_norm", "lr", "extra")


def _rows_reference(watched: list[tuple[str, Points]]) -> list[tuple[int, int, bool, bool]]:
    """(record, step, any value non-finite, a value other than the grad norm's non-finite), a
    record at a time; the first series carrying a record gives its step."""
    at: dict[int, list] = {}
    for role, p in watched:
        for pos, step, v in zip(p.pos.tolist(), p.steps.tolist(), p.values.tolist()):
            row = at.setdefault(pos, [pos, step, False, False])
            if not np.isfinite(v):
                row[2] = True
                row[3] = row[3] or role != "grad_norm"
    return [tuple(at[k]) for k in sorted(at)]  # type: ignore[misc]


@pytest.mark.parametrize("seed", range(4))
def test_rows_match_a_walk_over_the_records(seed: int) -> None:
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
        want = _rows_reference(watched)
        got = list(zip(*(a.tolist() for a in rows(watched))))
        assert got == want
        nonfinite += sum(w[2] for w in want)
    assert nonfinite > 100


@pytest.mark.parametrize("seed", range(4))
def test_rule_matches_the_episode_fed_record_by_record(seed: int) -> None:
    """Episodes that span frames, escalations, cooldowns: after every frame, the rule's alerts
    so far are those of the episode fed each record in turn (anomalous: a value non-finite;
    severe: one other than the grad norm's)."""
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
        rule = NanInfRule(cfg, Context())
        ref = Episode(cfg.rearm_points, cfg.cooldown_steps, 0)
        got: list[tuple[int, str]] = []
        want: list[tuple[int, str]] = []
        for frame in frames_of(cols, cuts, keep):
            rule.ctx.frame = frame
            got += [(h.pos, h.alert.severity) for h in rule.update(frame)]
            rule.ctx.end_frame(frame)
            for i in frame.rec_pos.tolist():
                bad = {r for r in cols if keep[r][i] and not np.isfinite(cols[r][i])}
                if not any(keep[r][i] for r in cols):
                    continue
                if not bad:
                    ref.normal()
                    continue
                kind = ref.hit(i + 1, severe=bool(bad - {"grad_norm"}))
                if kind is not None:
                    severe = kind in (ESCALATE, START_ESCALATED)
                    want.append((i, cfg.severity if severe else cfg.grad_only_severity))
            assert got == want
        fired += len(got)
    assert fired > 50, fired
