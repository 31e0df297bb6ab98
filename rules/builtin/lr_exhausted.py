"""``lr_exhausted``: the LR schedule is over while training goes on.

Three cases: the LR is 0 from the start (nothing will learn); the LR has been ~0 for a sizeable
part of the run (the schedule ended early, the run is idling); the LR has sat at its floor for a
sizeable part of the run while the loss still improves (a longer schedule would have helped).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from trainwatch.rules.config.models import LrConfig
from trainwatch.rules.detectors.blocks import Blocks, shared_blocks
from trainwatch.rules.detectors.lr_calm import FEW, CalmFrames
from trainwatch.rules.detectors.stats import min_max, true_runs
from trainwatch.rules.engine.base import (
    Context,
    Frame,
    Hit,
    Points,
    Rule,
    fmt,
    pct,
    r6,
    rank_causes,
)


class LrExhaustedRule(CalmFrames, Rule):
    id = "lr_exhausted"
    roles_read = ("lr", "loss")
    fast = True
    """Take a frame whose LR stays clear of its floor and of ~0 in a few array operations
    (tests turn it off to compare)."""

    def __init__(self, cfg: LrConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.n = 0
        self.peak = 0.0
        self.all_zero = True
        self.start_fired = False
        self.zrun = 0
        self.zfired = False
        self.zrun_start = 0
        self.frun = 0
        self.frun_start = 0
        self.ffired = False
        self.last_lr = 0.0
        self.loss_hist: deque[tuple[float, int]] = deque(maxlen=cfg.improving_windows + 1)
        """(median, step) of the last loss blocks (with ``_new_loss`` after them)."""
        self._new_loss: list[tuple[Blocks, int]] = []
        """Loss blocks (a frame's, from an index on) not yet added to ``loss_hist``: only a
        frame where the LR sits at its floor reads the history, so quiet frames only note
        theirs (see :meth:`_fold_loss`)."""

    def rewind(self) -> None:
        self.loss_hist.clear()
        self._new_loss.clear()

    def update(self, frame: Frame) -> list[Hit]:
        cfg: LrConfig = self.cfg
        lr = frame.role("lr")
        lb = shared_blocks(self.ctx, frame, "loss", cfg.window)
        f = lr.finite() if lr is not None and len(lr) else None
        hits: list[Hit] = []
        if f is not None and len(f):
            v = f.values
            m = v.shape[0]
            vmin, vmax = min_max(v, FEW)
            seen: list[Any] = []
            if self.fast and self.frun == 0 and self._clear(v, vmin, vmax, seen):
                # above the floor and above ~0 throughout, no run carried in: nothing can fire,
                # and the runs and their flags are all off at the end
                self.zrun, self.zfired, self.frun, self.ffired = 0, False, 0, False
                calm = True
            else:
                # no run long enough to fire (the runs at the end taken from the last points)
                calm = self.fast and self._calm(f, vmin, vmax, seen)
            if calm:
                if not self.start_fired and self.n < cfg.start_points:
                    hits.extend(self._start_check(f, vmin))
                if len(lb):
                    self._keep_loss(lb)
                self.n += m
                self.peak = max(self.peak, vmax)
                self.last_lr = float(v[-1])
                return hits
            peak_i = np.maximum.accumulate(v)
            np.maximum(peak_i, self.peak, out=peak_i)
            n_i = self.n + np.arange(1, m + 1)
            hits.extend(self._start_and_zero(f, n_i, peak_i, vmin))
            fl = (v <= cfg.floor_ratio * peak_i) & (v > np.maximum(cfg.zero, cfg.zero_ratio * peak_i))
            F, fid, starts = self._runs(fl, self.frun)
        else:
            f = None
            m = 0
            n_i = peak_i = F = fid = starts = np.empty(0, dtype=np.int64)
        # at the floor while the loss improves: checked where a loss block completes
        fired_f = {0} if self.ffired else set()
        floor_now = self.frun > 0 or bool(F.shape[0] and F.any())
        if len(lb) and not floor_now:  # the LR was never at its floor here: keep the history
            self._keep_loss(lb)
        elif len(lb):
            self._fold_loss()
            ks = (f.pos.searchsorted(lb.pos, side="right") - 1 if f is not None
                  else np.full(len(lb), -1))
            # only a block where the floor run is long enough can fire: the others only extend
            # the loss history, in bulk
            at = ks >= 0
            length_b = np.where(at, F[ks] if F.shape[0] else 0, self.frun)
            n_b = np.where(at, n_i[ks] if n_i.shape[0] else 0, self.n)
            long_enough = (length_b > 0) & (length_b >= np.maximum(cfg.min_points,
                                                                   cfg.floor_fraction * n_b))
            done = 0
            for j in long_enough.nonzero()[0].tolist():
                self.loss_hist.extend(zip(lb.med[done:j + 1].tolist(),
                                          lb.step[done:j + 1].tolist()))
                done = j + 1
                # two block medians differ by sqrt(2) standard errors of one
                delta = max(cfg.min_delta, cfg.noise_factor * 1.4142 * float(lb.noise[j]))
                k = int(ks[j])
                if k >= 0:
                    run, length, n, peak = int(fid[k]), int(F[k]), int(n_i[k]), float(peak_i[k])
                    lr_now = float(f.values[k])  # type: ignore[union-attr]
                else:  # no LR point yet in this frame: the carried state holds here
                    run, length, n, peak, lr_now = 0, self.frun, self.n, self.peak, self.last_lr
                lh = self.loss_hist
                if (length == 0 or run in fired_f
                        or length < max(cfg.min_points, cfg.floor_fraction * n)
                        or len(lh) < (lh.maxlen or 0)
                        or lh[-1][0] > lh[0][0] - delta * abs(lh[0][0])):
                    continue
                fired_f.add(run)
                since = int(f.steps[starts[run - 1]]) if run > 0 else self.frun_start  # type: ignore[union-attr]
                pos = int(lb.pos[j])
                hits.append(self._floor(pos, int(lb.step[j]), float(lb.time[j]), lr_now, length,
                                        peak, n, since, frame.roles.get("lr")))
            if done < len(lb):
                self._keep_loss(lb, done)
        if f is not None:
            self.ffired = bool(F[-1] > 0 and int(fid[-1]) in fired_f)
            if F[-1] > 0 and int(fid[-1]) > 0:
                self.frun_start = int(f.steps[starts[int(fid[-1]) - 1]])
            self.frun = int(F[-1])
            self.n += m
            self.peak = float(peak_i[-1])
            self.last_lr = float(f.values[-1])
        else:
            self.ffired = bool(self.frun > 0 and 0 in fired_f)
        return sorted(hits, key=lambda h: h.pos)

    def _start_and_zero(self, f: Points, n_i: np.ndarray, peak_i: np.ndarray,
                        vmin: float) -> list[Hit]:
        cfg: LrConfig = self.cfg
        v = f.values
        hits: list[Hit] = []
        if not self.start_fired and self.n < cfg.start_points:
            hits.extend(self._start_check(f, vmin))
        # ~0 for a sizeable part of the run: once per run of ~0 points
        z = v <= np.maximum(cfg.zero, cfg.zero_ratio * peak_i)
        if self.fast and not z.any():  # no point ~0 (the usual case): no run goes on or fires
            self.zfired = False
            self.zrun = 0
            return hits
        if self.fast:
            got = self._zero_by_runs(f, peak_i, z)
            if got is not None:
                return hits + got
        Z, zid, zstarts = self._runs(z, self.zrun)
        cond = z & (Z >= np.maximum(cfg.min_points, cfg.zero_fraction * n_i)) & (peak_i > 0)
        fired_z = {0} if self.zfired else set()
        # a run fires at most once, at its first qualifying point: only those are visited (run
        # ids never decrease along the frame)
        at = cond.nonzero()[0]
        runs = zid[at]
        for i in at[np.concatenate(([True], runs[1:] != runs[:-1]))[:at.shape[0]]].tolist():
            run = int(zid[i])
            if run in fired_z:
                continue
            fired_z.add(run)
            since = int(f.steps[zstarts[run - 1]]) if run > 0 else self.zrun_start
            hits.append(self._zero(f, i, int(Z[i]), float(peak_i[i]), int(n_i[i]), since))
        self.zfired = bool(Z[-1] > 0 and int(zid[-1]) in fired_z)
        if Z[-1] > 0 and int(zid[-1]) > 0:
            self.zrun_start = int(f.steps[zstarts[int(zid[-1]) - 1]])
        self.zrun = int(Z[-1])
        return hits

    def _zero_by_runs(self, f: Points, peak_i: np.ndarray, z: np.ndarray) -> list[Hit] | None:
        """The runs at ~0 (``z``) of :meth:`_start_and_zero`, from where ``z`` changes rather
        than a run length per point: each run's first point that fires found by bisection (its
        test can only turn true along a run: the run grows by 1 a point, the bar by
        ``zero_fraction <= 0.5``, and the running peak only rises). None (take the arrays)
        when ``z`` changes often or the fraction is higher."""
        cfg: LrConfig = self.cfg
        m = z.shape[0]
        cuts = (z[1:] != z[:-1]).nonzero()[0]
        if cuts.shape[0] > FEW or not cfg.zero_fraction <= 0.5:
            return None
        bounds = [0, *(cuts + 1).tolist(), m]
        n0, mp, frac = self.n, cfg.min_points, cfg.zero_fraction
        hits: list[Hit] = []
        # the runs are every other segment, from the first if it is ~0
        for k in range(0 if z[0] else 1, len(bounds) - 1, 2):
            s, e = bounds[k], bounds[k + 1]
            carry = self.zrun if s == 0 else 0  # (the carried run goes on)

            def fires(i: int, s: int = s, carry: int = carry) -> bool:
                return (carry + i - s + 1 >= max(mp, frac * (n0 + i + 1))
                        and float(peak_i[i]) > 0)

            fired = carry > 0 and self.zfired
            if not fired and fires(e - 1):
                lo, hi = s, e - 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    if fires(mid):
                        hi = mid
                    else:
                        lo = mid + 1
                since = self.zrun_start if carry else int(f.steps[s])
                hits.append(self._zero(f, lo, carry + lo - s + 1, float(peak_i[lo]), n0 + lo + 1,
                                       since))
                fired = True
            if e == m:  # the run at the end
                self.zrun, self.zfired = carry + e - s, fired
                if not carry:
                    self.zrun_start = int(f.steps[s])
        if not z[-1]:
            self.zrun, self.zfired = 0, False
        return hits

    def _runs(self, cond: np.ndarray, carried: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`~trainwatch.rules.detectors.stats.true_runs` of ``cond``, and the index of each run
        started in it (not the carried one)."""
        if self.fast:
            return runs_of(cond, carried)
        length, rid = true_runs(cond, carried)
        return length, rid, (cond & ~np.concatenate(([carried > 0], cond[:-1]))).nonzero()[0]

    def _keep_loss(self, lb: Blocks, lo: int = 0) -> None:
        """Add the loss blocks from ``lo`` on to the history, when it is next read."""
        keep = self.loss_hist.maxlen or 1
        if len(lb) - lo >= keep:  # they alone fill the history
            self._new_loss.clear()
        self._new_loss.append((lb, lo))
        # each note holds a block at least, and only the last ``keep`` blocks stay: a live
        # stream of one-record frames that never folds must not grow the list for ever
        del self._new_loss[:-keep]
        if not self.fast:  # (the reference adds them at once)
            self._fold_loss()

    def _fold_loss(self) -> None:
        """Add the noted loss blocks to the history (only the last ``maxlen`` can stay in it)."""
        keep = self.loss_hist.maxlen or 0
        for lb, lo in self._new_loss:
            lo = max(lo, len(lb) - keep)
            self.loss_hist.extend(zip(lb.med[lo:].tolist(), lb.step[lo:].tolist()))
        self._new_loss.clear()

    def _start_check(self, f: Points, vmin: float) -> list[Hit]:
        """Zero from the start: the first ``start_points`` points all ~0 (``vmin``: the lowest
        point of the frame)."""
        cfg: LrConfig = self.cfg
        if not self.all_zero:
            return []  # a point above ~0 was seen: the LR did not start at 0
        if self.fast and vmin > cfg.zero:  # (so is the first point)
            self.all_zero = False
            return []
        head = f.values[: cfg.start_points - self.n]
        if head.shape[0] and float(head.max()) > cfg.zero:
            self.all_zero = False
        elif self.n + head.shape[0] == cfg.start_points:
            self.start_fired = True
            return [self._start(f, head.shape[0] - 1)]
        return []

    # ------------------------------------------------------------------ alerts
    def _start(self, f: Points, i: int) -> Hit:
        cfg: LrConfig = self.cfg
        return self.alert(
            pos=int(f.pos[i]), severity=cfg.severity, step=int(f.steps[i]),
            time=float(f.times[i]), metric=f.name,
            message=f"The learning rate has been 0 since the start ({cfg.start_points} points): "
                    "nothing will learn.",
            evidence={"lr": r6(float(f.values[i])), "points": cfg.start_points},
            causes=_START_CAUSES, fixes=_START_FIXES,
        )

    def _zero(self, f: Points, i: int, run: int, peak: float, n: int, since: int) -> Hit:
        cfg: LrConfig = self.cfg
        frac = run / n
        when = f"since step {since}"
        return self.alert(
            pos=int(f.pos[i]), severity=cfg.severity, step=int(f.steps[i]),
            time=float(f.times[i]), metric=f.name,
            message=f"The learning rate has been ~0 ({fmt(float(f.values[i]))}, peak {fmt(peak)}) "
                    f"{when}, {pct(frac)} of the run: the schedule has ended and training is "
                    "idling.",
            evidence={"lr": r6(float(f.values[i])), "lr_peak": r6(peak), "points_at_zero": run,
                      "fraction_of_run": r6(frac)},
            causes=_ZERO_CAUSES, fixes=_ZERO_FIXES,
        )

    def _floor(self, pos: int, step: int, time: float, lr: float, run: int, peak: float,
               n: int, since: int, metric: str | None) -> Hit:
        cfg: LrConfig = self.cfg
        lh = self.loss_hist
        gain = (lh[0][0] - lh[-1][0]) / abs(lh[0][0]) if lh[0][0] else 0.0
        return self.alert(
            pos=pos, severity=cfg.severity, step=step, time=time, metric=metric,
            message=f"The learning rate has sat at its floor ({fmt(lr)}, {pct(lr / peak)} of its "
                    f"peak) since step {since} while the loss still improves ({pct(gain)} since "
                    f"step {lh[0][1]}): the schedule decayed too early.",
            evidence={"lr": r6(lr), "lr_peak": r6(peak), "points_at_floor": run,
                      "fraction_of_run": r6(run / n), "loss_gain": r6(gain),
                      "loss_then": r6(lh[0][0]), "loss_now": r6(lh[-1][0])},
            causes=_FLOOR_CAUSES, fixes=_FLOOR_FIXES,
        )


# Each alert's causes (ranked once) and fixes: they never vary.
_START_CAUSES = rank_causes([
    (("the scheduler starts at 0 and does not rise (e.g. warm-up longer than the run, a LambdaLR "
      "returning 0)"), 0.6),
    ("lr=0 in the optimizer or the config", 0.5),
])
_START_FIXES = ("Print scheduler.get_last_lr() for the first steps",
                "Check the optimizer's lr and the warm-up length")
_ZERO_CAUSES = rank_causes([
    ("the schedule's total steps are fewer than the run's (max_steps/epochs mismatch)", 0.8),
    (("the scheduler is stepped more often than it expects (per batch instead of per epoch)"),
     0.4),
])
_ZERO_FIXES = ("Set the scheduler's total steps to the run's length",
               "Stop the run: nothing changes from here on",
               "Call scheduler.step() as often as the scheduler expects")
_FLOOR_CAUSES = rank_causes([
    ("the schedule is too short for the run (decay ends too early)", 0.7),
    ("the final LR (min_lr / eta_min) is set too low", 0.4),
])
_FLOOR_FIXES = ("Lengthen the schedule (its total steps) or raise the final LR",
                "Resume from the last checkpoint with a higher constant LR")

_NO_RUNS = np.empty(0, dtype=np.int64)
_NO_RUNS.flags.writeable = False


def runs_of(cond: np.ndarray, carried: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(run length at each point (0 where False), run index per point, index of each run
    started here): :func:`~trainwatch.rules.detectors.stats.true_runs` plus the starts, from the change
    points of ``cond``. The LR's runs (at its floor, ~0) are long, so a frame holds a handful of
    segments: the work per segment is on small arrays, and on the points it is a few passes."""
    n = cond.shape[0]
    if n == 0 or not cond.any():  # (every length and run index 0)
        # separate arrays: a caller may write into one
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), _NO_RUNS
    bounds = np.concatenate(([0], (cond[1:] != cond[:-1]).nonzero()[0] + 1, [n]))
    seg = bounds[:-1]  # first index of each segment of equal values
    val = cond[seg]
    lens = bounds[1:] - seg  # (np.diff and np.append cost several times this)
    new = val.copy()  # the segments that start a run
    first = seg.copy()  # where the run of each segment began
    if carried > 0 and val[0]:
        new[0] = False
        first[0] = -carried
    length = np.arange(1, n + 1) - np.repeat(first, lens)
    length *= np.repeat(val, lens)
    return length, np.repeat(np.cumsum(new), lens), seg[new]
