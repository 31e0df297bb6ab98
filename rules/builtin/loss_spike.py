"""``loss_spike``: the training loss jumps far above its recent level.

Watches the ``loss`` role (finite, non-zero values) with the spike detector
(:mod:`trainwatch.rules.detectors.spike`): robust z against a rolling median/MAD of the points
it accepted, a ratio bar, a tail guard and a jump test. The alert says whether the gradient norm
spiked first (``grad_explosion``'s log, within ``lead_steps``): an unstable update, not a bad
batch. Parameters: :class:`~trainwatch.rules.builtin.spike_rule.SpikeConfig`.
"""

from __future__ import annotations

from trainwatch.rules.builtin.spike_rule import CLIP, SpikeConfig, SpikeRule, times_median, why
from trainwatch.rules.detectors.episode import ESCALATE, START_ESCALATED
from trainwatch.rules.detectors.spike import SpikeEvent
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Hit, Points, fmt, rank_causes

_CAUSES = [
    ("a bad or unusual batch (corrupt or mislabelled samples, an outlier sequence)", 0.5),
    ("the learning rate is too high for this phase (peak LR or warm-up too short)", 0.4),
    ("fp16 loss-scale instability", 0.15),
]
_RANKED = {
    False: rank_causes(_CAUSES),
    True: rank_causes([*_CAUSES, ("the run left its stable regime (not a one-off batch)", 0.6)]),
}
"""The causes, by whether the loss stays high (escalated by persistence, not severe)."""
_GRAD_FIRST = 0.7
"""Confidence of "the gradient norm spiked first": above every other cause."""
_FIXES = (
    "Lower the peak learning rate or lengthen the warm-up",
    ("Skip a batch whose loss is far above the running median (OLMo/PaLM-style spike "
     "skipping), or rewind to a checkpoint before the spike"),
)


class LossSpikeRule(SpikeRule):
    id = "loss_spike"
    role = "loss"
    roles_read = ("loss",)
    lane_role = "loss"

    def hit(self, f: Points, ev: SpikeEvent) -> Hit:
        step, pos = int(f.steps[ev.index]), int(f.pos[ev.index])
        cfg: SpikeConfig = self.cfg
        evidence = self.evidence(ev)
        g = self.ctx.log("grad_explosion").any_between(step - cfg.lead_steps, step, pos)
        evidence["grad_spiked_first"] = g is not None
        if g is not None:
            evidence["grad_spike_step"] = g
        if ev.kind == ESCALATE:
            lead = (f"The {f.name} spike persists at step {step}: {fmt(ev.value)} against a "
                    f"median of {fmt(ev.median)}")
        else:
            lead = (f"The {f.name} spiked to {fmt(ev.value)} at step {step} "
                    f"({times_median(ev.value, ev.median, fmt(ev.median))}, "
                    f"robust z {fmt(ev.z)})")
        because = why(ev, "the loss")
        causes = _RANKED[ev.kind in (ESCALATE, START_ESCALATED) and not ev.severe]
        inspect = f"Log the sample ids of the batch at step {step} and inspect them"
        if g is None:
            fixes = (inspect, CLIP, *_FIXES)
        else:  # an unstable update: the likeliest cause, and clipping comes first
            causes = (Cause((f"an unstable update: the gradient norm spiked first (step {g}); "
                             "LR too high or no gradient clipping"), _GRAD_FIRST), *causes)
            fixes = (CLIP, inspect, *_FIXES)
        message = f"{lead}{'; ' + because if because else ''}."
        return self.alert_at(f, ev, message, evidence, causes, fixes)
