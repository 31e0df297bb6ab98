"""``grad_vanishing``: the grad norm has fallen near zero relative to its history while the loss
is not improving (a converged model has small gradients too, but its loss got there).

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

import math
from collections import deque

import numpy as np

from trainwatch.rules.config.models import VanishingConfig
from trainwatch.rules.detectors.blocks import Blocks, BlockStream, shared_blocks
from trainwatch.rules.detectors.stats import min_max
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6, rank_causes


class GradVanishingRule(Rule):
    fast = True
    """Take runs of quiet blocks in one vectorised step, and put off the blocks of a frame whose
    points show that none can be low (tests turn it off to compare)."""
    id = "grad_vanishing"
    roles_read = ("grad_norm", "loss")

    def __init__(self, cfg: VanishingConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.peak = 0.0
        """The highest grad block median so far (of every segment)."""
        self.peak_step = 0
        self._later: list[Points] = []
        """Finite grad points of frames put off (see :meth:`_put_off`), not yet in ``_grads``."""
        self._later_n = 0
        self._later_hi = -math.inf
        """A bound over the running peak as it will be once ``_later`` is taken."""
        self.rewind()

    def rewind(self) -> None:
        if self._later:  # (never when built: the stream below does not exist yet)
            self._take_later()  # (the peak outlives the segment)
        self._grads = BlockStream(self.cfg.window, noise=False)
        """The grad norm's blocks (only this rule reads them: it keeps their stream)."""
        self._open = 0
        """Points of the grad block under way (whether taken or put off)."""
        self._open_lo, self._open_hi = math.inf, -math.inf
        """Bounds of their values."""
        self.loss_hist: deque[float] = deque(maxlen=self.cfg.loss_windows + 1)
        """The last loss block medians (with ``_new_loss`` after them)."""
        self._new_loss: list[tuple[Blocks, int, int]] = []
        """Loss blocks ``lo:hi`` of a frame not yet added to ``loss_hist`` (nor to ``delta``):
        only a low grad block reads them, so a quiet frame only notes its own."""
        self.delta = self.cfg.loss_min_delta
        self.nblk = 0
        self.low = 0
        self.active = False

    def update(self, frame: Frame) -> list[Hit]:
        lb = shared_blocks(self.ctx, frame, "loss", self.cfg.window, nonzero=True)
        g = frame.role("grad_norm")
        f = g.finite() if g is not None and len(g) else None
        if f is not None and len(f):
            f = grads_off_zero_loss(f, frame.role("loss"))
        if f is None or not len(f) or (self.fast and self._put_off(f)):
            self._add_loss(lb, 0, len(lb))
            return []
        self._take_later()
        gb = self._grads.push(f)
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
        upto = lb.pos.searchsorted(gb.pos, side="right")
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

    def _put_off(self, f: Points) -> bool:
        """Whether the frame's grad blocks can wait: no block it completes can be low, since
        the lowest point of any (the frame's and the block under way's) is above the bars of
        the highest running peak they could reach. Its points then wait in ``_later`` for the
        next frame that needs the blocks (as :meth:`_quiet_prefix` would take them: only the
        peak, its step and the block count change). Keeps the bounds of the block under way
        either way."""
        cfg: VanishingConfig = self.cfg
        v = f.values
        m = v.shape[0]
        vmin, vmax = min_max(v, _FEW)
        lo, hi = vmin, max(self.peak, self._later_hi, vmax)
        if self._open:
            lo, hi = min(lo, self._open_lo), max(hi, self._open_hi)
            self._open_lo, self._open_hi = lo, max(self._open_hi, vmax)
        else:
            self._open_lo, self._open_hi = vmin, vmax
        done = (self._open + m) // cfg.window  # blocks the frame completes
        self._open = (self._open + m) % cfg.window
        if done:  # (the block now under way holds points of this frame only, or none)
            self._open_lo, self._open_hi = vmin, vmax
        if (self.active or self._later_n + m > _MAX_LATER
                or not lo > max(cfg.ratio * hi, cfg.abs_floor)):
            return False
        self._later.append(f)
        if len(self._later) >= _JOIN_LATER:
            self._later = [_joined(self._later)]
        self._later_n += m
        self._later_hi = hi
        if done:
            self.low = 0
        return True

    def _take_later(self) -> None:
        """Add the points put off to the grad blocks, with their peak and count."""
        if not self._later:
            return
        f = _joined(self._later)
        self._later, self._later_n, self._later_hi = [], 0, -math.inf
        gb = self._grads.push(f)
        if len(gb):
            self.nblk += len(gb)
            j = int(gb.med.argmax())  # (the first of equal highs, as block by block)
            if float(gb.med[j]) > self.peak:
                self.peak, self.peak_step = float(gb.med[j]), int(gb.step[j])

    def _quiet_prefix(self, gb: Blocks) -> int:
        """Take in one step the leading grad blocks that are not low (the common case), as the
        loop would. Returns how many were taken."""
        if not self.fast:
            return 0
        cfg: VanishingConfig = self.cfg
        n = len(gb)
        if n <= _FEW and not self.active:
            # (a short run, or a live frame: a few blocks, in Python floats) the lowest block
            # above the bars of the highest peak leaves none low: every block is taken
            meds = gb.med.tolist()
            top = max(meds)
            if min(meds) > max(cfg.ratio * max(self.peak, top), cfg.abs_floor):
                self.nblk += n
                if top > self.peak:
                    self.peak, self.peak_step = top, int(gb.step[meds.index(top)])
                self.low = 0
                return n
        med = gb.med
        peak = np.maximum(self.peak, np.maximum.accumulate(med))
        low = (med <= cfg.ratio * peak) | (med <= cfg.abs_floor)
        hit = low.nonzero()[0]
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
        """Note the loss blocks ``lo:hi``: added to the history when it is next read."""
        if hi <= lo:
            return
        keep = self.loss_hist.maxlen or 1
        if hi - lo >= keep:  # they alone fill the history
            self._new_loss.clear()
        self._new_loss.append((lb, lo, hi))
        # each note holds a block at least, and only the last ``keep`` blocks stay: a live
        # stream of one-record frames that never folds must not grow the list for ever
        del self._new_loss[:-keep]
        if not self.fast:  # (the reference adds them at once)
            self._fold_loss()

    def _fold_loss(self) -> None:
        """Add the noted loss blocks to the history, and take ``delta`` from the last."""
        cfg: VanishingConfig = self.cfg
        for lb, lo, hi in self._new_loss:
            # only the last maxlen can stay in the history
            self.loss_hist.extend(lb.med[max(lo, hi - (self.loss_hist.maxlen or hi)):hi].tolist())
            # "improving" must beat the noise of two window medians, not just min_delta
            self.delta = max(cfg.loss_min_delta, 3.0 * 1.4142 * float(lb.noise[hi - 1]))
        self._new_loss.clear()

    def _block(self, frame: Frame, gb: Blocks, i: int, med: float) -> Hit | None:
        cfg: VanishingConfig = self.cfg
        self.nblk += 1
        if med > self.peak:
            self.peak, self.peak_step = med, int(gb.step[i])
        if self._new_loss:
            self._fold_loss()
        lh = self.loss_hist
        # (a loss level of exactly 0 at either end is not "stuck": with the exact zeros out of
        # the blocks, a median of 0 is two middle values that cancel, a loss crossing 0 that got
        # there; a zero-loss bug is learning_stalled's, a detached loss is stuck above 0)
        stuck = (len(lh) == lh.maxlen and lh[0] != 0.0 and lh[-1] != 0.0
                 and lh[-1] > lh[0] - self.delta * abs(lh[0]))
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

_FEW = 256
"""Most blocks (or points) a frame's quiet check takes in Python floats (a 12k-point frame's
blocks, at 50 points a block): past it, array operations are the cheaper."""
_MAX_LATER = 1 << 16
"""Most grad points put off (a live watch's quiet frames are taken now and then)."""
_JOIN_LATER = 64
"""Frames put off kept apart at most: past it they are joined into one (a live watch of
one-record frames would otherwise hold ~0.7 KB of objects per point: ~45 MB at _MAX_LATER)."""


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


def _joined(frames: list[Points]) -> Points:
    """The points of ``frames``, in order, as one."""
    if len(frames) == 1:
        return frames[0]
    return Points(frames[0].name, *(np.concatenate([getattr(p, a) for p in frames])
                                    for a in ("steps", "values", "times", "pos")))
