"""``step_time_outlier``: one training step takes far longer than usual.

Watches the ``step_time`` role (finite, non-zero values) with the spike detector
(:mod:`trainwatch.rules.detectors.spike`), with no tail guard. A slow step must also take
``min_excess_s`` more than the median: the detector sees the step times shifted up (see
:meth:`StepTimeOutlierRule.shift`). A note, never an error: sustained slowness is
``throughput_drop``'s business.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainwatch.humanize import fmt_duration
from trainwatch.rules.builtin.spike_rule import SpikeConfig, SpikeRule, times_median
from trainwatch.rules.config.schema import num
from trainwatch.rules.detectors.episode import ESCALATE
from trainwatch.rules.detectors.spike import SpikeEvent
from trainwatch.rules.engine.base import Context, Hit, Points, fmt, rank_causes


@dataclass(frozen=True)
class StepTimeConfig(SpikeConfig):
    min_excess_s: float = num(ge=0)
    """A slow step must also take this many seconds more than the median: on a shared CPU a 1 ms
    step often takes 3 ms, which is jitter, not a stall (series named ``*_ms`` are in ms)."""


_CAUSES = rank_causes([
    ("the data loader stalled (slow storage, too few workers)", 0.5),
    ("a pause inside the step: garbage collection, a checkpoint or an eval", 0.4),
    ("another process competing for the GPU or CPU", 0.3),
])
_FIXES = (
    "Raise DataLoader num_workers, set pin_memory=True and persistent_workers=True",
    "Move checkpoint and eval work out of the timed step",
    "Check nvidia-smi / top for other processes",
)
_DURATION_UPTO = 1e5
"""Step times below this are shown as durations; above, as numbers (not a duration: garbage)."""


class StepTimeOutlierRule(SpikeRule):
    id = "step_time_outlier"
    role = "step_time"
    roles_read = ("step_time",)

    def __init__(self, cfg: StepTimeConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self._shifts: dict[str, float] = {}
        """The shift of each series name, taken once."""

    def severity_of(self, ev: SpikeEvent) -> str:
        return self.cfg.severity

    def shift(self, name: str) -> float:
        """``c = min_excess / (min_ratio - 1)``: robust z is unchanged by a shift, and ``x -
        median >= (min_ratio - 1) (median + c)`` asks a slow step to pass the ratio AND an
        absolute excess, so the jitter of a 1 ms loop on a shared CPU never opens an episode
        (whose cooldown would hide the real stall that follows)."""
        c = self._shifts.get(name)
        if c is None:
            cfg: StepTimeConfig = self.cfg
            scale = 1000.0 if name.endswith("_ms") else 1.0
            c = self._shifts[name] = cfg.min_excess_s * scale / max(cfg.min_ratio - 1.0, 1e-9)
        return c

    def hit(self, f: Points, ev: SpikeEvent) -> Hit:
        step = int(f.steps[ev.index])
        dur = fmt_duration(ev.value) if ev.value < _DURATION_UPTO else fmt(ev.value)
        if ev.kind == ESCALATE:
            message = (f"Steps keep running slow ({ev.episode_points} slow steps since the "
                       f"episode began; step {step} took {dur}).")
        else:
            med = fmt_duration(ev.median) if math.isfinite(ev.median) else "-"
            message = f"Step {step} took {dur}, {times_median(ev.value, ev.median, med)}."
        return self.alert_at(f, ev, message, self.evidence(ev), _CAUSES, _FIXES)
