"""What a record's keys and values mean, before any batch is built: the reserved keys (``step``,
``time``, ``event``, ``rank``) and how each is read, the non-finite tokens, nested dicts flattened
to dotted names, and a record time filled in where a record has none (docs/format.md's table).

Apart from :mod:`~trainwatch.builder`, which collects records into batches (rows, series,
segments, events): these are the per-value rules every reader and the builder's column path
apply alike, each a pure function tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

RESERVED = frozenset({"step", "time", "event", "rank"})
NONFINITE_STRINGS = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-infinity": -math.inf,
}
MAX_KEYS_PER_RECORD = 4096
"""Guards against a pathological record turning into thousands of series."""


def numeric_value(v: Any) -> float | None:
    """The float a JSON value stands for as a metric, or None when it is not a metric value.

    Booleans are not metrics. The strings "nan", "inf", "-inf" (any case) are non-finite values,
    because some writers quote them to stay inside strict JSON.
    """
    t = type(v)
    if t is float:
        return v
    if t is int:
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if t is str and len(v) <= 10:
        return NONFINITE_STRINGS.get(v.strip().lower())
    return None


def flatten(obj: Mapping[str, Any], prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"train": {"loss": 1}}`` -> ``{"train/loss": 1}``."""
    if out is None:
        out = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if type(v) is dict:
            flatten(v, key + "/", out)
        else:
            out[key] = v
    return out


MAX_STEP = 2**62
"""Steps at or past this (either sign) count as absent: no run takes that many, and int64
arrays hold steps (a cast of 1e20 would wrap to int64's minimum)."""


def coerce_step(v: Any) -> int | None:
    """A record's own step, or None when it has none usable (then the record index is used)."""
    t = type(v)
    if t is int:
        return v if -MAX_STEP < v < MAX_STEP else None
    if t is float and -MAX_STEP < v < MAX_STEP:  # (False for NaN and inf)
        return int(v)
    return None


def finite_or_nan(col: np.ndarray) -> np.ndarray:
    """``col`` with +-inf as NaN (a reserved key's "absent")."""
    inf = np.isinf(col)
    return np.where(inf, np.nan, col) if inf.any() else col


def step_or_nan(col: np.ndarray) -> np.ndarray:
    """A step column truncated, with values :func:`coerce_step` refuses as NaN ("absent")."""
    col = np.trunc(col)
    bad = ~(np.abs(col) < MAX_STEP)  # NaN, inf and the out-of-range
    return np.where(bad, np.nan, col) if bad.any() else col


def fill_times(times: np.ndarray, carried: float | None, clock: Callable[[], float]) -> np.ndarray:
    """Record times with the absent ones (NaN) filled: a record without a time of its own was
    written after the last one that had one, so it takes that time (``carried``: from an earlier
    read); one before any such record takes the first own time after it in this read, and only
    where the stream has given none at all the time it is read (``clock``). Filling each with
    the read time put "now" between a script's timed records (say, one timed record in ten): a
    backfill saw an hour's silence before every timed record, a run's duration ran to now."""
    absent = np.isnan(times)
    own = np.flatnonzero(~absent)
    if own.size == 0:
        return np.full(times.shape[0], clock() if carried is None else carried)
    last_own = np.where(absent, -1, np.arange(times.shape[0]))
    np.maximum.accumulate(last_own, out=last_own)
    filled = times[np.maximum(last_own, 0)]
    head = int(own[0])  # records before the read's first own time
    if head:
        filled[:head] = times[head] if carried is None else carried
    return filled


def coerce_time(v: Any) -> float | None:
    t = type(v)
    if (t is float or t is int) and math.isfinite(v):
        return float(v)
    return None
