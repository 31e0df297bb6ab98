"""The block-median rules' two paths: runs of quiet blocks taken in one vectorised step must give
the same alerts as the per-block reference, in frames long enough for the vectorised step to run
(:data:`~trainwatch.rules.blocks.MIN_FAST` blocks or more) and in live-sized ones."""

from __future__ import annotations

import numpy as np
import pytest
from test_rules_data import clean, idx, parse_all, parse_live, set_loss, to_jsonl

from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.divergence import DivergenceRule
from trainwatch.rules.plateau import PlateauRule
from trainwatch.rules.throughput import ThroughputDropRule

RULES = (PlateauRule, DivergenceRule, ThroughputDropRule)


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
def test_vectorised_runs_match_the_per_block_reference(monkeypatch: pytest.MonkeyPatch,
                                                       reads: str) -> None:
    datas = _runs()
    split = parse_all if reads == "whole" else (lambda d: parse_live(d, seed=3, max_lines=2000))
    taken = dict.fromkeys(RULES, 0)
    for cls in RULES:
        orig = cls._quiet_prefix

        def counted(self, *a, _orig=orig, _cls=cls):  # type: ignore[no-untyped-def]
            k = _orig(self, *a)
            taken[_cls] += k
            return k

        monkeypatch.setattr(cls, "_quiet_prefix", counted)
    fast = [_alerts(split(d)) for d in datas]
    assert all(taken.values()), taken  # the vectorised step did run, for every rule
    for cls in RULES:
        monkeypatch.setattr(cls, "fast", False)
    slow = [_alerts(split(d)) for d in datas]
    assert fast == slow
    fired = {a.rule for run in fast for a in run}
    assert fired == {"plateau", "divergence", "throughput_drop"}, fired
