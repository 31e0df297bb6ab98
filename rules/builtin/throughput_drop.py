"""``throughput_drop``: throughput sustained well below its recent level.

Method: the throughput (or the step time, inverted, when there is none) is smoothed into block
medians of ``window`` points, each compared with the median of the last ``ref_windows`` normal
blocks; low blocks stay out of the reference, so a lasting drop is one episode. A drop that ``state_detach`` already explained
(step time rising with the graph) is not reported twice.

Episodes, not floods: on a machine other processes share, throughput dips and recovers every
fraction of a second. ``for_windows`` low blocks start an episode (blocks in the hysteresis band
between ``drop`` and ``recover`` neither count nor break the count); once it has fired, the rule
re-arms only after throughput has stayed recovered for ``rearm_windows`` blocks spanning
``rearm_seconds``. A drop with nothing in the run to explain it (no memory growth, no growing
graph) points first at other processes sharing the CPU or GPU.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trainwatch.humanize import fmt_duration
from trainwatch.rules.config.schema import RuleBase, integer, num
from trainwatch.rules.detectors.blocks import Blocks, BlockStream
from trainwatch.rules.detectors.stats import small_median
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import (
    Context,
    Frame,
    Hit,
    Points,
    Rule,
    fmt,
    pct,
    r6,
    rank_causes,
)


@dataclass(frozen=True)
class ThroughputConfig(RuleBase):
    window: int = integer(ge=2)
    ref_windows: int = integer(ge=1)
    """Reference: median of the last N normal block medians."""
    warmup_windows: int = integer(ge=1)
    drop: float = num(gt=0, lt=1)
    """Throughput at or below (1 - drop) x the reference (step time from 1 / (1 - drop) x)."""
    for_windows: int = integer(ge=1)
    """Low blocks (not necessarily in a row: blocks between low and recovered do not break the
    count) before the rule fires."""
    recover: float = num(gt=0, lt=1)
    """Throughput at or above (1 - recover) x the reference has recovered (below ``drop``: the
    band between the two is hysteresis, where a wobble neither starts nor ends an episode)."""
    rearm_windows: int = integer(ge=1)
    """After an alert, the rule re-arms once throughput has stayed recovered for this many
    blocks..."""
    rearm_seconds: float = num(ge=0)
    """...and this many seconds (a wobble on a shared machine is one episode, not one per dip)."""


MEM_GREW = 1.1
"""Memory's last points this much above its first of ``4 window``: it grows too (a cause)."""


def _ranked_causes(growing: bool) -> tuple[Cause, ...]:
    causes = [(("other processes share the CPU or GPU (another job, a busy node), or thermal "
                "throttling"), 0.4 if growing else 0.6),
              (("data loading became the bottleneck (slower storage, a new shard, too few "
                "workers)"), 0.4),
              ("the batch composition changed (longer sequences, larger images)", 0.2)]
    if growing:
        causes.append((("memory is growing too: allocator churn, swapping, or a retained graph"),
                       0.5))
    return rank_causes(causes)


_CAUSES = {growing: _ranked_causes(growing) for growing in (False, True)}
"""throughput_drop's causes, ranked once, by whether memory grows too."""
_FIXES = (("Check what else runs on the machine (top, nvidia-smi): other processes, clocks, "
           "temperature"),
          "Compare data time and compute time per step (profile one step)",
          "Raise DataLoader num_workers / prefetch_factor")


class ThroughputDropRule(Rule):
    reads_unresolved = (("throughput", "step_time"),)  # (no throughput series: the inverse)
    id = "throughput_drop"
    roles_read = ("throughput", "step_time")

    def __init__(self, cfg: ThroughputConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rewind()

    def rewind(self) -> None:
        self.blocks = BlockStream(self.cfg.window, noise=False)  # (it reads the medians)
        self.ref: deque[float] = deque(maxlen=self.cfg.ref_windows)
        self.nblk = 0
        self.low = 0
        """Low blocks of the episode under way (0: none)."""
        self.active = False
        """An alert fired for the episode under way (until the rule re-arms)."""
        self.since = 0
        self.calm = 0
        """Recovered blocks in a row since the alert."""
        self.calm_from = 0.0
        """Time of the last block before them (the recovery's start)."""

    def update(self, frame: Frame) -> list[Hit]:
        pts = frame.role("throughput")
        inverted = False
        if pts is None and frame.roles.get("throughput") is None:
            pts = frame.role("step_time")
            inverted = True
        if pts is None or not len(pts):
            return []
        f = pts.finite()
        if inverted:
            ok = f.values > 0
            f = f.take(ok) if not ok.all() else f
            f = Points(f.name, f.steps, 1.0 / f.values, f.times, f.pos)
        b = self.blocks.push(f)
        hits: list[Hit] = []
        for i, med in enumerate(b.med.tolist()):
            hit = self._block(b, i, med, inverted, pts.name)
            if hit is not None:
                hits.append(hit)
        return hits

    def _block(self, b: Blocks, i: int, med: float, inverted: bool, name: str) -> Hit | None:
        """One block, the reference."""
        cfg: ThroughputConfig = self.cfg
        self.nblk += 1
        if self.nblk <= cfg.warmup_windows or not self.ref:
            self.ref.append(med)
            return None
        ref = small_median(self.ref)
        low = med <= (1.0 - cfg.drop) * ref
        recovered = not low and med >= (1.0 - cfg.recover) * ref
        if self.active:
            if not recovered:
                self.calm, self.calm_from = 0, float(b.time[i])
                return None
            self.ref.append(med)
            self.calm += 1
            if self.calm >= cfg.rearm_windows and b.time[i] - self.calm_from >= cfg.rearm_seconds:
                self.active, self.low = False, 0
            return None
        if not low:
            if recovered or not self.low:  # (in the band during an episode: no change)
                self.ref.append(med)
                self.low = 0
            return None
        self.low += 1
        if self.low == 1:
            self.since = int(b.step[i])
        if self.low < cfg.for_windows:
            return None
        self.active, self.calm, self.calm_from = True, 0, float(b.time[i])
        if self.ctx.log("state_detach").last(int(b.pos[i])) is not None:
            return None  # explained: the graph grows every step
        return self._hit(b, i, med, ref, inverted, name)

    def _hit(self, b: Blocks, i: int, med: float, ref: float, inverted: bool, name: str) -> Hit:
        cfg: ThroughputConfig = self.cfg
        pos, step = int(b.pos[i]), int(b.step[i])
        drop = 1.0 - med / ref
        if inverted:
            message = (f"Steps take {fmt(ref / med)}x longer than before ({fmt_duration(1 / med)} "
                       f"vs {fmt_duration(1 / ref)}) since step {self.since}.")
            evidence = {"step_time": r6(1 / med), "reference_step_time": r6(1 / ref)}
        else:
            message = (f"Throughput dropped {pct(drop)} to {fmt(med)}/s (from {fmt(ref)}/s) "
                       f"since step {self.since}.")
            evidence = {"throughput": r6(med), "reference": r6(ref)}
        evidence.update({"drop": r6(drop), "since_step": self.since, "window_points": cfg.window})
        _s, mem = self.ctx.recent("memory", pos, 4 * cfg.window)
        # (np.median's first call in a process imports numpy.ma, ~20 ms)
        growing = (mem.shape[0] >= 8
                   and small_median(mem[-4:].tolist()) > MEM_GREW * small_median(mem[:4].tolist()))
        # nothing in the run itself moved with the drop (no memory growth; a growing graph is
        # state_detach's, checked before): the likeliest cause is outside the run
        causes, fixes = _CAUSES[bool(growing)], _FIXES
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(b.time[i]),
                          metric=name, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
