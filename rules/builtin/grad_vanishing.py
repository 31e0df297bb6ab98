"""``grad_vanishing``: the grad norm has fallen near zero relative to its history while the loss
is not improving (a converged model has small gradients too, but its loss got there).

Method: the grad norm's block medians of ``window`` points are compared with the highest so far
(``ratio`` of it, or ``abs_floor``), for ``for_windows`` blocks in a row, while the loss's block
median is not ``loss_min_delta`` (or its noise) below that of ``loss_windows`` blocks before.

A zero-inflated loss (exactly 0 on easy batches: hinge, margin and triplet losses, detection
losses on batches with no positives) is read by its non-zero values: "not improving" compares
the block medians of those (``nonzero`` in :func:`~trainwatch.rules.detectors.blocks.shared_blocks`), and
the grad norm leaves out its zeros at records where the loss is exactly 0
(:func:`grads_off_zero_loss`: such a batch has no gradient, and a grad norm of 0 there is no
vanishing). With the zeros in, a loss 0 on over half its steps had window medians of 0, read as
"not stuck", and a gradient that really vanished under it was never told (4 of 4 seeds at 60 %
and 75 % zeros). A loss with no exact zero, the usual case, has the same blocks and grad points
either way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trainwatch.rules.config.schema import RuleBase, integer, num
from trainwatch.rules.detectors.blocks import EMPTY, Blocks, BlockStream, shared_blocks
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6, rank_causes


@dataclass(frozen=True)
class VanishingConfig(RuleBase):
    window: int = integer(ge=2)
    """Points per block median."""
    warmup_windows: int = integer(ge=1)
    ratio: float = num(gt=0, lt=1)
    """Block median grad norm at or below this fraction of its highest block median."""
    abs_floor: float = num(ge=0)
    """...or at or below this absolute value."""
    for_windows: int = integer(ge=1)
    loss_windows: int = integer(ge=1)
    """The loss is "not improving" when its block median is not lower than N blocks ago..."""
    loss_min_delta: float = num(ge=0, lt=1)
    """...by at least this fraction."""


LOSS_TOL_SE = 3.0 * 1.4142
""""Improving" must beat 3 standard errors of the difference of two window medians."""
BACK = 2.0
"""After an alert, a grad block this many times above both bars: the gradients came back (the
rule re-arms)."""


class GradVanishingRule(Rule):
    id = "grad_vanishing"
    roles_read = ("grad_norm", "loss")

    def __init__(self, cfg: VanishingConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.peak = 0.0
        """The highest grad block median so far (of every segment)."""
        self.peak_step = 0
        self.rewind()

    def rewind(self) -> None:
        self._grads = BlockStream(self.cfg.window, noise=False)
        """The grad norm's blocks (only this rule reads them, their medians: it keeps their
        stream)."""
        self.loss_hist: deque[float] = deque(maxlen=self.cfg.loss_windows + 1)
        """The last loss block medians."""
        self.delta = self.cfg.loss_min_delta
        """How far the loss must have fallen to be improving (from its last block's noise)."""
        self.nblk = 0
        self.low = 0
        """Low grad blocks in a row."""
        self.active = False

    def update(self, frame: Frame) -> list[Hit]:
        lb = shared_blocks(self.ctx, frame, "loss", self.cfg.window, nonzero=True)
        g = frame.role("grad_norm")
        f = g.finite() if g is not None and len(g) else None
        gb = EMPTY
        if f is not None and len(f):
            gb = self._grads.push(grads_off_zero_loss(f, frame.role("loss")))
        hits: list[Hit] = []
        # each grad block reads the loss blocks completed at or before it (by record)
        upto = (lb.pos.searchsorted(gb.pos, side="right").tolist() if len(gb) and len(lb)
                else [0] * len(gb))
        j = 0
        for i, med in enumerate(gb.med.tolist()):
            if upto[i] > j:
                self._add_loss(lb, j, upto[i])
                j = upto[i]
            hit = self._block(frame, gb, i, med)
            if hit is not None:
                hits.append(hit)
        self._add_loss(lb, j, len(lb))
        return hits

    def _add_loss(self, lb: Blocks, lo: int, hi: int) -> None:
        """Add the loss blocks ``lo:hi`` to the history, and take ``delta`` from the last."""
        if hi <= lo:
            return
        self.loss_hist.extend(lb.med[lo:hi].tolist())
        self.delta = max(self.cfg.loss_min_delta, LOSS_TOL_SE * float(lb.noise[hi - 1]))

    def _block(self, frame: Frame, gb: Blocks, i: int, med: float) -> Hit | None:
        cfg: VanishingConfig = self.cfg
        self.nblk += 1
        if med > self.peak:
            self.peak, self.peak_step = med, int(gb.step[i])
        lh = self.loss_hist
        # (a loss level of exactly 0 at either end is not "stuck": with the exact zeros out of
        # the blocks, a median of 0 is two middle values that cancel, a loss crossing 0 that got
        # there; a zero-loss bug is learning_stalled's, a detached loss is stuck above 0)
        stuck = (len(lh) == lh.maxlen and lh[0] != 0.0 and lh[-1] != 0.0
                 and lh[-1] > lh[0] - self.delta * abs(lh[0]))
        low = med <= cfg.ratio * self.peak or med <= cfg.abs_floor
        if self.active and med > BACK * cfg.ratio * self.peak and med > BACK * cfg.abs_floor:
            self.active = False  # the gradients came back
        if not (self.nblk > cfg.warmup_windows and low and stuck):
            self.low = 0
            return None
        self.low += 1
        if self.active or self.low < cfg.for_windows:
            return None
        self.active = True
        pos, step = int(gb.pos[i]), int(gb.step[i])
        zero = med == 0.0
        causes = _CAUSES[bool(zero)]
        fixes = _FIXES
        message = (f"The gradient norm has fallen to {fmt(med)} ({fmt(med / self.peak) if self.peak else 0}x "
                   f"its peak {fmt(self.peak)} at step {self.peak_step}) while the loss is not "
                   f"improving.")
        evidence = {"grad_norm_median": r6(med), "grad_norm_peak": r6(self.peak),
                    "peak_step": self.peak_step, "loss_then": r6(lh[0]), "loss_now": r6(lh[-1]),
                    "window_points": cfg.window}
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(gb.time[i]),
                          metric=frame.roles.get("grad_norm"), message=message,
                          evidence=evidence, causes=causes, fixes=fixes)


_CAUSES_LOW = [("saturating activations (sigmoid/tanh) or dead ReLUs stop the gradient", 0.5),
               ("a deep network without normalisation or residual connections", 0.4),
               ("the weights or the LR collapsed (LR ~0, too much weight decay)", 0.3)]
_CAUSES = {
    False: rank_causes(_CAUSES_LOW),
    True: rank_causes([(("no gradient reaches the parameters: the loss is detached (.detach(), "
                         ".item(), torch.no_grad) or the parameters are frozen"), 0.8),
                       *_CAUSES_LOW]),
}
"""grad_vanishing's causes, ranked once, by whether the gradient norm is exactly 0."""
_FIXES = (("Check that the loss is built from the model's outputs without .detach() and that "
           "parameters have requires_grad=True"),
          "Use ReLU/GELU, residual connections and LayerNorm/BatchNorm",
          "Check the initialisation (Kaiming/Xavier) and the LR schedule")


def grads_off_zero_loss(grad: Points, loss: Points | None) -> Points:
    """The grad norm's points other than the zeros of records where the loss is exactly 0
    (``grad`` itself when there are none: the usual frame, whose loss has no zero, is proved by
    the count the loss's :meth:`~trainwatch.rules.engine.base.Points.nonzero` makes once for every
    rule). A batch whose loss is 0 has no gradient: its grad norm of 0 says nothing of vanishing
    (a grad norm that is not 0 there, weight decay's say, still counts)."""
    if loss is None or loss.nonzero() is loss or grad.nonzero() is grad:
        return grad
    zpos = loss.pos[loss.values == 0.0]
    # (both in record order: a grad point is left out where it is 0 and its record one of zpos)
    at = zpos.searchsorted(grad.pos)
    at[at == zpos.shape[0]] = 0
    keep = (zpos[at] != grad.pos) | (grad.values != 0.0)
    return grad if keep.all() else grad.take(keep)
