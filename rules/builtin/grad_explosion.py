"""``grad_explosion``: the gradient norm jumps far above its recent level.

Watches the ``grad_norm`` role (finite, non-zero values) with the spike detector
(:mod:`trainwatch.rules.detectors.spike`), at least ``min_ratio`` (3) times the window median; a
value ``early_max_ratio`` (10) times the early maximum is an explosion by itself. Its anomalous
points go to the context's log, where ``loss_spike`` and ``nan_inf`` ask whether the gradient
norm spiked first. Parameters: :class:`~trainwatch.rules.builtin.spike_rule.SpikeConfig`.
"""

from __future__ import annotations

import math

from trainwatch.rules.builtin.spike_rule import CLIP, SpikeRule, times_median, why
from trainwatch.rules.detectors.episode import ESCALATE
from trainwatch.rules.detectors.spike import SpikeEvent
from trainwatch.rules.engine.base import Hit, Points, fmt, r6, rank_causes

_CAUSES = rank_causes([
    ("the learning rate is too high (or warm-up too short)", 0.6),
    ("no gradient clipping, or a clipping threshold that is too loose", 0.5),
    ("a bad batch (extreme inputs, mislabelled samples)", 0.35),
    ("numerical instability: fp16 overflow, exploding attention logits", 0.25),
])
_FIXES = (
    CLIP,
    "Lower the learning rate (2-10x) or lengthen the warm-up",
    "Use bf16 instead of fp16, or QK-layernorm / z-loss for large transformers",
)


class GradExplosionRule(SpikeRule):
    id = "grad_explosion"
    role = "grad_norm"
    roles_read = ("grad_norm",)
    log_flagged = True  # loss_spike and nan_inf ask whether the gradient norm spiked first

    def hit(self, f: Points, ev: SpikeEvent) -> Hit:
        step, pos = int(f.steps[ev.index]), int(f.pos[ev.index])
        if ev.kind == ESCALATE:
            lead = f"The gradient norm is still exploding at step {step} ({fmt(ev.value)})"
        elif math.isfinite(ev.median):
            lead = (f"The gradient norm exploded to {fmt(ev.value)} at step {step} "
                    f"({times_median(ev.value, ev.median, fmt(ev.median))})")
        else:  # (severe before the baseline is warm)
            lead = f"The gradient norm exploded to {fmt(ev.value)} at step {step}"
        because = why(ev, "it")
        evidence = self.evidence(ev)
        lr = self.ctx.latest("lr", pos)
        if lr is not None:
            evidence["lr"] = r6(lr)
        fixes = (*_FIXES, f"Inspect the batch at step {step}")
        return self.alert_at(f, ev, f"{lead}{'; ' + because if because else ''}.", evidence,
                             _CAUSES, fixes)
