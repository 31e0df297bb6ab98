"""``divergence``: the smoothed train loss climbs back up from its best.

The loss is smoothed into block medians of ``window`` points (shared with other rules, see
:func:`~trainwatch.rules.blocks.shared_blocks`); a block at least ``rise`` (or ``noise_factor``
times the noise of a block median, for noisy losses) above the best one, for ``windows`` blocks in
a row, is a warning; ``error_rise`` above the best, or past an absolute ``cap``, is an error at
once. Runs of quiet blocks are taken in one vectorised step.

The noise of a block median is the larger of two estimates: the standard error from the block's
own spread (:mod:`~trainwatch.rules.blocks`), and the scatter *between* consecutive block medians
(:func:`block_scatter`). The first assumes independent points; a loss whose points are correlated
(a recurrent model carrying its state, a data order with structure) or that wanders around its
level scatters from block to block several times more than that (3x on the demo's LSTM), and the
best block, the lowest of many noisy ones, sits that much lower by luck: without the second
estimate a flat noisy loss "diverged" from its luckiest block. For the same reason the best is
taken over the median of each three consecutive blocks (:func:`block_levels`), not over single
blocks.
"""

from __future__ import annotations

import math

import numpy as np

from trainwatch.rules.alert import Cause
from trainwatch.rules.base import Context, Frame, Hit, fmt, pct, r6, rank_causes
from trainwatch.rules.blocks import Blocks, LossBlockRule
from trainwatch.rules.models import DivergenceConfig
from trainwatch.rules.stats import median_sorted, small_median, windows

SCATTER_BLOCKS = 16
"""Consecutive-block jumps the between-block scatter is the median of."""
_MIN_JUMPS = 4
"""Fewer jumps than this: no scatter estimate yet (0)."""
_JUMP_TO_SIGMA = 1.0484
"""median |x - y| of two independent normal values is 0.6745 sqrt(2) sigma."""


def block_jumps(prev: float | None, med: np.ndarray) -> np.ndarray:
    """The jumps ``|m - m_prev| / |m_prev|`` of the block medians ``med`` (``prev``: the block
    before them, None at a segment's start; a jump from 0 is taken as absolute)."""
    seq = med if prev is None else np.concatenate(([prev], med))
    base = np.abs(seq[:-1])
    out = seq[1:] - seq[:-1]  # (= np.diff, without its ~3 us of Python)
    np.abs(out, out=out)
    out /= np.where(base > 0, base, 1.0)
    return out


def scatter_at_list(jumps: list[float], end: int) -> float:
    """The between-block noise of the block whose own jump is ``jumps[end - 1]`` (the jumps
    before ``end``, the last ``SCATTER_BLOCKS`` of them, at least ``_MIN_JUMPS``; else 0): one
    value of :func:`block_scatter`, for the blocks the rule reads it at. The jumps are Python
    floats (the per-block path reads them so: no numpy call per block)."""
    if end < _MIN_JUMPS:
        return 0.0
    return small_median(jumps[max(0, end - SCATTER_BLOCKS):end]) * _JUMP_TO_SIGMA


def block_scatter(prev: float | None, jumps: np.ndarray, med: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The between-block noise of each block median in ``med``, relative to its level, and the
    jumps to carry to the next call: the definition, block by block (the rule reads it at the
    few blocks that need it: :func:`scatter_at_list`, :func:`scatter_of`; tests hold those to
    this).

    A block's jump is ``|m - m_prev| / |m_prev|`` (none for the first block of a segment); its
    scatter is 1.0484 x the median of its own and the previous jumps, ``SCATTER_BLOCKS`` at most,
    which estimates the standard deviation of a block median around a slowly moving level.
    ``prev`` is the block before ``med`` (None at a segment's start), ``jumps`` the carried ones.

    The jumps are not centred on their median: a steady fall or rise then counts as scatter too,
    which delays a divergence right after a fast fall by a few blocks (625 -> 725 steps on a
    rise of 5 % a block); centred, their median over 16 jumps reads low on a flat loss with
    correlated noise and let 4 of 12 such runs "diverge" instead of 1.
    """
    new = block_jumps(prev, med)
    allj = np.concatenate((jumps, new)) if jumps.shape[0] else new
    # jumps up to and including block k's own: h + k + 1 (h + k when the segment starts here)
    ends = np.arange(med.shape[0]) + jumps.shape[0] + (0 if prev is None else 1)
    return scatter_of(allj, ends), allj[-(SCATTER_BLOCKS - 1):]


def scatter_of(jumps: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`scatter_at_list` at each of ``ends``, vectorised."""
    out = np.zeros(ends.shape[0])
    full = ends >= SCATTER_BLOCKS
    if full.any():
        rows = np.sort(windows(jumps, SCATTER_BLOCKS)[ends[full] - SCATTER_BLOCKS], axis=1)
        out[full] = median_sorted(rows)
    vals = jumps.tolist()
    for k in np.flatnonzero(~full & (ends >= _MIN_JUMPS)).tolist():
        out[k] = small_median(vals[:ends[k]])
    out *= _JUMP_TO_SIGMA
    return out


_MAD_SCALE = 1.4826


def _scale(best: float, mad: float) -> float:
    """What the relative bars multiply: the best level, or the block's own spread when that is
    larger (a loss near 0, or crossing it, has no meaningful relative rise: at a best of 0 every
    flat block was "up" and an error at once)."""
    return max(abs(best), _MAD_SCALE * mad)


_FEW = 8
"""Candidate blocks of a vectorised step checked one by one first (a rise under way makes the
first bad); the exact bars of the rest, if any, are computed in one go."""

LEVEL_BLOCKS = 3
"""Consecutive block medians whose median is a level the best is taken from."""


def block_levels(prev: list[float], med: np.ndarray) -> np.ndarray:
    """The level at each block of ``med``: the median of it and the ``LEVEL_BLOCKS - 1`` blocks
    before it (fewer at a segment's start); ``prev`` holds the blocks before ``med``."""
    p = len(prev)
    n = med.shape[0]
    seq = np.concatenate((prev, med)) if p else med
    out = np.empty(n)
    # the blocks with 3 values up to them: the last `full` ones, their median of three as
    # max(min(a, c), min(max(a, c), x)), one of the three values as a sort picks it, in 4 numpy
    # calls (a sort of the windows cost 3x that)
    full = max(0, min(n, n + p - (LEVEL_BLOCKS - 1)))
    if full:
        s = n - full  # (the first block with two before it)
        a, c, x = seq[p + s - 2:p + n - 2], seq[p + s - 1:p + n - 1], med[s:]
        hi = np.maximum(a, c)
        np.minimum(hi, x, out=hi)
        np.maximum(np.minimum(a, c), hi, out=out[s:])
    if full < n:
        vals = seq[:p + n - full].tolist()
        for k in range(n - full):
            out[k] = small_median(vals[:p + k + 1])
    return out


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


class DivergenceRule(LossBlockRule):
    id = "divergence"
    lazy_spread = True
    """(The vectorised step reads the blocks' MAD and noise only at candidates: on most frames
    at none, and their sort and rolling median are not done.)"""

    def __init__(self, cfg: DivergenceConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rewind()

    def rewind(self) -> None:
        self._rewind_blocks()
        self._jumps = np.empty(0)
        """The jumps between block medians (see block_jumps): the segment's last
        ``SCATTER_BLOCKS - 1`` before the frame being driven, then the frame's own (once
        computed: see :meth:`_frame_jumps`)."""
        self._jin: tuple[np.ndarray, float | None, np.ndarray] | None = None
        """What the frame's jumps are computed from when first read (the carried jumps, the
        block before the frame, its block medians), None once they are: a frame with no block
        that may rise reads none (a short file checked whole: never)."""
        self._jump0 = 0
        """Where in ``_jumps`` the jumps of the frame's first block end (see scatter_at_list)."""
        self._last: list[float] = []
        """The last LEVEL_BLOCKS - 1 block medians of the segment (the last one is the block
        before the next frame's first: its jump starts from it)."""
        self._level = np.empty(0)
        """The level (see block_levels) at each block of the frame being driven: what the best
        is the lowest of."""
        self._cols: tuple[list[float], list[float], list[float]] | None = None
        """The frame's levels, MADs and jumps as Python floats, made at its first block taken
        one by one (the per-block reference then does no numpy indexing)."""
        self.up = 0
        self.quiet = 0
        self.active = False
        self.escalated = False
        self.rearm_below: float | None = None
        """After an alert, a best below this re-arms the rule: a loss that stays flat and noisy
        around the same level is the same story, not a new divergence (it fired again and again
        before), and only real progress (``rise`` below the best at the alert) starts a new one."""

    def _start_frame(self, b: Blocks) -> None:
        # pure functions of the block medians: computed once for the frame, read alike by the
        # per-block reference and the vectorised step
        prev = self._last[-1] if self._last else None
        # (the between-block scatter is needed only at blocks that may rise above the best: it
        # is computed there, from the jumps, not at every block as block_scatter does)
        carried = self._frame_jumps()[-(SCATTER_BLOCKS - 1):]
        self._jin = (carried, prev, b.med)
        self._jump0 = carried.shape[0] + (0 if prev is None else 1)
        self._level = block_levels(self._last, b.med)
        self._cols = None
        self._last = (self._last + b.med[-(LEVEL_BLOCKS - 1):].tolist())[-(LEVEL_BLOCKS - 1):]

    def _frame_jumps(self) -> np.ndarray:
        """``_jumps``, computed at the first read in a frame."""
        if self._jin is not None:
            carried, prev, med = self._jin
            new = block_jumps(prev, med)
            self._jumps = np.concatenate((carried, new)) if carried.shape[0] else new
            self._jin = None
        return self._jumps

    def _new_best(self, med: float) -> None:
        if self.rearm_below is not None and med < self.rearm_below:
            self.rearm_below = None

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float,
               step: int) -> Hit | None:
        """One block, the reference."""
        cfg: DivergenceConfig = self.cfg
        self.nblk += 1
        cols = self._cols
        if cols is None:  # (the MAD is read at once: the block's noise, given, computed it)
            cols = self._cols = (self._level.tolist(), b.mad.tolist(),
                                      self._frame_jumps().tolist())
        level = cols[0][i]
        if self.best is None or self.nblk <= cfg.warmup_windows:
            self._note_best(level, step)
            return None
        best = self.best
        if med < best and (cfg.cap is None or med <= cfg.cap):  # below the best: nothing to check
            self.up = 0
            self.quiet += 1
            if self.active and self.quiet >= 2:
                self.active = False
            self._note_best(level, step)
            return None
        rise = max(cfg.rise, cfg.noise_factor * max(noise, scatter_at_list(cols[2],
                                                                         self._jump0 + i)))
        scale = _scale(best, cols[1][i])
        up = med > best and med >= best + rise * scale
        capped = cfg.cap is not None and med > cfg.cap
        err = capped or (med > best and med >= best + cfg.error_rise * scale)
        if up or capped:
            self.up += 1
            self.quiet = 0
        else:
            self.up = 0
            self.quiet += 1
            if self.active and self.quiet >= 2:
                self.active = False
        kind = None
        armed = self.rearm_below is None
        if not self.active and ((self.up >= cfg.windows and armed) or (err and armed)):
            kind = "error" if err else cfg.severity
            self.active, self.escalated = True, err
            # re-armed by a new best clearly below this one: by the rise bar, which allows for
            # the noise (5 % alone is often a lucky window of a noisy loss, and the same unstable
            # run was reported again and again)
            self.rearm_below = best - rise * scale
        elif err and not self.escalated:
            # the story told as a warning grows into an error: said once, until re-armed
            kind, self.escalated = "error", True
        hit = None if kind is None else self._fire(frame, b, i, med, best, kind, capped)
        self._note_best(level, step)  # (only a lower level changes it)
        return hit

    def _ready(self) -> bool:
        # (the warm-up too is taken in one step: its blocks only lower the best)
        return self.fast

    def _quiet_prefix(self, b: Blocks, i: int, j: int) -> int:
        """Take in one step the blocks from ``i`` on (before ``j``) with no rise (the common
        case), the warm-up's first, as :meth:`_block` would. Returns how many were taken."""
        cfg: DivergenceConfig = self.cfg
        # the warm-up's blocks (a segment's first) only lower the best: taken along, in the same
        # step (the first frame of every run has them)
        w = min(j - i, max(cfg.warmup_windows - self.nblk, 1 if self.best is None else 0))
        level = self._level[i:j]
        k = n = j - i
        if w < n:
            med = b.med[i + w:j]
            # the best before each block after the warm-up (the warm-up's levels included)
            init = math.inf if self.best is None else self.best
            best = np.minimum.accumulate(np.concatenate(((init,), level)))[w:-1]
            # a block is bad at ``rise`` (at least cfg.rise: noise or scatter only raise it) or
            # at ``error_rise`` above the best, times the scale (at least |best|: the MAD only
            # raises it): the lower bar times |best| picks the candidates, and the exact bars
            # (the MAD, noise and scatter read only here) are checked for them alone
            lo = min(cfg.rise, cfg.error_rise)
            cand = med >= best + lo * np.abs(best)
            cand &= med > best
            if cfg.cap is not None:
                cand |= med > cfg.cap
            if cand.any():
                scale = np.maximum(np.abs(best), _MAD_SCALE * b.mad[i + w:j])
                cand &= med >= best + lo * scale
                if cfg.cap is not None:
                    cand |= med > cfg.cap
                if cand.any():
                    k = w + self._first_bad(b, i + w, med, best, scale, np.flatnonzero(cand))
        self.nblk += k
        if k > w:
            self.up = 0
            self.quiet += k - w
            if self.active and self.quiet >= 2:
                self.active = False
        if k:
            self._note_best_of(b, i, level[:k])
        return k

    def _first_bad(self, b: Blocks, i: int, med: np.ndarray, best: np.ndarray,
                   scale: np.ndarray, cands: np.ndarray) -> int:
        """The first of the candidate blocks ``cands`` (of blocks ``i, i + 1, ...`` of ``b``,
        whose medians, bests before them and scales are given) that rises above the best by
        :meth:`_block`'s bars; ``med``'s length if none does."""
        cfg: DivergenceConfig = self.cfg
        # the first few one by one on Python floats (a rise under way: the first is often bad),
        # the rest, if many, vectorised
        cl = cands.tolist()
        medl, bestl, scalel = med.tolist(), best.tolist(), scale.tolist()
        noise, jumps, j0 = b.noise.tolist(), self._frame_jumps().tolist(), self._jump0 + i
        for t in cl[:_FEW]:
            x, bs, sl = medl[t], bestl[t], scalel[t]
            if cfg.cap is not None and x > cfg.cap:
                return t
            sc = scatter_at_list(jumps, j0 + t)
            rise = max(cfg.rise, cfg.noise_factor * max(noise[i + t], sc))
            if x > bs and (x >= bs + rise * sl or x >= bs + cfg.error_rise * sl):
                return t
        if len(cl) <= _FEW:
            return med.shape[0]
        cands = cands[_FEW:]
        g = cands + i
        sc = scatter_of(self._frame_jumps(), g + self._jump0)
        rise = np.maximum(cfg.rise, cfg.noise_factor * np.maximum(b.noise[g], sc))
        m, bs, sl = med[cands], best[cands], scale[cands]
        bad = (m > bs) & ((m >= bs + rise * sl) | (m >= bs + cfg.error_rise * sl))
        if cfg.cap is not None:
            bad |= m > cfg.cap
        hit = np.flatnonzero(bad)
        return int(cands[hit[0]]) if hit.shape[0] else med.shape[0]

    def _fire(self, frame: Frame, b: Blocks, i: int, med: float, best: float, severity: str,
              capped: bool) -> Hit:
        cfg: DivergenceConfig = self.cfg
        pos, step = int(b.pos[i]), int(b.step[i])
        rise = (med - best) / abs(best) if best else None
        _s, lr_recent = self.ctx.recent("lr", pos, 2 * cfg.window)
        lr = float(lr_recent[-1]) if lr_recent.shape[0] else None  # (= ctx.latest("lr", pos))
        _g, gv = self.ctx.recent("grad_norm", pos, 4 * cfg.window)
        lr_rose = lr_recent.shape[0] > 1 and lr_recent[-1] > lr_recent[0] * 1.05
        grad_grew = False
        if gv.shape[0] >= 8:
            half = gv.shape[0] // 2
            g = gv.tolist()  # (medians of ~100 Python floats: ~3x cheaper than numpy's sort)
            grad_grew = small_median(g[half:]) > 2 * small_median(g[:half])
        causes = _CAUSES[bool(lr_rose), bool(grad_grew)]
        fixes = ((f"Rewind to a checkpoint near step {self.best_step} (best loss {fmt(best)}) "
                  "and lower the LR 2-10x"), *_FIXES)
        what = (f"above the cap {fmt(cfg.cap)}" if capped
                else f"{pct(rise)} above its best" if rise is not None
                else f"{fmt(med - best)} above its best")
        message = (f"The smoothed loss is diverging: {fmt(med)} at step {step}, {what} "
                   f"({fmt(best)} at step {self.best_step}).")
        evidence = {"smoothed_loss": r6(med), "best": r6(best), "best_step": self.best_step,
                    "rise": r6(rise) if rise is not None else None, "windows_up": self.up, "window_points": cfg.window,
                    "lr": r6(lr) if lr is not None else None}
        return self.alert(pos=pos, severity=severity, step=step, time=float(b.time[i]),
                          metric=frame.roles.get("loss"), message=message, evidence=evidence,
                          causes=causes, fixes=fixes)
