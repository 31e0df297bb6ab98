"""Block medians of the train loss as the trend rules read them, one block at a time.

Several rules smooth the loss with the same window: :func:`shared_blocks` computes a role's blocks
(:mod:`~trainwatch.rules.detectors.block_stream`) once per frame and hands the same value to all of them.
:class:`LossBlockRule` is the base of the rules that read the train loss's blocks one by one
(``plateau``, ``divergence``): it drives them through the per-block reference and the vectorised
quiet runs (:func:`drive`), and keeps the best block so far.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainwatch.rules.detectors.block_stream import EMPTY, Blocks, BlockStream
from trainwatch.rules.engine.base import Context, Frame, Hit, Rule

_MAX_BACKOFF = 64
MIN_FAST = 16
"""Fewest blocks left for the vectorised step to be tried: its fixed cost (tens of numpy calls
on small arrays, ~20 us) is more than the per-block reference takes for a few (~1 us each), as
in a live frame or the first frame of a run."""


def drive(n: int, ready: Callable[[], bool], fast: Callable[[int, int], int],
          slow: Callable[[int], None], min_fast: int = MIN_FAST) -> None:
    """Take blocks ``0..n-1`` in order: runs of quiet blocks in one vectorised step, the others
    one by one.

    ``fast(i, j)`` takes the quiet blocks from ``i`` on, before ``j``, and returns how many it
    took (it stops before the first block that may fire or change a mode); ``slow(i)`` is the
    per-block reference; ``ready()`` says, without numpy work, whether the rule's state allows the
    fast step (warm-up over, no episode under way). The fast step is tried again right after the
    block it stopped at, so a warm-up or one odd block does not send the rest of a long frame down
    the slow path; when it declines outright, or takes fewer than ``min_fast`` blocks (less than
    its fixed cost saves: a stretch where every few blocks run a trend test or restart a
    patience), it waits 1, 2, 4 ... 64 blocks before the next try, so a long anomaly costs a few
    tries, not one per block. Fewer than ``min_fast`` blocks left go one by one.

    A try looks at ``8 min_fast`` blocks, four times as many after each try that took all it
    looked at: a try that stops early has cost in proportion to what it looked at, so the many
    short ones of a long frame where the loss improves in small steps do not each sort through
    the whole rest of the frame (they made plateau's cost on a 50k-step file 3x what it is).
    """
    i = 0
    wait, backoff = 0, 1
    first_span = span = 8 * min_fast
    while i < n:
        if wait <= 0 and n - i >= min_fast and ready():
            j = i + span if n - i - span >= min_fast else n  # (no short tail left over)
            k = fast(i, j)
            i += k
            if i >= n:
                return
            if i == j:  # all quiet: a long quiet stretch, look further next
                span *= 4
                continue
            span = first_span
            if k >= min_fast:
                backoff = 1
            else:
                wait, backoff = backoff, min(2 * backoff, _MAX_BACKOFF)
        slow(i)
        i += 1
        wait -= 1


class _SharedStream:
    """A role's block stream in the context, with the blocks it made for the frame it was last
    pushed (every rule after the first gets those: one lookup, no tuple built per call)."""

    __slots__ = ("blocks", "frame", "stream")

    def __init__(self, stream: BlockStream) -> None:
        self.stream = stream
        self.frame: Frame | None = None
        self.blocks = EMPTY


def shared_blocks(ctx: Context, frame: Frame, role: str, k: int, *, noise: bool = True,
                  nonzero: bool = False) -> Blocks:
    """The blocks of ``role`` completed in this frame, computed once for every rule that asks with
    the same ``k``, ``noise`` and ``nonzero`` (the stream's state lives in the context and
    restarts with it at a rewind). With ``noise=False`` the blocks carry no MAD or noise level
    (for rules that read only the medians); else they are computed at their first read (a lazy
    :class:`BlockStream`): the rules of a window read them at a few blocks or none in most frames
    (``overfit``, ``grad_vanishing`` and ``lr_exhausted`` only where they may fire, ``plateau``
    not in a frame it puts off), and a push whose noise is read costs what an eager stream's
    does. With ``nonzero=True`` the blocks are made of the role's values other than exact zeros
    (``divergence``: a zero-inflated loss's level is that of its non-zero values), the same
    blocks as without it for a series that holds no zero."""
    key = (role, k, noise, nonzero)
    shared = ctx.shared.get(key)
    if shared is None:
        shared = ctx.shared[key] = _SharedStream(BlockStream(k, noise=noise, lazy=noise))
    elif shared.frame is frame:
        return shared.blocks
    pts = frame.role(role)
    if pts is None or not len(pts):
        b = EMPTY
    else:
        pts = pts.finite().nonzero() if nonzero else pts.finite()
        b = shared.stream.push(pts) if len(pts) else EMPTY
    shared.frame, shared.blocks = frame, b
    return b


class LossBlockRule(Rule):
    """A rule fed the block medians of the train loss (``cfg.window`` points each, shared with
    the other rules that ask for the same window), one block at a time.

    Subclasses give :meth:`_block` (one block, the reference) and :meth:`_quiet_prefix` (the
    same state changes for a run of blocks that cannot fire or change a mode, vectorised), and
    call :meth:`_rewind_blocks` from their ``rewind``. The best (lowest) block so far is kept
    here: :meth:`_note_best` for one block, :meth:`_note_best_of` for a run of them.
    """

    fast = True
    """Take runs of quiet blocks in one vectorised step (tests turn it off to compare)."""
    min_fast = MIN_FAST
    """Fewest blocks the vectorised step is tried on (and must take to be tried again soon)."""
    lazy_spread = False
    """The rule reads the blocks' noise level itself, where it needs it (the per-block reference
    is given None for it): for a rule whose vectorised step reads it only at a few candidate
    blocks (the stream computes it at its first read, see :func:`shared_blocks`)."""

    def _rewind_blocks(self) -> None:
        self.nblk = 0
        """Blocks seen in this segment."""
        self.best: float | None = None
        """The lowest block median so far."""
        self.best_step = 0

    def update(self, frame: Frame) -> list[Hit]:
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window)
        if not len(b):
            return []
        self._start_frame(b)
        return self._drive(frame, b)

    def _start_frame(self, b: Blocks) -> None:
        """Before the frame's blocks are driven: per-frame values both the per-block reference
        and the vectorised step read (none here)."""

    def _drive(self, frame: Frame, b: Blocks) -> list[Hit]:
        hits: list[Hit] = []
        n = len(b)
        # (a lazy_spread rule's noise is not read here: it reads it at the blocks that need it)
        lazy = self.lazy_spread
        if n < self.min_fast:  # (drive takes them all one by one: without its per-block calls)
            block = self._block
            meds, steps = b.med.tolist(), b.step.tolist()
            noises = [None] * n if lazy else b.noise.tolist()
            for i in range(n):
                hit = block(frame, b, i, meds[i], noises[i], steps[i])
                if hit is not None:
                    hits.append(hit)
            return hits
        cols: list[list] = []  # (as Python numbers, made at the first block taken one by one)

        def slow(i: int) -> None:
            if not cols:
                cols.extend((b.med.tolist(), [None] * n if lazy else b.noise.tolist(),
                             b.step.tolist()))
            meds, noises, steps = cols
            hit = self._block(frame, b, i, meds[i], noises[i], steps[i])
            if hit is not None:
                hits.append(hit)

        drive(n, self._ready, lambda i, j: self._quiet_prefix(b, i, j), slow,
              self.min_fast)
        return hits

    def _ready(self) -> bool:
        """Whether the state allows :meth:`_quiet_prefix` (checked without numpy work): warm-up
        over."""
        return self.fast and self.best is not None and self.nblk >= self.cfg.warmup_windows

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float | None,
               step: int) -> Hit | None:
        """Block ``i`` of ``b`` (its median, noise level and step given as Python numbers; the
        noise None for a ``lazy_spread`` rule, which reads it from ``b`` where it needs it)."""
        raise NotImplementedError

    def _quiet_prefix(self, b: Blocks, i: int, j: int) -> int:
        """The quiet blocks from ``i`` on, before ``j``, taken in one step; how many."""
        raise NotImplementedError

    def _note_best(self, med: float, step: int) -> None:
        """Take ``med`` as the best if it is lower."""
        if self.best is None or med < self.best:
            self.best, self.best_step = med, step
            self._new_best(med)

    def _note_best_of(self, b: Blocks, i: int, med: np.ndarray) -> None:
        """:meth:`_note_best` for blocks ``i, i + 1, ...`` of ``b`` whose medians are ``med``
        (the first of equal lows wins, as one by one)."""
        j = int(med.argmin())
        self._note_best(float(med[j]), int(b.step[i + j]))

    def _new_best(self, med: float) -> None:
        """Called when ``med`` has just become the best."""
