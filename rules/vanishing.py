"""``grad_vanishing``: the grad norm has fallen near zero relative to its history while the loss
is not improving (a converged model has small gradients too, but its loss got there)."""

from __future__ import annotations

from collections import deque

import numpy as np

from trainwatch.rules.base import Context, Frame, Hit, Rule, fmt, r6
from trainwatch.rules.blocks import Blocks, shared_blocks
from trainwatch.rules.models import VanishingConfig


class GradVanishingRule(Rule):
    fast = True
    """Take runs of quiet blocks in one vectorised step (tests turn it off to compare)."""
    id = "grad_vanishing"

    def __init__(self, cfg: VanishingConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.peak = 0.0
        self.peak_step = 0
        self.rewind()

    def rewind(self) -> None:
        self.loss_hist: deque[float] = deque(maxlen=self.cfg.loss_windows + 1)
        self.delta = self.cfg.loss_min_delta
        self.nblk = 0
        self.low = 0
        self.active = False

    def update(self, frame: Frame) -> list[Hit]:
        lb = shared_blocks(self.ctx, frame, "loss", self.cfg.window)
        gb = shared_blocks(self.ctx, frame, "grad_norm", self.cfg.window, noise=False)
        if not len(gb):
            self._add_loss(lb, 0, len(lb))
            return []
        hits: list[Hit] = []
        first = self._quiet_prefix(gb)
        n = len(gb)
        if first == n:  # all quiet (the common case): the loss history only needs extending
            self._add_loss(lb, 0, len(lb))
            return hits
        # loss blocks completed at or before each grad block (by record)
        upto = np.searchsorted(lb.pos, gb.pos, side="right")
        j = 0
        if first:
            k = int(upto[first - 1])
            if k > j:
                self._add_loss(lb, j, k)
                j = k
        for i, med in enumerate(gb.med.tolist()):
            if i < first:
                continue
            k = int(upto[i])
            if k > j:
                self._add_loss(lb, j, k)
                j = k
            hit = self._block(frame, gb, i, med)
            if hit is not None:
                hits.append(hit)
        if j < len(lb):
            self._add_loss(lb, j, len(lb))
        return hits

    def _quiet_prefix(self, gb: Blocks) -> int:
        """Take in one step the leading grad blocks that are not low (the common case), as the
        loop would. Returns how many were taken."""
        if not self.fast:
            return 0
        cfg: VanishingConfig = self.cfg
        med = gb.med
        peak = np.maximum(self.peak, np.maximum.accumulate(med))
        low = (med <= cfg.ratio * peak) | (med <= cfg.abs_floor)
        hit = np.flatnonzero(low)
        k = int(hit[0]) if hit.shape[0] else len(gb)
        if k:
            self.nblk += k
            j = int(np.argmax(med[:k]))
            if med[j] > self.peak:
                self.peak, self.peak_step = float(med[j]), int(gb.step[j])
            if self.active and bool(np.any((med[:k] > 2 * cfg.ratio * peak[:k])
                                           & (med[:k] > 2 * cfg.abs_floor))):
                self.active = False  # the gradients came back
            self.low = 0
        return k

    def _add_loss(self, lb: Blocks, lo: int, hi: int) -> None:
        cfg: VanishingConfig = self.cfg
        if hi <= lo:
            return
        # only the last maxlen can stay in the history
        self.loss_hist.extend(lb.med[max(lo, hi - (self.loss_hist.maxlen or hi)):hi].tolist())
        # "improving" must beat the noise of two window medians, not just min_delta
        self.delta = max(cfg.loss_min_delta, 3.0 * 1.4142 * float(lb.noise[hi - 1]))

    def _block(self, frame: Frame, gb: Blocks, i: int, med: float) -> Hit | None:
        cfg: VanishingConfig = self.cfg
        self.nblk += 1
        if med > self.peak:
            self.peak, self.peak_step = med, int(gb.step[i])
        lh = self.loss_hist
        stuck = len(lh) == lh.maxlen and lh[-1] > lh[0] - self.delta * abs(lh[0])
        low = med <= cfg.ratio * self.peak or med <= cfg.abs_floor
        if self.active and med > 2 * cfg.ratio * self.peak and med > 2 * cfg.abs_floor:
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
        causes = [("saturating activations (sigmoid/tanh) or dead ReLUs stop the gradient", 0.5),
                  ("a deep network without normalisation or residual connections", 0.4),
                  ("the weights or the LR collapsed (LR ~0, too much weight decay)", 0.3)]
        if zero:
            causes.insert(0, (("no gradient reaches the parameters: the loss is detached "
                              "(.detach(), .item(), torch.no_grad) or the parameters are frozen"),
                              0.8))
        fixes = [("Check that the loss is built from the model's outputs without .detach() and "
                 "that parameters have requires_grad=True"),
                 "Use ReLU/GELU, residual connections and LayerNorm/BatchNorm",
                 "Check the initialisation (Kaiming/Xavier) and the LR schedule"]
        message = (f"The gradient norm has fallen to {fmt(med)} ({fmt(med / self.peak) if self.peak else 0}x "
                   f"its peak {fmt(self.peak)} at step {self.peak_step}) while the loss is not "
                   f"improving.")
        evidence = {"grad_norm_median": r6(med), "grad_norm_peak": r6(self.peak),
                    "peak_step": self.peak_step, "loss_then": r6(lh[0]), "loss_now": r6(lh[-1]),
                    "window_points": cfg.window}
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(gb.time[i]),
                          metric=frame.roles.get("grad_norm"), message=message,
                          evidence=evidence, causes=causes, fixes=fixes)
