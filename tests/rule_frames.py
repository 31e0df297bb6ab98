"""Frames built by hand for rule tests, and a rule's fast paths run beside its reference.

Record ``i`` carries step ``i + 1`` and time ``i + 1.0``; each series its value at record ``i``
(where its ``keep`` mask says so); every role is its own series name.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from trainwatch.rules.engine.base import Context, Frame, Points, Rule


def frames_of(cols: Mapping[str, np.ndarray], cuts: Sequence[int],
              keep: Mapping[str, np.ndarray] | None = None) -> list[Frame]:
    """One frame per piece between consecutive ``cuts``."""
    out = []
    for lo, hi in itertools.pairwise(cuts):
        pos = np.arange(lo, hi, dtype=np.int64)
        steps = pos + 1
        times = steps.astype(np.float64)
        series = {}
        for name, v in cols.items():
            at = pos if keep is None else pos[keep[name][lo:hi]]
            if at.shape[0]:
                series[name] = Points(name, at + 1, v[at], (at + 1).astype(np.float64), at)
        out.append(Frame(0, {r: r for r in cols}, series, (), steps, times, pos,
                         np.zeros(hi - lo, dtype=bool)))
    return out


def fast_and_reference(cls: type[Rule], cfg: Any) -> list[Rule]:
    """The rule with its fast paths, and the same rule with them off (``fast = False``), each
    with its own context."""
    rules = []
    for fast in (True, False):
        r = cls(cfg, Context())
        r.fast = fast
        rules.append(r)
    return rules


def feed_alike(rules: Sequence[Rule], frame: Frame, state: Callable[[Rule], Any] | None = None
               ) -> list[tuple[int, Any]]:
    """Feed ``frame`` to each rule; their hits (and ``state``, if given) must agree. Returns
    the hits as (record, alert)."""
    got = []
    for r in rules:
        r.ctx.frame = frame
        got.append([(h.pos, h.alert) for h in r.update(frame)])
        r.ctx.end_frame(frame)
    assert all(g == got[0] for g in got[1:])
    if state is not None:
        states = [state(r) for r in rules]
        assert all(x == states[0] for x in states[1:])
    return got[0]
