"""The bars a block of ``divergence`` must pass above the best: what the relative rise multiplies
(:func:`bar_scale`) and the error bar's rise (:func:`error_rise`, :func:`run_error`).

Pure functions of a block's numbers and the config, apart from the rule
(:mod:`~trainwatch.rules.builtin.divergence`) and tested without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainwatch.rules.builtin.divergence import DivergenceConfig

MAD_SCALE = 1.4826
"""A MAD times this is the standard deviation of normal data."""


def multiplies(best: float, mad: float, med: float) -> bool:
    """Whether a block (median ``med``, MAD ``mad``) above the best is read as a positive loss,
    whose noise multiplies its level: a positive best, and the block's MAD at most its median (as
    it always is for values >= 0; one whose MAD passes its median crosses 0)."""
    return 0.0 < best < med and mad <= med


def bar_scale(best: float, mad: float, med: float) -> float:
    """What the relative bars multiply: the best level, or the loss's spread at the best's level
    when that is larger (a loss near 0, or crossing it, has no meaningful relative rise: at a best
    of 0 every flat block was "up" and an error at once).

    The spread is the block's own MAD (around its median ``med``), brought back to the best's
    level when the loss :func:`multiplies`: such a loss's spread grows with its level, and the
    risen block's own MAD grew as fast as its median on a multiplicative blow-up (x5, x20 of an
    Exponential-like loss), so the bar did too, and such a blow-up was caught only by luck.

    (A best of exactly 0 needs no rule of its own: with the zeros out of the blocks, a block
    median of 0 is two middle values of an even window that cancel, a loss crossing 0, whose
    MAD is then positive and the scale.)"""
    if multiplies(best, mad, med):
        mad = mad * best / med
    return max(abs(best), MAD_SCALE * mad)


def noise_rise(q: float, mult: bool) -> float:
    """The relative rise that ``q`` relative noise levels of a block median make: ``expm1(q)``
    for a loss whose noise multiplies its level (``mult``: its block medians spread as their
    logarithm does, and the best, the luckiest low, sits ``q`` levels below in the logarithm:
    at 25-50 % noise a block ``1 + q`` times the best was an unlucky one, not a rise); ``q`` for
    one that crosses 0. The same to first order at the usual noise of a few %."""
    if not mult:
        return q
    return math.expm1(q) if q < 700.0 else math.inf  # (past it, expm1 overflows)


def noise_levels(rise: float, mult: bool) -> float:
    """The inverse of :func:`noise_rise`: how many relative noise levels (times the noise)
    a relative ``rise`` is."""
    return math.log1p(rise) if mult else rise


def luck(nblk: int, k: int = 1) -> float:
    """How many noise levels of a block median ``k`` blocks in a row stray above their level by
    chance, the highest such run of ``nblk`` blocks: ``sqrt(2 ln n / k)`` (the extreme of n normal
    values grows as ``sqrt(2 ln n)``; k in a row each pass a bar of probability ``p`` with ``p^k``)."""
    return math.sqrt(2.0 * math.log(nblk) / k) if nblk > 1 else 0.0


def error_levels(cfg: DivergenceConfig, nblk: int, k: int = 1) -> float:
    """The noise levels a block, or each of ``k`` blocks in a row, must be above the best for an
    error: ``noise_factor`` plus :func:`luck` (0: noise off, only ``error_rise`` counts).

    Over hundreds of blocks of a noisy loss the best is the luckiest low and some block an
    unlucky high, and a bar of ``noise_factor`` levels alone (the warning's, which asks for
    ``windows`` blocks in a row) was passed by one block on every clean run of 30k steps at 50 %
    batch noise; a marginal block is an error when the next ones pass a lower bar too."""
    return cfg.noise_factor + luck(nblk, k) if cfg.noise_factor > 0 else 0.0


def error_rise(cfg: DivergenceConfig, rise: float, sd: float, nblk: int, mult: bool) -> float:
    """The error bar's rise for one block, given the rise bar without the wander (``rise``), the
    noise of a block median it was made from (``sd``: the largest of its standard error and the
    scatter), the blocks of the segment so far (``nblk``) and whether the loss multiplies:
    ``error_rise``, or that bar, or :func:`error_levels` noise levels, whichever is most.

    A loss whose noise puts its block medians ``error_rise`` above its luckiest low (an
    Exponential-like spread, a block median's error ~30 %) is the same story. (Not the wander: a
    rise told and settled back raises it, and a blow-up after it put off its error by 19
    blocks.)"""
    return max(cfg.error_rise, rise, noise_rise(error_levels(cfg, nblk) * sd, mult))


def run_error(cfg: DivergenceConfig, run: list[float], nblk: int) -> bool:
    """Whether the blocks up in a row up to this one, ``run`` noise levels above the best each
    (oldest first), make an error: each of the last ``k`` at least ``error_levels(k)`` (``k``
    from 2 on). A single block must pass ``error_levels(1)``, the luck of one block in the whole
    run: a blow-up of a noisy loss by x5 is often just under it, and the next block, past a
    lower bar too, tells it apart from an unlucky one."""
    if cfg.noise_factor <= 0:
        return False
    low = math.inf
    for k in range(1, len(run) + 1):
        low = min(low, run[-k])
        if k >= 2 and low >= error_levels(cfg, nblk, k):
            return True
    return False
