"""``divergence``'s warm-up blocks (each a new best on a loss falling fast) in the first frame of
a run, with the quiet blocks or the rise after them: a file checked whole (one frame) gives the
alerts of the file read live, and a loss that rises straight after the warm-up is caught."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_rules_data import clean, idx, parse_live, set_loss, to_jsonl

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config


def _fast_falling(seed: int) -> dict[str, Any]:
    """A loss that falls fast over the warm-up (8 blocks of 25 points: every block a new best),
    then stays 2 % above its last block (a slip in the warm-up's best is not hidden by a later
    one)."""
    run = clean(1500, "exp", noise=0.002, seed=seed)
    s = run["step"].astype(np.float64)
    mean = 1.5 + 4.5 * np.exp(-s / 100.0)
    mean[s > 200] = 1.02 * (1.5 + 4.5 * np.exp(-1.88))  # (the last warm-up block's middle)
    set_loss(run, 1, mean)
    return run


def _early_faults(seed: int) -> dict[str, Any]:
    """The loss rising right after the warm-up (8 blocks of 25 points)."""
    run = _fast_falling(seed)
    st = run["step"]
    i = idx(run, 230)
    set_loss(run, 230, run["mean"][i] * 2 ** (np.arange(st.shape[0] - i) / 150.0))
    return run


def _divergences(batches: list) -> list:
    e = RuleEngine(load_rules_config(), live=False)
    for batch in batches:
        e.feed(batch)
    return [(a.rule, a.step, a.severity, a.message) for a in e.alerts if a.rule == "divergence"]


@pytest.mark.parametrize("make", [_fast_falling, _early_faults])
def test_warmup_in_one_frame_fires_as_live(make: Any) -> None:
    fired = set()
    for seed in range(3):
        data = to_jsonl(make(seed))
        whole = _divergences([JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1)])
        assert whole == _divergences(parse_live(data, seed=seed, max_lines=20))
        fired |= {a[0] for a in whole}
    if make is _early_faults:  # (the early faults are caught: the comparison covers alerts)
        assert fired == {"divergence"}, fired
