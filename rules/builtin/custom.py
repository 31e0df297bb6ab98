"""User threshold rules from the ``custom:`` list of a rules file.

A rule fires when its metric (a series name, or a role) has been above ``above`` (or below
``below``) for ``for_steps`` steps: from the first point of the run of violations to the current
one, ``step - first + 1 >= for_steps``. It fires once per run of violations. A value that is
not finite (NaN, inf) neither continues nor ends a run (``nan_inf`` tells it).

A metric named by role follows the role: when the role moves to another series mid-run (a name
ranked higher for it appears, perhaps at another scale), the count starts over on the new series
instead of adding its steps to the old one's. The rule notices the change of series itself (the
engine cuts a frame where a role moves, so one frame reads one series), which also keeps a
metric named by a series counting when a role of the same name moves elsewhere.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from trainwatch.rules.config.loading import CustomRuleConfig
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6


class _SafeDict(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render(template: str, values: dict[str, Any]) -> str:
    """``str.format_map`` that leaves unknown fields as they are and never raises."""
    try:
        return string.Formatter().vformat(template, (), _SafeDict(values))
    except (ValueError, IndexError, AttributeError, KeyError):
        return template


class CustomRule(Rule):
    def __init__(self, cfg: CustomRuleConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.id = cfg.id
        self.rewind()

    def names_read(self) -> tuple[str, ...]:
        return (self.cfg.metric,)

    def rewind(self) -> None:
        self.first: int | None = None
        """Step of the first point of the current run of violations."""
        self.fired = False
        self.series: str | None = None
        """Name of the series the count was built on (a role's series changes when it moves)."""

    def _points(self, frame: Frame) -> Points | None:
        """The metric's points: the series of that name, else the role's."""
        name = self.cfg.metric
        return frame.series[name] if name in frame.series else frame.role(name)

    def update(self, frame: Frame) -> list[Hit]:
        cfg: CustomRuleConfig = self.cfg
        pts = self._points(frame)
        if pts is None or not len(pts):
            return []
        if pts.name != self.series:  # a role moved: its new series starts its own count
            self.first, self.fired, self.series = None, False, pts.name
        f = pts.finite()  # (a value that is not finite neither holds nor breaks a run)
        v = f.values
        if not v.shape[0]:
            return []
        bad = np.zeros(v.shape[0], dtype=bool)
        if cfg.above is not None:
            bad |= v > cfg.above
        if cfg.below is not None:
            bad |= v < cfg.below
        if not bad.any():
            self.first, self.fired = None, False
            return []
        # runs of violations: each point's run (0: the one going on from the last frame)
        carried = self.first is not None
        new = bad & ~np.concatenate(([carried], bad[:-1]))
        rid = np.cumsum(new)
        first = np.concatenate(([self.first or 0], f.steps[new]))[rid]
        # each run fires at its first point held for for_steps steps (the carried one: once)
        at = np.flatnonzero(bad & (f.steps - first + 1 >= cfg.for_steps))
        runs = rid[at]
        once = np.concatenate(([True], runs[1:] != runs[:-1])) & ~((runs == 0) & self.fired)
        fired = set(runs[once].tolist()) | ({0} if self.fired else set())
        if bad[-1]:
            self.first, self.fired = int(first[-1]), int(rid[-1]) in fired
        else:
            self.first, self.fired = None, False
        return [self._hit(f, i, int(first[i])) for i in at[once].tolist()]

    def _hit(self, f: Points, i: int, since: int) -> Hit:
        cfg: CustomRuleConfig = self.cfg
        value = float(f.values[i])
        high = cfg.above is not None and value > cfg.above
        threshold = cfg.above if high else cfg.below
        values = {"metric": f.name, "value": fmt(value), "threshold": fmt(threshold),
                  "step": int(f.steps[i]), "since": since, "for_steps": cfg.for_steps}
        if cfg.message:
            message = render(cfg.message, values)
        else:
            side = "above" if high else "below"
            message = (f"{f.name} is {fmt(value)}, {side} {fmt(threshold)}"
                       + (f" since step {since}." if cfg.for_steps > 1 else "."))
        return self.alert(pos=int(f.pos[i]), severity=cfg.severity, step=int(f.steps[i]),
                          time=float(f.times[i]), metric=f.name, message=message,
                          evidence={"value": r6(value), "threshold": threshold,
                                    "since_step": since, "for_steps": cfg.for_steps})
