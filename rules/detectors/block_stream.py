"""Non-overlapping block medians of a stream: the smoothed signal the trend rules compare.

Every ``k`` finite points make one block; its median (and MAD) is the block's value, stamped with
the step, time and record of its last point. The block boundaries depend only on how many points
came, so the blocks are the same however the stream was batched.

Each block also carries the *noise level* of recent blocks: the relative standard error of a
block median (1.2533 x 1.4826 x MAD / sqrt(k) / |median|), as the median over the last 8 blocks.
Rules raise their "improved" / "rose" bars above it, so a noisy loss does not trip them by chance.

A push that completes a few blocks (a live read completes one or none) is computed on Python
floats, a longer one in numpy: the same operations on the same values, so the same blocks to the
bit (tests push a stream whole and in pieces of every size and compare).
"""

from __future__ import annotations

import math
from bisect import insort

import numpy as np

from trainwatch.rules.detectors.stats import MAD_TO_SIGMA, windows
from trainwatch.rules.engine.base import Points

NOISE_BLOCKS = 8
"""Blocks the noise level is the median over."""
_SE_MEDIAN = 1.2533
"""Standard error of a median is about 1.2533 sigma / sqrt(n) for normal data."""
PY_BLOCKS = 4
"""Most blocks a push computes on Python floats: past that, numpy's fixed cost per call (a dozen
calls, ~25 us on one block of 50) is the smaller."""


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


_Rows = np.ndarray | list[list[float]]
"""A push's blocks' sorted values: an array, or Python lists for a short push."""


class _Pushed:
    """One lazy push, as the pushes after it read it for their noise history: its sorted rows,
    its medians, and, once its own noise was read, the relative errors of the stream's last
    NOISE_BLOCKS - 1 blocks up to its end (the next push's whole history: a stream whose every
    push is read, as a live watch's, computes each block's error once, as an eager one does)."""

    __slots__ = ("last", "med", "rows")

    def __init__(self, rows: _Rows, med: np.ndarray | list[float]) -> None:
        self.rows, self.med = rows, med
        self.last: list[float] | None = None


class _Spread:
    """The MAD and noise level of a lazy stream's push, computed when first asked for, from the
    push's sorted rows and those of the pushes before it (whose last blocks' relative errors
    are the noise level's history: kept by the last push whose noise was read, the others'
    computed here, so a push whose noise nobody reads costs nothing of it)."""

    __slots__ = ("before", "own", "se")

    def __init__(self, se: float, own: _Pushed, before: list[_Pushed]) -> None:
        self.se, self.own, self.before = se, own, before

    def _hist(self) -> list[float]:
        """The relative errors of the NOISE_BLOCKS - 1 blocks before the push (fewer at a
        segment's start)."""
        rels: list[float] = []
        need = NOISE_BLOCKS - 1
        for p in reversed(self.before):
            if p.last is not None:  # (the history up to p's end: all there is before it)
                rels[:0] = p.last[-need:]
                break
            take = min(need, len(p.med))
            rs, ms = p.rows[-take:], p.med[-take:]
            # (a push's rows in numpy when it made them so: a few calls, where a sort of each
            # row on Python floats cost ~4 us a row)
            rels[:0] = (mad_rel_list(self.se, rs, ms)[1] if isinstance(rs, list)  # type: ignore[arg-type]
                        else mad_rel(self.se, rs, ms)[1].tolist())  # type: ignore[arg-type]
            need -= take
            if not need:
                break
        return rels

    def mad_noise(self) -> tuple[np.ndarray, np.ndarray]:
        hist = self._hist()
        own = self.own
        if isinstance(own.rows, list):
            mad, rel = mad_rel_list(self.se, own.rows, own.med)  # type: ignore[arg-type]
            own.last = (hist + rel)[-(NOISE_BLOCKS - 1):]
            return np.array(mad), np.array(rolling_noise_list(hist, rel))
        mad, rel_a = mad_rel(self.se, own.rows, own.med)  # type: ignore[arg-type]
        own.last = (hist + rel_a[-(NOISE_BLOCKS - 1):].tolist())[-(NOISE_BLOCKS - 1):]
        return mad, rolling_noise(hist, rel_a)


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


def mad_rel_list(se: float, rows: list[list[float]], med: list[float]
                 ) -> tuple[list[float], list[float]]:
    """:func:`mad_rel` on Python floats (the same operations, in the same order)."""
    mads, rels = [], []
    for row, m in zip(rows, med):
        k = len(row)
        dev = sorted([abs(x - m) for x in row])
        mad = (dev[(k - 1) // 2] + dev[k // 2]) * 0.5
        absmed = abs(m)
        rel = se * mad / absmed if absmed > 0 else 0.0
        mads.append(mad)
        rels.append(rel if math.isfinite(rel) else 0.0)
    return mads, rels


def rolling_noise(hist: list[float], rel: np.ndarray) -> np.ndarray:
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


def rolling_noise_list(hist: list[float], rel: list[float]) -> list[float]:
    """:func:`rolling_noise` on Python floats, for a few blocks."""
    seq = hist + rel
    h = len(hist)
    out = []
    for t in range(h, len(seq)):
        cur = sorted(seq[max(0, t - NOISE_BLOCKS + 1):t + 1])
        c = len(cur)
        out.append((cur[(c - 1) // 2] + cur[c // 2]) * 0.5)
    return out


def sorted_medians(rows: np.ndarray) -> np.ndarray:
    """Each row's median, sorting ``rows`` in place (numpy's sort: what decides the sign of a
    zero median)."""
    k = rows.shape[1]
    rows.sort(axis=1)
    med = rows[:, (k - 1) // 2] + rows[:, k // 2]
    med *= 0.5  # = median_sorted(rows), in place
    return med


def list_block_medians(v: list[float], k: int, nb: int) -> tuple[list[list[float]], list[float]]:
    """The first ``nb`` blocks of ``k`` values of ``v``, sorted, and their medians, on Python
    floats: the bits of :func:`sorted_medians`. Sorting orders equal floats alike except 0.0
    and -0.0, so a block whose two middle values are zeros (where the order of their signs
    shows in the median's) has its median taken by numpy's sort."""
    lo, hi = (k - 1) // 2, k // 2
    rows = [sorted(v[j * k:(j + 1) * k]) for j in range(nb)]
    meds = []
    for j, r in enumerate(rows):
        a, b = r[lo], r[hi]
        if a == 0.0 and b == 0.0:
            meds.append(float(sorted_medians(np.array([v[j * k:(j + 1) * k]]))[0]))
        else:
            meds.append((a + b) * 0.5)
    return rows, meds


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
        self._v: list[float] = []
        """Values of the block under way (fewer than k): its last point is still to come, so
        only the values are carried; step, time and record come from the point that ends it."""
        self._rel: list[float] = []
        """Relative standard errors of the last NOISE_BLOCKS - 1 blocks (an eager stream's)."""
        self._tail: list[_Pushed] = []
        """A lazy stream's last pushes, as many as hold its last NOISE_BLOCKS - 1 blocks: their
        relative errors (the next push's noise history) are computed only if a noise is read (a
        live read of one block paid ~3 us for them at every push), and once (see
        :class:`_Pushed`)."""
        self._tail_n = 0
        """Blocks in ``_tail``."""
        self.count = 0
        """Blocks completed since the last reset."""

    def push(self, pts: Points) -> Blocks:
        """Add finite points; returns the blocks they complete."""
        k = self.k
        c = len(self._v)
        m = pts.values.shape[0]
        if c + m < k:  # no block completes (most live reads): the values are only kept
            self._v += pts.values.tolist()
            return EMPTY
        nb = (c + m) // k
        # block j ends at the new point k - c - 1 + j k (the carried ones are fewer than k)
        last = slice(k - c - 1, k - c - 1 + nb * k, k)
        steps, times, pos = pts.steps[last], pts.times[last], pts.pos[last]
        if nb <= PY_BLOCKS:
            return self._push_list(pts, nb, steps, times, pos)
        v = np.concatenate((self._v, pts.values)) if c else pts.values
        n = nb * k
        self._v = v[n:].tolist()
        rows = v[:n].reshape(-1, k).copy()
        med = sorted_medians(rows)
        self.count += nb
        if not self.noise:
            return Blocks(med, _NONE, _NONE, steps, times, pos)
        if self.lazy:
            return Blocks(med, None, None, steps, times, pos, self._spread(rows, med))
        mad, rel = mad_rel(self.se, rows, med)
        noise = rolling_noise(self._rel, rel)
        self._rel = (self._rel + rel[-(NOISE_BLOCKS - 1):].tolist())[-(NOISE_BLOCKS - 1):]
        return Blocks(med, mad, noise, steps, times, pos)

    def _spread(self, rows: _Rows, med: np.ndarray | list[float]) -> _Spread:
        """A lazy push's spread; the push joins the tail (only the pushes that hold the last
        NOISE_BLOCKS - 1 blocks are kept)."""
        tail = self._tail
        own = _Pushed(rows, med)
        spread = _Spread(self.se, own, tail[:])
        tail.append(own)
        have = self._tail_n = self._tail_n + len(med)
        while have - len(tail[0].med) >= NOISE_BLOCKS - 1:
            have -= len(tail.pop(0).med)
        self._tail_n = have
        return spread

    def _push_list(self, pts: Points, nb: int, steps: np.ndarray, times: np.ndarray,
                   pos: np.ndarray) -> Blocks:
        """:meth:`push` of a few blocks, on Python floats."""
        k = self.k
        v = self._v + pts.values.tolist()
        rows, meds = list_block_medians(v, k, nb)
        self._v = v[nb * k:]
        self.count += nb
        med = np.array(meds)
        if not self.noise:
            return Blocks(med, _NONE, _NONE, steps, times, pos)
        if self.lazy:
            return Blocks(med, None, None, steps, times, pos, self._spread(rows, meds))
        mad, rel = mad_rel_list(self.se, rows, meds)
        noise = rolling_noise_list(self._rel, rel)
        self._rel = (self._rel + rel)[-(NOISE_BLOCKS - 1):]
        return Blocks(med, np.array(mad), np.array(noise), steps, times, pos)


_NONE = np.empty(0)
"""MAD and noise of the blocks of a stream that computes neither."""
EMPTY = Blocks(np.empty(0), np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0),
               np.empty(0, dtype=np.int64))
"""No block."""
