"""The verdict on a finished run (unstable, overfitting, underfitting, converged...) and the
concrete next steps, from the loss curves and the alerts the rules raised."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from trainwatch.commands.run_summary import moving_average
from trainwatch.humanize import fmt_count, fmt_num
from trainwatch.rules.detectors.stats import median
from trainwatch.rules.engine.alert import SEVERITY_RANK, Alert

UNSTABLE_RULES = ("nan_inf", "divergence", "grad_explosion", "loss_spike")
BUG_RULES = ("state_detach", "console_error", "run_crashed")
"""Rules whose error is a bug in the training code or setup: the run's curves mean little until
it is fixed (a recurrent state never detached, out of memory, an NCCL timeout, a crash...)."""
STUCK_RULES = ("lr_exhausted", "plateau", "learning_stalled", "grad_vanishing")
TAIL = 0.2
"""Share of the run whose trend decides "still improving" versus "flat"."""
FLAT = 0.01
"""A relative change of the loss below this over the tail counts as flat (converged)."""


@dataclass(frozen=True)
class Verdict:
    verdict: str
    """``unstable``, ``diverged``, ``broken``, ``overfitting``, ``underfitting``, ``stalled``,
    ``converged``, or ``too short to tell``."""
    reason: str
    recommendations: tuple[str, ...]


@dataclass(frozen=True)
class Trend:
    change: float
    """Relative change of the loss (negative = improving)."""
    steps: int
    """Steps the measurement spans."""
    significant: bool
    """More than three standard errors of the batch noise: a real trend, not noise."""

    @property
    def improving(self) -> bool:
        return self.significant and self.change < -FLAT


def tail_trend(steps: np.ndarray, values: np.ndarray, tail: float = TAIL) -> Trend | None:
    """How the loss moved over the last ``tail`` of the run: medians of the tail's first and last
    quarter compared, against the noise of neighbouring points. None when too short."""
    ok = np.isfinite(values)
    v, st = values[ok], steps[ok]
    n = int(v.size * tail)
    if n < 20:
        return None
    return tail_trend_of(v[-n:], int(st[-1] - st[-n]))


def tail_trend_of(t: np.ndarray, span: int) -> Trend | None:
    """:func:`tail_trend` of the tail itself: its finite values and the steps it spans (None
    when under 20 values)."""
    n = t.size
    if n < 20:
        return None
    q = max(n // 4, 5)
    a, b = median(t[:q]), median(t[-q:])
    if a == 0:
        return None
    resid = np.diff(t) / math.sqrt(2)  # the trend cancels out of neighbour differences
    sigma = 1.4826 * median(np.abs(resid - median(resid)))
    se = 1.2533 * sigma / math.sqrt(q) * math.sqrt(2)  # of the difference of two medians
    return Trend((b - a) / abs(a), span, abs(b - a) >= 3 * se)


def judge(
    *, loss: tuple[np.ndarray, np.ndarray] | None, val: tuple[np.ndarray, np.ndarray] | None,
    alerts: Iterable[Alert], lr_peak: float | None, lr_final: float | None,
    warmup_steps: int | None, last_step: int | None,
) -> Verdict:
    """What state the run ended in, and what to do next, from the curves and the alerts."""
    return judge_from(
        trend=tail_trend(*loss) if loss is not None else None,
        turn=_val_turn(*val) if val is not None else None,
        alerts=alerts, lr_peak=lr_peak, lr_final=lr_final, warmup_steps=warmup_steps,
        last_step=last_step,
    )


def judge_from(
    *, trend: Trend | None, turn: tuple[int, float, float, int] | None, alerts: Iterable[Alert],
    lr_peak: float | None, lr_final: float | None, warmup_steps: int | None,
    last_step: int | None,
) -> Verdict:
    """:func:`judge` given the loss's tail trend and the validation loss's turn (see
    ``_val_turn``) rather than the curves they come from."""
    alerts = [a for a in alerts if SEVERITY_RANK.get(a.severity, 0) >= 1]
    first = {a.rule: a for a in sorted(alerts, key=lambda a: a.step)[::-1]}  # earliest per rule
    recs: list[str] = []
    unstable = [first[r] for r in UNSTABLE_RULES if r in first]
    bugs = [first[r] for r in BUG_RULES if r in first and first[r].severity == "error"]
    told: Alert | None = None
    """The alert whose fixes the verdict already gave."""
    if bugs and not unstable:
        a = told = min(bugs, key=lambda x: x.step)
        verdict = "broken"
        reason = f"{a.rule} at step {a.step:,}: {a.message}"
        recs.extend(a.fixes)
        if trend is not None and trend.improving:
            recs.append("Then train again: the train loss was still falling when the run ended.")
    elif unstable:
        a = min(unstable, key=lambda x: x.step)
        dead = any(x.rule in ("nan_inf", "divergence") and x.severity == "error" for x in unstable)
        verdict = "diverged" if dead else "unstable"
        reason = f"{a.rule} at step {a.step:,}: {a.message}"
        if "nan_inf" in first:
            recs.append(
                f"Find where the first NaN/inf came from (step {first['nan_inf'].step:,}): check that "
                "batch for bad inputs or labels, prefer bf16 to fp16 or use a loss scaler, and add "
                "an epsilon to divisions, logs and square roots."
            )
        recs.append("Clip gradients (e.g. torch.nn.utils.clip_grad_norm_(params, 1.0)) so one bad "
                    "batch cannot throw the weights far.")
        if lr_peak:
            recs.append(f"Lower the peak learning rate (it was {fmt_num(lr_peak, 2)}; try "
                        f"{fmt_num(lr_peak / 3, 2)} to {fmt_num(lr_peak / 2, 2)}).")
        if last_step:
            w = warmup_steps or 0
            target = max(2 * w, int(0.02 * last_step), 100)
            was = f"it was {fmt_count(w)} steps" if w else "there was none"
            recs.append(f"Lengthen the LR warmup ({was}; try {fmt_count(target)}).")
        if dead:
            recs.append(f"Restart from the last checkpoint before step {a.step:,} rather than "
                        "going on.")
    elif "overfit" in first or (turn is not None and turn[2] >= 0.02 and turn[3] >= 3):
        best_step, best, rise, _after = turn if turn is not None else (first["overfit"].step,
                                                                      math.nan, math.nan, 0)
        verdict = "overfitting"
        reason = (f"validation loss was best at step {best_step:,} ({fmt_num(best)}) and ended "
                  f"{rise * 100:.1f} % higher while the train loss kept falling")
        recs.append(f"Stop early: keep the checkpoint from step {best_step:,} (early stopping "
                    "with a patience of about 3 evaluations would have stopped there).")
        recs.append("Regularize: weight decay, dropout, data augmentation, or more data; or a "
                    "smaller model.")
    elif (trend is not None and trend.improving) or any(r in first for r in STUCK_RULES):
        stuck = [first[r] for r in STUCK_RULES if r in first]
        if trend is not None and trend.improving:
            verdict = "underfitting"
            reason = (f"the train loss was still falling: {-trend.change * 100:.1f} % over the "
                      f"last {fmt_count(trend.steps)} steps")
            recs.append("Train longer (e.g. twice the steps): the model has not converged.")
        else:
            verdict = "stalled"
            reason = f"{stuck[0].rule} at step {stuck[0].step:,}: {stuck[0].message}"
        if "lr_exhausted" in first:
            recs.append(f"The LR schedule ran out at step {first['lr_exhausted'].step:,} while "
                        "training went on: set the scheduler's total steps to the run's length.")
        if ("plateau" in first or "learning_stalled" in first) and lr_peak:
            recs.append(f"Raise the learning rate (peak was {fmt_num(lr_peak, 2)}; try "
                        f"{fmt_num(lr_peak * 3, 2)}), or run a short LR range test.")
        if "learning_stalled" in first:
            recs.append("Check that the optimizer steps the parameters you train (requires_grad, "
                        "optimizer.step(), zero_grad placement).")
        if "grad_vanishing" in first:
            recs.append("Gradients vanished: check initialization, normalization layers and "
                        "saturating activations; a residual path or a higher LR may help.")
        recs.append("If more steps are not an option, try a larger model or a higher LR.")
    elif trend is None:
        verdict, reason = "too short to tell", "too few loss values to judge a trend"
        recs.append("Let the run go on, then report again.")
    else:
        verdict = "converged"
        vtxt = (f"; validation loss is within 2 % of its best ({fmt_num(turn[1])} at step "
                f"{turn[0]:,})" if turn is not None else "")
        noise = "" if trend.significant else ", within its noise"
        reason = (f"the train loss changed {trend.change * 100:+.1f} % over the last "
                  f"{fmt_count(trend.steps)} steps{noise}{vtxt}")
        at = f" (step {turn[0]:,})" if turn is not None else ""
        recs.append(f"The model is ready for evaluation on the held-out test set: use the best "
                    f"checkpoint{at}.")
        if lr_final is not None and lr_peak and lr_final > 0.5 * lr_peak:
            recs.append("The LR never decayed: a decay to the end (cosine or linear) usually buys "
                        "a little more.")
    for a in alerts:  # system faults need their own fix whatever the verdict
        if (a.rule not in UNSTABLE_RULES + STUCK_RULES + ("overfit",) and a.fixes
                and a is not told and a.fixes[0] not in recs):
            tip = f"{a.rule} at step {a.step:,}: {a.fixes[0]}"
            if tip not in recs:
                recs.append(tip)
    return Verdict(verdict, reason, tuple(recs))


def _val_turn(steps: np.ndarray, values: np.ndarray) -> tuple[int, float, float, int] | None:
    """(best step, best value, relative rise from best to the end, evaluations after the best).

    The rise compares 3-evaluation averages, so one lucky low evaluation is not a turn."""
    ok = np.isfinite(values)
    v, st = values[ok], steps[ok]
    if v.size < 2:
        return None
    i = int(np.argmin(v))
    sm = moving_average(v, min(3, v.size))
    j = int(np.argmin(sm))
    rise = (float(sm[-1]) - float(sm[j])) / abs(float(sm[j])) if sm[j] != 0 else 0.0
    return int(st[i]), float(v[i]), rise, int(v.size - 1 - j)
