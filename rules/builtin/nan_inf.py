"""``nan_inf``: a non-finite loss, val_loss, grad norm or LR (or an opted-in series).

It fires at the first record of an episode where a watched value is not finite, and ranks
causes by what came before: a grad-norm blow-up (its last ``lookback`` points ``blowup_ratio``
times the median of the points before, or a ``grad_explosion`` among them: LR too high, no
clipping), a NaN within the run's first ``early_points`` loss points (init, LR, data), or no
warning sign at all (log(0), a division by zero, a bad batch, fp16 overflow). A grad norm that
alone goes non-finite while the loss is finite is an fp16 step GradScaler skips: a warning,
escalated to an error if another series follows. An episode ends after ``rearm_points``
records all finite; none starts within ``cooldown_steps`` of the last one's start.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from trainwatch.families import classify_run
from trainwatch.rules.config.schema import RuleBase, integer, names, num, roles, severity
from trainwatch.rules.detectors.episode import ESCALATE, START_ESCALATED, Episode
from trainwatch.rules.detectors.stats import median
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6


@dataclass(frozen=True)
class NanInfConfig(RuleBase):
    roles: tuple[str, ...] = roles()
    """Roles watched for NaN/inf."""
    metrics: tuple[str, ...] = names()
    """More series to watch, by exact name."""
    grad_only_severity: str = severity()
    """Severity when only the grad norm is non-finite and the loss is finite (an fp16 step that
    GradScaler skips)."""
    early_points: int = integer(ge=1)
    """A NaN within the run's first N loss points points at init, LR or data."""
    lookback: int = integer(ge=2)
    """Grad-norm points before the NaN searched for a blow-up."""
    blowup_ratio: float = num(gt=1)
    """Recent grad norm this many times its earlier median counts as a blow-up."""
    rearm_points: int = integer(ge=1)
    """Records with every watched value finite that end an episode."""
    cooldown_steps: int = integer(ge=0)
    """Steps after an episode's start before another may start."""


_ORDER = ("loss", "val_loss", "grad_norm", "lr")
"""The order the roles are reported in (other roles after them)."""
BASELINE_POINTS = 200
"""Grad-norm points before the lookback whose median is the level a blow-up is measured from."""
MIN_BASELINE = 10
"""Fewer grad-norm points before the lookback than this make no level to measure a blow-up by."""


@functools.lru_cache(maxsize=64)
def loss_watch(losses: tuple[str, ...], roles: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(label, name) of the run's loss series whose role is watched: every train and val loss
    a run logs (a GAN's two, six eval sets, a detector's components) can be the one that goes
    NaN. (Cached: the same run's losses are asked about at every frame.)"""
    fams = classify_run(losses)
    labels = (("val_loss" if fams[n].family == "val_loss" else "loss", n) for n in losses)
    return tuple((label, n) for label, n in labels if label in roles)


def _word(v: float) -> str:
    return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")


class NanInfRule(Rule):
    id = "nan_inf"

    def __init__(self, cfg: NanInfConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.episode = Episode(cfg.rearm_points, cfg.cooldown_steps, 0)
        roles = sorted(cfg.roles, key=lambda r: _ORDER.index(r) if r in _ORDER else 9)
        self._watch: list[tuple[str, str | None]] = [
            *((role, None) for role in roles), *((name, name) for name in cfg.metrics)]
        """(label, series name) of the watched series: roles (their series is the frame's)
        first, in reporting order, then the series watched by name (then the run's other
        losses: :meth:`_losses`)."""


    def names_read(self) -> tuple[str, ...]:
        return tuple(self.cfg.metrics)

    def rewind(self) -> None:
        self.episode.reset()

    def _watched(self, frame: Frame) -> tuple[list[tuple[str, Points]], bool]:
        """The watched series present in the frame (each once, by role then by name), and
        whether all their values are finite."""
        out: dict[str, tuple[str, Points]] = {}
        finite = True
        watch = self._watch
        if frame.losses:
            watch = [*watch, *loss_watch(frame.losses, self.cfg.roles)]
        for role, name in watch:
            if name is None:  # a role: its series in this frame
                name = frame.roles.get(role)
            pts = frame.series.get(name) if name is not None else None
            if pts is not None and pts.values.shape[0] and name not in out:
                out[name] = (role, pts)
                finite = finite and pts.all_finite
        return list(out.values()), finite

    def update(self, frame: Frame) -> list[Hit]:
        watched, finite = self._watched(frame)
        if not watched:
            return []
        if finite and not self.episode.active:
            return []
        rec_pos, rec_step, bad, severe = rows(watched)
        return [self._hit(watched, int(rec_pos[k]), int(rec_step[k]), kind)
                for k, kind in self.episode.scan(rec_step, bad, severe)]

    def _hit(self, watched: list[tuple[str, Points]], pos: int, step: int, kind: str) -> Hit:
        cfg: NanInfConfig = self.cfg
        nonfinite: dict[str, str] = {}
        time = math.nan
        for role, p in watched:
            k = int(p.pos.searchsorted(pos))
            if k < len(p) and int(p.pos[k]) == pos:
                time = float(p.times[k])
                if not math.isfinite(float(p.values[k])):
                    nonfinite[p.name] = _word(float(p.values[k]))
        roles_bad = [r for r, p in watched if p.name in nonfinite]
        metric = next(iter(nonfinite), None)
        grad_only = roles_bad == ["grad_norm"]
        severity = cfg.grad_only_severity if kind not in (ESCALATE, START_ESCALATED) else cfg.severity

        # what came before
        gs, gv = self.ctx.recent("grad_norm", pos, cfg.lookback + BASELINE_POINTS)
        recent, earlier = gv[-cfg.lookback:], gv[:-cfg.lookback]
        blowup = False
        evidence: dict[str, object] = {"nonfinite": nonfinite}
        if recent.shape[0] and earlier.shape[0] >= MIN_BASELINE:
            base = median(earlier)
            peak = float(recent.max())
            evidence["grad_norm_recent_max"] = r6(peak)
            evidence["grad_norm_median_before"] = r6(base)
            blowup = base > 0 and peak >= cfg.blowup_ratio * base
        grad_flag = self.ctx.log("grad_explosion").any_between(
            int(gs[-cfg.lookback]) if gs.shape[0] >= cfg.lookback else step - cfg.lookback,
            step, pos)
        blowup = blowup or grad_flag is not None
        loss_before = self.ctx.count_before("loss", pos)
        early = loss_before < cfg.early_points
        evidence["loss_points_before"] = loss_before
        _ls, lv = self.ctx.recent("loss", pos - 1, 1)
        if lv.shape[0]:
            evidence["last_finite_loss"] = r6(float(lv[-1]))

        causes: list[tuple[str, float]] = []
        if grad_only:
            causes.append((("an fp16 overflow in the backward pass: GradScaler skips this step "
                           "(harmless if rare)"), 0.8))
        if "val_loss" in roles_bad and "loss" not in roles_bad:
            causes.append((("evaluation numerics: an empty eval set (0/0), fp16 overflow in eval, "
                           "or NaN in the eval data"), 0.7))
        if "lr" in roles_bad:
            causes.append((("the LR schedule produced a non-finite value (a division by zero in a "
                           "custom schedule)"), 0.8))
        if blowup:
            causes.append((("the gradient norm blew up just before: the LR is too high or "
                           "gradients are not clipped"), 0.8))
        if early:
            causes.append(((f"it came within the first {cfg.early_points} steps: initialisation, "
                           "a too-high initial LR, or bad data"), 0.6))
        causes.append((("no warning sign: log(0), a division by zero, a bad batch, or fp16 "
                       "overflow"), 0.6 if not (blowup or early) else 0.3))
        fixes = [
            "Run a few steps with torch.autograd.set_detect_anomaly(True) to find the op",
            "Clip gradients and lower the learning rate (2-10x)" if blowup else
            "Guard log/div/sqrt with an epsilon, e.g. torch.log(x.clamp_min(1e-8))",
            "Check the batch: assert torch.isfinite(inputs).all() and the same for targets",
            "Use bf16, or torch.amp.GradScaler with fp16",
        ]
        what = ", ".join(f"{n} is {w}" for n, w in nonfinite.items()) or "a value is non-finite"
        if kind == ESCALATE:
            message = f"Now {what} at step {step} (the episode began with the gradient norm)."
        elif grad_only:
            message = f"At step {step} {what} while the loss is finite (a skipped fp16 step?)."
        else:
            hint = " after the gradient norm blew up" if blowup else (
                _early_hint(loss_before) if early else "")
            message = f"At step {step} {what}{hint}."
        return self.alert(pos=pos, severity=severity, step=step, time=time, metric=metric,
                          message=message, evidence=evidence, causes=causes, fixes=fixes)


def _early_hint(loss_before: int) -> str:
    """Where an early non-finite value came in the loss: its count of finite points before it
    ("within the first 1 loss points" read as a typo)."""
    if loss_before == 0:
        return " before any finite loss point"
    return f" after only {fmt(loss_before)} loss point{'s' if loss_before != 1 else ''}"


def rows(watched: list[tuple[str, Points]]
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One row per record carrying any watched series, in record order: (record, its step as
    the first series carrying it gives it, any value non-finite, a value other than the grad
    norm's non-finite). The series are laid out over the span of records they cover."""
    base = min(int(p.pos[0]) for _r, p in watched)
    span = max(int(p.pos[-1]) for _r, p in watched) - base + 1
    has = np.zeros(span, dtype=bool)
    bad = np.zeros(span, dtype=bool)
    severe = np.zeros(span, dtype=bool)
    step = np.empty(span, dtype=np.int64)
    for role, p in reversed(watched):  # (the first series written last: its step stays)
        at = p.pos - base
        has[at] = True
        step[at] = p.steps
        b = at[~np.isfinite(p.values)]
        bad[b] = True
        if role != "grad_norm":
            severe[b] = True
    rows = has.nonzero()[0]
    return rows + base, step[rows], bad[rows], severe[rows]
