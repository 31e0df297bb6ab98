"""``plateau``: the smoothed train loss (or val_loss) stops improving.

The loss is smoothed into block medians of ``window`` points (shared with other rules, see
:func:`~trainwatch.rules.detectors.blocks.shared_blocks`). The patience restarts when a block beats the
level of the last restart by ``min_delta`` (raised to ``noise_factor`` standard errors of a block median for noisy
losses); after ``patience`` windows without that, the rule fires unless the loss still trends down
slowly (Kendall tau and a Theil-Sen drop since the best). The diagnosis
(:mod:`~trainwatch.rules.builtin.plateau_alert`) reads the LR (at its floor: the schedule is over, a note)
and the grad norm (healthy: LR too low; tiny: vanishing).
Evaluations get the same treatment with ``val_patience``. Once fired, the rule re-arms only after
the loss goes clearly below its level then (``rearm_delta``, or the alert's noise margin if more):
one plateau, one alert. Runs of quiet blocks are taken in one vectorised step; the per-block loop
is the reference. A frame too short for the patience to run out in it has its blocks taken at the
next frame (a short file checked whole is one frame: never).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque

import numpy as np

from trainwatch.rules.builtin.plateau_alert import PlateauAlert
from trainwatch.rules.config.models import PlateauConfig
from trainwatch.rules.detectors.blocks import Blocks, LossBlockRule, shared_blocks
from trainwatch.rules.detectors.evals import EvalPool
from trainwatch.rules.detectors.lr_peak import LrPeak
from trainwatch.rules.detectors.stats import improving, noise_sd, small_median
from trainwatch.rules.engine.base import Context, Frame, Hit, Points

_LEVEL_DIFF = math.sqrt(1.0 + 0.449)
"""Standard error of a level (the median of 3 block medians: variance 0.449 of one for normal
data) minus the reference block, in standard errors of one block median."""
_TREND_WINDOWS = 400
"""Most window medians the plateau's trend test looks back over."""

def first_check(wait: int, news: list[int], n: int, patience: int, every: int) -> int:
    """The first of ``n`` blocks at which a constant ``patience`` runs out (the wait reaches it,
    or a multiple of ``every`` past it: the trend test's repeats), ``n`` if none. ``wait`` is the
    wait before the first block; ``news`` the blocks that are new bests (their wait is 0, and
    the next block's 1). As the vectorised step's check on arrays of waits, in a few Python
    operations per new best."""
    start, w = 0, wait + 1
    for s in news + [n]:
        # the blocks start .. s - 1 wait w, w + 1, ...
        t = start + (patience - w if w <= patience else (patience - w) % every)
        if t < s:
            return t
        start, w = s + 1, 1
    return n


class PlateauRule(LossBlockRule, PlateauAlert):
    id = "plateau"
    roles_read = ("loss", "val_loss", "lr")
    min_fast = 32
    """(Twice the default: the vectorised step costs ~40 us, twice the others', and a block one by
    one ~1.2 us; on the bench's short runs 16 cost ~20 % more than no vectorised step at all.)"""
    lazy_spread = True
    """A block one by one reads the noise level only where a value clears a bar of ``min_delta``
    alone (the noise only raises the bars) or the rule fires: a live watch's blocks, most of them
    no clear improvement, then never compute it (see :meth:`_noise_at`)."""

    def __init__(self, cfg: PlateauConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.lr = LrPeak()
        self.rewind()

    def rewind(self) -> None:
        cfg: PlateauConfig = self.cfg
        self._rewind_blocks()
        self._cols: list[float] | None = None
        """The noise levels of the frame's blocks as Python floats, made at the first read by a
        block taken one by one (see :meth:`_noise_at`)."""
        self._deferred: tuple[Frame, Blocks] | None = None
        """A frame whose train blocks cannot fire, taken at the next frame (see update)."""
        self.recent: deque[float] = deque(maxlen=_TREND_WINDOWS)
        """The last window medians (for the trend test over twice the patience)."""
        self.fired = 0
        """Plateau alerts in this segment (repeats are notes: the user has been told)."""
        self.ref, self.ref_step = math.nan, 0
        """The loss when the patience last restarted (a clear improvement)."""
        self.wait = 0
        """Blocks since the patience last restarted."""
        self.since_best = 0
        """Blocks since the last clear new best (the span of the trend test)."""
        self.prev = (math.nan, math.nan)
        """The two block medians before the next one (NaN before they came)."""
        self.rearm_below: float | None = None
        """After an alert, the level a block must go below to re-arm the rule: the best then,
        lowered by ``rearm_delta`` or the margin the alert used, whichever is more (the noise of
        a flat loss alone re-armed it at 5 %, and the same plateau was reported again)."""
        self.first: tuple[int, int | None] | None = None
        """Records where the first train-loss alert fired and where the rule re-armed after it
        (None: not yet). The evaluations of a frame are taken after its train blocks: they ask
        this rather than the state, which may be that of a later record."""
        self.v_recent: deque[float] = deque(maxlen=max(cfg.val_patience, 16))
        self.v_pool = EvalPool(cfg.window)
        """Dense evaluations (a val_loss logged every step or few) are judged pooled."""
        self._v_noise: float | tuple[float, ...] = 0.0
        """The evaluations' noise, or the evaluations it is to be computed from (when needed)."""
        self.v_count = 0
        self.v_best: float | None = None
        self.v_best_step = 0
        self.v_wait = 0
        self.v_rearm_below: float | None = None

    def update(self, frame: Frame) -> list[Hit]:
        hits = self._settle_train()
        b = shared_blocks(self.ctx, frame, "loss", self.cfg.window)
        if len(b):
            if self.fast and self.rearm_below is None and self.wait + len(b) < self.cfg.patience:
                # no block of this frame can fire (each adds at most 1 to the wait, and the
                # patience is at least cfg.patience) or re-arm (none is armed): its blocks only
                # move the state, which nothing reads before the next frame's blocks. They are
                # taken then, and never on a short file checked whole (one frame).
                self._deferred = (frame, b)
            else:
                self._start_frame(b)
                hits += self._drive(frame, b)
        val = frame.role("val_loss")
        if val is not None and len(val):
            hits.extend(self._val(frame, val.finite()))
        self.lr.end_frame(frame)
        return hits

    def _settle_train(self) -> list[Hit]:
        """Take the deferred frame's blocks (none of them fires: the list is empty)."""
        if self._deferred is None:
            return []
        frame, b = self._deferred
        self._deferred = None
        self._start_frame(b)
        return self._drive(frame, b)

    def _start_frame(self, b: Blocks) -> None:
        self._cols = None

    def _noise_at(self, b: Blocks, i: int) -> float:
        """The noise level of block ``i`` of the frame being driven."""
        cols = self._cols
        if cols is None:
            cols = self._cols = b.noise.tolist()
        return cols[i]

    def _rearm_level(self, best: float, delta: float) -> float:
        return best - max(self.cfg.rearm_delta, delta) * abs(best)

    def _ready(self) -> bool:
        return super()._ready() and not math.isnan(self.prev[0])

    def _quiet_prefix(self, b: Blocks, i: int, j: int) -> int:
        """Take in one step the blocks from ``i`` on (before ``j``) that cannot fire or re-arm
        (the common case): the same state changes as :meth:`_block`, vectorised, slow
        improvements that restart the patience included. Returns how many were taken."""
        cfg: PlateauConfig = self.cfg
        med = b.med[i:j]
        n = med.shape[0]
        noise = b.noise[i:j]
        bprev = np.minimum.accumulate(np.concatenate(([self.best], med)))[:-1]
        improved = med < bprev - np.maximum(cfg.min_delta, cfg.noise_factor * noise) * np.abs(bprev)
        news = improved.nonzero()[0].tolist()  # (the new bests: few)
        # the reference each block's level is compared with, if no slow improvement restarted
        # the patience: the last new best before it (each is below all before it, so the lowest
        # of them). A restart sets it to the level, below the reference then: the reference is
        # the lowest of the new bests and the restarts' levels before the block.
        ref = np.minimum.accumulate(np.concatenate(((self.ref,), np.where(improved, med, np.inf))))
        ref = ref[:-1]
        p1, p2 = self.prev
        a = np.concatenate(((p1, p2), med[:-1]))[:n]
        c = np.concatenate(((p2,), med[:-1]))
        level = np.maximum(np.minimum(a, c), np.minimum(np.maximum(a, c), med))
        # (the product in :meth:`_block`'s order: the same bar, to the last bit)
        delta = np.maximum(cfg.min_delta, (_LEVEL_DIFF * cfg.noise_factor) * noise)
        # blocks that may restart the patience: the level below the bar of the new bests alone
        # (a restart only lowers the reference, and the bar with it: a superset), ...
        maybe = level < ref - delta * np.abs(ref)
        maybe &= ~improved
        rearm = self.rearm_below
        if rearm is None and cfg.patience_fraction * (self.nblk + n) < cfg.patience + 1:
            # the patience a scalar (the common case): the first check found from the new bests
            k = first_check(self.wait, news, n, cfg.patience, max(4, cfg.patience // 4))
        else:
            if rearm is None:
                idx = np.arange(n)
                last = np.maximum.accumulate(np.where(improved, idx, -1))
                patience = np.maximum(cfg.patience, (cfg.patience_fraction * (
                    self.nblk + idx + 1)).astype(np.int64))
                every = np.maximum(4, patience // 4)
                wait = np.where(last >= 0, idx - last, self.wait + idx + 1)
                # past the patience, only every max(4, patience/4)-th block runs the trend test
                stop = (wait >= patience) & ((wait - patience) % every == 0)
                stop &= ~improved
            else:
                stop = med < rearm
            hit = stop.nonzero()[0]
            k = int(hit[0]) if hit.shape[0] else n
        # ... each checked in order as :meth:`_block` does, up to the first stop (a restart there
        # takes its place: its patience check does not run). After a restart at t no patience can
        # run out before t + patience: the step goes on to there (it may stop early, never late).
        restart, level_r = -1, math.inf
        cands = maybe.nonzero()[0].tolist()
        if cands and cands[0] <= k:
            medl, al, cl, refl = med.tolist(), a.tolist(), c.tolist(), ref.tolist()
            deltal = delta.tolist()  # (:meth:`_block`'s margin, to the bit: computed above)
            for t in cands:
                if t > k or (t == k and rearm is not None):
                    break
                r = min(refl[t], level_r)
                x = medl[t]
                bar = r - deltal[t] * abs(r)
                if x < bar and (al[t] < bar or cl[t] < bar):
                    restart, level_r = t, small_median((al[t], cl[t], x))
                    if rearm is None:
                        k = min(n, t + cfg.patience)
        if k:
            self.recent.extend(med[:k].tolist())
            self.nblk += k
            self._note_best_of(b, i, med[:k])
            li = news[bisect_left(news, k) - 1] if news and news[0] < k else -1  # (last new best)
            event = max(li, restart)
            self.wait = k - 1 - event if event >= 0 else self.wait + k
            self.since_best = k - 1 - li if li >= 0 else self.since_best + k
            if restart > li:
                self.ref, self.ref_step = level_r, int(b.step[i + restart])
            elif li >= 0:
                self.ref, self.ref_step = float(med[li]), int(b.step[i + li])
            self.prev = (p2, float(med[0])) if k == 1 else (float(med[k - 2]), float(med[k - 1]))
        return k

    def _block(self, frame: Frame, b: Blocks, i: int, med: float, noise: float | None,
               step: int) -> Hit | None:
        """One block of the train loss, the reference (``noise`` None: read where it is needed).

        The noise only raises a bar above ``min_delta``'s (``max(min_delta, ...)``, times the
        same non-negative scale, subtracted from the same value: rounding keeps the order), so a
        value that does not clear ``min_delta``'s bar clears no bar, and its noise is not read."""
        cfg: PlateauConfig = self.cfg
        self.nblk += 1
        self.recent.append(med)
        if self.rearm_below is not None and med < self.rearm_below:
            self.rearm_below = None
            if self.first is not None and self.first[1] is None:
                self.first = (self.first[0], int(b.pos[i]))
        p1, p2 = self.prev
        self.prev = (p2, med)
        best = self.best
        if noise is None and best is not None and med < best - cfg.min_delta * abs(best):
            noise = self._noise_at(b, i)
        # a clear improvement on the best so far restarts the patience
        if best is None or (noise is not None and med < best - max(
                cfg.min_delta, cfg.noise_factor * noise) * abs(best)):
            self.best, self.best_step = med, step  # (= _note_best: this rule has no _new_best)
            self.wait = self.since_best = 0
            self.ref, self.ref_step = med, step
            return None
        self.since_best += 1
        if med < best:
            self.best, self.best_step = med, step
        # so does a slow one that adds up: the level (the median of this block and the two
        # before, so one lucky block does not count) clearly below the reference, the loss at
        # the last restart (as ReduceLROnPlateau's ``best``). The lowest block alone moves down
        # with the progress and the noise: a loss 60 % lower than its reference was reported as
        # "not improved". The bar allows for the noise of the two values compared. (A median of
        # three is below a bar when two of them are; p1 is NaN for the first two blocks.)
        ref = self.ref
        if noise is None and med < ref - cfg.min_delta * abs(ref):
            noise = self._noise_at(b, i)
        if noise is not None:
            bar = ref - max(cfg.min_delta, _LEVEL_DIFF * cfg.noise_factor * noise) * abs(ref)
            if med < bar and (p1 < bar or p2 < bar) and not math.isnan(p1):
                self.ref, self.ref_step, self.wait = small_median((p1, p2, med)), step, 0
                return None
        if self.nblk <= cfg.warmup_windows:
            return None
        self.wait += 1
        # late in a long run, progress is slower: the patience grows with the run
        patience = max(cfg.patience, int(cfg.patience_fraction * self.nblk))
        if self.wait < patience or self.rearm_below is not None:
            return None
        if self.ref == 0.0:
            # a smoothed loss at exactly 0 (more than half its points 0: a hinge or detection
            # loss on easy batches, or a zero-loss bug, learning_stalled's story) cannot improve
            # by any fraction of its level, and its median hides what its non-zero values do:
            # "not improved by 1 % of 0" says nothing
            return None
        # a slow, steady improvement since the reference is not a plateau (re-tested every
        # patience/4 windows while it lasts: the test costs a Theil-Sen fit)
        if (self.wait - patience) % max(4, patience // 4):
            return None
        # (over the blocks since the last new best, up to twice the patience, even when the
        # level restarted the patience within them: on a noisy loss a trend needs length to show)
        back = list(self.recent)[-min(self.since_best, 2 * patience, _TREND_WINDOWS):]
        if improving(back, cfg.improving_tau, cfg.min_delta / 2):
            return None
        if noise is None:
            noise = self._noise_at(b, i)
        delta = max(cfg.min_delta, cfg.noise_factor * noise)
        self.rearm_below = self._rearm_level(min(self.best, med), delta)  # type: ignore[type-var]
        self.fired += 1
        if self.fired == 1:
            self.first = (int(b.pos[i]), None)
        # (the message compares the reference with now: it names that comparison's margin)
        margin = max(cfg.min_delta, _LEVEL_DIFF * cfg.noise_factor * noise)
        return self._fire(frame, int(b.pos[i]), step, float(b.time[i]), "train", med,
                          self.ref, self.ref_step, margin, self.wait * cfg.window,
                          "info" if self.fired > 1 else None)

    def _val(self, frame: Frame, pts: Points) -> list[Hit]:
        cfg: PlateauConfig = self.cfg
        hits: list[Hit] = []
        recent = self.v_recent
        patience, min_delta = cfg.val_patience, cfg.val_min_delta
        every = max(4, patience // 2)
        # (the state in locals through the loop, written back after it: a long file has an
        # evaluation every few hundred points, each one a few attribute writes otherwise)
        count, best, best_step = self.v_count, self.v_best, self.v_best_step
        wait, rearm = self.v_wait, self.v_rearm_below
        poss = pts.pos.tolist()
        for i, x, step in self.v_pool.judged(pts.values.tolist(), pts.steps.tolist()):
            pos = poss[i]
            recent.append(x)
            count += 1
            if count % 4 == 1:  # the noise estimate is refreshed every 4 evaluations
                self._v_noise = tuple(recent)  # (computed if a decision needs it)
            if rearm is not None and x < rearm:
                rearm = None
            # the margin only matters below the best (it is >= 0), and its noise term only when
            # the value clears the bar of min_delta alone (the margin is at least that): computed
            # there, not at every evaluation
            if best is None or (x < best - min_delta * abs(best)
                                and x < best - self._val_delta() * abs(best)):
                best, best_step, wait = x, step, 0
                continue
            if x < best:
                best, best_step = x, step
            wait += 1
            if wait < patience or rearm is not None:
                continue
            if (wait - patience) % every:
                continue  # the trend test is repeated every few evaluations, not each one
            last = list(recent)[-min(wait, recent.maxlen or 0):]
            if improving(last, cfg.improving_tau, min_delta / 2):
                continue
            rearm = self._rearm_level(min(best, x), self._val_delta())
            over = self.ctx.log("overfit").last(pos)
            if over is not None and over >= best_step:
                continue  # overfit has reported this already, with the better diagnosis
            # val alone stalling while the train loss improves is a generalisation gap (a note);
            # with the train loss stalled too it is a plateau
            first = self.first
            train_stalled = first is not None and first[0] <= pos and (
                first[1] is None or pos < first[1])
            hits.append(self._fire(frame, pos, step, float(pts.times[i]), "val", x, best,
                                   best_step, self._val_delta(), wait,
                                   None if train_stalled else "info"))
        self.v_count, self.v_best, self.v_best_step = count, best, best_step
        self.v_wait, self.v_rearm_below = wait, rearm
        return hits

    def _val_delta(self) -> float:
        """The margin a new best evaluation must beat the old by."""
        cfg: PlateauConfig = self.cfg
        if not isinstance(self._v_noise, float):
            self._v_noise = noise_sd(self._v_noise)
        return max(cfg.val_min_delta, cfg.noise_factor * self._v_noise)
