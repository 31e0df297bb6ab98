"""``lr_exhausted``: the LR schedule is over while training goes on.

Method: three cases, on the finite LR points and their running peak: the LR is ~0 (``zero``) for
the first ``start_points`` points (nothing will learn); a run of points at or below ``zero_ratio``
of the peak reaches ``min_points`` and ``zero_fraction`` of the run so far (the schedule ended
early, the run is idling); a run at or below ``floor_ratio`` of the peak reaches ``min_points``
and ``floor_fraction`` of the run while the loss (block medians of ``window`` points) still
improves over the last ``improving_windows`` blocks (a longer schedule would have helped). Each
run fires once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from trainwatch.rules.config.schema import RuleBase, integer, num
from trainwatch.rules.detectors.blocks import Blocks, shared_blocks
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


@dataclass(frozen=True)
class LrConfig(RuleBase):
    zero: float = num(ge=0)
    """An LR at or below this is zero."""
    start_points: int = integer(ge=1)
    """Zero for the first N points: nothing will ever learn."""
    zero_ratio: float = num(gt=0, lt=1)
    """LR at or below this fraction of its peak counts as ~0..."""
    zero_fraction: float = num(gt=0, le=1)
    """...for this fraction of the run so far (and ``min_points``)."""
    floor_ratio: float = num(gt=0, lt=1)
    """LR at or below this fraction of its peak is at its floor..."""
    floor_fraction: float = num(gt=0, le=1)
    """...for this fraction of the run so far, while the loss still improves."""
    min_points: int = integer(ge=1)
    window: int = integer(ge=2)
    """Loss points per block median (for "still improving")."""
    improving_windows: int = integer(ge=1)
    min_delta: float = num(ge=0, lt=1)
    """The loss improved by this fraction over the last ``improving_windows`` windows..."""
    noise_factor: float = num(ge=0)
    """...and by this many standard errors of a window median (noisy losses)."""


DIFF_SE = 1.4142
"""Two block medians differ by sqrt(2) standard errors of one."""


class LrExhaustedRule(Rule):
    id = "lr_exhausted"
    roles_read = ("lr", "loss")

    def __init__(self, cfg: LrConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.n = 0
        """LR points before this frame."""
        self.peak = 0.0
        self.all_zero = True
        """Every LR point so far was ~0."""
        self.start_fired = False
        self.zrun = 0
        """Points of the run at ~0 under way (0: none), whether it fired, its first step."""
        self.zfired = False
        self.zrun_start = 0
        self.frun = 0
        """The same for the run at the floor."""
        self.frun_start = 0
        self.ffired = False
        self.last_lr = 0.0
        self.loss_hist: deque[tuple[float, int]] = deque(maxlen=cfg.improving_windows + 1)
        """(median, step) of the last loss blocks."""

    def rewind(self) -> None:
        self.loss_hist.clear()

    def update(self, frame: Frame) -> list[Hit]:
        cfg: LrConfig = self.cfg
        lr = frame.role("lr")
        lb = shared_blocks(self.ctx, frame, "loss", cfg.window)
        f = lr.finite() if lr is not None and len(lr) else None
        hits: list[Hit] = []
        if f is not None and len(f) and self._clear(f):
            f = None  # (nothing at the floor or ~0 in this frame: its points are counted)
        if f is not None and len(f):
            v = f.values
            m = v.shape[0]
            peak_i = np.maximum.accumulate(v)
            np.maximum(peak_i, self.peak, out=peak_i)
            n_i = self.n + np.arange(1, m + 1)
            hits.extend(self._start_and_zero(f, n_i, peak_i))
            fl = (v <= cfg.floor_ratio * peak_i) & (v > np.maximum(cfg.zero, cfg.zero_ratio * peak_i))
            F, fid, starts = _runs(fl, self.frun)
        else:
            f = None
            m = 0
            n_i = peak_i = F = fid = starts = np.empty(0, dtype=np.int64)
        # at the floor while the loss improves: checked where a loss block completes, at the LR
        # point at or before it
        fired_f = {0} if self.ffired else set()
        if len(lb) and f is None and not self.frun:  # (no run at the floor: nothing to check)
            self.loss_hist.extend(zip(lb.med.tolist(), lb.step.tolist()))
        elif len(lb):
            ks = (f.pos.searchsorted(lb.pos, side="right") - 1 if f is not None
                  else np.full(len(lb), -1))
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
                hit = self._floor_block(frame, f, lb, j, int(ks[j]), F, fid, n_i, peak_i,
                                        starts, fired_f)
                if hit is not None:
                    hits.append(hit)
            self.loss_hist.extend(zip(lb.med[done:].tolist(), lb.step[done:].tolist()))
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

    def _clear(self, f: Points) -> bool:
        """Whether no point of the frame is at the floor or ~0 and no run goes on into it (the
        usual frame): each point's bars are at most those of the frame's highest peak, so its
        lowest point above them clears it. The frame's points are then only counted."""
        cfg: LrConfig = self.cfg
        lo, hi = min_max(f.values)
        if self.zrun or self.frun or (not self.start_fired and self.n < cfg.start_points) or not (
                lo > max(cfg.zero, max(cfg.floor_ratio, cfg.zero_ratio) * max(self.peak, hi))):
            return False
        self.zfired = self.ffired = False
        self.n += len(f)
        self.peak = max(self.peak, hi)
        self.last_lr = float(f.values[-1])
        return True

    def _floor_block(self, frame: Frame, f: Points | None, lb: Blocks, j: int, k: int,
                     F: np.ndarray, fid: np.ndarray, n_i: np.ndarray, peak_i: np.ndarray,
                     starts: np.ndarray, fired_f: set[int]) -> Hit | None:
        """Loss block ``j``, where the LR's run at its floor (at LR point ``k`` of the frame, -1:
        none yet, the carried state holds) is long enough: fires if the loss improved."""
        cfg: LrConfig = self.cfg
        delta = max(cfg.min_delta, cfg.noise_factor * DIFF_SE * float(lb.noise[j]))
        if k >= 0:
            run, length, n, peak = int(fid[k]), int(F[k]), int(n_i[k]), float(peak_i[k])
            lr_now = float(f.values[k])  # type: ignore[union-attr]
        else:
            run, length, n, peak, lr_now = 0, self.frun, self.n, self.peak, self.last_lr
        lh = self.loss_hist
        if (length == 0 or run in fired_f
                or length < max(cfg.min_points, cfg.floor_fraction * n)
                or len(lh) < (lh.maxlen or 0)
                or lh[-1][0] > lh[0][0] - delta * abs(lh[0][0])):
            return None
        fired_f.add(run)
        since = int(f.steps[starts[run - 1]]) if run > 0 else self.frun_start  # type: ignore[union-attr]
        return self._floor(int(lb.pos[j]), int(lb.step[j]), float(lb.time[j]), lr_now, length,
                           peak, n, since, frame.roles.get("lr"))

    def _start_and_zero(self, f: Points, n_i: np.ndarray, peak_i: np.ndarray) -> list[Hit]:
        cfg: LrConfig = self.cfg
        v = f.values
        hits: list[Hit] = []
        if not self.start_fired and self.n < cfg.start_points:
            hits.extend(self._start_check(f))
        # ~0 for a sizeable part of the run: once per run of ~0 points
        z = v <= np.maximum(cfg.zero, cfg.zero_ratio * peak_i)
        if not z.any():  # (the usual frame: no run goes on or fires)
            self.zfired = False
            self.zrun = 0
            return hits
        Z, zid, zstarts = _runs(z, self.zrun)
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

    def _start_check(self, f: Points) -> list[Hit]:
        """Zero from the start: the first ``start_points`` points all ~0."""
        cfg: LrConfig = self.cfg
        if not self.all_zero:
            return []  # a point above ~0 was seen: the LR did not start at 0
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
def _runs(cond: np.ndarray, carried: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~trainwatch.rules.detectors.stats.true_runs` of ``cond`` (run length and run index
    at each point), and the index of the first point of each run started here."""
    length, rid = true_runs(cond, carried)
    return length, rid, (cond & ~np.concatenate(([carried > 0], cond[:-1]))).nonzero()[0]
