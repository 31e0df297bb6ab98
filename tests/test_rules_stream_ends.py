"""``stalled_stream``'s end/restart bookkeeping (``_ends``) against its definition, record by
record, on random frames of metric records and events; and its quick path (the few invalid gaps
as a list of rows) against the masked one."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from trainwatch.rules import load_rules_config
from trainwatch.rules.builtin.stalled_stream import _STARTS, StalledStreamRule
from trainwatch.rules.engine.base import Context

CFG = load_rules_config().rules["stalled_stream"]


def _reference(finished: bool, is_event: np.ndarray, names: list[str], valid: np.ndarray
               ) -> tuple[bool, bool]:
    """The definition: ``finished`` after each record is True after an end event, False after a
    metric record or a start event, unchanged after another event; the gap into a record is no
    stall when ``finished`` held before it, nor the gap into a start event. Returns (finished,
    announced)."""
    announced = False
    it = iter(names)
    for i, ev in enumerate(is_event.tolist()):
        if finished:
            valid[i] = False
        name = next(it, "") if ev else None
        if name is None:
            finished = False
        elif name in CFG.end_events:
            finished = True
        elif name in _STARTS:
            valid[i] = False
            finished = False
            announced = True
    return finished, announced


@pytest.mark.parametrize("seed", range(4))
def test_ends_follows_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = [*CFG.end_events, *_STARTS, "eval", "checkpoint"]
    for _ in range(2000):
        n = int(rng.integers(1, 14))
        is_event = rng.random(n) < rng.random()
        n_ev = int(is_event.sum()) - int(rng.integers(0, 2) if is_event.any() else 0)
        names = [str(rng.choice(kinds)) for _ in range(n_ev)]
        frame = SimpleNamespace(rec_is_event=is_event,
                                events=tuple(SimpleNamespace(name=x) for x in names))
        finished = bool(rng.random() < 0.5)
        valid = rng.random(n) < 0.8
        want = valid.copy()
        want_fin, want_ann = _reference(finished, is_event, names, want)
        rule = StalledStreamRule(CFG, Context())
        rule.finished = finished
        cleared: list[int] = []
        rule._ends(frame, cleared)  # type: ignore[arg-type]
        assert cleared == sorted(set(cleared))
        valid[cleared] = False
        assert valid.tolist() == want.tolist()
        assert (rule.finished, rule.announced) == (want_fin, want_ann)


def _frames(rng: np.random.Generator) -> list[SimpleNamespace]:
    """A stream cut into frames: regular gaps with stalls, a few events (ends, starts, others),
    now and then a clock that steps back, a NaN or an inf time."""
    kinds = [*CFG.end_events, *_STARTS, "eval"]
    n = int(rng.integers(1, 400))
    gaps = rng.choice([1.0, 2.0, 3.0], n) + rng.random(n)
    gaps[rng.random(n) < 0.03] = rng.choice([70.0, 200.0, 900.0])
    t = 1000.0 + np.cumsum(gaps)
    odd = rng.random()
    if odd < 0.15:
        t[int(rng.integers(0, n))] -= 50.0
    elif odd < 0.25:
        t[int(rng.integers(0, n))] = np.nan
    elif odd < 0.3:
        t[-1] = np.inf
    is_event = rng.random(n) < rng.choice([0.0, 0.01, 0.05])
    if rng.random() < 0.5:
        is_event[0] = True
    names = [str(rng.choice(kinds)) for _ in range(int(is_event.sum()))]
    cuts = sorted({0, n, *rng.integers(0, n, int(rng.integers(0, 4))).tolist()})
    out = []
    ev_rows = np.flatnonzero(is_event)
    for a, b in itertools.pairwise(cuts):
        lo, hi = int(ev_rows.searchsorted(a)), int(ev_rows.searchsorted(b))
        out.append(SimpleNamespace(
            rec_times=t[a:b], rec_steps=np.arange(a, b) * 10, rec_pos=np.arange(a, b) * 3,
            rec_is_event=is_event[a:b], events=tuple(SimpleNamespace(name=x) for x in names[lo:hi])))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_quick_path_matches_the_masked_one(seed: int) -> None:
    # the same hits and the same gap history, frame after frame
    rng = np.random.default_rng([seed, 11])
    fired = 0
    for _ in range(300):
        frames = _frames(rng)
        rules = [StalledStreamRule(CFG, Context()) for _ in range(2)]
        rules[1].fast = False
        for frame in frames:
            got = [[(h.alert.step, h.alert.message, sorted(h.alert.evidence.items()))
                    for h in r.update(frame)] for r in rules]  # type: ignore[arg-type]
            assert got[0] == got[1]
            assert rules[0].gaps.tolist() == rules[1].gaps.tolist()
            assert (rules[0].finished, rules[0].announced) == (rules[1].finished,
                                                               rules[1].announced)
            fired += len(got[0])
    assert fired >= 50


def _live_frames(rng: np.random.Generator) -> list[SimpleNamespace]:
    """A long stream read a few records at a time (as live reads cut it): regular gaps, rare
    stalls, rare odd times (a NaN, a clock stepping back, an inf), now and then an event."""
    kinds = ["eval", "checkpoint", *CFG.end_events, *_STARTS]
    n = int(rng.integers(300, 1500))
    gaps = 1.0 + 3.0 * rng.random(n)
    gaps[rng.random(n) < 0.005] = rng.choice([70.0, 200.0, 900.0])
    t = 1000.0 + np.cumsum(gaps)
    odd = rng.random(n)
    t[odd < 0.002] = np.nan
    t[(odd >= 0.002) & (odd < 0.004)] -= 30.0
    t[(odd >= 0.004) & (odd < 0.005)] = np.inf
    is_event = rng.random(n) < 0.03
    names = [str(rng.choice(kinds, p=[0.6, 0.25, 0.05, 0.05, 0.05]))
             for _ in range(int(is_event.sum()))]
    ev_rows = np.flatnonzero(is_event)
    out, a = [], 0
    while a < n:
        b = min(n, a + int(rng.integers(1, 20)))
        lo, hi = int(ev_rows.searchsorted(a)), int(ev_rows.searchsorted(b))
        out.append(SimpleNamespace(
            rec_times=t[a:b], rec_steps=np.arange(a, b) * 10, rec_pos=np.arange(a, b) * 3,
            rec_is_event=is_event[a:b], events=tuple(SimpleNamespace(name=x) for x in names[lo:hi])))
        a = b
    return out


@pytest.mark.parametrize("seed", range(3))
def test_quiet_small_frames_match_the_masked_path(seed: int) -> None:
    # small frames that cannot fire only extend a run of record times (folded into the gap
    # history when something reads it): the same hits, history, and end-of-file silence as
    # the masked path, with the history read only now and then (so the run grows and is cut)
    rng = np.random.default_rng([seed, 12])
    fired = 0
    for _ in range(40):
        rules = [StalledStreamRule(CFG, Context()) for _ in range(2)]
        rules[1].fast = False
        for k, frame in enumerate(_live_frames(rng)):
            got = [[(h.pos, h.alert.step, h.alert.message, sorted(h.alert.evidence.items()))
                    for h in r.update(frame)] for r in rules]  # type: ignore[arg-type]
            assert got[0] == got[1]
            fired += len(got[0])
            if k % 13 == 12:  # a live tick: the limit remembered while the history is the same
                now = float(frame.rec_times[-1]) + float(rng.choice([5.0, 100.0, 1000.0]))
                ticked = [[(h.pos, h.alert.message) for h in r.tick(now)] for r in rules]
                assert ticked[0] == ticked[1]
                for r in rules:
                    assert str(r._current_limit()) == str(r._limit(r.gaps))
            if k % 97 == 96:
                assert rules[0].gaps.tolist() == rules[1].gaps.tolist()
        for r in rules:
            r.announced = True  # (finish reports only for a writer that promised a run_end)
        end = [[(h.pos, h.alert.step, h.alert.message) for h in r.finish(1e7)] for r in rules]
        assert end[0] == end[1]
        assert rules[0].gaps.tolist() == rules[1].gaps.tolist()
    assert fired >= 20
