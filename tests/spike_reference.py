"""The spike detector's definition written point by point in plain Python (see the module doc of
:mod:`trainwatch.rules.detectors.spike`): the reference the vectorised detector is compared with,
and seeded series of several shapes to compare them on."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainwatch.rules.detectors.episode import Episode


def median(v: list[float]) -> float:
    s = sorted(v)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) * 0.5


class Reference:
    """One point at a time: :meth:`push` returns the point's event fields (or None) and whether
    it is anomalous."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.episode = Episode(cfg.rearm_points, cfg.cooldown_steps, cfg.persist_points)
        self.early_n, self.early_max, self.flag_run = 0, -math.inf, 0
        self.restart()

    def restart(self) -> None:
        self.acc: list[float] = []
        self.n_acc, self.ok, self.med, self.mad = 0, False, math.nan, math.nan
        self.blk, self.blocks = 0.0, [0.0]

    def guard(self) -> float:
        lb = math.ceil(self.cfg.tail_window / self.cfg.refresh)
        return max(self.blocks[-lb:])

    def scale(self, med: float, mad: float) -> float:
        return max(1.4826 * mad, 1e-3 * abs(med), 1e-12)

    def flags(self, x: float, med: float, mad: float) -> bool:
        """Whether ``x`` clears the ratio and z bars of the baseline ``med``, ``mad``."""
        return ((x - med) / (abs(med) or 1.0) >= self.cfg.min_ratio - 1
                and (x - med) / self.scale(med, mad) >= self.cfg.z_threshold)

    def push(self, x: float, step: int) -> tuple[tuple | None, bool]:
        cfg = self.cfg
        anomalous, e = False, 0.0
        if self.ok:
            e = (x - self.med) / (abs(self.med) or 1.0)
            recent = median(self.acc[-cfg.recent_points:])
            anomalous = (self.flags(x, self.med, self.mad)
                         and e >= max(cfg.min_ratio - 1, cfg.tail_guard * self.guard())
                         and x - recent >= cfg.jump_share * (x - self.med))
        severe = (self.early_n >= cfg.early_points and self.early_max > 0
                  and x >= cfg.early_max_ratio * self.early_max)
        if anomalous or (cfg.early_max_fires and severe):
            kind = self.episode.hit(step, severe)
            z = (x - self.med) / self.scale(self.med, self.mad) if self.ok else math.nan
            event = (kind, x, self.med, self.mad, z, self.early_max, severe, self.episode.count)
            self.flag_run += 1
            if self.flag_run == cfg.rebase_points:
                self.restart()
                self.flag_run = 0
            return (event if kind else None), True
        self.acc = (self.acc + [x])[-cfg.window:]
        self.n_acc += 1
        if self.ok:
            self.blk = max(self.blk, abs(e))
        if self.early_n < cfg.early_points:
            self.early_max, self.early_n = max(self.early_max, x), self.early_n + 1
        if self.n_acc % cfg.refresh == 0:
            if self.n_acc >= cfg.min_points:
                med = median(self.acc)
                mad = median([abs(v - med) for v in self.acc])
                if not self.ok and cfg.tail_guard > 0:  # the tail guard's start
                    half = self.acc[len(self.acc) - len(self.acc) // 2:]
                    self.blk = max([self.blk] + [abs((v - med) / (abs(med) or 1.0))
                                                 for v in half if not self.flags(v, med, mad)])
                self.ok, self.med, self.mad = True, med, mad
            self.blocks.append(self.blk)
            self.blk = 0.0
        self.episode.normal(1)
        self.flag_run = 0
        return None, False


def reference_run(cfg: Any, x: np.ndarray, steps: np.ndarray | None = None
                  ) -> tuple[list[tuple], list[int]]:
    """The reference's events (index first) and anomalous indices over ``x`` (steps 3 apart
    unless given)."""
    ref = Reference(cfg)
    events, flagged = [], []
    steps = np.arange(x.shape[0]) * 3 if steps is None else steps
    for i, (v, step) in enumerate(zip(x.tolist(), steps.tolist())):
        ev, anom = ref.push(v, step)
        if ev is not None:
            events.append((i, *ev))
        if anom:
            flagged.append(i)
    return events, flagged


# ------------------------------------------------------------------------------ shapes
def clean(seed: int, n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 2 + 4 * np.exp(-np.arange(n) / 800) + 0.05 * rng.standard_normal(n)


def spikes(seed: int, n: int = 6000) -> np.ndarray:
    """Heavy-ish noise on a falling curve, huge first values, spikes (one in warm-up) and a level
    shift longer than ``rebase_points``."""
    rng = np.random.default_rng(seed)
    x = 2 + 4 * np.exp(-np.arange(n) / 800) + 0.05 * rng.standard_t(3, n)
    x[:3] *= 20
    at = rng.choice(np.arange(200, n), 25, replace=False)
    x[at] *= rng.uniform(1.3, 6.0, 25)
    x[40] *= 30
    x[4000:4300] += 5.0
    return x


def ramps(seed: int, n: int = 6000) -> np.ndarray:
    """Ramps up of several slopes (most are no jump, the steepest is), spikes, a level step."""
    rng = np.random.default_rng(seed)
    x = 2.0 + 0.05 * rng.standard_t(3, n)
    for start, length, top in ((300, 80, 8.0), (1200, 40, 3.0), (2000, 6, 5.0), (3000, 60, 10.0)):
        x[start:start + length] *= np.geomspace(1.0, top, length)
        x[start + length:] *= top
    at = rng.choice(np.arange(200, n), 25, replace=False)
    x[at] *= rng.uniform(1.3, 6.0, 25)
    x[5000:5100] *= 3.0
    return x


def heavy(seed: int, n: int = 4000) -> np.ndarray:
    """A zero-inflated loss's non-zero values (a curve times Exponential(1) draws), starting
    high, with spikes, a step up longer than ``rebase_points`` and a drop."""
    rng = np.random.default_rng(seed)
    curve = 0.3 + 2.0 / (1.0 + np.arange(n) / 20.0)
    x = curve * rng.exponential(1.0, n)
    x[rng.choice(np.arange(150, n), 12, replace=False)] *= rng.uniform(10.0, 40.0, 12)
    x[1500:1800] = 30.0 * (1.0 + 0.01 * rng.standard_normal(300))
    x[2600:] *= 0.02
    return x


def dips_and_spikes(seed: int, n: int = 6000) -> np.ndarray:
    """Deep dips (the tail guard's bar comes from below), frequent spikes, and anomalous runs of
    15 to 200 points."""
    rng = np.random.default_rng(seed)
    x = 5.0 + 0.05 * rng.standard_normal(n)
    dips = rng.random(n) < 0.01
    x[dips] *= rng.uniform(0.05, 0.8, int(dips.sum()))
    at = rng.random(n) < 0.03
    x[at] *= rng.uniform(2.0, 8.0, int(at.sum()))
    start = 1000
    for length in (15, 16, 17, 200):
        x[start:start + length] = 50.0 + rng.random(length)
        start += 600
    return x


def zeros(seed: int, n: int = 3000) -> np.ndarray:
    """Exact zeros (a frozen grad norm) with blips that keep the median and MAD at 0, spikes."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    x[rng.random(n) < 0.1] = 0.05
    x[rng.choice(np.arange(300, n), 8, replace=False)] = 5.0
    return x


def early_then_faults(seed: int, n: int = 3500) -> np.ndarray:
    """Points 100-110 at 12x the early maximum (severe on their own), then dips, spikes, a zero
    stretch and a level shift longer than ``rebase_points``."""
    rng = np.random.default_rng(seed)
    x = 1.0 + 0.05 * rng.standard_normal(n)
    x[100:110] = 12.5
    x[rng.random(n) < 0.01] *= 0.3
    x[rng.choice(np.arange(300, n), 20, replace=False)] *= rng.uniform(1.5, 20.0, 20)
    x[2000:2300] = 0.0
    x[2500:2900] = 40.0 + 0.05 * rng.standard_normal(400)
    return x


SHAPES = {"clean": clean, "spikes": spikes, "ramps": ramps, "heavy": heavy,
          "dips_and_spikes": dips_and_spikes, "zeros": zeros,
          "early_then_faults": early_then_faults}
