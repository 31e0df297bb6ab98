"""``rank_straggler``: one rank's step time sustained at >= ``ratio`` x the median of the others.

At each step, each rank is compared with the median of the other ranks that reported that step
(at least ``min_ranks - 1`` of them); ``sustain`` compared steps in a row at or above ``ratio``
fire once, and ``rearm_points`` compared steps below it in a row end the episode. A throughput
stands in for the step time where none is logged (inverted: a rank slower by the same ratio).

Ranks write separate streams that arrive in any interleaving. Live, points wait until every rank
close to the leader has reported a step, then steps are compared in step order (a rank
``max_lag_steps`` behind the leader stops holding the others back). In a backfill (``check``),
whole rank files arrive one after the other, so nothing can be compared before the last one:
points are kept and compared at :meth:`RankStraggler.finish`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.humanize import fmt_duration
from trainwatch.roles import RoleTable
from trainwatch.rules.config.schema import RuleBase, integer, num
from trainwatch.rules.detectors.stats import distinct
from trainwatch.rules.engine.base import Context, Hit, Rule, make_hit, r6, rank_causes


@dataclass(frozen=True)
class StragglerConfig(RuleBase):
    ratio: float = num(gt=1)
    """A rank's step time at or above this multiple of the median of the others."""
    sustain: int = integer(ge=1)
    """Consecutive compared steps."""
    min_ranks: int = integer(ge=2)
    max_lag_steps: int = integer(ge=1)
    """A rank this far behind the others is compared without waiting for it."""
    rearm_points: int = integer(ge=1)


_CAUSES = rank_causes([
    ("a slower or throttled GPU (power or thermal limit), or one shared with another process",
     0.5),
    ("uneven work: this rank gets longer sequences or larger samples", 0.4),
    ("a slow host, network link or storage for this rank's node", 0.3),
    ("CPU contention from data-loader workers on that node", 0.3),
])


def median_of_others(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each value of a 2-D array (ranks x steps, NaN: not logged): the median of the other
    values of its column (its step), and how many there are (for a NaN: its column's median and
    count).

    From one sort of the columns (NaN last): with ``a[j, i]`` left out, row ``q`` of the sorted
    column holds ``s[q + 1]`` if the value sorted at or before ``q``, else ``s[q]``; "at or
    before q" is ``a <= s[q]`` (where they are equal, either choice is the same number)."""
    s = np.sort(a, axis=0)
    present = ~np.isnan(a)
    n_others = np.count_nonzero(present, axis=0) - present

    def left_out(q: np.ndarray) -> np.ndarray:  # (q + 1 <= (k + 1) // 2: inside the column)
        at = np.take_along_axis(s, q, axis=0)
        return np.where(a <= at, np.take_along_axis(s, q + 1, axis=0), at)

    lo = left_out(np.maximum(n_others - 1, 0) // 2)
    hi = left_out(n_others // 2)
    out = np.where(n_others % 2 == 1, lo, (lo + hi) / 2.0)
    out[n_others == 0] = np.nan
    return out, n_others


class _RankState:
    def __init__(self) -> None:
        self.steps = np.empty(0, dtype=np.int64)
        """The rank's points not compared yet."""
        self.values = np.empty(0)
        self.times = np.empty(0)
        self.max_step = -1
        self.run = 0
        """Consecutive compared steps at or above the ratio."""
        self.run_start = 0
        self.active = False
        self.quiet = 0
        """Consecutive compared steps below the ratio (while active)."""


class RankStraggler(Rule):
    id = "rank_straggler"

    def __init__(self, cfg: StragglerConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.roles: RoleTable = ctx.config.roles
        self.live = ctx.live
        self.ranks: dict[int, _RankState] = {}
        self.inverted: bool | None = None
        """The ranks log throughput, not step time (taken from the first rank seen)."""
        self.done_step = -1
        """Steps at or below this have been compared."""

    def reset(self) -> None:
        self.ranks.clear()
        self.done_step = -1

    def _series(self, batch: RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(steps, step times, times) of the batch's valid points (above 0, finite)."""
        found = self.roles.resolve(batch.series)
        name, inverted = found.get("step_time"), False
        if name is None:
            name, inverted = found.get("throughput"), True
        if name is None:
            return None
        if self.inverted is None:
            self.inverted = inverted
        elif self.inverted != inverted:
            return None
        ch = batch.series[name]
        ok = np.isfinite(ch.values) & (ch.values > 0)
        v = ch.values[ok]
        return ch.steps[ok], 1.0 / v if inverted else v, ch.times[ok]

    def update_rank(self, rank: int, batch: RecordBatch) -> list[Hit]:
        if batch.reset or batch.rewinds:
            self.reset()  # a restarted rank: comparisons start over for everyone
        st = self.ranks.setdefault(rank, _RankState())
        got = self._series(batch)
        if got is not None and got[0].shape[0]:
            s, v, t = got
            keep = s > self.done_step
            st.steps = np.concatenate([st.steps, s[keep]])
            st.values = np.concatenate([st.values, v[keep]])
            st.times = np.concatenate([st.times, t[keep]])
            st.max_step = max(st.max_step, int(s[-1]))
        if not self.live:
            return []  # compared at finish(), once every rank's file is in
        reported = [s.max_step for s in self.ranks.values() if s.max_step >= 0]
        if len(reported) < self.cfg.min_ranks:
            return []
        lead = max(reported)
        return self._compare(min(m for m in reported if m >= lead - self.cfg.max_lag_steps))

    def finish(self, now: float) -> list[Hit]:
        """Compare whatever is left (in a backfill: everything)."""
        reported = [s.max_step for s in self.ranks.values() if s.max_step >= 0]
        return self._compare(max(reported)) if len(reported) >= self.cfg.min_ranks else []

    def _compare(self, limit: int) -> list[Hit]:
        """Compare the steps up to ``limit``, then drop them."""
        cfg = self.cfg
        if limit <= self.done_step:
            return []
        ranks = sorted(r for r, st in self.ranks.items() if st.steps.shape[0])
        hits: list[Hit] = []
        if len(ranks) >= cfg.min_ranks:
            # a rank x step matrix of the first value each rank logged at each step (NaN: none)
            steps = distinct(np.concatenate([self.ranks[r].steps for r in ranks]))
            steps = steps[:int(steps.searchsorted(limit, side="right"))]
            mat = np.full((len(ranks), steps.shape[0]), np.nan)
            tim = np.full_like(mat, np.nan)
            for j, r in enumerate(ranks):
                st = self.ranks[r]
                idx = np.minimum(st.steps.searchsorted(steps), st.steps.shape[0] - 1)
                have = st.steps[idx] == steps
                mat[j, have] = st.values[idx[have]]
                tim[j, have] = st.times[idx[have]]
            meds, n_others = median_of_others(mat)
            compared = ~np.isnan(mat) & (n_others >= cfg.min_ranks - 1)
            for j, r in enumerate(ranks):
                at = compared[j]
                if at.any():
                    mine, med = mat[j, at], meds[j, at]
                    hits += self._episodes(r, self.ranks[r], steps[at], mine / med, mine, med,
                                           tim[j, at], len(ranks))
        for st in self.ranks.values():
            keep = st.steps > limit
            st.steps, st.values, st.times = st.steps[keep], st.values[keep], st.times[keep]
        self.done_step = limit
        return sorted(hits, key=lambda h: (h.alert.step, h.alert.message))

    def _episodes(self, rank: int, st: _RankState, steps: np.ndarray, ratio: np.ndarray,
                  mine: np.ndarray, med: np.ndarray, times: np.ndarray, n_ranks: int) -> list[Hit]:
        """The compared steps of one rank through its state, a run of slow (or normal) steps at
        a time: a slow run that reaches ``sustain`` fires once (its message tells the run up to
        that step); ``rearm_points`` normal steps in a row re-arm."""
        cfg = self.cfg
        hits: list[Hit] = []
        slow = ratio >= cfg.ratio
        n = slow.shape[0]
        cuts = ((slow[1:] != slow[:-1]).nonzero()[0] + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, n]):
            if not slow[a]:
                st.run = 0
                st.quiet += b - a
                if st.active and st.quiet >= cfg.rearm_points:
                    st.active = False
                continue
            if st.run == 0:
                st.run_start = int(steps[a])
            st.quiet = 0
            if not st.active and st.run + b - a >= cfg.sustain:
                i = a + max(0, cfg.sustain - st.run - 1)
                st.active = True
                hits.append(self._hit(rank, st.run + i - a + 1, st.run_start, int(steps[i]),
                                      float(times[i]), float(ratio[i]), float(mine[i]),
                                      float(med[i]), n_ranks))
            st.run += b - a
        return hits

    def _hit(self, rank: int, run: int, since: int, step: int, time: float, ratio: float,
             mine: float, med: float, n_ranks: int) -> Hit:
        cfg = self.cfg
        if self.inverted:
            what = f"its throughput is {1 / ratio:.2g}x the median of the other {n_ranks - 1} ranks"
            mine_s, med_s = f"{1 / mine:.3g}/s", f"{1 / med:.3g}/s"
        else:
            what = f"its step time is {ratio:.2g}x the median of the other {n_ranks - 1} ranks"
            mine_s, med_s = fmt_duration(mine), fmt_duration(med)
        return make_hit(
            self.id, pos=step, severity=cfg.severity, step=step, time=time,
            metric="throughput" if self.inverted else "step_time",
            message=f"Rank {rank} is a straggler: {what} ({mine_s} vs {med_s}) for {run} steps "
                    f"since step {since}.",
            evidence={"rank": rank, "ratio": r6(ratio), "rank_value": r6(mine),
                      "others_median": r6(med), "ranks": n_ranks, "steps": run,
                      "since_step": since},
            causes=_CAUSES,
            fixes=((f"On rank {rank}'s node: nvidia-smi -q -d PERFORMANCE,CLOCK (throttling) and "
                   "check for other processes"),
                   "Balance the work: bucket samples by length, drop_last=True",
                   "Compare data-loading time across ranks"),
        )
