"""A live watch feeds the engine one record at a time for days: state that a rule notes now and
reads later (the loss blocks grad_vanishing and lr_exhausted fold in only when they look) must
stay bounded however long the run, with the alerts of the file read whole."""

from __future__ import annotations

from pathlib import Path

from test_rules_data import parse_live

from bench.synthetic import clean_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.check import feed_run


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
