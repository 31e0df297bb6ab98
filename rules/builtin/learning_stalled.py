"""``learning_stalled``: the loss is exactly constant (learning is off), or exactly 0 (a bug).

An exactly repeated float is not noise: the parameters do not change (LR 0, frozen parameters,
an optimizer holding other tensors, ``step()`` never called), or the logged value is stale.
"""

from __future__ import annotations

import numpy as np

from trainwatch.rules.config.models import StalledConfig
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Context, Frame, Hit, Points, Rule, fmt, r6, rank_causes

_SMALL = 64
"""Frames of at most this many loss points (live reads) are first tried with Python floats:
a set and a min cost less than the numpy calls on arrays this short."""


def run_lengths(values: np.ndarray, prev: float | None, prev_len: int) -> np.ndarray:
    """Length of the run of equal values ending at each point, continuing a carried run."""
    n = values.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.int64)
    before = np.empty(n)
    before[0] = np.nan if prev is None else prev
    before[1:] = values[:-1]
    new = values != before  # NaN never equals: a fresh stream starts a run
    idx = np.arange(n)
    last_new = np.maximum.accumulate(np.where(new, idx, -1))
    return np.where(last_new < 0, prev_len + idx + 1, idx - last_new + 1)


_ZERO_CAUSES = rank_causes([
    ("the loss is computed on an empty selection (everything masked, all targets = ignore_index)",
     0.5),
    ("labels leak into the inputs, so the task is trivial", 0.4),
    ("the loss is multiplied by 0 or clamped (a zero loss weight)", 0.4),
    (("nothing: a hinge, margin or triplet loss (or a detection loss on batches without "
      "objects) is 0 on easy batches; then set learning_stalled.mixed_points: 100"), 0.3),
])
_ZERO_FIXES = ("Print one batch's inputs, targets and mask, and the loss terms",
               "Check the loss weights and the ignore_index / masking logic")
_NO_ZERO_YET = 1 << 40
"""The non-zero run of a stream that held no zero yet: longer than any bar (an int64 still)."""
_NO_GRAD, _GRAD_ZERO, _GRAD_MOVES = 0, 1, 2
"""What the gradient norm says about a flat, non-zero loss: not logged, exactly 0, non-zero."""


def _flat_causes(lr_zero: bool, grad: int) -> tuple[Cause, ...]:
    causes = [("the logged value is stale (a variable logged outside the training loop)", 0.3)]
    if lr_zero:
        causes.append(("the learning rate is 0", 0.9))
    if grad == _GRAD_ZERO:
        causes.append((("no gradient reaches the parameters: they are frozen "
                        "(requires_grad=False) or the loss is detached"), 0.8))
    elif grad == _GRAD_MOVES:
        causes.append((("gradients exist but the parameters do not move: the optimizer holds "
                        "other parameters than the model's, or step() is never called"), 0.7))
    else:
        causes.append((("the parameters do not move: LR 0, frozen parameters, or an optimizer "
                        "not attached to the model"), 0.6))
    return rank_causes(causes)


_FLAT_CAUSES = {(z, g): _flat_causes(z, g) for z in (False, True)
                for g in (_NO_GRAD, _GRAD_ZERO, _GRAD_MOVES)}
"""The causes of a flat non-zero loss, ranked once, by (the LR is 0, the gradient norm)."""
_FLAT_FIXES = (("Print optimizer.param_groups[0]['lr'] and "
                "sum(p.requires_grad for p in model.parameters())"),
               ("Check that the optimizer was built from model.parameters() after any model "
                "surgery, and that optimizer.step() runs every step"))


class LearningStalledRule(Rule):
    id = "learning_stalled"
    roles_read = ("loss",)
    fast = True
    """Take a frame where no value repeats the one before it in a few array operations (a live
    frame of distinct values above 0 in a set and a min of Python floats); tests turn it off to
    compare."""

    def __init__(self, cfg: StalledConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self._distinct = min(cfg.zero_points, cfg.constant_points)
        """A frame whose values each differ from the one before cannot fire when both bars
        are above 1."""
        self._long = max(cfg.zero_points, cfg.mixed_points)
        """A run of this many zeros is a bug even in a loss that mixes zeros in (one that turned
        into zeros altogether): the second of a zero run's bars."""
        self.rewind()

    def rewind(self) -> None:
        self.prev: float | None = None
        self.prev_len = 0
        self.start_step: int | None = None
        """First step of the carried run."""
        self.zero_armed = True
        """A zero-loss alert may fire (False after one, until ``rearm_points`` non-zero values
        in a row)."""
        self.nonzero_run = _NO_ZERO_YET
        """Non-zero values in a row at the end of the last frame (since the stream's start, if
        no zero came yet: as good as endless)."""
        self.run_gap = _NO_ZERO_YET
        """Non-zero values in a row before the first zero of the zero run the last frame ended
        in (read where that run goes on into the next frame)."""

    def update(self, frame: Frame) -> list[Hit]:
        loss = frame.role("loss")
        if loss is None:
            return []
        f = loss.finite()
        v = f.values
        m = v.shape[0]
        if not m:
            return []
        cfg: StalledConfig = self.cfg
        if self.fast and m <= _SMALL and self._distinct > 1:
            # a live frame in Python floats: all values distinct (so none repeats the one
            # before it) and above 0 is the usual frame, where only the non-zero run grows
            vl = v.tolist()
            if vl[0] != self.prev and len(set(vl)) == m and min(vl) > 0.0:
                self.prev, self.prev_len, self.start_step = vl[-1], 1, int(f.steps[-1])
                self.nonzero_run += m
                if self.nonzero_run >= cfg.rearm_points:
                    self.zero_armed = True
                return []
        if (self.fast and self._distinct > 1 and v[0] != self.prev
                and not np.count_nonzero(v[1:] == v[:-1])):
            # no value repeats the one before it: every run has length 1, nothing can fire
            self.prev, self.prev_len, self.start_step = float(v[-1]), 1, int(f.steps[-1])
            # a loss above 0 throughout (the usual case) holds no zero: one reduction says so
            if float(v.min()) > 0.0:
                self._rearm(None, [], v.shape[0])
            else:
                self._rearm(v == 0.0, [])
            return []
        if self.fast:
            return self._by_runs(f)
        L = run_lengths(v, self.prev, self.prev_len)
        carried = self.start_step
        self.prev, self.prev_len = float(f.values[-1]), int(L[-1])
        first = len(f) - int(L[-1])
        self.start_step = int(f.steps[first]) if first >= 0 else carried
        zero = f.values == 0.0
        at_bar = zero & ((L == cfg.zero_points) | (L == self._long))
        fire_zero = self._rearm(zero, [(i, int(L[i])) for i in at_bar.nonzero()[0].tolist()])
        fire_const = (~zero & (L == cfg.constant_points)).nonzero()[0]
        hits = [self._hit(f, i, n, True, carried) for i, n in fire_zero]
        hits += [self._hit(f, int(i), int(L[i]), False, carried) for i in fire_const.tolist()]
        return sorted(hits, key=lambda h: h.pos)

    def _by_runs(self, f: Points) -> list[Hit]:
        """The frame from its runs of equal values (where the values change) rather than a run
        length per point: only a run long enough reaches a bar, each at one point."""
        cfg: StalledConfig = self.cfg
        v = f.values
        m = v.shape[0]
        # run r is bounds[r]:bounds[r + 1]
        bounds = np.concatenate(([0], (v[1:] != v[:-1]).nonzero()[0] + 1, [m]))
        lens = bounds[1:] - bounds[:-1]
        carry = self.prev_len if v[0] == self.prev else 0  # (the first run goes on)
        lens[0] += carry
        zeros: list[tuple[int, int]] = []
        zero_bars = sorted({cfg.zero_points, self._long})
        consts: list[int] = []
        for r in (lens >= min(cfg.zero_points, cfg.constant_points)).nonzero()[0].tolist():
            s = int(bounds[r])
            back = (carry if r == 0 else 0) + 1
            if float(v[s]) == 0.0:
                zeros += [(s + bar - back, bar) for bar in zero_bars
                          if s <= s + bar - back < int(bounds[r + 1])]
                continue
            i = s + cfg.constant_points - back
            if s <= i < int(bounds[r + 1]):  # the point where the run's length equals the bar
                consts.append(i)
        carried = self.start_step
        last = int(lens[-1])
        self.prev, self.prev_len = float(v[-1]), last
        self.start_step = int(f.steps[m - last]) if m - last >= 0 else carried
        fire_zero = self._rearm(None if float(v.min()) > 0.0 else v == 0.0, zeros, m)
        hits = [self._hit(f, i, n, True, carried) for i, n in fire_zero]
        hits += [self._hit(f, i, cfg.constant_points, False, carried) for i in consts]
        return sorted(hits, key=lambda h: h.pos)

    def _rearm(self, zero: np.ndarray | None, candidates: list[tuple[int, int]], n: int = 0
               ) -> list[tuple[int, int]]:
        """The zero-loss candidates (index, length of its run of zeros there; in order) that
        fire: one per episode, re-armed by ``rearm_points`` non-zero values in a row. A run of
        ``zero_points`` zeros fires only with at least ``mixed_points`` non-zero values in a row
        before it (a loss that mixes exact zeros with other values, a hinge or detection loss on
        easy batches, has runs of zeros: a bug turns a loss that held none into zeros), one of
        ``max(zero_points, mixed_points)`` always (that loss turned into zeros altogether).
        Carries the state to the next frame.
        ``zero=None``: ``n`` values, none of them 0 (so no candidate either)."""
        need = self.cfg.rearm_points
        if zero is None or (self.fast and not zero.any()):
            # no zero here: only the non-zero run grows (and may re-arm)
            n = n if zero is None else zero.shape[0]
            self.nonzero_run += n
            if self.nonzero_run >= need:
                self.zero_armed = True
            return []
        zi = zero.nonzero()[0]
        # non-zero values in a row just before each zero (the carried run before the first)
        gaps = np.empty_like(zi)
        if gaps.shape[0]:  # (np.diff with prepend= costs several times this)
            gaps[0] = zi[0] + self.nonzero_run
            np.subtract(zi[1:], zi[:-1], out=gaps[1:])
            gaps[1:] -= 1
        fired: list[tuple[int, int]] = []
        k = 0
        for c, run in candidates:
            # the zeros up to this candidate: did a long enough non-zero stretch come before any?
            j = int(zi.searchsorted(c, side="right"))
            if not self.zero_armed and j > k and int(gaps[k:j].max()) >= need:
                self.zero_armed = True
            k = j
            # the run's first zero is ``run`` zeros back, in this frame or an earlier one
            first = j - run
            gap = int(gaps[first]) if first >= 0 else self.run_gap
            if self.zero_armed and (run >= self._long or gap >= self.cfg.mixed_points):
                fired.append((c, run))
                self.zero_armed = False
        n = zero.shape[0]
        tail = n - 1 - int(zi[-1]) if zi.shape[0] else n
        if zi.shape[0] and not tail:
            # the frame ends in a run of zeros: the gap before its first zero (the last zero
            # after a non-zero value), unless the carried run fills the frame
            starts = gaps.nonzero()[0]
            if starts.shape[0]:
                self.run_gap = int(gaps[starts[-1]])
        if not self.zero_armed and ((zi.shape[0] > k and int(gaps[k:].max()) >= need)
                                    or tail >= need or (not zi.shape[0]
                                                        and self.nonzero_run + n >= need)):
            self.zero_armed = True
        self.nonzero_run = tail if zi.shape[0] else self.nonzero_run + n
        return fired

    def _hit(self, f: Points, i: int, n: int, zero: bool, carried: int | None) -> Hit:
        """An alert at point ``i``, the ``n``-th of its run."""
        cfg: StalledConfig = self.cfg
        pos, step = int(f.pos[i]), int(f.steps[i])
        since = int(f.steps[i - n + 1]) if i - n + 1 >= 0 else carried
        value = float(f.values[i])
        evidence: dict[str, object] = {"value": r6(value), "points": n}
        if since is not None:
            evidence["since_step"] = since
        when = f"since step {since}" if since is not None else f"for {n} points"
        if zero:
            message = f"The loss has been exactly 0 {when} ({n} points): a loss or data bug."
            causes, fixes = _ZERO_CAUSES, _ZERO_FIXES
        else:
            lr = self.ctx.latest("lr", pos)
            g = self.ctx.latest("grad_norm", pos)
            evidence.update({"lr": r6(lr) if lr is not None else None,
                             "grad_norm": r6(g) if g is not None else None})
            message = (f"The loss has been exactly {fmt(value)} {when} ({n} points): nothing is "
                       f"learning.")
            grad = _NO_GRAD if g is None else _GRAD_ZERO if g == 0 else _GRAD_MOVES
            causes = _FLAT_CAUSES[lr is not None and lr <= 0, grad]
            fixes = _FLAT_FIXES
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=float(f.times[i]),
                          metric=f.name, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
