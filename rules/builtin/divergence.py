"""``divergence``: the smoothed train loss climbs back up from its best.

Method: the loss's non-zero values are smoothed into block medians of ``window`` points, and the
best *level* (the median of three consecutive blocks, so one lucky block is not the bar) is kept;
a block ``rise`` above it (or ``noise_factor`` noise levels, for noisy losses) for ``windows``
blocks in a row is a warning, one ``error_rise`` above it (or past the luck of the best over the
segment's blocks, see :mod:`~trainwatch.rules.detectors.rise_bars`) or past ``cap`` an error.

The noise of a block median is the largest of three estimates: the standard error from the
block's own spread (:mod:`~trainwatch.rules.detectors.blocks`), the scatter *between* consecutive
block medians (:mod:`~trainwatch.rules.detectors.block_levels`: a loss whose points are correlated,
a recurrent model carrying its state, scatters from block to block several times more than its
own spread says, and the best block sits that much lower by luck) and the level's *wander* over
long lags (:mod:`~trainwatch.rules.detectors.block_wander`: a flat loss that roams on a plateau,
read only at a block the other two let rise). The noise of a positive loss multiplies its level:
the bars are ``expm1`` of the noise levels, and they scale with the best level (or the block's
MAD brought back to the best's level, when larger).

The blocks leave out the loss's exact zeros (``nonzero`` in
:func:`~trainwatch.rules.detectors.blocks.shared_blocks`; a loss with no zero has the same blocks):
a zero-inflated loss (hinge, margin, detection losses, 0 on easy batches) has block medians that
jump between 0, near 0 and its non-zero level, a "rise" of hundreds of % on a healthy run. A loss
that turns into zeros altogether makes no block: no divergence (``learning_stalled`` tells it).

Before the blocks can judge (``warmup_windows + 1`` blocks), the first points are judged on
their own (:mod:`~trainwatch.rules.detectors.first_points`): ``early_points`` in a row at least
``early_ratio`` times the first loss or the lowest rolling median of three before them (or the
noise's bar, when more) are an error on as few as 3 points, with a confidence that grows with
the points it had. A rise the loss already made since its best and came back from (by half,
in log terms) is its own wander: the rise bars never drop below it until a new best lower
by more than it (a loss that hovers 0.02-0.06 after a fast fall, whose scatter read low once the fall's jumps
had left it, was an error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainwatch.rules.config.schema import RuleBase, integer, num, opt_num
from trainwatch.rules.detectors.block_levels import BlockLevels
from trainwatch.rules.detectors.block_wander import WanderSamples
from trainwatch.rules.detectors.blocks import Blocks, shared_blocks
from trainwatch.rules.detectors.first_points import Finding, FirstPoints
from trainwatch.rules.detectors.lr_range import lr_outside
from trainwatch.rules.detectors.rise_bars import (
    bar_scale,
    error_levels,
    error_rise,
    multiplies,
    noise_levels,
    noise_rise,
    run_error,
)
from trainwatch.rules.detectors.stats import small_median
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
class DivergenceConfig(RuleBase):
    window: int = integer(ge=2)
    warmup_windows: int = integer(ge=1)
    rise: float = num(gt=0)
    """Smoothed loss this fraction above its best..."""
    windows: int = integer(ge=1)
    """...for this many consecutive windows."""
    noise_factor: float = num(ge=0)
    error_rise: float = num(gt=0)
    """This fraction above the best is an error."""
    cap: float | None = opt_num()
    """An absolute smoothed loss above which it is an error (null: none)."""
    early_ratio: float = num(gt=1)
    """Before the blocks judge: the last points this many times the first loss (or the lowest
    rolling median of three) are an error."""


QUIET_END = 2
"""Blocks not up in a row that end an episode (a new alert may then fire)."""
LR_ROSE = 1.05
"""The LR's last value this much above its value ``2 window`` points before: it rose recently."""
GRAD_GREW = 2.0
"""The median grad norm of the last ``2 window`` points this much above that of the ``2 window``
before: updates are growing."""


class DivergenceRule(Rule):
    id = "divergence"
    roles_read = ("loss",)
    lane_role = "loss"
    lane_beside_main = False  # (a loss component rising from ~0, or flat, while the total learns)

    def __init__(self, cfg: DivergenceConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rewind()

    def rewind(self) -> None:
        self.levels = BlockLevels()
        self.wander = WanderSamples()
        self.nblk = 0
        """Blocks seen in this segment."""
        self.best: float | None = None
        """The lowest level so far."""
        self.best_step = 0
        self.up = 0
        """Blocks up in a row."""
        self.quiet = 0
        """Blocks not up in a row (two end an episode)."""
        self.run_z: list[float] = []
        """The noise levels above the best of the last blocks up in a row (at most ``windows``;
        see :func:`~trainwatch.rules.detectors.rise_bars.run_error`)."""
        self.active = False
        self.escalated = False
        self.rearm_below: float | None = None
        """After an alert, a best below this re-arms the rule: a loss that stays flat and noisy
        around the same level is the same story, and only real progress starts a new one."""
        self.peak = 0.0
        """The highest relative rise of a block above the best since it was set..."""
        self.recovered = 0.0
        """...and the highest such rise the loss came back from (the rise bars' floor; forgotten
        when a new best is lower than the best by more than it)."""
        cfg: DivergenceConfig = self.cfg
        self.first = FirstPoints((cfg.warmup_windows + 1) * cfg.window, cfg.early_ratio,
                                 cfg.noise_factor)

    def update(self, frame: Frame) -> list[Hit]:
        hits = [] if self.first.done else self._first_points(frame)
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window, nonzero=True)
        if not len(b):
            return hits
        meds = b.med.tolist()
        level, scatter = self.levels.push(meds)
        self.wander.start_frame(self.nblk, b.med)
        for i, (med, lv, mad, noise, sc, step) in enumerate(zip(
                meds, level, b.mad.tolist(), b.noise.tolist(), scatter, b.step.tolist())):
            hit = self._block(frame, b, i, med, lv, mad, max(noise, sc), step)
            if hit is not None:
                hits.append(hit)
        return hits

    def _first_points(self, frame: Frame) -> list[Hit]:
        """The frame's loss points while the blocks have not judged yet."""
        pts = frame.role("loss")
        if pts is None or not len(pts):
            return []
        pts = pts.finite().nonzero()
        n0 = len(self.first.xs)
        found = self.first.push(pts.values.tolist())
        if not found:
            return []
        i, f = found[0]
        # the blocks re-arm only once the loss is back below the level it blew up from
        self.active = self.escalated = True
        self.rearm_below = f.reference
        ref_step = int(pts.steps[f.reference_index - n0]) if f.reference_index >= n0 else None
        return [self._early_alert(frame, pts, i, f, ref_step)]

    def _note_excursion(self, med: float, best: float) -> None:
        """Track the block's rise above the best: a rise that came back down by half (in log
        terms) is the loss's own wander, and the bars stay above it."""
        if best <= 0:
            return
        r = max(0.0, (med - best) / best)
        if r > self.peak:
            self.peak = r
        elif self.peak > 0 and math.log1p(r) <= 0.5 * math.log1p(self.peak):
            self.recovered = max(self.recovered, self.peak)
            self.peak = r

    def _recovered_error(self) -> float:
        """The error bar the recovered rise makes: that rise taken as ``noise_factor`` noise
        levels (in log terms), and the error's :func:`error_levels` of them (its luck over the
        blocks so far: the wander's next high may pass its last by a little)."""
        cfg: DivergenceConfig = self.cfg
        if not self.recovered or cfg.noise_factor <= 0:
            return self.recovered
        return math.expm1(math.log1p(self.recovered) * error_levels(cfg, self.nblk)
                          / cfg.noise_factor)

    def _note_best(self, level: float, step: int) -> None:
        if self.best is None or level < self.best:
            # a new best within the wander is one of its lows: the wander stays known until
            # the loss improves by more than it
            if self.best is None or level * (1.0 + self.recovered) < self.best:
                self.recovered = 0.0
            self.best, self.best_step = level, step
            self.peak = 0.0
            if self.rearm_below is not None and level < self.rearm_below:
                self.rearm_below = None

    def _calm(self) -> None:
        """A block neither up nor past the cap."""
        self.up = 0
        self.run_z = []
        self.quiet += 1
        if self.active and self.quiet >= QUIET_END:
            self.active = False

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, level: float, mad: float,
               sd: float, step: int) -> Hit | None:
        """Block ``i`` of ``b``: its median, level, MAD and noise of a block median (``sd``: the
        larger of its standard error and the scatter, without the wander)."""
        cfg: DivergenceConfig = self.cfg
        self.nblk += 1
        if self.best is None or self.nblk <= cfg.warmup_windows:
            self._note_best(level, step)
            return None
        best = self.best
        self._note_excursion(med, best)
        capped = cfg.cap is not None and med > cfg.cap
        # below the best, or below the lower of the two bars times |best| (each bar is at least
        # that: its rise at least cfg.rise or cfg.error_rise, its scale at least |best|)
        if not capped and (med < best or not (
                med > best and med >= best + min(cfg.rise, cfg.error_rise) * abs(best))):
            self._calm()
            self._note_best(level, step)
            return None
        mult = multiplies(best, mad, med)
        rise = max(cfg.rise, noise_rise(cfg.noise_factor * sd, mult), self.recovered)
        scale = bar_scale(best, mad, med)
        err = capped or (med > best and med >= best + max(error_rise(
            cfg, rise, sd, self.nblk, mult), self._recovered_error()) * scale)
        if err or (med > best and med >= best + rise * scale):
            # the wander only raises the bar: read where the others pass (a spread of relative
            # differences measured as they are, it is not taken through noise_rise)
            rise = max(rise, cfg.noise_factor * self.wander.at(i))
        up = med > best and med >= best + rise * scale
        if up or capped:
            self.up += 1
            self.quiet = 0
            if up:
                z = noise_levels((med - best) / scale, mult)
                self.run_z = (self.run_z + [z / sd if sd > 0 else math.inf])[-cfg.windows:]
                err = err or (med >= best + max(cfg.error_rise, rise) * scale
                              and run_error(cfg, self.run_z, self.nblk))
            else:
                self.run_z = []
        else:
            self._calm()
        kind = None
        armed = self.rearm_below is None
        if not self.active and armed and (self.up >= cfg.windows or err):
            kind = "error" if err else cfg.severity
            self.active, self.escalated = True, err
            # re-armed by a new best clearly below this one: by the rise bar, which allows for
            # the noise (5 % alone is often a lucky window of a noisy loss)
            self.rearm_below = best - rise * scale
        elif err and not self.escalated:
            # the story told as a warning grows into an error: said once, until re-armed
            kind, self.escalated = "error", True
        hit = None if kind is None else self._alert(frame, b, i, med, best, kind, capped)
        self._note_best(level, step)
        return hit

    def _alert(self, frame: Frame, b: Blocks, i: int, med: float, best: float, severity: str,
               capped: bool) -> Hit:
        """The alert at block ``i``: the LR (risen recently: a warm-up ending, a schedule
        restart) and the grad norm (doubled meanwhile) ranked into causes."""
        cfg: DivergenceConfig = self.cfg
        pos, step = int(b.pos[i]), int(b.step[i])
        rise = (med - best) / abs(best) if best else None
        _s, lr_recent = self.ctx.recent("lr", pos, 2 * cfg.window)
        lr = float(lr_recent[-1]) if lr_recent.shape[0] else None
        _g, gv = self.ctx.recent("grad_norm", pos, 4 * cfg.window)
        lr_rose = lr_recent.shape[0] > 1 and lr_recent[-1] > lr_recent[0] * LR_ROSE
        grad_grew = False
        if gv.shape[0] >= 8:
            half = gv.shape[0] // 2
            g = gv.tolist()
            grad_grew = small_median(g[half:]) > GRAD_GREW * small_median(g[:half])
        fixes = ((f"Rewind to a checkpoint near step {self.best_step} (best loss {fmt(best)}) "
                  "and lower the LR 2-10x"), *_FIXES)
        what = (f"above the cap {fmt(cfg.cap)}" if capped
                else f"{pct(rise)} above its best" if rise is not None
                else f"{fmt(med - best)} above its best")
        message = (f"The smoothed loss is diverging: {fmt(med)} at step {step}, {what} "
                   f"({fmt(best)} at step {self.best_step}).")
        evidence = {"smoothed_loss": r6(med), "best": r6(best), "best_step": self.best_step,
                    "rise": r6(rise) if rise is not None else None, "windows_up": self.up,
                    "window_points": cfg.window, "lr": r6(lr) if lr is not None else None}
        causes = _causes(bool(lr_rose), bool(grad_grew), lr_outside(lr, frame.roles.get("lr")))
        return self.alert(pos=pos, severity=severity, step=step, time=float(b.time[i]),
                          metric=frame.roles.get("loss"), message=message, evidence=evidence,
                          causes=causes, fixes=fixes)

    def _early_alert(self, frame: Frame, pts: Points, i: int, f: Finding,
                     ref_step: int | None) -> Hit:
        """The alert of a blow-up seen on the first points: its confidence grows with the
        points the judgement had (half at 3 points, near 1 once the blocks would judge)."""
        pos, step = int(pts.pos[i]), int(pts.steps[i])
        lr = self.ctx.latest("lr", pos)
        confidence = min(1.0, 0.5 + 0.5 * f.points / self.first.limit)
        of = "its first value" if f.reference_index == 0 else "its lowest level"
        when = f" at step {ref_step}" if ref_step is not None else ""
        message = (f"The loss is diverging from its first steps: {fmt(float(pts.values[i]))} at "
                   f"step {step}, {f.ratio:.1f}x {of} ({fmt(f.reference)}{when}), judged on {f.points} "
                   "points.")
        evidence = {"smoothed_loss": r6(f.now), "best": r6(f.reference), "best_step": ref_step,
                    "rise": r6(f.ratio - 1.0), "ratio_bar": r6(f.bar), "points": f.points,
                    "points_up": f.up, "confidence": r6(confidence),
                    "lr": r6(lr) if lr is not None else None}
        causes = _causes(False, False, lr_outside(lr, frame.roles.get("lr")), early=True)
        causes = rank_causes([(c.cause, c.confidence * confidence) for c in causes])
        fixes = ("Lower the LR 10x (and check its warm-up: the first updates blew the loss up)",
                 *_FIXES)
        return self.alert(pos=pos, severity="error", step=step, time=float(pts.times[i]),
                          metric=frame.roles.get("loss"), message=message, evidence=evidence,
                          causes=causes, fixes=fixes)


def _causes(lr_rose: bool, grad_grew: bool, lr_far: tuple[str, float] | None = None,
            early: bool = False) -> tuple:
    """The causes of a divergence, ranked; ``lr_far``: the LR far outside its optimizer's
    usual range (a cause and its confidence); ``early``: from the first updates (an LR or an
    initialisation too large for the model, no warm-up)."""
    causes = [("the learning rate is too high for this phase of training", 0.6),
              ("bad data: a corrupt shard or a shift in the data distribution", 0.3)]
    if early:
        causes.append((("no LR warm-up, or an initialisation too large for the model (a "
                        "parametrisation's scaling off, as in muP at a new width)"), 0.4))
    else:
        causes.append(("optimizer state lost or mismatched after a resume", 0.15))
    if lr_rose:
        causes.append(("the LR rose recently (warm-up ending, a schedule restart)", 0.7))
    if grad_grew:
        causes.append(("updates are growing: the grad norm doubled meanwhile", 0.6))
    if lr_far is not None:
        causes.append(lr_far)
    return rank_causes(causes)


_FIXES = ("Clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
          "Check the data around where the rise began")
