"""A live watch feeds the engine one record at a time for days: what the block rules keep from
one record to the next is bounded (the loss history of grad_vanishing and lr_exhausted, the
block under way), and the alerts are those of the file read whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from test_rules_data import parse_live

from bench.synthetic import clean_run
from trainwatch.commands.check import feed_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config


def _live_and_whole(data: bytes, name: str) -> None:
    live = RuleEngine(load_rules_config(), live=True)
    rules = {r.id: r for r in live._rules}
    for batch in parse_live(data, seed=1, max_lines=1):
        live.feed(batch)
        for rid in ("grad_vanishing", "lr_exhausted"):
            lh = rules[rid].loss_hist
            assert len(lh) <= (lh.maxlen or 0), rid
        assert len(rules["grad_vanishing"]._grads._carry) < rules["grad_vanishing"].cfg.window
    whole = RuleEngine(load_rules_config(), live=False)
    feed_run(whole, LoadedRun(Path(name), "jsonl", parse_live(data, max_lines=10**6)))
    key = [(a.rule, a.step, a.message) for a in whole.alerts]
    assert [(a.rule, a.step, a.message) for a in live.alerts] == key[:len(live.alerts)]


def test_block_state_stays_bounded_live() -> None:
    run = clean_run(1, 3000)
    _live_and_whole(run.jsonl(), run.name)


def test_a_steady_grad_norm_live_is_the_whole_file() -> None:
    rng = np.random.default_rng(0)
    lines = [json.dumps({"step": i + 1, "time": float(i), "loss": 2.0 + 0.01 * rng.standard_normal(),
                         "grad_norm": 1.0 + 0.05 * rng.standard_normal()}).encode() + b"\n"
             for i in range(600)]
    _live_and_whole(b"".join(lines), "r")
