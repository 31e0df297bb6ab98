"""Spike rules: ``loss_spike``, ``grad_explosion`` and ``step_time_outlier``.

All three run :class:`~trainwatch.rules.detectors.spike_detector.SpikeDetector` on one role; they differ in
what a spike means and what to do about it. ``grad_explosion`` runs first on a frame and logs its
anomalous points, so ``loss_spike`` can say whether the gradient norm spiked first.
"""

from __future__ import annotations

import math

from trainwatch.humanize import fmt_duration
from trainwatch.rules.config.models import SpikeConfig, StepTimeConfig
from trainwatch.rules.detectors.episode import ESCALATE, START_ESCALATED
from trainwatch.rules.detectors.spike_detector import SpikeDetector, SpikeEvent
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6, rank_causes


class SpikeRule(Rule):
    role = ""
    log_flagged = False
    """Whether the anomalous points go to the context's log of this rule (only where another
    rule asks for them: a log costs a tuple per point)."""

    def __init__(self, cfg: SpikeConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.det = SpikeDetector(cfg)

    def rewind(self) -> None:
        self.det.rewind()

    def update(self, frame: Frame) -> list[Hit]:
        pts = frame.role(self.role)
        if pts is None or not pts.values.shape[0]:
            return []
        # exact zeros (a hinge, margin or detection loss on easy batches, no gradient on them)
        # are no spike and no part of the level: kept in the baseline, a loss that is 0 on half
        # its steps had a window median of 0 and every non-zero value "spiked"
        f = pts.finite().nonzero()
        if not f.values.shape[0]:
            return []
        c = self._shift(f)
        events, flagged = self.det.update(f.values + c if c else f.values, f.steps)
        if self.log_flagged and flagged.shape[0]:
            self.ctx.log(self.id).extend(f.pos[flagged].tolist(), f.steps[flagged].tolist())
        if not events:  # (nearly every frame)
            return []
        if c:  # (positional: _replace takes keywords through a Python loop)
            events = [SpikeEvent(ev.index, ev.kind, ev.value - c, ev.median - c, ev.mad, ev.z,
                                 ev.early_max - c, ev.severe, ev.episode_points)
                      for ev in events]
        return [self._hit(f, ev) for ev in events]

    def _shift(self, f: Points) -> float:
        """What the detector sees is the values plus this (0: the values themselves); events
        come back on the values' own scale."""
        return 0.0

    def _severity(self, ev: SpikeEvent) -> str:
        return "error" if ev.kind in (ESCALATE, START_ESCALATED) else self.cfg.severity

    def _evidence(self, f: Points, ev: SpikeEvent) -> dict[str, object]:
        ratio = ev.value / ev.median if ev.median and math.isfinite(ev.median) else math.nan
        return {
            "value": r6(ev.value),
            "window_median": r6(ev.median),
            "window_mad": r6(ev.mad),
            "robust_z": r6(ev.z),
            "ratio_to_median": r6(ratio),
            "window_points": self.cfg.window,
            # (+ 0.0: a zero early maximum is -0.0 or 0.0 as the frames came, Python's max keeping
            # the first of equal values and numpy's its own; the evidence reads the same either way)
            "early_max": r6(ev.early_max + 0.0),
            "episode_points": ev.episode_points,
        }

    def _hit(self, f: Points, ev: SpikeEvent) -> Hit:
        raise NotImplementedError

    def _alert(self, f: Points, ev: SpikeEvent, message: str, evidence: dict[str, object],
               causes: tuple[Cause, ...], fixes: tuple[str, ...]) -> Hit:
        """The hit at the event's point (its step, time and record)."""
        i = ev.index
        return self.alert(pos=int(f.pos[i]), severity=self._severity(ev), step=int(f.steps[i]),
                          time=float(f.times[i]), metric=f.name, message=message,
                          evidence=evidence, causes=causes, fixes=fixes)


def _times_median(value: float, median: float, shown: str) -> str:
    """"12x the median 0.3", or, over a window median of 0, that it is (no "infx")."""
    if median:
        return f"{fmt(value / median)}x the median {shown}"
    return f"the window median being {shown}"


def _why(ev: SpikeEvent, name: str, cfg: SpikeConfig) -> str:
    if ev.kind == ESCALATE and not ev.severe:
        return f"{name} has stayed high for {ev.episode_points} points"
    if ev.severe:
        return f"{name} is {fmt(ev.value / ev.early_max)}x its early maximum {fmt(ev.early_max)}"
    return ""


_LOSS_CAUSES = [
    ("a bad or unusual batch (corrupt or mislabelled samples, an outlier sequence)", 0.5),
    ("the learning rate is too high for this phase (peak LR or warm-up too short)", 0.4),
    ("fp16 loss-scale instability", 0.15),
]
_LOSS_RANKED = {
    False: rank_causes(_LOSS_CAUSES),
    True: rank_causes([*_LOSS_CAUSES, ("the run left its stable regime (not a one-off batch)", 0.6)]),
}
"""loss_spike's causes (ranked once), by whether the loss stays high (escalated, not severe)."""
_LOSS_GRAD_FIRST = 0.7
"""Confidence of "the gradient norm spiked first": above every other cause of a loss spike."""
_CLIP = "Clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
_LOSS_FIXES = (
    "Lower the peak learning rate or lengthen the warm-up",
    ("Skip a batch whose loss is far above the running median (OLMo/PaLM-style spike "
     "skipping), or rewind to a checkpoint before the spike"),
)


class LossSpikeRule(SpikeRule):
    id = "loss_spike"
    role = "loss"
    roles_read = ("loss",)

    def _hit(self, f: Points, ev: SpikeEvent) -> Hit:
        i = ev.index
        step, pos = int(f.steps[i]), int(f.pos[i])
        cfg: SpikeConfig = self.cfg
        ev_d = self._evidence(f, ev)
        g = self.ctx.log("grad_explosion").any_between(step - cfg.lead_steps, step, pos)
        ev_d["grad_spiked_first"] = g is not None
        if g is not None:
            ev_d["grad_spike_step"] = g
        lead = self._lead(ev, step, f.name)
        why = _why(ev, "the loss", cfg)
        message = f"{lead}{'; ' + why if why else ''}."
        causes = _LOSS_RANKED[ev.kind in (ESCALATE, START_ESCALATED) and not ev.severe]
        inspect = f"Log the sample ids of the batch at step {step} and inspect them"
        if g is None:
            fixes = (inspect, _CLIP, *_LOSS_FIXES)
        else:  # an unstable update: the likeliest cause, and clipping comes first
            causes = (Cause((f"an unstable update: the gradient norm spiked first (step {g}); "
                             "LR too high or no gradient clipping"), _LOSS_GRAD_FIRST), *causes)
            fixes = (_CLIP, inspect, *_LOSS_FIXES)
        return self._alert(f, ev, message, ev_d, causes, fixes)

    @staticmethod
    def _lead(ev: SpikeEvent, step: int, name: str) -> str:
        if ev.kind == ESCALATE:
            return f"The {name} spike persists at step {step}: {fmt(ev.value)} against a median of {fmt(ev.median)}"
        return (f"The {name} spiked to {fmt(ev.value)} at step {step} "
                f"({_times_median(ev.value, ev.median, fmt(ev.median))}, "
                f"robust z {fmt(ev.z)})")


_GRAD_CAUSES = rank_causes([
    ("the learning rate is too high (or warm-up too short)", 0.6),
    ("no gradient clipping, or a clipping threshold that is too loose", 0.5),
    ("a bad batch (extreme inputs, mislabelled samples)", 0.35),
    ("numerical instability: fp16 overflow, exploding attention logits", 0.25),
])
_GRAD_FIXES = (
    _CLIP,
    "Lower the learning rate (2-10x) or lengthen the warm-up",
    "Use bf16 instead of fp16, or QK-layernorm / z-loss for large transformers",
)


class GradExplosionRule(SpikeRule):
    id = "grad_explosion"
    role = "grad_norm"
    roles_read = ("grad_norm",)
    log_flagged = True  # loss_spike and nan_inf ask whether the gradient norm spiked first

    def _hit(self, f: Points, ev: SpikeEvent) -> Hit:
        i = ev.index
        step, pos = int(f.steps[i]), int(f.pos[i])
        cfg: SpikeConfig = self.cfg
        if ev.kind == ESCALATE:
            lead = f"The gradient norm is still exploding at step {step} ({fmt(ev.value)})"
        elif math.isfinite(ev.median):
            lead = (f"The gradient norm exploded to {fmt(ev.value)} at step {step} "
                    f"({_times_median(ev.value, ev.median, fmt(ev.median))})")
        else:
            lead = f"The gradient norm exploded to {fmt(ev.value)} at step {step}"
        why = _why(ev, "it", cfg)
        lr = self.ctx.latest("lr", pos)
        evidence = self._evidence(f, ev)
        if lr is not None:
            evidence["lr"] = r6(lr)
        fixes = (*_GRAD_FIXES, f"Inspect the batch at step {step}")
        return self._alert(f, ev, f"{lead}{'; ' + why if why else ''}.", evidence, _GRAD_CAUSES,
                           fixes)


_STEP_TIME_CAUSES = rank_causes([
    ("the data loader stalled (slow storage, too few workers)", 0.5),
    ("a pause inside the step: garbage collection, a checkpoint or an eval", 0.4),
    ("another process competing for the GPU or CPU", 0.3),
])
_STEP_TIME_FIXES = (
    "Raise DataLoader num_workers, set pin_memory=True and persistent_workers=True",
    "Move checkpoint and eval work out of the timed step",
    "Check nvidia-smi / top for other processes",
)


class StepTimeOutlierRule(SpikeRule):
    id = "step_time_outlier"
    role = "step_time"
    roles_read = ("step_time",)

    def __init__(self, cfg: StepTimeConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self._shifts: dict[str, float] = {}
        """The shift of each series name (see :meth:`_shift`), taken once."""

    def _severity(self, ev: SpikeEvent) -> str:
        return self.cfg.severity  # a slow step is never an error; sustained slowness is throughput_drop

    def _shift(self, f: Points) -> float:
        c = self._shifts.get(f.name)
        if c is None:
            c = self._shifts[f.name] = self._shift_of(f.name)
        return c

    def _shift_of(self, name: str) -> float:
        # The detector sees step times shifted up by c = min_excess / (min_ratio - 1): robust z is
        # unchanged by a shift, and "x - median >= (min_ratio - 1) * (median + c)" asks a slow
        # step to pass the ratio AND an absolute excess. Jitter of a 1 ms loop on a shared CPU
        # then never opens an episode (whose cooldown would hide the real stall that follows).
        cfg: StepTimeConfig = self.cfg
        scale = 1000.0 if name.endswith("_ms") else 1.0
        return cfg.min_excess_s * scale / max(cfg.min_ratio - 1.0, 1e-9)

    def _hit(self, f: Points, ev: SpikeEvent) -> Hit:
        step = int(f.steps[ev.index])
        dur = fmt_duration(ev.value) if ev.value < 1e5 else fmt(ev.value)
        if ev.kind == ESCALATE:
            message = (f"Steps keep running slow ({ev.episode_points} slow steps since the "
                       f"episode began; step {step} took {dur}).")
        else:
            med = fmt_duration(ev.median) if math.isfinite(ev.median) else "-"
            message = f"Step {step} took {dur}, {_times_median(ev.value, ev.median, med)}."
        return self._alert(f, ev, message, self._evidence(f, ev), _STEP_TIME_CAUSES,
                           _STEP_TIME_FIXES)
