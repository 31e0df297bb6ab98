"""The block rules fed a series cut into frames and the same series as one frame: the blocks do
not depend on the cuts, and neither may the alerts (a live watch and ``trainwatch check`` of the
same file say the same)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rule_frames import frames_of

from trainwatch.rules.engine.base import Context, Rule


def feed(rule: Rule, cols: Mapping[str, np.ndarray], cuts: Sequence[int],
         keep: Mapping[str, np.ndarray] | None = None) -> list[tuple[int, Any]]:
    """The hits of ``rule`` fed the frames between ``cuts``, as (record, alert)."""
    got = []
    for frame in frames_of(cols, cuts, keep):
        rule.ctx.frame = frame
        got += [(h.pos, h.alert) for h in rule.update(frame)]
        rule.ctx.end_frame(frame)
    return got


def cut_and_whole(cls: type[Rule], cfg: Any, cols: Mapping[str, np.ndarray],
                  cuts: Sequence[int], keep: Mapping[str, np.ndarray] | None = None
                  ) -> list[tuple[int, Any]]:
    """The hits of the rule fed the frames between ``cuts``, which must be those of the rule fed
    the whole series as one frame."""
    n = cuts[-1]
    got = feed(cls(cfg, Context()), cols, cuts, keep)
    assert got == feed(cls(cfg, Context()), cols, [0, n], keep)
    return got
