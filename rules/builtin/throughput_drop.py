"""``throughput_drop``: throughput sustained well below its recent level.

Uses the throughput role, or the step time (inverted) when there is none. Block medians are
compared with the median of the last ``ref_windows`` normal blocks; low blocks stay out of the
reference, so a lasting drop is one episode. A drop that ``state_detach`` already explained
(step time rising with the graph) is not reported twice.

Episodes, not floods: on a machine other processes share, throughput dips and recovers every
fraction of a second. ``for_windows`` low blocks start an episode (blocks in the hysteresis band
between ``drop`` and ``recover`` neither count nor break the count); once it has fired, the rule
re-arms only after throughput has stayed recovered for ``rearm_windows`` blocks spanning
``rearm_seconds``. A drop with nothing in the run to explain it (no memory growth, no growing
graph) points first at other processes sharing the CPU or GPU.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from trainwatch.humanize import fmt_duration
from trainwatch.rules.config.models import ThroughputConfig
from trainwatch.rules.detectors.blocks import Blocks, drive
from trainwatch.rules.detectors.median_blocks import SHORT, MedianBlocks
from trainwatch.rules.detectors.stats import median_sorted, small_median, windows
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


_FEW = 32
"""Blocks of a frame up to which Python's min and max beat numpy's (live frames hold one or
two)."""


_CAUSES = {growing: _ranked_causes(growing) for growing in (False, True)}
"""throughput_drop's causes, ranked once, by whether memory grows too."""
_FIXES = (("Check what else runs on the machine (top, nvidia-smi): other processes, clocks, "
           "temperature"),
          "Compare data time and compute time per step (profile one step)",
          "Raise DataLoader num_workers / prefetch_factor")


class ThroughputDropRule(Rule):
    reads_unresolved = (("throughput", "step_time"),)  # (no throughput series: the inverse)
    fast = True
    """Take a live frame's values as Python floats (:class:`MedianBlocks`), a frame's blocks
    whose lowest is above the bar in one test, and runs of quiet blocks in one vectorised step
    (tests turn it off to compare)."""
    id = "throughput_drop"
    roles_read = ("throughput", "step_time")

    def __init__(self, cfg: ThroughputConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rewind()

    def rewind(self) -> None:
        self.blocks = MedianBlocks(self.cfg.window)  # the medians are all it reads
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
        if pts is None:
            return []
        m = pts.values.shape[0]
        if not m:
            return []
        vl = pts.values.tolist() if self.fast and m <= SHORT else None
        # a live frame whose values are all finite (and above 0 for step times; the usual
        # frame) goes in as Python floats (a NaN or an inf makes the sum so, as an overflow
        # does: the array path takes those frames)
        if vl is not None and math.isfinite(sum(vl)) and (not inverted or min(vl) > 0.0):
            meds = self.blocks.push_values([1.0 / x for x in vl] if inverted else vl, pts)
        else:
            f = pts.finite()
            if inverted:
                ok = f.values > 0
                f = f.take(ok) if not ok.all() else f
                f = Points(f.name, f.steps, 1.0 / f.values, f.times, f.pos)
            meds = self.blocks.push(f, short=self.fast)
        if not meds:
            return []
        i0 = self._filling(meds) if self.fast else 0
        if i0 == len(meds):
            return []
        b = self.blocks.blocks()
        hits: list[Hit] = []

        def slow(i: int) -> None:
            hit = self._block(b, i0 + i, meds[i0 + i], inverted, pts.name)
            if hit is not None:
                hits.append(hit)

        drive(len(meds) - i0, self._ready,
              lambda i, j: self._quiet_prefix(b.med[i0 + i:i0 + j]), slow)
        return hits

    def _filling(self, meds: list[float]) -> int:
        """Take leading blocks the quick way, as :meth:`_block` would: the warm-up's; then, with
        no episode under way, every block when none can be low (each block's reference is a
        median of earlier blocks, so at most their maximum: a frame whose lowest block is above
        ``1 - drop`` times that has no low block, the common case); else the normal ones while
        the reference fills (:meth:`_quiet_prefix` needs a full one). Returns how many."""
        cfg: ThroughputConfig = self.cfg
        ref, n, i = self.ref, len(meds), 0
        if self.nblk < cfg.warmup_windows:
            i = min(cfg.warmup_windows - self.nblk, n)
            ref.extend(meds[:i])
            self.nblk += i
        if self.low or self.active or not ref or i == n:
            return i
        bar = 1.0 - cfg.drop
        # (a live frame's few medians: min and max of the Python floats, without numpy's
        # per-call cost; they are numpy's, as no median is NaN: finite values or inverses)
        if n - i <= _FEW:
            rest = meds[i:] if i else meds
            lo, hi = min(rest), max(rest)
        else:
            med = self.blocks.medians()[i:]
            lo, hi = float(np.minimum.reduce(med)), float(np.maximum.reduce(med))
        if bar > 0 and lo > bar * max(hi, max(ref)):
            ref.extend(meds[i:])
            self.nblk += n - i
            return n
        while i < n and len(ref) < (ref.maxlen or 0):
            if meds[i] <= bar * small_median(ref):
                break  # a low block: the reference path takes it
            ref.append(meds[i])
            self.nblk += 1
            i += 1
        return i

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

    def _ready(self) -> bool:
        """Whether the state allows :meth:`_quiet_prefix` (checked without numpy work)."""
        return (self.fast and not self.low and not self.active
                and len(self.ref) == self.ref.maxlen and self.nblk >= self.cfg.warmup_windows)

    def _quiet_prefix(self, med: np.ndarray) -> int:
        """Take in one step the leading blocks that are normal (the common case): each block's
        reference is the median of the previous ``ref_windows`` blocks when all of them were
        normal. Returns how many blocks were taken; the rest go through :meth:`_block`."""
        cfg: ThroughputConfig = self.cfg
        R = self.ref.maxlen or 0
        seq = np.concatenate([np.asarray(self.ref, dtype=np.float64), med])
        ref = median_sorted(np.sort(windows(seq, R)[: med.shape[0]], axis=1))
        low = (med <= (1.0 - cfg.drop) * ref).nonzero()[0]
        k = int(low[0]) if low.shape[0] else int(med.shape[0])
        if k:
            self.ref.extend(med[:k].tolist())
            self.nblk += k
        return k

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
                   and small_median(mem[-4:].tolist()) > 1.1 * small_median(mem[:4].tolist()))
        # nothing in the run itself moved with the drop (no memory growth; a growing graph is
        # state_detach's, checked before): the likeliest cause is outside the run
        causes, fixes = _CAUSES[bool(growing)], _FIXES
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(b.time[i]),
                          metric=name, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
