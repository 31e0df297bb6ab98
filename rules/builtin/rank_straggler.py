"""``rank_straggler``: one rank's step time sustained at >= ``ratio`` x the median of the others.

Ranks write separate streams that arrive in any interleaving. Live, points wait until every rank
close to the leader has reported a step, then steps are compared in step order (a rank
``max_lag_steps`` behind the leader stops holding the others back). In a backfill (``check``),
whole rank files arrive one after the other, so nothing can be compared before the last one:
points are kept and compared at :meth:`RankStraggler.finish`. At each step, a rank is compared
with the median of the other ranks that reported it.
"""

from __future__ import annotations

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.humanize import fmt_duration
from trainwatch.roles import RoleTable
from trainwatch.rules.config.models import StragglerConfig
from trainwatch.rules.detectors.stats import nan_median_of_others
from trainwatch.rules.engine.base import Hit, make_hit, r6, rank_causes


def median_of_others_full(a: np.ndarray) -> np.ndarray:
    """:func:`~trainwatch.rules.detectors.stats.nan_median_of_others` of a 2-D array with no NaN and no
    zero (every rank logged every step; step times and throughputs above 0), bit for bit, from
    one sort of its rows and no ranking: each value has ``k - 1`` others, and with it left out
    the sorted row's position ``q`` holds ``s[q + 1]`` if it sorted at or before ``q``, else
    ``s[q]``; "at or before q" is ``a <= s[q]`` (where ``a == s[q]`` and it sorted after q, the
    values between are all equal: either choice is the same number)."""
    k = a.shape[1]
    if k == 1:  # (no others: as nan_median_of_others says it)
        return np.full(a.shape, np.nan)
    if k <= _NETWORK_UP_TO:
        # a few ranks: the rows sorted by a network of min/max over whole columns (a sort of
        # short rows costs a call per row inside numpy); they select, so the sorted values are
        # np.sort's, bit for bit (no NaN, no zero: no order between equal values can show)
        cols = a.T.copy()
        s = _sorted_columns(list(cols))

        def left_out_t(q: int) -> np.ndarray:
            return np.where(cols <= s[q], s[q + 1], s[q])

        lo_t = left_out_t((k - 2) // 2)
        if k % 2 == 0:
            return lo_t.T
        out_t = lo_t + left_out_t((k - 1) // 2)
        out_t /= 2.0
        return out_t.T
    s2 = np.sort(a, axis=1)

    def left_out(q: int) -> np.ndarray:
        return np.where(a <= s2[:, q:q + 1], s2[:, q + 1:q + 2], s2[:, q:q + 1])

    lo = left_out((k - 2) // 2)
    if k % 2 == 0:  # an odd count of others: the middle one
        return lo
    out = lo + left_out((k - 1) // 2)
    out /= 2.0
    return out


_NETWORK_UP_TO = 7
"""Up to this many ranks the rows are sorted by :func:`_sorted_columns` (k(k-1)/2 pairs of
column-wide min/max: 21 at 7 ranks, still cheaper than numpy's sort of short rows)."""


def _sorted_columns(c: list[np.ndarray]) -> list[np.ndarray]:
    """Columns ``c`` sorted row by row (the lowest first): an odd-even transposition network,
    k rounds of min/max of neighbouring columns."""
    k = len(c)
    for r in range(k):
        for i in range(r % 2, k - 1, 2):
            c[i], c[i + 1] = np.minimum(c[i], c[i + 1]), np.maximum(c[i], c[i + 1])
    return c


_CAUSES = rank_causes([
    ("a slower or throttled GPU (power or thermal limit), or one shared with another process",
     0.5),
    ("uneven work: this rank gets longer sequences or larger samples", 0.4),
    ("a slow host, network link or storage for this rank's node", 0.3),
    ("CPU contention from data-loader workers on that node", 0.3),
])
"""The alert's causes, ranked once (they never vary)."""


def _shared_steps(rank_steps: list[np.ndarray], limit: int) -> np.ndarray | None:
    """The steps up to ``limit`` when every rank holds the same strictly increasing steps (each
    logged every step once: the usual backfill), which are then the sorted distinct steps of
    them all, with no sort; None otherwise."""
    first = rank_steps[0]
    if not all(np.array_equal(s, first) for s in rank_steps[1:]):
        return None
    if first.shape[0] > 1 and not bool((first[1:] > first[:-1]).all()):
        return None
    return first[:int(np.searchsorted(first, limit, side="right"))]


_NO_STEPS = np.empty(0, dtype=np.int64)
_NO_VALUES = np.empty(0)


class _RankState:
    def __init__(self) -> None:
        # (shared empty arrays: a rank's arrays are replaced, never written in place)
        self.steps = _NO_STEPS
        self.values = _NO_VALUES
        self.times = _NO_VALUES
        self.max_step = -1
        self.run = 0
        """Consecutive compared steps at or above the ratio."""
        self.run_start = 0
        self.active = False
        self.quiet = 0


def _same_kinds(steps: np.ndarray, values: np.ndarray, times: np.ndarray) -> bool:
    """Whether the arrays have the dtypes a concatenation onto a rank's empty ones gives."""
    return (steps.dtype == _NO_STEPS.dtype and values.dtype == _NO_VALUES.dtype
            and times.dtype == _NO_VALUES.dtype)


class RankStraggler:
    id = "rank_straggler"

    def __init__(self, cfg: StragglerConfig, roles: RoleTable, *, live: bool = True) -> None:
        self.cfg = cfg
        self.roles = roles
        self.live = live
        self.ranks: dict[int, _RankState] = {}
        self.inverted: bool | None = None
        self.done_step = -1
        """Steps at or below this have been compared."""

    def reset(self) -> None:
        self.ranks.clear()
        self.done_step = -1

    def _series(self, batch: RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        found = self.roles.resolve(batch.series)  # (remembered by the table)
        name, thr = found.get("step_time"), found.get("throughput")
        inverted = False
        if name is None:
            name, inverted = thr, True
        if name is None:
            return None
        if self.inverted is None:
            self.inverted = inverted
        elif self.inverted != inverted:
            return None
        ch = batch.series[name]
        v = ch.values
        ok = np.isfinite(v) & (v > 0)
        if ok.all():  # (the usual batch: no copies)
            return ch.steps, 1.0 / v if inverted else v, ch.times
        vals = 1.0 / v[ok] if inverted else v[ok]
        return ch.steps[ok], vals, ch.times[ok]

    def feed(self, rank: int, batch: RecordBatch) -> list[Hit]:
        if batch.reset or batch.rewinds:
            self.reset()  # a restarted rank: comparisons start over for everyone
        st = self.ranks.get(rank)
        if st is None:
            st = self.ranks[rank] = _RankState()
        got = self._series(batch)
        if got is not None and got[0].shape[0]:
            s, v, t = got
            keep = s > self.done_step
            if not keep.all():
                s, v, t = s[keep], v[keep], t[keep]
            if st.steps.shape[0] == 0 and _same_kinds(s, v, t):
                # (a rank's first batch: its arrays as they are, as a concatenation onto the
                # empty ones would copy them; nothing writes them in place)
                st.steps, st.values, st.times = s, v, t
            else:
                st.steps = np.concatenate([st.steps, s])
                st.values = np.concatenate([st.values, v])
                st.times = np.concatenate([st.times, t])
            st.max_step = max(st.max_step, int(got[0][-1]))
        if not self.live:
            return []  # compared at finish(), once every rank's file is in
        live = [s.max_step for s in self.ranks.values() if s.max_step >= 0]
        if len(live) < self.cfg.min_ranks:
            return []
        lead = max(live)
        return self._compare(min(m for m in live if m >= lead - self.cfg.max_lag_steps))

    def finish(self) -> list[Hit]:
        """Compare whatever is left (in a backfill: everything)."""
        live = [s.max_step for s in self.ranks.values() if s.max_step >= 0]
        return self._compare(max(live)) if len(live) >= self.cfg.min_ranks else []

    def _compare(self, limit: int) -> list[Hit]:
        cfg = self.cfg
        if limit <= self.done_step:
            return []
        ranks = sorted(r for r, st in self.ranks.items() if st.steps.shape[0])
        hits: list[Hit] = []
        if len(ranks) >= cfg.min_ranks:
            steps = _shared_steps([self.ranks[r].steps for r in ranks], limit)
            if steps is not None:
                # (the usual case: every rank logged the same steps) the columns as they are
                m = steps.shape[0]
                mat = np.column_stack([self.ranks[r].values[:m] for r in ranks])
                tim = np.column_stack([self.ranks[r].times[:m] for r in ranks])
                full = True
                ranks_left: list[int] = []
            else:
                # np.unique: sorted distinct steps (a sort and a diff are cheaper than its
                # hashing)
                steps = np.sort(np.concatenate([self.ranks[r].steps for r in ranks]))
                steps = steps[: np.searchsorted(steps, limit, side="right")]
                if steps.shape[0] > 1:
                    steps = steps[np.concatenate(([True], steps[1:] != steps[:-1]))]
                mat = np.full((steps.shape[0], len(ranks)), np.nan)
                tim = np.full_like(mat, np.nan)
                full = True
                ranks_left = ranks
            for j, r in enumerate(ranks_left):
                st = self.ranks[r]
                # the usual case: the rank logged each step once (live, a rank ahead holds
                # steps past the limit too)
                m = st.steps.shape[0]
                if m > steps.shape[0]:
                    m = int(np.searchsorted(st.steps, limit, side="right"))
                if m == steps.shape[0] and np.array_equal(st.steps[:m], steps):
                    mat[:, j] = st.values[:m]
                    tim[:, j] = st.times[:m]
                    continue
                full = False
                idx = np.minimum(np.searchsorted(st.steps, steps), st.steps.shape[0] - 1)
                have = st.steps[idx] == steps  # first occurrence of each step the rank has
                mat[have, j] = st.values[idx[have]]
                tim[have, j] = st.times[idx[have]]
            # each rank against the median of the others, from one sort of the matrix
            if full:  # (no step missing: every value has them all, and no ranking is needed)
                meds = median_of_others_full(mat)
                enough = None  # (every value is compared: len(ranks) >= min_ranks)
            else:
                meds, n_others = nan_median_of_others(mat)
                enough = ~np.isnan(mat) & (n_others >= cfg.min_ranks - 1)
            for j, r in enumerate(ranks):
                if enough is None:
                    at: slice | np.ndarray = slice(None)
                else:
                    at = enough[:, j]
                    if not at.any():
                        continue
                med = meds[at, j]
                mine = mat[at, j]
                hits.extend(self._episodes(r, self.ranks[r], steps[at], mine / med, mine, med,
                                           tim[at, j], len(ranks)))
        for st in self.ranks.values():
            keep = st.steps > limit
            st.steps, st.values, st.times = st.steps[keep], st.values[keep], st.times[keep]
        self.done_step = limit
        return sorted(hits, key=lambda h: (h.alert.step, h.alert.message))

    def _episodes(self, rank: int, st: _RankState, steps: np.ndarray, ratio: np.ndarray,
                  mine: np.ndarray, med: np.ndarray, times: np.ndarray, n_ranks: int) -> list[Hit]:
        cfg = self.cfg
        hits: list[Hit] = []
        slow = ratio >= cfg.ratio
        if not slow.any() and not st.active and st.run == 0:
            return hits
        # runs of slow (or normal) compared steps, each in one step: the state machine below
        # is the per-step one (a run reaching `sustain` fires once; `rearm_points` normal
        # steps re-arm), taken a run at a time
        n = slow.shape[0]
        cuts = ((slow[1:] != slow[:-1]).nonzero()[0] + 1).tolist()
        starts = [0, *cuts]
        for a, b, sl in zip(starts, [*cuts, n], slow[starts].tolist()):
            if not sl:
                st.run = 0
                st.quiet += b - a
                if st.active and st.quiet >= cfg.rearm_points:
                    st.active = False
                continue
            if st.run == 0:
                st.run_start = int(steps[a])
            st.quiet = 0
            before = st.run
            st.run += b - a
            if not st.active and st.run >= cfg.sustain:
                i = a + max(0, cfg.sustain - before - 1)
                end_run, st.run = st.run, before + i - a + 1  # the message tells the run then
                st.active = True
                hits.append(self._hit(rank, st, int(steps[i]), float(times[i]),
                                      float(ratio[i]), float(mine[i]), float(med[i]), n_ranks))
                st.run = end_run
        return hits

    def _hit(self, rank: int, st: _RankState, step: int, time: float, ratio: float, mine: float,
             med: float, n_ranks: int) -> Hit:
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
            message=f"Rank {rank} is a straggler: {what} ({mine_s} vs {med_s}) for {st.run} steps "
                    f"since step {st.run_start}.",
            evidence={"rank": rank, "ratio": r6(ratio), "rank_value": r6(mine),
                      "others_median": r6(med), "ranks": n_ranks, "steps": st.run,
                      "since_step": st.run_start},
            causes=_CAUSES,
            fixes=((f"On rank {rank}'s node: nvidia-smi -q -d PERFORMANCE,CLOCK (throttling) and "
                   "check for other processes"),
                   "Balance the work: bucket samples by length, drop_last=True",
                   "Compare data-loading time across ranks"),
        )
