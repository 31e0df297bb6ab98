"""Whether a learning rate is far outside the range people use with its optimizer: a likely cause
worth naming when the loss misbehaves (lr 5 with Adam), never an alert by itself.

The optimizer is read from what the run says, when it says it: the name of its LR series
(Lightning's ``lr-AdamW``, ``lr-SGD/pg1``), or a name passed in. Without one, the widest range
of the common optimizers is used, and the adaptive ones' (the usual default) with less
confidence.

    >>> lr_outside(5.0, "lr-AdamW")
    ('the learning rate 5 is far above the usual range for AdamW (1e-6 to 0.01)', 0.8)
    >>> lr_outside(3e-4, "lr-AdamW") is None
    True
"""

from __future__ import annotations

import re

from trainwatch.humanize import fmt_num

ADAPTIVE = (1e-6, 1e-2)
"""Adam, AdamW, RMSprop, Adagrad, Lion, LAMB..: fine-tuning at 1e-6, from-scratch at up to 1e-2
(a few small models train at 3e-2; x10 past the top is well outside)."""
SGD = (1e-5, 2.0)
"""SGD with momentum: 0.1 x batch/256 is the classic rule; LARS-style large batches reach ~10."""
ANY = (1e-7, 10.0)
"""Any of them (the optimizer unknown)."""
FAR = 10.0
"""An LR this many times past either end of the range is far outside it."""

_ADAPTIVE_NAMES = re.compile(r"adam|adagrad|adadelta|rmsprop|lion|lamb|adafactor|sophia|nadam|"
                             r"radam|shampoo|soap|muon", re.IGNORECASE)
_SGD_NAMES = re.compile(r"sgd|lars|momentum|nesterov", re.IGNORECASE)


def optimizer_of(name: str | None) -> tuple[str, tuple[float, float]] | None:
    """(the optimizer's name as written, its usual range) read from a series or optimizer
    name, or None when it names none known."""
    if not name:
        return None
    for pattern, rng in ((_ADAPTIVE_NAMES, ADAPTIVE), (_SGD_NAMES, SGD)):
        m = pattern.search(name)
        if m:
            # the whole word the match is in (AdamW, not Adam, from lr-AdamW/pg1)
            word = re.search(r"[A-Za-z0-9]*" + re.escape(m.group(0)) + r"[A-Za-z0-9]*", name)
            return (word.group(0) if word else m.group(0)), rng
    return None


def lr_outside(lr: float | None, optimizer: str | None = None) -> tuple[str, float] | None:
    """(a cause, its confidence) when ``lr`` is more than :data:`FAR` times past the usual range
    of the optimizer ``optimizer`` names (a series or optimizer name), else None. Unnamed, an LR
    past any common optimizer's range is said as such, and one past the adaptive optimizers'
    (the usual default) as unusual for them, with less confidence."""
    if lr is None or not lr > 0:
        return None
    known = optimizer_of(optimizer)
    if known is not None:
        label, (lo, hi) = known
        return _outside(lr, label, lo, hi, 0.8)
    found = _outside(lr, "any common optimizer", *ANY, 0.8)
    if found is not None:
        return found
    found = _outside(lr, "Adam-type optimizers", ADAPTIVE[0] / FAR, ADAPTIVE[1], 0.5)
    return None if found is None else (f"{found[0]}; only SGD with large batches goes this high",
                                       found[1])


def _outside(lr: float, label: str, lo: float, hi: float, conf: float) -> tuple[str, float] | None:
    span = f"{fmt_num(lo, 2)} to {fmt_num(hi, 2)}"
    if lr > FAR * hi:
        return f"the learning rate {fmt_num(lr, 2)} is far above the usual range for {label} ({span})", conf
    if lr < lo / FAR:
        return (f"the learning rate {fmt_num(lr, 2)} is far below the usual range for {label} "
                f"({span})"), conf
    return None
