"""Non-overlapping block medians of a stream: the smoothed signal the trend rules compare.

Every ``k`` finite points make one block; its median (and MAD) is the block's value, stamped with
the step, time and record of its last point. The block boundaries depend only on how many points
came, so the blocks are the same however the stream was batched.

Each block also carries the *noise level* of recent blocks: the relative standard error of a
block median (1.2533 x 1.4826 x MAD / sqrt(k) / |median|), as the median over the last 8 blocks.
Rules raise their "improved" / "rose" bars above it, so a noisy loss does not trip them by chance.

Several rules smooth the loss with the same window: :func:`shared_blocks` computes a role's blocks
once per frame and hands the same value to all of them. :class:`LossBlockRule` is the base of the
rules that read the train loss's blocks one by one (``plateau``, ``divergence``): it drives them
through the per-block reference and the vectorised quiet runs, and keeps the best block so far.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable

import numpy as np

from trainwatch.rules.base import Context, Frame, Hit, Points, Rule
from trainwatch.rules.stats import MAD_TO_SIGMA, windows

NOISE_BLOCKS = 8
"""Blocks the noise level is the median over."""
_SE_MEDIAN = 1.2533
"""Standard error of a median is about 1.2533 sigma / sqrt(n) for normal data."""


class Blocks:
    """The blocks one push completed: their medians, MADs, noise levels and the step, time and
    record of each one's last point. A value: never changed once made (a lazy stream's MAD and
    noise level are computed at their first read, see :class:`BlockStream`)."""

    __slots__ = ("_mad", "_noise", "_spread", "med", "pos", "step", "time")

    def __init__(self, med: np.ndarray, mad: np.ndarray | None, noise: np.ndarray | None,
                 step: np.ndarray, time: np.ndarray, pos: np.ndarray,
                 spread: _Spread | None = None) -> None:
        self.med = med
        self._mad = mad
        self._noise = noise
        self.step = step
        self.time = time
        self.pos = pos
        self._spread = spread
        """Computes the MAD and noise level (None once they are, or when they were given)."""

    @property
    def mad(self) -> np.ndarray:
        """(empty when the stream computes no noise)"""
        if self._mad is None:
            self._read_spread()
        return self._mad  # type: ignore[return-value]

    @property
    def noise(self) -> np.ndarray:
        """Relative standard error of a block median, over the last NOISE_BLOCKS blocks (empty
        when the stream computes no noise)."""
        if self._noise is None:
            self._read_spread()
        return self._noise  # type: ignore[return-value]

    def _read_spread(self) -> None:
        assert self._spread is not None
        self._mad, self._noise = self._spread.mad_noise()
        self._spread = None

    def __len__(self) -> int:
        return int(self.med.shape[0])


class _Spread:
    """The MAD and noise level of a lazy stream's push, computed when first asked for, from the
    push's sorted rows and the relative errors of the blocks before them."""

    __slots__ = ("hist", "med", "rel", "rows", "se")

    def __init__(self, se: float, rows: np.ndarray, med: np.ndarray, hist: np.ndarray) -> None:
        self.se, self.rows, self.med, self.hist = se, rows, med, hist
        self.rel: np.ndarray | None = None
        """The blocks' relative errors, once computed."""

    def mad_noise(self) -> tuple[np.ndarray, np.ndarray]:
        mad, self.rel = mad_rel(self.se, self.rows, self.med)
        return mad, rolling_noise(self.hist, self.rel)

    def carry(self) -> np.ndarray:
        """The relative errors of the last NOISE_BLOCKS - 1 blocks up to this push's last: the
        next push's history (when no rule read this push's noise, of its last blocks alone)."""
        w = NOISE_BLOCKS - 1
        rel = self.rel
        if rel is None:
            rel = mad_rel(self.se, self.rows[-w:], self.med[-w:])[1]
        return (np.concatenate((self.hist, rel)) if self.hist.shape[0] else rel)[-w:]


def mad_rel(se: float, rows: np.ndarray, med: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The MAD of each sorted row whose median is ``med``, and the relative standard error of
    the median, ``se`` x MAD / |median| (0 at a median of 0, and where it overflows)."""
    k = rows.shape[1]
    dev = rows - med[:, None]
    np.abs(dev, out=dev)
    dev.sort(axis=1)
    mad = dev[:, (k - 1) // 2] + dev[:, k // 2]
    mad *= 0.5
    absmed = np.abs(med)
    if absmed.min() > 0:
        rel = se * mad / absmed
    else:
        rel = np.zeros(med.shape[0])
        np.divide(se * mad, absmed, out=rel, where=absmed > 0)
    if not np.isfinite(rel.sum()):  # (a huge MAD over a tiny median: treated as no noise)
        rel[~np.isfinite(rel)] = 0.0
    return mad, rel


def rolling_noise(hist: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Median of each block's and the previous NOISE_BLOCKS - 1 blocks' values (``rel``, with
    the values of the blocks before it, ``hist``: fewer at a segment's start)."""
    w = NOISE_BLOCKS
    h = len(hist)
    m = rel.shape[0]
    seq = np.concatenate((hist, rel)) if h else rel
    short = min(m, max(0, w - 1 - h))  # the first blocks after a reset
    if not short:
        rows = np.sort(windows(seq, w)[h - w + 1:], axis=1)
        out = rows[:, (w - 1) // 2] + rows[:, w // 2]
        out *= 0.5
        return out
    # (one sorted list grown a value at a time: a median per block for ~0.3 us, where a
    # sort of each prefix cost ~1 us)
    vals = seq[: h + short].tolist()
    cur = sorted(vals[:h])
    head = []
    for x in vals[h:]:
        insort(cur, x)
        c = len(cur)
        head.append((cur[(c - 1) // 2] + cur[c // 2]) * 0.5)
    if short == m:
        return np.array(head)
    rows = np.sort(windows(seq, w)[h + short - w + 1:], axis=1)
    rest = rows[:, (w - 1) // 2] + rows[:, w // 2]
    rest *= 0.5
    return np.concatenate((head, rest))


class BlockStream:
    def __init__(self, k: int, *, noise: bool = True, lazy: bool = False) -> None:
        self.k = k
        self.noise = noise
        """Compute the blocks' MAD and noise level (a stream whose rules read only the medians
        leaves them empty)."""
        self.lazy = lazy
        """Compute them when a rule first reads them, not at the push (for a rule that needs
        them at a few blocks only, and often at none: a sort and a rolling median saved)."""
        self.se = _SE_MEDIAN * MAD_TO_SIGMA / math.sqrt(k)
        self.reset()

    def reset(self) -> None:
        self._v = np.empty(0)
        """Values of the block under way (fewer than k): its last point is still to come, so
        only the values are carried; step, time and record come from the point that ends it."""
        self._rel = np.empty(0)
        """Relative standard errors of the last NOISE_BLOCKS - 1 blocks (of a lazy stream, up to
        the push before ``_pending``)."""
        self._pending: _Spread | None = None
        """A lazy stream's last push: its blocks' errors join ``_rel`` at the next push."""
        self.count = 0
        """Blocks completed since the last reset."""

    def push(self, pts: Points) -> Blocks:
        """Add finite points; returns the blocks they complete."""
        k = self.k
        c = self._v.shape[0]
        v = np.concatenate((self._v, pts.values)) if c else pts.values
        n = (v.shape[0] // k) * k
        self._v = v[n:]
        if n == 0:
            return _EMPTY
        rows = v[:n].reshape(-1, k)
        rows = np.sort(rows, axis=1)
        med = rows[:, (k - 1) // 2] + rows[:, k // 2]
        med *= 0.5  # = median_sorted(rows), in place
        nb = med.shape[0]
        self.count += nb
        # block j ends at the new point k - c - 1 + j k (the carried ones are fewer than k)
        last = slice(k - c - 1, k - c - 1 + nb * k, k)
        if not self.noise:
            return Blocks(med, _NONE, _NONE, pts.steps[last], pts.times[last], pts.pos[last])
        if self._pending is not None:
            self._rel, self._pending = self._pending.carry(), None
        if self.lazy:
            self._pending = _Spread(self.se, rows, med, self._rel)
            return Blocks(med, None, None, pts.steps[last], pts.times[last], pts.pos[last],
                          self._pending)
        mad, rel = mad_rel(self.se, rows, med)
        noise = rolling_noise(self._rel, rel)
        h = self._rel.shape[0]
        self._rel = (np.concatenate((self._rel, rel)) if h else rel)[-(NOISE_BLOCKS - 1):]
        return Blocks(med, mad, noise, pts.steps[last], pts.times[last], pts.pos[last])


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


def shared_blocks(ctx: Context, frame: Frame, role: str, k: int, *,
                  noise: bool = True, lazy: bool = False) -> Blocks:
    """The blocks of ``role`` completed in this frame, computed once for every rule that asks with
    the same ``k``, ``noise`` and ``lazy`` (one stream per combination: a lazy and an eager
    stream of the same window compute their medians twice; the stream's state lives in the
    context and restarts with it at a rewind). With ``noise=False`` the blocks carry no MAD or
    noise level (cheaper, for rules that read only the medians); with ``lazy=True`` the MAD and
    noise are computed at their first read (see :class:`BlockStream`)."""
    key = (role, k, noise, lazy)
    cached = ctx.shared.get(("frame", key))
    if cached is not None and cached[0] is frame:
        return cached[1]
    stream = ctx.shared.get(key)
    if stream is None:
        stream = ctx.shared[key] = BlockStream(k, noise=noise, lazy=lazy)
    pts = frame.role(role)
    b = stream.push(pts.finite()) if pts is not None and len(pts) else _EMPTY
    ctx.shared[("frame", key)] = (frame, b)
    return b


_NONE = np.empty(0)
"""MAD and noise of the blocks of a stream that computes neither."""
_EMPTY = Blocks(np.empty(0), np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0),
                np.empty(0, dtype=np.int64))


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
    """The blocks' MAD and noise level computed at their first read (see :class:`BlockStream`):
    for a rule whose vectorised step reads them only at a few candidate blocks."""

    def _rewind_blocks(self) -> None:
        self.nblk = 0
        """Blocks seen in this segment."""
        self.best: float | None = None
        """The lowest block median so far."""
        self.best_step = 0

    def update(self, frame: Frame) -> list[Hit]:
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window, lazy=self.lazy_spread)
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
        if n < self.min_fast:  # (drive takes them all one by one: without its per-block calls)
            block = self._block
            for i, (med, noise, step) in enumerate(zip(b.med.tolist(), b.noise.tolist(),
                                                       b.step.tolist())):
                hit = block(frame, b, i, med, noise, step)
                if hit is not None:
                    hits.append(hit)
            return hits
        cols: list[list] = []  # (as Python numbers, made at the first block taken one by one)

        def slow(i: int) -> None:
            if not cols:
                cols.extend((b.med.tolist(), b.noise.tolist(), b.step.tolist()))
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

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float,
               step: int) -> Hit | None:
        """Block ``i`` of ``b`` (its median, noise level and step given as Python numbers)."""
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
