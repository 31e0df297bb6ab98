"""``memory_growth``: memory rising steadily while the step time is flat (or rises only in a step
or a burst: another process loading the machine), as when a tensor is kept with its graph.

Every ``every`` memory points after ``warmup_points``, the last ``window`` are tested: Theil-Sen
slope and Spearman rho at least ``min_rho``, growing ``min_growth`` of the level over the window
(a quick estimate, the median of the window's last fifth over its first fifth's, picks the windows
worth the exact test). The first rising window of an episode is judged; the episode lasts while
the quick estimate stays at half the bar. If the step time ramps up steadily over the same steps,
the growth is ``state_detach``'s (see :mod:`~trainwatch.rules.builtin.state_detach`), and once
that rule has fired in a segment, this one yields to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.rules.builtin.state_detach import (
    finite_of,
    memory_window,
    span_cap,
)
from trainwatch.rules.config.schema import RuleBase, integer, num
from trainwatch.rules.detectors.growth import Episodes, Tail
from trainwatch.rules.engine.base import Context, Frame, Hit, Rule, fmt, make_hit, pct, rank_causes


@dataclass(frozen=True)
class MemoryConfig(RuleBase):
    window: int = integer(ge=5)
    """Points in the trend window (Theil-Sen slope + Spearman rho)."""
    every: int = integer(ge=1)
    """The trend is tested every N points."""
    warmup_points: int = integer(ge=0)
    """Points skipped at the start of a segment (optimizer state, allocator warm-up)."""
    min_rho: float = num(gt=0, le=1)
    min_growth: float = num(gt=0)
    """Growth over the window as a fraction of the level."""


_CAUSES = rank_causes([
    ("a tensor kept with its graph across steps (e.g. total_loss += loss instead of loss.item())",
     0.7),
    ("a growing list of tensors kept on the device (outputs, predictions)", 0.5),
    ("a cache that grows (memoised tensors, recompilations for new shapes)", 0.3),
    ("allocator fragmentation from varying shapes", 0.2),
])
_FIXES = ("Accumulate metrics with loss.item() or loss.detach()",
          "Move kept outputs to the CPU (.cpu()) or keep only what you need",
          "Compare torch.cuda.memory_summary() at two steps to see what grows")


class MemoryGrowthRule(Rule):
    id = "memory_growth"
    roles_read = ("step_time", "memory")

    def __init__(self, cfg: MemoryConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.det = det = ctx.config.rules["state_detach"]
        """``state_detach``'s parameters: its bars tell a steady step-time ramp."""
        self.cap = span_cap(cfg, det)
        self.memory, self.time = Tail(self.cap), Tail(self.cap)
        self.rises = Episodes(cfg.min_rho, cfg.min_growth)
        self.rewind()

    def rewind(self) -> None:
        self.memory.reset()
        self.time.reset()
        self.rises.active = False
        self.from_step: int | None = None
        """The segment's (or the role's, once moved) first step: state_detach's alerts before
        it are of another series (its log is cleared at a new segment only)."""

    def update(self, frame: Frame) -> list[Hit]:
        mem = self.cfg
        if not mem.enabled:
            return []
        if self.from_step is None and frame.rec_steps.shape[0]:
            self.from_step = int(frame.rec_steps[0])
        mp = self.memory.push(finite_of(frame.role("memory")))
        tp = self.time.push(finite_of(frame.role("step_time")))
        ev = mp.evals(mem.window, mem.every, mem.warmup_points)
        detach = self.ctx.log("state_detach")
        hits = []
        for k, tr in self.rises.starts(ev):
            pos, step, time = ev.at(k)
            if detach.any_between(self.from_step or 0, step, pos) is not None:
                continue  # the same growth, diagnosed as state_detach already
            up, rising, _g_t, evidence = memory_window(self.det, ev, k, tr, tp, self.cap)
            if rising:
                continue  # the step time ramps with it: state_detach's (d)
            slope, _rho, g = tr
            e = int(ev.end[k])
            first, last = float(ev.values[e - mem.window + 1]), float(ev.values[e])
            hits.append(make_hit(
                self.id, pos=pos, severity=mem.severity, step=step, time=time,
                metric=frame.roles.get("memory"),
                message=f"Memory has grown steadily by {pct(g)} over the last "
                        f"{evidence['steps']} steps ({fmt(first)} -> {fmt(last)}, "
                        f"+{fmt(slope * 1000)} per 1k steps) while the step time "
                        + ("rose only in a step or a burst, not steadily with it (another load "
                           "on the machine?)." if up else "is flat."),
                evidence=evidence, causes=_CAUSES, fixes=_FIXES))
        return hits
