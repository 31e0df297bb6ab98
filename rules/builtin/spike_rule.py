"""What the three spike rules (``loss_spike``, ``grad_explosion``, ``step_time_outlier``) share:
their parameters, the feeding of :class:`~trainwatch.rules.detectors.spike.SpikeDetector` with
one series, and the evidence of an alert. Each rule's text is in its own module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainwatch.rules.config.schema import RuleBase, flag, integer, num
from trainwatch.rules.detectors.episode import ESCALATE, START_ESCALATED
from trainwatch.rules.detectors.spike import SpikeDetector, SpikeEvent
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6


@dataclass(frozen=True)
class SpikeConfig(RuleBase):
    window: int = integer(ge=8)
    """Accepted points in the rolling median/MAD baseline."""
    refresh: int = integer(ge=1)
    """The baseline is recomputed every N accepted points."""
    min_points: int = integer(ge=8)
    """Accepted points needed before the rule may fire (warm-up)."""
    z_threshold: float = num(gt=0)
    """Robust z (deviation over 1.4826 x MAD) at or above which a point is a spike."""
    min_ratio: float = num(ge=1)
    """...and the value must be at least this multiple of the window median."""
    tail_guard: float = num(ge=0)
    """...and its excess over the median at least this multiple of the largest excess among the
    last ``tail_window`` accepted points (heavy-tailed noise raises the bar; 0 disables)."""
    tail_window: int = integer(ge=1)
    persist_points: int = integer(ge=0)
    """Anomalous points in one episode that escalate it to error (0: never)."""
    early_points: int = integer(ge=1)
    """The first N accepted points define the early maximum."""
    early_max_ratio: float = num(gt=1)
    """A value this many times the early maximum escalates to error at once."""
    early_max_fires: bool = flag()
    """Whether that alone (without a robust-z spike) is anomalous."""
    rebase_points: int = integer(ge=1)
    """After this many consecutive anomalous points the level is taken as the new normal."""
    rearm_points: int = integer(ge=1)
    cooldown_steps: int = integer(ge=0)
    lead_steps: int = integer(ge=0)
    """(loss_spike) grad-norm spikes at most this many steps earlier count as "spiked first"."""
    recent_points: int = integer(ge=1)
    """A spike must also *jump* from the recent level, the median of this many last accepted
    points: the window median lags a smooth ramp (a grad norm growing with the LR warm-up)..."""
    jump_share: float = num(ge=0, le=1)
    """...by at least this share of its excess over the window median (0: merely above it)."""

    def conflict(self) -> tuple[tuple[str, ...], str] | None:
        """(the keys that clash, the first one named; why) when keys valid one by one do not go
        together, else None."""
        if self.recent_points > self.window:
            # the detector keeps only `window` accepted points for the recent level
            return ("recent_points", "window"), (f"must be at most window ({self.window}), "
                                                 f"got {self.recent_points}")
        return None


CLIP = "Clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
"""The first fix of an unstable update (loss_spike, grad_explosion)."""


class SpikeRule(Rule):
    """One detector on the finite, non-zero points of ``role``; a subclass says what it means."""

    role = ""
    log_flagged = False
    """Whether the anomalous points go to the context's log of this rule (for another rule)."""

    def __init__(self, cfg: SpikeConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.det = SpikeDetector(cfg)

    def rewind(self) -> None:
        self.det.rewind()

    def update(self, frame: Frame) -> list[Hit]:
        pts = frame.role(self.role)
        if pts is None:
            return []
        # exact zeros (a hinge, margin or detection loss on easy batches) are no spike and no
        # part of the level: in the baseline, a loss that is 0 on half its steps had a median of
        # 0 and every other value "spiked"
        f = pts.finite().nonzero()
        if not f.values.shape[0]:
            return []
        c = self.shift(f.name)
        events, flagged = self.det.update(f.values + c if c else f.values, f.steps)
        if self.log_flagged and flagged.shape[0]:
            self.ctx.log(self.id).extend(f.pos[flagged].tolist(), f.steps[flagged].tolist())
        return [self.hit(f, ev._replace(value=ev.value - c, median=ev.median - c,
                                        early_max=ev.early_max - c) if c else ev)
                for ev in events]

    def shift(self, name: str) -> float:
        """What the detector sees is the values plus this; events come back on the values'
        own scale."""
        return 0.0

    def hit(self, f: Points, ev: SpikeEvent) -> Hit:
        raise NotImplementedError

    def evidence(self, ev: SpikeEvent) -> dict[str, object]:
        ratio = ev.value / ev.median if ev.median and math.isfinite(ev.median) else math.nan
        return {
            "value": r6(ev.value),
            "window_median": r6(ev.median),
            "window_mad": r6(ev.mad),
            "robust_z": r6(ev.z),
            "ratio_to_median": r6(ratio),
            "window_points": self.cfg.window,
            "early_max": r6(ev.early_max + 0.0),  # (+ 0.0: an early maximum of -0.0 reads 0.0)
            "episode_points": ev.episode_points,
        }

    def severity_of(self, ev: SpikeEvent) -> str:
        return "error" if ev.kind in (ESCALATE, START_ESCALATED) else self.cfg.severity

    def alert_at(self, f: Points, ev: SpikeEvent, message: str, evidence: dict[str, object],
                 causes: tuple[Cause, ...], fixes: tuple[str, ...]) -> Hit:
        """The hit at the event's point (its step, time and record)."""
        i = ev.index
        return self.alert(pos=int(f.pos[i]), severity=self.severity_of(ev), step=int(f.steps[i]),
                          time=float(f.times[i]), metric=f.name, message=message,
                          evidence=evidence, causes=causes, fixes=fixes)


def times_median(value: float, median: float, shown: str) -> str:
    """"12x the median 0.3", or, over a window median of 0, that it is (no "infx")."""
    if median:
        return f"{fmt(value / median)}x the median {shown}"
    return f"the window median being {shown}"


def why(ev: SpikeEvent, name: str) -> str:
    """Why an alert escalates ("" for a start): it persists, or it is severe."""
    if ev.kind == ESCALATE and not ev.severe:
        return f"{name} has stayed high for {ev.episode_points} points"
    if ev.severe:
        return f"{name} is {fmt(ev.value / ev.early_max)}x its early maximum {fmt(ev.early_max)}"
    return ""
