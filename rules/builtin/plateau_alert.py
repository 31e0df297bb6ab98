"""How ``plateau`` explains a plateau it has found: the LR (at its floor: the schedule is over),
the grad norm (healthy: the LR is too low; tiny: vanishing; large: noisy updates) and the train
loss's own scatter (noisy: an LR too high to settle is as likely as one too low), ranked into
causes and fixes, and the alert itself. Read only when the rule fires."""

from __future__ import annotations

import numpy as np

from trainwatch.rules.config.models import PlateauConfig
from trainwatch.rules.detectors.lr_peak import LrPeak
from trainwatch.rules.detectors.stats import median, small_median
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Frame, Hit, Rule, fmt, fmt3, pct, r6

NOISY_SPREAD = 0.05
"""A train loss whose points scatter more than this (relative, robust) around their level is
noisy: at a plateau an LR too high to settle near the minimum (the picture behind
ReduceLROnPlateau) is then as likely as one too low, and is said first."""
_SPREAD_POINTS = 200
"""Train-loss points the robust spread (:meth:`PlateauAlert._spread`) is taken over."""
_CAPACITY = Cause("the model's capacity or the data limit this loss", 0.3)
"""plateau's last cause, whatever else it finds."""


class PlateauAlert(Rule):
    """:class:`~trainwatch.rules.builtin.plateau.PlateauRule`'s diagnosis and alert (a base: it reads
    the rule's LR peak, ``lr``)."""

    lr: LrPeak

    def _spread(self, pos: int) -> float:
        """Relative robust spread (1.4826 MAD / |median|) of the last train-loss points."""
        _s, v = self.ctx.recent("loss", pos, _SPREAD_POINTS)
        if v.shape[0] < 20:
            return 0.0
        m = median(v)
        return 1.4826 * median(np.abs(v - m)) / abs(m) if m else 0.0

    def _fire(self, frame: Frame, pos: int, step: int, time: float, which: str, now: float,
              best: float, best_step: int, delta: float, span: int,
              severity_override: str | None = None) -> Hit:
        cfg: PlateauConfig = self.cfg
        lr = self.ctx.latest("lr", pos)
        peak = self.lr.at(frame, pos)
        _gs, gv = self.ctx.recent("grad_norm", pos, 50)
        g = small_median(gv.tolist()) if gv.shape[0] else None  # (= median(gv): 50 values)
        severity = severity_override or cfg.severity
        # the causes come in ranked order (confidence never rises down the list): built as they
        # are, with no sort
        causes: list[Cause] = []
        fixes: list[str] = []
        at_floor = lr is not None and peak > 0 and lr <= cfg.lr_floor_ratio * peak
        spread = self._spread(pos) if which == "train" else None
        if at_floor:
            severity = cfg.floor_severity
            causes.append(Cause((f"the LR is at its floor ({fmt(lr)}, peak {fmt(peak)}): the "
                                 "schedule is exhausted and the run has converged for it"), 0.8))
            fixes.append("Stop here, or continue with a new schedule (a higher LR) if the "
                         "loss should go lower")
        if g is not None and g < cfg.grad_low:
            causes.append(Cause(f"vanishing gradients: the grad norm is only {fmt(g)}", 0.7))
            fixes.append("Check for saturated activations and missing normalisation or "
                         "residual connections")
        elif g is not None and g <= cfg.grad_high and not at_floor:
            noisy = spread is not None and spread > NOISY_SPREAD
            if noisy:
                causes.append(Cause((f"a noisy loss: its points scatter {pct(spread)} around "
                                     "their level; the LR may be too high to settle near the "
                                     "minimum, or the batch too small"), 0.5))
                fixes.append("Lower the LR 2-10x (or decay it sooner), or raise the batch size "
                             "(gradient accumulation)")
            causes.append(Cause((f"the learning rate is too low: the grad norm is healthy "
                                 f"({fmt(g)}) but updates are too small"), 0.5 if noisy else 0.7))
            fixes.append("Raise the learning rate 2-10x (or use an LR range test)")
        elif g is not None and g > cfg.grad_high:
            causes.append(Cause((f"noisy updates: the grad norm is large ({fmt(g)}), the LR may "
                                 "be too high to settle or the batch too small"), 0.5))
            fixes.append("Lower the LR or raise the batch size")
        causes.append(_CAPACITY)
        fixes.append("ReduceLROnPlateau-style: lower the LR 10x when this fires (if not at "
                     "the floor), or stop early")
        name = "val_loss" if which == "val" else "The loss"
        unit = "evaluations" if which == "val" else "points"
        if which == "val":
            metric = frame.roles.get("val_loss")
            message = (f"val_loss has not improved by {pct(delta)} in {span} evaluations "
                       f"({fmt3(best)} at step {best_step}, {fmt3(now)} now).")
        else:
            metric = frame.roles.get("loss")
            message = (f"{name} has not improved by {pct(delta)} in {fmt(span)} points "
                       f"(smoothed: {fmt3(best)} at step {best_step}, {fmt3(now)} now).")
        evidence = {
            "reference": r6(best), "reference_step": best_step, "now": r6(now),
            "min_delta": r6(delta),
            f"no_improvement_{unit}": span, "lr": r6(lr) if lr is not None else None,
            "lr_peak": r6(peak), "grad_norm_median": r6(g) if g is not None else None,
        }
        if spread is not None:
            evidence["loss_spread"] = r6(spread)
        return self.alert(pos=pos, severity=severity, step=step, time=time, metric=metric,
                          message=message, evidence=evidence, causes=tuple(causes), fixes=fixes)
