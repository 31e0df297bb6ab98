"""``stalled_stream``'s end/restart bookkeeping (``_ends``) against its definition, record by
record, on random frames of metric records and events."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from trainwatch.rules import load_rules_config
from trainwatch.rules.base import Context
from trainwatch.rules.stream import _STARTS, StalledStreamRule

CFG = load_rules_config().rules["stalled_stream"]


def _reference(finished: bool, is_event: np.ndarray, names: list[str], valid: np.ndarray
               ) -> tuple[bool, bool]:
    """The definition: ``finished`` after each record is True after an end event, False after a
    metric record or a start event, unchanged after another event; the gap into a record is no
    stall when ``finished`` held before it, nor the gap into a start event. Returns (finished,
    announced)."""
    announced = False
    it = iter(names)
    for i, ev in enumerate(is_event.tolist()):
        if finished:
            valid[i] = False
        name = next(it, "") if ev else None
        if name is None:
            finished = False
        elif name in CFG.end_events:
            finished = True
        elif name in _STARTS:
            valid[i] = False
            finished = False
            announced = True
    return finished, announced


@pytest.mark.parametrize("seed", range(4))
def test_ends_follows_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = [*CFG.end_events, *_STARTS, "eval", "checkpoint"]
    for _ in range(2000):
        n = int(rng.integers(1, 14))
        is_event = rng.random(n) < rng.random()
        n_ev = int(is_event.sum()) - int(rng.integers(0, 2) if is_event.any() else 0)
        names = [str(rng.choice(kinds)) for _ in range(n_ev)]
        frame = SimpleNamespace(rec_is_event=is_event,
                                events=tuple(SimpleNamespace(name=x) for x in names))
        finished = bool(rng.random() < 0.5)
        valid = rng.random(n) < 0.8
        want = valid.copy()
        want_fin, want_ann = _reference(finished, is_event, names, want)
        rule = StalledStreamRule(CFG, Context())
        rule.finished = finished
        rule._ends(frame, valid)  # type: ignore[arg-type]
        assert valid.tolist() == want.tolist()
        assert (rule.finished, rule.announced) == (want_fin, want_ann)
