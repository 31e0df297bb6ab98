"""TensorBoard-style smoothing: a debiased exponential moving average.

Pure numpy, no Textual, so it is tested against a plain-Python reference.
"""

from __future__ import annotations

import math

import numpy as np

SMOOTHING_STEPS: tuple[float, ...] = (0.0, 0.6, 0.8, 0.9, 0.95, 0.99)
"""The weights the ``s`` key cycles through (0 = off)."""

_MAX_GROWTH = 1e40
"""Largest ``w**-k`` allowed inside one block, far from float64 overflow."""


def is_constant(values: np.ndarray) -> bool:
    """True when every finite value is the same (smoothing would only add a ramp-up artefact)."""
    finite = values[np.isfinite(values)]
    return finite.size == 0 or bool(np.all(finite == finite[0]))


def debiased_ema(values: np.ndarray, weight: float) -> np.ndarray:
    """Smooth ``values`` exactly as TensorBoard's scalar dashboard does.

    ``last = last * w + (1 - w) * x`` over finite values only, divided by ``1 - w**n`` (n = finite
    values so far) so that the start is not pulled towards zero. A non-finite value passes through
    unchanged and does not move the average: a NaN stays visible as a NaN. Weight 0, and a
    constant series, return the input.
    """
    x = np.asarray(values, dtype=np.float64)
    if weight <= 0.0 or x.size == 0 or is_constant(x):
        return x.copy()
    if weight >= 1.0:
        raise ValueError(f"smoothing weight must be below 1, got {weight}")
    finite = np.isfinite(x)
    xf = x[finite]
    out = x.copy()
    out[finite] = _ema(xf, weight) / (1.0 - weight ** np.arange(1, xf.size + 1))
    return out


def _ema(x: np.ndarray, w: float) -> np.ndarray:
    """``y_i = w * y_{i-1} + (1 - w) * x_i`` with ``y_{-1} = 0``, vectorised block by block.

    Inside a block of length B, ``y_i = w**(i+1) * carry + (1 - w) * w**i * cumsum(x_k * w**-k)``;
    B is chosen so that ``w**-B`` stays far from overflow, and the carry links the blocks.
    """
    n = x.size
    block = int(min(4096, max(1, math.floor(math.log(_MAX_GROWTH) / -math.log(w)))))
    k = np.arange(block, dtype=np.float64)
    grow = w ** -k  # w**-k
    shrink = w**k  # w**k
    out = np.empty(n, dtype=np.float64)
    carry = 0.0
    for start in range(0, n, block):
        seg = x[start : start + block]
        m = seg.size
        acc = np.cumsum(seg * grow[:m])
        y = shrink[:m] * ((1.0 - w) * acc + w * carry)
        out[start : start + m] = y
        carry = float(y[-1])
    return out
