"""A streaming spike detector: robust z against a rolling median/MAD of accepted points, with
episodes.

The definition, point by point (finite values only):

* The baseline is the median and MAD of the last ``window`` *accepted* points, taken again every
  ``refresh`` accepted points once ``min_points`` are in (warm-up). A point is accepted when it is
  not anomalous, so a spike never inflates the baseline.
* A point is anomalous when the baseline is warm and the point clears four bars: its relative
  excess ``(x - median) / |median|`` is at least ``min_ratio - 1``; and at least ``tail_guard``
  times the largest relative deviation (either side) of the accepted points of the last
  ``tail_window`` (in refresh blocks; heavy-tailed noise raises the bar by itself); its robust z
  ``(x - median) / (1.4826 MAD)`` is at least ``z_threshold``; and it is a *jump*: its excess over
  the recent level (median of the last ``recent_points`` accepted points) is at least
  ``jump_share`` of its excess over the median (the window median lags a smooth ramp by half a
  window; against the recent level the ramp's next point is no jump, a spike or a step is).
* When the baseline becomes warm, the tail guard starts from the largest deviation of the newest
  half of the warm-up window, less the points that first baseline flags (:func:`warm_deviation`).
* A point at least ``early_max_ratio`` times the early maximum (the largest of the first
  ``early_points`` accepted points) is *severe*: it escalates its episode at once, and where
  ``early_max_fires`` it is anomalous by itself.
* Anomalous points open, escalate and close episodes (:class:`Episode`); ``rebase_points``
  anomalous points in a row make the new level the normal one (the baseline restarts).

Feeding (:meth:`SpikeDetector.update`) is a vectorised pass that takes every point as accepted,
finds the first one the definition flags, commits the points before it, and takes the run of
anomalous points from there against the then fixed baseline. ``tests/spike_reference.py`` holds
the definition written point by point, which the detector is compared with after every element.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from trainwatch.rules.detectors.episode import Episode
from trainwatch.rules.detectors.stats import MAD_TO_SIGMA, min_max, strided_rows, windows

if TYPE_CHECKING:  # (the config model lives with the rules, which import this module)
    from trainwatch.rules.builtin.spike_rule import SpikeConfig

_FLAT = 1e-3
"""The robust scale's floor, as a share of |median|: a flat window (MAD 0) gives no infinite z."""
_TINY = 1e-12
"""...and its floor over a median of 0."""
_NO_INDEX = np.empty(0, dtype=np.int64)
_NO_INDEX.flags.writeable = False
_SPAN = 4096
"""The most points one pass looks at: a pass costs a few dozen array operations, and the points
after an anomaly are looked at again by the next pass."""
_MIN_SPAN = 256
"""The least, after a pass ended early at an anomaly (anomalies may come thick and fast)."""


class SpikeEvent(NamedTuple):
    """An anomalous point that starts or escalates an episode: what the alert reports."""

    index: int
    """Index of the point in the values passed to :meth:`SpikeDetector.update`."""
    kind: str
    """Episode kind: start, escalate or start_escalated."""
    value: float
    median: float
    mad: float
    z: float
    early_max: float
    severe: bool
    """At least ``early_max_ratio`` times the early maximum."""
    episode_points: int
    """Anomalous points in the episode so far (persistence)."""


def _median(s: np.ndarray) -> np.ndarray | float:
    """Median of a sorted 1-D array (a float), or of each row of a sorted 2-D one."""
    n = s.shape[-1]
    if s.ndim == 1:
        return (s.item((n - 1) // 2) + s.item(n // 2)) * 0.5
    return (s[:, (n - 1) // 2] + s[:, n // 2]) * 0.5


def _mad(win: np.ndarray, med: float) -> float:
    """Median absolute deviation around ``med`` of a window."""
    d = np.abs(win - med)
    d.sort()
    return _median(d)


def _scale(med: np.ndarray | float, mad: np.ndarray | float) -> np.ndarray:
    """The robust z's denominator: ``1.4826 MAD``, floored (``_FLAT``, ``_TINY``)."""
    return np.maximum(np.maximum(MAD_TO_SIGMA * mad, _FLAT * np.abs(med)), _TINY)


def _windows(a: np.ndarray, his: range, w: int) -> tuple[list[np.ndarray], list[float]]:
    """The sorted windows ``a[max(0, hi - w):hi]`` for each ``hi`` and their medians: the full
    windows sorted as rows at once when there are several, else one by one (a live frame's
    boundary, the shorter windows of warm-up)."""
    if not his:
        return [], []
    one = bisect_left(his, w)
    if len(his) - one < 2:
        one = len(his)
    wins = [np.sort(a[max(0, hi - w):hi]) for hi in his[:one]]
    med = [_median(s) for s in wins]
    if one < len(his):
        rows = strided_rows(a, w, his[one] - w, his.step, len(his) - one)
        rows.sort(axis=1)
        med += _median(rows).tolist()
        wins += list(rows)
    return wins, med


def _recent(a: np.ndarray, ends: np.ndarray, k: int) -> np.ndarray:
    """The recent level before each ``a[end]``: the median of the ``k`` values before it (fewer
    at the start of the baseline)."""
    if int(ends[0]) >= k:
        return _median(np.sort(windows(a, k)[ends - k], axis=1))
    return np.array([_median(np.sort(a[max(0, e - k):e])) for e in ends.tolist()])


class SpikeDetector:
    """The definition (see the module doc) and its state for one series.

    :meth:`update` feeds it finite values and returns the alerts' points and the anomalous
    indices; :meth:`rewind` starts a new segment.

    >>> from trainwatch.rules import load_rules_config
    >>> d = SpikeDetector(load_rules_config().loss_spike)
    >>> x = 2.0 + 0.01 * np.sin(np.arange(400.0))
    >>> x[300] = 9.0
    >>> events, flagged = d.update(x, np.arange(400))
    >>> [(e.index, e.kind) for e in events], flagged.tolist()
    ([(300, 'start')], [300])
    """

    def __init__(self, cfg: SpikeConfig) -> None:
        self.cfg = cfg
        self.lb = max(1, math.ceil(cfg.tail_window / cfg.refresh))
        """Refresh blocks the tail guard looks back over (``tail_window`` in blocks)."""
        self.r1 = cfg.min_ratio - 1.0
        """The lowest bar on a point's relative excess over the median."""
        self.episode = Episode(cfg.rearm_points, cfg.cooldown_steps, cfg.persist_points)
        self.early_n = 0
        """Accepted points counted into the early maximum (up to ``early_points``)."""
        self.early_max = -math.inf
        self.flag_run = 0
        """Anomalous points in a row so far (``rebase_points`` of them restart the baseline)."""
        self._reset_baseline()

    def _reset_baseline(self) -> None:
        self.acc = np.empty(0)
        """The last ``window`` accepted values, in arrival order."""
        self.n_acc = 0
        """Accepted points since the baseline (re)started."""
        self.ok = False
        """Whether the baseline is warm."""
        self.med = self.mad = math.nan
        self.blk_e = 0.0
        """Largest relative deviation among accepted points since the last refresh."""
        self.e_hist: list[float] = []
        """Largest relative deviation of each of the last ``tail_window`` refresh blocks."""
        self.emax = 0.0
        """The tail guard's reference: the largest of ``e_hist``."""

    def rewind(self) -> None:
        """A new segment: a resumed run replays steps from a checkpoint, where the level was
        higher than where the old segment ended. The baseline, episodes and cooldowns restart;
        the early maximum, a fact about the run, stays."""
        self.episode.reset()
        self.flag_run = 0
        self._reset_baseline()

    def bar(self, emax: float) -> float:
        """The bar on the relative excess given the tail guard's reference (a NaN product, an
        infinite reference times a guard of 0, leaves ``r1``)."""
        return max(self.r1, self.cfg.tail_guard * emax)

    def early_bar(self) -> float:
        """The value from which a point is severe (infinite while the early maximum is still
        being learnt, or is not positive)."""
        if self.early_n < self.cfg.early_points or self.early_max <= 0:
            return math.inf
        return self.cfg.early_max_ratio * self.early_max

    def update(self, values: np.ndarray, steps: np.ndarray) -> tuple[list[SpikeEvent], np.ndarray]:
        """Feed finite values in order; returns the alerts' points and the anomalous indices."""
        events: list[SpikeEvent] = []
        flagged: list[np.ndarray] = []
        i, m, span = 0, int(values.shape[0]), _SPAN
        while i < m:
            x = values[i:i + span]
            used = self._accept(x)
            if used < x.shape[0]:
                used += self._flag_run(x[used:], steps[i + used:i + span], i + used, events,
                                       flagged)
                span = min(_SPAN, max(_MIN_SPAN, 2 * used))
            else:
                span = _SPAN
            i += used
        return events, np.concatenate(flagged) if flagged else _NO_INDEX

    def _accept(self, x: np.ndarray) -> int:
        """Accept the points of ``x`` up to the first anomalous one; returns how many.

        Every point is first taken as accepted: then the refresh boundaries fall at known places,
        and each point is judged against the baseline of the last boundary before it. The points
        are laid out as rows of ``refresh`` slots, one per baseline (row 0: the current one; row
        g + 1: boundary g's). ``x -> (x - median) / |median|`` is monotone: a row's largest and
        smallest points give its largest deviations either way, which is all the tail guard
        keeps, and all it takes to know that no point of the row reaches the bar (nearly
        always); only then are the points' own deviations taken (:meth:`_first_spike`)."""
        cfg, k, w = self.cfg, self.cfg.refresh, self.cfg.window
        m, r, off = int(x.shape[0]), int(self.acc.shape[0]), self.n_acc % k
        a = np.concatenate((self.acc, x))
        n_rows, n_bd = (off + m - 1) // k + 1, (off + m) // k
        # boundary g follows x[(g + 1) k - off - 1]; from g_warm on, min_points are behind it
        g_warm = min(n_bd, max(0, -(-(cfg.min_points - self.n_acc + off) // k) - 1))
        his = range(r + (g_warm + 1) * k - off, r + (n_bd + 1) * k - off, k)
        wins, b_med = _windows(a, his, w)
        meds = [self.med] + [math.nan] * g_warm + b_med  # (one more than the rows when x ends
        # on a boundary)
        dens = [abs(v) or 1.0 for v in meds]
        if n_rows == 1:  # (a live frame within a block)
            rows, at = x.reshape(1, m), 0
            lo_v, hi_v = min_max(x)
            top, bot = [hi_v], [lo_v]
        else:
            grid = np.full(n_rows * k, math.nan)
            grid[off:off + m] = x
            rows, at = grid.reshape(n_rows, k), off
            top, bot = np.fmax.reduce(rows, axis=1).tolist(), np.fmin.reduce(rows, axis=1).tolist()
        up = [(t - md) / dn for t, md, dn in zip(top, meds, dens)]  # (NaN: no warm baseline)
        dev = [0.0 if math.isnan(u) else max(u, (md - b) / dn)  # the largest |deviation|
               for u, b, md, dn in zip(up, bot, meds, dens)]
        # the tail guard: each boundary's block maximum (the warm-up window's at the first warm
        # boundary); each row's bar from the last tail_window blocks before it
        dev[0] = max(self.blk_e, dev[0])
        h0 = len(self.e_hist)
        hist = self.e_hist + dev[:n_bd] if n_bd else self.e_hist  # (read only without one)
        if not self.ok and g_warm < n_bd and cfg.tail_guard > 0:
            hi, med = his[0], meds[g_warm + 1]
            hist[h0 + g_warm] = max(hist[h0 + g_warm], warm_deviation(
                self, a[max(0, hi - w):hi], med, _mad(wins[0], med)))
        # every bar is at least r1: a row's own is taken only when its largest point reaches r1
        bar = [self.bar(self.emax if q == 0 else max(hist[max(0, h0 + q - self.lb):h0 + q]))
               if up[q] >= self.r1 else math.inf for q in range(n_rows)]
        over = [q for q in range(n_rows) if up[q] >= bar[q]]
        j = self._first_spike(a, x, rows, at, over, meds, dens, bar, wins, g_warm) if over else m
        need = max(0, cfg.early_points - self.early_n)
        early_max = self.early_max
        if need:
            early_max = max(early_max, float(np.maximum.reduce(x[:need])))
        severe_at = cfg.early_max_ratio * early_max
        if cfg.early_max_fires and early_max > 0 and need < j and max(top) >= severe_at:
            hit = np.flatnonzero(x[need:j] >= severe_at)
            j = need + int(hit[0]) if hit.shape[0] else j
        if not j:
            return 0
        # commit x[:j]: nr boundaries reached, x[lo:j] in row nr
        self.acc = a[max(0, r + j - w):r + j]
        self.n_acc += j
        nr = (off + j) // k
        if nr:
            if nr - 1 >= g_warm:
                self.ok, self.med = True, meds[nr]
                self.mad = _mad(wins[nr - 1 - g_warm], self.med)
            self.e_hist = hist[:h0 + nr][-self.lb:]
            self.emax, self.blk_e = max(self.e_hist), 0.0
        lo = max(0, nr * k - off)
        if j == m and lo < m:
            self.blk_e = max(self.blk_e, dev[nr])
        elif lo < j and self.ok:
            (lo_v, hi_v), md, dn = min_max(x[lo:j]), meds[nr], dens[nr]
            self.blk_e = max(self.blk_e, (hi_v - md) / dn, (md - lo_v) / dn)
        take = min(j, need)
        if take:
            self.early_max = max(self.early_max, float(np.maximum.reduce(x[:take])))
            self.early_n += take
        self.episode.normal(j)
        self.flag_run = 0
        return j

    def _first_spike(self, a: np.ndarray, x: np.ndarray, rows: np.ndarray, at: int,
                     over: list[int], meds: list[float], dens: list[float], bar: list[float],
                     wins: list[np.ndarray], g_warm: int) -> int:
        """The first point of the rows ``over`` (whose largest point reaches their bar; ``x[0]``
        at slot ``at`` of row 0) that reaches the bar, the z threshold, and jumps from the recent
        level (``len(x)`` if none)."""
        cfg, k = self.cfg, rows.shape[1]
        med = np.array([meds[q] for q in over])[:, None]
        e = (rows[over] - med) / np.array([dens[q] for q in over])[:, None]
        ri, slot = np.nonzero(e >= np.array([bar[q] for q in over])[:, None])
        row = np.array(over)[ri]
        cand = row * k + slot - at
        mad = [self.mad if q == 0 else _mad(wins[q - 1 - g_warm], meds[q]) for q in over]
        z = (x[cand] - med[ri, 0]) / _scale(med[ri, 0], np.array(mad)[ri])
        keep = z >= cfg.z_threshold
        cand, mc = cand[keep], med[ri[keep], 0]
        if cand.shape[0]:
            rec = _recent(a, int(self.acc.shape[0]) + cand, cfg.recent_points)
            jumps = np.flatnonzero(x[cand] - rec >= cfg.jump_share * (x[cand] - mc))
            if jumps.shape[0]:
                return int(cand[jumps[0]])
        return int(x.shape[0])

    def _flag_run(self, x: np.ndarray, steps: np.ndarray, base: int, events: list[SpikeEvent],
                  flagged: list[np.ndarray]) -> int:
        """The run of anomalous points at the start of ``x`` (``x[0]`` is one), against the
        baseline, recent level and bars that no accepted point changes: its episode's events, up
        to ``rebase_points`` in a row (then the baseline restarts). Returns its length."""
        cfg = self.cfg
        severe = x >= self.early_bar()
        anom = severe if cfg.early_max_fires else np.zeros(x.shape[0], dtype=bool)
        if self.ok:
            d = x - self.med
            rec = _recent(self.acc, np.array([self.acc.shape[0]]), cfg.recent_points)
            anom = anom | ((d / (abs(self.med) or 1.0) >= self.bar(self.emax))
                           & (d / _scale(self.med, self.mad) >= cfg.z_threshold)
                           & (x - rec >= cfg.jump_share * d))
        n = 1 + (int(anom[1:].argmin()) if not anom[1:].all() else anom.shape[0] - 1)
        n = min(n, cfg.rebase_points - self.flag_run)
        sev = severe[:n].tolist()
        for k, kind in self.episode.run_list(steps[:n], sev):
            v = float(x[k])
            z = float((v - self.med) / _scale(self.med, self.mad)) if self.ok else math.nan
            events.append(SpikeEvent(base + k, kind, v, self.med, self.mad, z, self.early_max,
                                     sev[k], self.episode.count - (n - 1 - k)))
        flagged.append(np.arange(base, base + n, dtype=np.int64))
        self.flag_run += n
        if self.flag_run >= cfg.rebase_points:
            self._reset_baseline()
            self.flag_run = 0
        return n


def warm_deviation(det: SpikeDetector, window: np.ndarray, med: float, mad: float) -> float:
    """The tail guard's start when a baseline becomes warm: the largest relative deviation,
    either side, of the points of the newest half of the warm-up ``window`` (arrival order) that
    this baseline (``med``, ``mad``) does not flag (``r1`` and the z threshold; 0 if it flags them
    all).

    The newest half only: a level still moving (a loss falling from its first steps) puts the
    older half far from the median, a deviation the guard never sees once warm, which would
    blind it for a whole ``tail_window``. The flagged points are left out as the guard leaves
    anomalous points out: a spike in warm-up would blind it too."""
    n = int(window.shape[0])
    d = window[n - n // 2:] - med
    e = d / (abs(med) or 1.0)
    e = np.abs(e[~((e >= det.r1) & (d / _scale(med, mad) >= det.cfg.z_threshold))])
    return float(np.maximum.reduce(e)) if e.shape[0] else 0.0
