"""The bars a block of ``divergence`` must pass above the best: what the relative rise multiplies
(:func:`bar_scale`) and the error bar's rise (:func:`error_rise`).

Pure functions of a block's numbers and the config: apart from the rule (:mod:`~trainwatch.rules.
divergence`), which reads them at every block that may rise and in its vectorised step alike
(:data:`MAD_SCALE` there times a column of MADs), and tested against them without a rule.
"""

from __future__ import annotations

from trainwatch.rules.models import DivergenceConfig

MAD_SCALE = 1.4826
"""A MAD times this is the standard deviation of normal data."""


def bar_scale(best: float, mad: float) -> float:
    """What the relative bars multiply: the best level, or the block's own spread when that is
    larger (a loss near 0, or crossing it, has no meaningful relative rise: at a best of 0 every
    flat block was "up" and an error at once).

    (A best of exactly 0 needs no rule of its own: with the zeros out of the blocks, a block
    median of 0 is two middle values of an even window that cancel, a loss crossing 0, whose
    MAD is then positive and the scale.)"""
    return max(abs(best), MAD_SCALE * mad)


def error_rise(cfg: DivergenceConfig, rise: float) -> float:
    """The error bar's rise, given the rise bar without the wander (``rise``): ``error_rise``, or
    that bar when it is more. A loss whose batch noise puts its block medians ``error_rise``
    above its luckiest low (a few hinge terms above their margin: an Exponential-like spread, a
    block median's error ~30 %, as a zero-inflated loss's non-zero values) was "diverging" at once
    on a healthy run, its error bar below its warning bar. (Not the wander: a rise told and
    settled back raises it, and a blow-up after it put off its error by 19 blocks.)"""
    return max(cfg.error_rise, rise)
