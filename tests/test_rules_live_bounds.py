"""A live watch feeds the engine one record at a time for days: state that a rule notes now and
reads later (the loss blocks grad_vanishing and lr_exhausted fold in only when they look) must
stay bounded however long the run, with the alerts of the file read whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from test_rules_data import parse_live

from bench.synthetic import clean_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.grad_vanishing import _JOIN_LATER
from trainwatch.rules.commands.check import feed_run


def test_noted_loss_blocks_stay_bounded_live() -> None:
    run = clean_run(1, 3000)
    live = RuleEngine(load_rules_config(), live=True)
    rules = {r.id: r for r in live._rules}
    longest = dict.fromkeys(("grad_vanishing", "lr_exhausted"), 0)
    for batch in parse_live(run.jsonl(), seed=1, max_lines=1):
        live.feed(batch)
        for rid in longest:
            longest[rid] = max(longest[rid], len(rules[rid]._new_loss))
    for rid, n in longest.items():
        assert 0 < n <= (rules[rid].loss_hist.maxlen or 0), (rid, n)
    whole = RuleEngine(load_rules_config(), live=False)
    feed_run(whole, LoadedRun(Path(run.name), "jsonl", parse_live(run.jsonl(), max_lines=10**6)))
    key = [(a.rule, a.step, a.message) for a in whole.alerts]
    assert [(a.rule, a.step, a.message) for a in live.alerts] == key[:len(live.alerts)]


def test_put_off_grad_frames_stay_few_live() -> None:
    """A steady grad norm's quiet frames wait in grad_vanishing until a frame needs its blocks:
    up to 65k points. Kept as one object per one-record frame that is ~0.7 KB a point (~45 MB):
    past _JOIN_LATER frames they are joined into one, with the alerts of the file read whole."""
    rng = np.random.default_rng(0)
    lines = [json.dumps({"step": i + 1, "time": float(i), "loss": 2.0 + 0.01 * rng.standard_normal(),
                         "grad_norm": 1.0 + 0.05 * rng.standard_normal()}).encode() + b"\n"
             for i in range(600)]
    data = b"".join(lines)
    live = RuleEngine(load_rules_config(), live=True)
    vanishing = next(r for r in live._rules if r.id == "grad_vanishing")
    put_off = 0
    for batch in parse_live(data, seed=1, max_lines=1):
        live.feed(batch)
        put_off = max(put_off, len(vanishing._later))
    assert 1 < put_off <= _JOIN_LATER
    assert vanishing._later_n > _JOIN_LATER  # (more points wait than frames are kept)
    whole = RuleEngine(load_rules_config(), live=False)
    feed_run(whole, LoadedRun(Path("r"), "jsonl", parse_live(data, max_lines=10**6)))
    assert [(a.rule, a.step, a.message) for a in live.alerts] == \
        [(a.rule, a.step, a.message) for a in whole.alerts][:len(live.alerts)]
