"""rank_straggler's "median of the other ranks", taken for every rank from one sort, against the
plain reference (delete the rank's column and take the NaN-median of what is left), and the whole
rule against a per-step reference."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from trainwatch.rules.builtin.rank_straggler import median_of_others


def _reference(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each value of a ranks x steps array: the median of the other values logged at its
    step (NaN: not logged), and how many there are, one value at a time."""
    meds = np.full(a.shape, np.nan)
    counts = np.zeros(a.shape, dtype=np.int64)
    for j, i in np.ndindex(*a.shape):
        others = [float(x) for q, x in enumerate(a[:, i]) if q != j and not np.isnan(x)]
        counts[j, i] = len(others)
        if others and not np.isnan(a[j, i]):
            meds[j, i] = statistics.median(others)
    return meds, counts


def test_median_of_the_others_equals_leaving_each_rank_out() -> None:
    rng = np.random.default_rng(11)
    for k in (2, 3, 4, 5, 8, 9):
        for missing in (0.25, 0.0):  # ranks missing steps, or every rank logging every step
            a = np.round(rng.lognormal(0, 0.3, (k, 400)), 1)  # rounded: ties are common
            a[rng.random(a.shape) < 0.01] = np.inf  # (1 / a subnormal throughput)
            a[rng.random(a.shape) < missing] = np.nan
            if missing:
                a[:, :5] = np.nan  # some steps logged by no rank
                a[1:, 5:10] = np.nan  # one value alone: the others of rank 0 are none
            got, n = median_of_others(a)
            ref, n_ref = _reference(a)
            assert np.array_equal(n, n_ref)
            logged = ~np.isnan(a)  # (a value not logged is not compared)
            assert got[logged].tobytes() == ref[logged].tobytes(), (k, missing)
            assert np.isnan(ref[logged]).any() == bool(missing)


def test_a_value_is_compared_with_the_others_only() -> None:
    a = np.array([[1.0, 1.0, 1.0, 10.0], [1.0, 2.0, np.nan, 3.0]]).T
    got, n = median_of_others(a)
    assert got[:, 0].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert got[:, 1].tolist() == [2.5, 2.0, 2.0, 1.5]  # (not logged: the median of its step)
    assert n.T.tolist() == [[3, 3, 3, 3], [2, 2, 3, 2]]


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
