"""rank_straggler's "median of the other ranks", taken for every rank from one sort, against the
plain reference: delete the rank's column and take the NaN-median of what is left."""

from __future__ import annotations

import numpy as np
import pytest

from trainwatch.rules.builtin.rank_straggler import _shared_steps, median_of_others_full
from trainwatch.rules.detectors.stats import nan_median_of_others, nan_median_rows


def _reference(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    meds = np.empty(a.shape)
    counts = np.empty(a.shape, dtype=np.int64)
    for j in range(a.shape[1]):
        others = np.delete(a, j, axis=1)
        counts[:, j] = np.count_nonzero(~np.isnan(others), axis=1)
        meds[:, j] = nan_median_rows(others)
    return meds, counts


def test_median_of_the_others_equals_deleting_each_column() -> None:
    rng = np.random.default_rng(11)
    for k in (2, 3, 4, 5, 8, 9):
        a = np.round(rng.lognormal(0, 0.3, (400, k)), 1)  # rounded: ties are common
        a[rng.random(a.shape) < 0.25] = np.nan  # ranks missing steps, some rows all NaN
        a[:5] = np.nan
        a[5:10, 1:] = np.nan  # one value alone: the others of column 0 are none
        got, n = nan_median_of_others(a)
        ref, n_ref = _reference(a)
        assert np.array_equal(n, n_ref)
        assert np.array_equal(got, ref, equal_nan=True), k
        assert np.isnan(got).any() and not np.isnan(got).all()


def test_median_of_the_others_without_missing_values_needs_no_ranking() -> None:
    # every rank logged every step: the same numbers, bit for bit, without the ranking
    rng = np.random.default_rng(12)
    for k in range(2, 10):
        for scale in (1.0, 0.3):  # rounded: many ties; less rounded: few
            a = np.round(rng.lognormal(0, scale, (500, k)), 1) + 0.1
            a[rng.random(a.shape) < 0.01] = np.inf  # (1 / a subnormal throughput)
            got = median_of_others_full(a)
            ref, _n = nan_median_of_others(a)
            assert got.tobytes() == ref.tobytes(), (k, scale)


def test_shared_steps_are_the_sorted_distinct_steps_of_all_ranks() -> None:
    # every rank with the same steps: those up to the limit, with no sort; anything else (a
    # rank skipping or repeating a step, or ahead of the others) is left to the sort (None)
    rng = np.random.default_rng(13)
    base = np.arange(1, 501, dtype=np.int64)
    skipped = base[rng.random(500) > 0.1]
    repeated = np.sort(np.concatenate([base, base[40:42]]))
    for limit in (0, 1, 250, 499, 500, 10_000):
        got = _shared_steps([base, base.copy(), base.copy()], limit)
        ref = np.unique(np.concatenate([base] * 3))
        assert got is not None and got.tolist() == ref[ref <= limit].tolist(), limit
        assert _shared_steps([base, skipped], limit) is None
        assert _shared_steps([repeated, repeated.copy()], limit) is None
        assert _shared_steps([base, base[:-1]], limit) is None


def test_a_value_is_compared_with_the_others_only() -> None:
    a = np.array([[1.0, 1.0, 1.0, 10.0], [1.0, 2.0, np.nan, 3.0]])
    got, n = nan_median_of_others(a)
    assert got[0].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert got[1].tolist() == [2.5, 2.0, 2.0, 1.5]
    assert n.tolist() == [[3, 3, 3, 3], [2, 2, 3, 2]]


def _stream(steps: np.ndarray, dt: np.ndarray) -> bytes:
    t = 1.7e9 + np.cumsum(dt)
    return "".join(f'{{"step":{s},"time":{ti!r},"step_time":{d!r}}}\n'
                   for s, ti, d in zip(steps.tolist(), t.tolist(), dt.tolist())).encode()


def _per_step_reference(cols: dict[int, dict[int, float]], cfg) -> list[tuple[int, int]]:
    """(step, rank) of each alert, step by step: each rank against the median of the others that
    logged the step; the state machine of rank_straggler."""
    state = {r: {"run": 0, "quiet": 0, "active": False} for r in cols}
    fired = []
    for step in sorted(set().union(*cols.values())):
        for r, col in sorted(cols.items()):
            others = [c[step] for q, c in cols.items() if q != r and step in c]
            if step not in col or len(others) < cfg.min_ranks - 1:
                continue
            st = state[r]
            if col[step] / float(np.median(others)) >= cfg.ratio:
                st["run"] += 1
                st["quiet"] = 0
                if st["run"] >= cfg.sustain and not st["active"]:
                    st["active"] = True
                    fired.append((step, r))
            else:
                st["run"] = 0
                st["quiet"] += 1
                if st["active"] and st["quiet"] >= cfg.rearm_points:
                    st["active"] = False
    return sorted(fired)


@pytest.mark.parametrize(("missing", "live"), [(True, False), (False, False), (True, True),
                                             (False, True)])
def test_straggler_matches_a_per_step_reference(missing: bool, live: bool) -> None:
    # ranks that skip or replay steps (missing values in the comparison), or that log them all;
    # whole files (compared at the end), or small reads of each rank in turn (compared as the
    # ranks reach each step: a rank ahead holds steps past the ones compared)
    from test_rules_data import parse_all, parse_live

    from trainwatch.rules import RuleEngine, load_rules_config

    cfg = load_rules_config()
    rng = np.random.default_rng(4)
    checked = 0
    for trial in range(6):
        cols, streams = {}, {}
        for r in range(int(rng.integers(3, 7))):
            steps = np.arange(1, 801)
            if missing:
                steps = steps[rng.random(800) > 0.15]  # this rank skipped some steps
            if r == 1 and missing:
                steps = np.sort(np.concatenate([steps, steps[100:103]]))  # a replayed step
            dt = 0.3 * rng.lognormal(0, 0.05, steps.shape[0])
            if r == trial % 3:
                dt[300:] *= 2.0
            cols[r] = {}
            for s, d in zip(steps.tolist(), dt.tolist()):
                cols[r].setdefault(s, d)  # the first value logged at a step counts
            streams[r] = _stream(steps, dt)
        e = RuleEngine(cfg, live=live)
        if live:
            feeds = {r: parse_live(data, seed=trial * 10 + r, max_lines=30,
                                   source=f"metrics.rank{r}.jsonl")
                     for r, data in streams.items()}
            while any(feeds.values()):
                for r, batches in feeds.items():
                    if batches:
                        e.feed_rank(r, batches.pop(0))
        else:
            for r, data in streams.items():
                for b in parse_all(data, f"metrics.rank{r}.jsonl"):
                    e.feed_rank(r, b)
        e.finish(now=0.0)
        got = sorted((a.step, a.evidence["rank"]) for a in e.alerts)
        ref = _per_step_reference(cols, cfg.rules["rank_straggler"])
        assert got == ref, trial
        checked += len(ref)
    assert checked >= 6
