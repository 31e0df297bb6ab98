"""How ``divergence`` tells a rise it has found: the LR (risen recently: a warm-up ending, a
schedule restart) and the grad norm (doubled meanwhile) ranked into causes, the fixes, and the
alert's message and evidence. Read only when the rule fires.

Apart from the rule (:mod:`~trainwatch.rules.builtin.divergence`), whose job is deciding *whether* a
block has risen; this is what the alert says about it, and reads other roles' series to say it.
"""

from __future__ import annotations

from trainwatch.rules.config.models import DivergenceConfig
from trainwatch.rules.detectors.blocks import Blocks, LossBlockRule
from trainwatch.rules.detectors.stats import small_median
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Frame, Hit, fmt, pct, r6, rank_causes


def _ranked_causes(lr_rose: bool, grad_grew: bool) -> tuple[Cause, ...]:
    causes = [("the learning rate is too high for this phase of training", 0.6),
              ("bad data: a corrupt shard or a shift in the data distribution", 0.3),
              ("optimizer state lost or mismatched after a resume", 0.15)]
    if lr_rose:
        causes.append(("the LR rose recently (warm-up ending, a schedule restart)", 0.7))
    if grad_grew:
        causes.append(("updates are growing: the grad norm doubled meanwhile", 0.6))
    return rank_causes(causes)


_CAUSES = {(r, g): _ranked_causes(r, g) for r in (False, True) for g in (False, True)}
"""divergence's causes, ranked once, by (the LR rose recently, the grad norm grew)."""
_FIXES = ("Clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
          "Check the data around where the rise began")


def divergence_hit(rule: LossBlockRule, frame: Frame, b: Blocks, i: int, med: float, best: float,
                   severity: str, capped: bool, windows_up: int) -> Hit:
    """The alert of ``rule`` (divergence) at block ``i`` of ``b``, at ``med`` against the best
    level ``best`` (at ``rule.best_step``), past the cap if ``capped``, after ``windows_up``
    blocks up in a row."""
    cfg: DivergenceConfig = rule.cfg
    ctx = rule.ctx
    pos, step = int(b.pos[i]), int(b.step[i])
    rise = (med - best) / abs(best) if best else None
    _s, lr_recent = ctx.recent("lr", pos, 2 * cfg.window)
    lr = float(lr_recent[-1]) if lr_recent.shape[0] else None  # (= ctx.latest("lr", pos))
    _g, gv = ctx.recent("grad_norm", pos, 4 * cfg.window)
    lr_rose = lr_recent.shape[0] > 1 and lr_recent[-1] > lr_recent[0] * 1.05
    grad_grew = False
    if gv.shape[0] >= 8:
        half = gv.shape[0] // 2
        g = gv.tolist()  # (medians of ~100 Python floats: ~3x cheaper than numpy's sort)
        grad_grew = small_median(g[half:]) > 2 * small_median(g[:half])
    causes = _CAUSES[bool(lr_rose), bool(grad_grew)]
    fixes = ((f"Rewind to a checkpoint near step {rule.best_step} (best loss {fmt(best)}) "
              "and lower the LR 2-10x"), *_FIXES)
    what = (f"above the cap {fmt(cfg.cap)}" if capped
            else f"{pct(rise)} above its best" if rise is not None
            else f"{fmt(med - best)} above its best")
    message = (f"The smoothed loss is diverging: {fmt(med)} at step {step}, {what} "
               f"({fmt(best)} at step {rule.best_step}).")
    evidence = {"smoothed_loss": r6(med), "best": r6(best), "best_step": rule.best_step,
                "rise": r6(rise) if rise is not None else None, "windows_up": windows_up,
                "window_points": cfg.window, "lr": r6(lr) if lr is not None else None}
    return rule.alert(pos=pos, severity=severity, step=step, time=float(b.time[i]),
                      metric=frame.roles.get("loss"), message=message, evidence=evidence,
                      causes=causes, fixes=fixes)
