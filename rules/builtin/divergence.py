"""``divergence``: the smoothed train loss climbs back up from its best.

The loss is smoothed into block medians of ``window`` points (shared with other rules, see
:func:`~trainwatch.rules.detectors.blocks.shared_blocks`); a block at least ``rise`` (or ``noise_factor``
times the noise of a block median, for noisy losses) above the best one, for ``windows`` blocks in
a row, is a warning; ``error_rise`` above the best (or, when more, ``noise_factor`` plus
``sqrt(2 ln n)`` noise levels, n the segment's blocks so far: see
:func:`~trainwatch.rules.builtin.divergence_bars.error_rise`), each of ``k`` blocks in a row (2 to
``windows``) ``noise_factor + sqrt(2 ln n / k)`` noise levels above it, or past an absolute
``cap``, is an error. Runs of quiet blocks are taken in one vectorised step. What the alert says
(causes, fixes, evidence) is :mod:`~trainwatch.rules.builtin.divergence_alert`'s.

The error's allowance for luck: over hundreds of blocks of a loss as noisy as its level
(batch-size-1 training, RL), the best is the luckiest low and some block an unlucky high, and a
bar of ``noise_factor`` levels on one block was passed on every clean run of 30k steps at 50 %
batch noise (the warning asks for ``windows`` blocks in a row, which such luck does not give).
The extreme of n normal values grows as ``sqrt(2 ln n)``, and k in a row past one bar are as rare
as one past a bar ``sqrt(k)`` times as far: a blow-up that one block leaves marginal is confirmed
by the next. The noise of a positive loss multiplies its level (its block medians spread as
their logarithm does): the bars are ``expm1`` of the noise levels (the same at a few % noise,
3.5x the best, not 2.25x, at 5 levels of 25 %), and the scale they multiply is the best level,
or the block's MAD brought back to the best's level (:func:`~trainwatch.rules.builtin.divergence_bars.
bar_scale`): the risen block's own MAD grew with a multiplicative blow-up (x5, x20 of an
Exponential-like loss) as fast as the block, and such a blow-up was caught only by luck.

The noise of a block median is the largest of three estimates: the standard error from the
block's own spread (:mod:`~trainwatch.rules.detectors.block_stream`), the scatter *between* consecutive
block medians (:func:`~trainwatch.rules.detectors.block_levels.block_scatter`), and the level's *wander* over
long lags (:func:`~trainwatch.rules.detectors.block_wander.wander`). The first assumes independent points; a
loss whose points are correlated (a recurrent model carrying its state, a data order with
structure) or that wanders around its level scatters from block to block several times more than
that (3x on the demo's LSTM), and the best block, the lowest of many noisy ones, sits that much
lower by luck: without the second estimate a flat noisy loss "diverged" from its luckiest block.
For the same reason the best is taken over the median of each three consecutive blocks
(:func:`~trainwatch.rules.detectors.block_levels.block_levels`), not over single blocks. Noise correlated
over thousands of steps (a flat loss that roams on a plateau) barely moves from one block to the
next, so both read low while the level roams several of its sd over a long run: the third
measures that (every such run of 100k steps "diverged" without it). It only raises the bar, so it
is read only at a block the other two let rise (and computed once per 4 blocks at most).

A live frame completes one block of ``window`` points or none: its block's level and jump are
picked on Python floats, and a block below the lower rise bar reads no MAD, noise or scatter (a
sort of the jumps and the stream's rolling noise saved).

The blocks are made of the loss's values other than exact zeros (``nonzero`` in
:func:`~trainwatch.rules.detectors.blocks.shared_blocks`; a loss with no zero, the usual case, has the same
blocks either way): a zero-inflated loss (exactly 0 on 30-85 % of steps: hinge, margin and triplet
losses on easy batches, detection losses on batches with no positives) has block medians of 0
where over half a block's points are zeros, near 0 (its lowest non-zero values) where just under
half are, and at its non-zero level where fewer are: a "rise" of hundreds of % from a near-0 best
on a healthy run (an error). Its level is that of its non-zero values, which diverge as any
loss's do. A loss that turns into zeros altogether makes no block at all: no divergence (nothing
rose: a loss or data bug, or learning switched off, and ``learning_stalled``'s story, a run of
exact zeros); should it come back, its blocks go on from its last non-zero values, against the
best before.
"""

from __future__ import annotations

import math

import numpy as np

from trainwatch.rules.builtin.divergence_alert import divergence_hit
from trainwatch.rules.builtin.divergence_bars import (
    bar_scale,
    bar_scales,
    error_rise,
    multiplies,
    noise_levels,
    noise_rise,
    run_error,
)
from trainwatch.rules.config.models import DivergenceConfig
from trainwatch.rules.detectors.block_levels import (
    LEVEL_BLOCKS,
    SCATTER_BLOCKS,
    block_jumps,
    block_levels,
    jump_list,
    level_at,
    scatter_at_list,
    scatter_of,
)
from trainwatch.rules.detectors.block_wander import WanderSamples
from trainwatch.rules.detectors.blocks import Blocks, LossBlockRule, shared_blocks
from trainwatch.rules.engine.base import Context, Frame, Hit

_FEW = 8
"""Candidate blocks of a vectorised step checked one by one first (a rise under way makes the
first bad); the exact bars of the rest, if any, are computed in one go."""
_PY_JUMPS = 32
"""Most blocks of a frame whose jumps are computed on Python floats (past it, in numpy)."""


class _FrameCols:
    """The values of a frame's blocks that divergence reads besides their medians, each made at
    its first read (most frames read few of them, a live one often none)."""

    __slots__ = ("level", "lv", "mad", "noise")

    def __init__(self) -> None:
        self.level: np.ndarray | None = None
        """The level at each block (block_levels): the vectorised step's."""
        self.lv: list[float] | None = None
        """The same as Python floats: the per-block reference's."""
        self.mad: list[float] | None = None
        self.noise: list[float] | None = None
        """The blocks' MADs and noise levels as Python floats (reading them computes a lazy
        stream's spread: only at a block that may rise)."""


class DivergenceRule(LossBlockRule):
    id = "divergence"
    roles_read = ("loss",)
    lazy_spread = True
    """(The vectorised step reads the blocks' MAD and noise only at candidates: on most frames
    at none, and their sort and rolling median are not done.)"""

    def __init__(self, cfg: DivergenceConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self._lo = min(cfg.rise, cfg.error_rise)
        """The lower of the two rise bars (a block below it times |best| is neither)."""
        self.rewind()

    def rewind(self) -> None:
        self._rewind_blocks()
        self._jl: list[float] = []
        """The jumps between block medians (see block_jumps): the segment's last
        ``SCATTER_BLOCKS - 1`` before the frame being driven, then the frame's own (once
        computed: see :meth:`_frame_jumps`)."""
        self._jin: tuple[float | None, np.ndarray] | None = None
        """What the frame's jumps are computed from when first read (the block before the frame,
        its block medians), None once they are: a frame with no block that may rise reads none
        (a short file checked whole: never), and the next frame carries the last few only."""
        self._jump0 = 0
        """Where in ``_jl`` the jumps of the frame's first block end (see scatter_at_list)."""
        self._before: list[float] = []
        """The last LEVEL_BLOCKS - 1 block medians before the frame being driven."""
        self._last: list[float] = []
        """The last LEVEL_BLOCKS - 1 block medians of the segment (the last one is the block
        before the next frame's first: its jump starts from it)."""
        self._cols = _FrameCols()
        """The frame's values the blocks read, each made at its first read."""
        self._wander = WanderSamples()
        """The segment's sampled block medians, and the wander they give at a block."""
        self.up = 0
        self.quiet = 0
        self.run_z: list[float] = []
        """The noise levels above the best of the last few blocks in a row that were up (at most
        ``windows``; see :func:`~trainwatch.rules.builtin.divergence_bars.run_error`)."""
        self.active = False
        self.escalated = False
        self.rearm_below: float | None = None
        """After an alert, a best below this re-arms the rule: a loss that stays flat and noisy
        around the same level is the same story, not a new divergence (it fired again and again
        before), and only real progress (``rise`` below the best at the alert) starts a new one."""

    def update(self, frame: Frame) -> list[Hit]:
        # (the loss's blocks without its exact zeros: see the module's docstring)
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window, nonzero=True)
        if not len(b):
            return []
        self._start_frame(b)
        return self._drive(frame, b)

    def _start_frame(self, b: Blocks) -> None:
        # the levels, jumps, MADs and noise the frame's blocks read are pure functions of the
        # block medians, made when first read (a live frame of one block below the rise bars
        # reads its level alone); only what the next frame needs is carried now
        prev = self._last[-1] if self._last else None
        self._jl = self._carried_jumps()
        self._jin = (prev, b.med)
        self._jump0 = len(self._jl) + (0 if prev is None else 1)
        self._before = self._last
        self._cols = _FrameCols()
        self._last = (self._last + b.med[-(LEVEL_BLOCKS - 1):].tolist())[-(LEVEL_BLOCKS - 1):]
        self._wander.start_frame(self.nblk, b.med)

    def _carried_jumps(self) -> list[float]:
        """The segment's last ``SCATTER_BLOCKS - 1`` jumps, to the end of the frame just
        driven (from its last blocks alone when the frame's jumps were not read)."""
        keep = SCATTER_BLOCKS - 1
        if self._jin is None:
            return self._jl[-keep:]
        prev, med = self._jin
        self._jin = None
        if med.shape[0] > keep:
            prev, med = float(med[-keep - 1]), med[-keep:]
        return (self._jl + jump_list(prev, med.tolist()))[-keep:]

    def _frame_jumps(self) -> list[float]:
        """``_jl``, the frame's jumps computed at the first read in a frame."""
        if self._jin is not None:
            prev, med = self._jin
            new = (jump_list(prev, med.tolist()) if med.shape[0] <= _PY_JUMPS
                   else block_jumps(prev, med).tolist())
            self._jl = self._jl + new
            self._jin = None
        return self._jl

    def _levels(self, b: Blocks) -> np.ndarray:
        """The level at each block of the frame (see block_levels), for the vectorised step."""
        cols = self._cols
        if cols.level is None:
            cols.level = block_levels(self._before, b.med)
        return cols.level

    def _level_list(self, b: Blocks) -> list[float]:
        """The level at each block of the frame, for the per-block reference: :meth:`_levels` as
        Python floats, or, for a frame of a few blocks (a live one), picked one by one."""
        cols = self._cols
        if cols.lv is None:
            n = len(b)
            if n < self.min_fast and cols.level is None:
                p = len(self._before)
                seq = self._before + b.med.tolist()
                cols.lv = [level_at(seq, p + i) for i in range(n)]
            else:
                cols.lv = self._levels(b).tolist()
        return cols.lv

    def _spread(self, b: Blocks) -> _FrameCols:
        """The frame's columns, with the blocks' MADs and noise as Python floats."""
        cols = self._cols
        if cols.mad is None:
            cols.mad, cols.noise = b.mad.tolist(), b.noise.tolist()
        return cols

    def _new_best(self, med: float) -> None:
        if self.rearm_below is not None and med < self.rearm_below:
            self.rearm_below = None

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float | None,
               step: int) -> Hit | None:
        """One block, the reference."""
        cfg: DivergenceConfig = self.cfg
        self.nblk += 1
        cols = self._cols
        # (the frame's columns read as attributes once made: a method call per block cost ~10 %
        # of a rise's per-block path)
        level = (cols.lv if cols.lv is not None else self._level_list(b))[i]
        if self.best is None or self.nblk <= cfg.warmup_windows:
            self._note_best(level, step)
            return None
        best = self.best
        capped = cfg.cap is not None and med > cfg.cap
        # below the best, or below the lower of the two bars times |best| (each bar is at least
        # that: its rise at least cfg.rise or cfg.error_rise, its scale at least |best|): neither
        # up nor an error, and the MAD, noise and scatter are not read
        if not capped and (med < best or not (
                med > best and med >= best + self._lo * abs(best))):
            self.up = 0
            self.run_z = []
            self.quiet += 1
            if self.active and self.quiet >= 2:
                self.active = False
            self._note_best(level, step)
            return None
        mads = cols.mad if cols.mad is not None else self._spread(b).mad
        if noise is None:
            noise = cols.noise[i]  # type: ignore[index]
        jumps = self._jl if self._jin is None else self._frame_jumps()
        sd = max(noise, scatter_at_list(jumps, self._jump0 + i))
        mad = mads[i]  # type: ignore[index]
        mult = multiplies(best, mad, med)
        rise = max(cfg.rise, noise_rise(cfg.noise_factor * sd, mult))
        scale = bar_scale(best, mad, med)
        err = capped or (med > best and med >= best + error_rise(
            cfg, rise, sd, self.nblk, mult) * scale)
        if err or (med > best and med >= best + rise * scale):
            # the wander only raises the bar: read where the others pass (and where the rule
            # fires, whose re-arm bar is the rise); a spread of relative differences measured
            # as they are, it is not taken through noise_rise
            rise = max(rise, cfg.noise_factor * self._wander.at(i))
        up = med > best and med >= best + rise * scale
        if up or capped:
            self.up += 1
            self.quiet = 0
            if up:
                # (the error's floor, error_rise, asked of this block alone)
                z = noise_levels((med - best) / scale, mult)
                self.run_z = (self.run_z + [z / sd if sd > 0 else math.inf])[-cfg.windows:]
                err = err or (med >= best + max(cfg.error_rise, rise) * scale
                              and run_error(cfg, self.run_z, self.nblk))
            else:
                self.run_z = []
        else:
            self.run_z = []
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
        level = self._levels(b)[i:j]
        k = n = j - i
        if w < n:
            med = b.med[i + w:j]
            # the best before each block after the warm-up (the warm-up's levels included)
            init = math.inf if self.best is None else self.best
            best = np.minimum.accumulate(np.concatenate(((init,), level)))[w:-1]
            # a block is bad at ``rise`` (at least cfg.rise: noise or scatter only raise it) or
            # at ``error_rise`` (the rise bar only raises it) above the best, times the scale
            # (at least |best|: the MAD only raises it): the lower bar times |best| picks the
            # candidates, and the exact bars (the MAD, noise and scatter read only here) are
            # checked for them alone
            lo = self._lo
            cand = med >= best + lo * np.abs(best)
            cand &= med > best
            if cfg.cap is not None:
                cand |= med > cfg.cap
            if cand.any():
                scale = bar_scales(best, b.mad[i + w:j], med)
                cand &= med >= best + lo * scale
                if cfg.cap is not None:
                    cand |= med > cfg.cap
                if cand.any():
                    k = w + self._first_bad(b, i + w, med, best, scale, cand.nonzero()[0],
                                            self.nblk + w)
        self.nblk += k
        if k > w:
            self.up = 0
            self.run_z = []
            self.quiet += k - w
            if self.active and self.quiet >= 2:
                self.active = False
        if k:
            self._note_best_of(b, i, level[:k])
        return k

    def _first_bad(self, b: Blocks, i: int, med: np.ndarray, best: np.ndarray,
                   scale: np.ndarray, cands: np.ndarray, n0: int) -> int:
        """The first of the candidate blocks ``cands`` (of blocks ``i, i + 1, ...`` of ``b``,
        whose medians, bests before them and scales are given; ``n0`` blocks of the segment
        before block ``i``) that rises above the best by :meth:`_block`'s bars; ``med``'s length
        if none does."""
        cfg: DivergenceConfig = self.cfg
        # the first few one by one on Python floats (a rise under way: the first is often bad),
        # the rest, if many, vectorised
        cl = cands.tolist()
        medl, bestl, scalel = med.tolist(), best.tolist(), scale.tolist()
        noise, jumps, j0 = self._spread(b).noise, self._frame_jumps(), self._jump0 + i
        for t in cl[:_FEW]:
            x, bs, sl = medl[t], bestl[t], scalel[t]
            if cfg.cap is not None and x > cfg.cap:
                return t
            sd = max(noise[i + t], scatter_at_list(jumps, j0 + t))  # type: ignore[index]
            if x > bs and self._rises(i + t, x, bs, sl, sd, n0 + t + 1):
                return t
        if len(cl) <= _FEW:
            return med.shape[0]
        cands = cands[_FEW:]
        g = cands + i
        sc = scatter_of(np.array(jumps), g + self._jump0)
        sd = np.maximum(b.noise[g], sc)
        rise = np.maximum(cfg.rise, cfg.noise_factor * sd)
        m, bs, sl = med[cands], best[cands], scale[cands]
        # (bad by the rise bar without the wander or at ``error_rise``, the error bar's floor: a
        # superset, each then checked with the exact bars, whose noise rise is at least this)
        bad = (m > bs) & ((m >= bs + rise * sl) | (m >= bs + cfg.error_rise * sl))
        if cfg.cap is not None:
            bad |= m > cfg.cap
        for h in bad.nonzero()[0].tolist():
            t = int(cands[h])
            x = float(m[h])
            if (cfg.cap is not None and x > cfg.cap) or self._rises(
                    i + t, x, float(bs[h]), float(sl[h]), float(sd[h]), n0 + t + 1):
                return t
        return med.shape[0]

    def _rises(self, k: int, x: float, best: float, scale: float, sd: float, nblk: int
               ) -> bool:
        """Whether block ``k`` of the frame, at ``x`` above the best, is up or an error by
        :meth:`_block`'s bars, given its scale, the noise of a block median (``sd``, without the
        wander) and the blocks of the segment up to this one (``nblk``). (Its MAD is read again
        here: only at the few candidates.)"""
        cfg: DivergenceConfig = self.cfg
        mult = multiplies(best, self._cols.mad[k], x)  # type: ignore[index]
        rise = max(cfg.rise, noise_rise(cfg.noise_factor * sd, mult))
        if x >= best + error_rise(cfg, rise, sd, nblk, mult) * scale:
            return True
        if x < best + rise * scale:
            return False
        return x >= best + max(rise, cfg.noise_factor * self._wander.at(k)) * scale

    def _fire(self, frame: Frame, b: Blocks, i: int, med: float, best: float, severity: str,
              capped: bool) -> Hit:
        """The alert at block ``i`` (see :mod:`~trainwatch.rules.builtin.divergence_alert`)."""
        return divergence_hit(self, frame, b, i, med, best, severity, capped, self.up)
