"""``stalled_stream`` against its definition, record by record: its end/restart bookkeeping
(:func:`restarts`) on random frames of metric records and events, and the whole rule (alerts,
gap history, end-of-file silence) after every frame, on streams cut into frames of any size."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from trainwatch.rules import load_rules_config
from trainwatch.rules.builtin.stalled_stream import STARTS, StalledStreamRule, restarts
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
        elif name in STARTS:
            valid[i] = False
            finished = False
            announced = True
    return finished, announced


@pytest.mark.parametrize("seed", range(4))
def test_ends_follows_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = [*CFG.end_events, *STARTS, "eval", "checkpoint"]
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
        cleared, fin, started = restarts(frame, CFG.end_events, finished)  # type: ignore[arg-type]
        valid[cleared] = False
        assert valid.tolist() == want.tolist()
        assert (fin, started) == (want_fin, want_ann)


def _frames(rng: np.random.Generator) -> list[SimpleNamespace]:
    """A stream cut into frames: regular gaps with stalls, a few events (ends, starts, others),
    now and then a clock that steps back, a NaN or an inf time."""
    kinds = [*CFG.end_events, *STARTS, "eval"]
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
    return _cut(t, is_event, names, cuts)


def _live_frames(rng: np.random.Generator) -> list[SimpleNamespace]:
    """A long stream read a few records at a time (as live reads cut it): regular gaps, rare
    stalls, rare odd times (a NaN, a clock stepping back, an inf), now and then an event."""
    kinds = ["eval", "checkpoint", *CFG.end_events, *STARTS]
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
    cuts = [0]
    while cuts[-1] < n:
        cuts.append(min(n, cuts[-1] + int(rng.integers(1, 20))))
    return _cut(t, is_event, names, cuts)


def _cut(t: np.ndarray, is_event: np.ndarray, names: list[str], cuts: list[int]
         ) -> list[SimpleNamespace]:
    """Frames of the records between consecutive ``cuts`` (times ``t``, events named
    ``names``): step ``10 i`` and position ``3 i`` for record ``i``."""
    out = []
    ev_rows = np.flatnonzero(is_event)
    for a, b in itertools.pairwise(cuts):
        lo, hi = int(ev_rows.searchsorted(a)), int(ev_rows.searchsorted(b))
        out.append(SimpleNamespace(
            rec_times=t[a:b], rec_steps=np.arange(a, b) * 10, rec_pos=np.arange(a, b) * 3,
            rec_is_event=is_event[a:b], events=tuple(SimpleNamespace(name=x) for x in names[lo:hi])))
    return out


class StreamReference:
    """The rule's gaps a record at a time: the gap into a record is valid when finite, >= 0 and
    no restart (:func:`_reference`); a valid gap over ``min_seconds`` and over
    max(min_seconds, gap_factor x the median of the last ``gap_window`` valid gaps) fires, once
    per silence."""

    def __init__(self) -> None:
        self.last = float("nan")
        self.last_step = 0
        self.gaps: list[float] = []
        self.finished = False
        self.reported_for: float | None = None

    def limit(self) -> float:
        w = self.gaps[-CFG.gap_window:]
        return max(CFG.min_seconds, CFG.gap_factor * float(np.median(w))) if w else CFG.min_seconds

    def feed(self, frame: SimpleNamespace) -> list[tuple[int, int, float]]:
        """(record, step before the gap, gap) of each alert."""
        valid = np.ones(frame.rec_times.shape[0], dtype=bool)
        names = [ev.name for ev in frame.events]
        self.finished, _ann = _reference(self.finished, frame.rec_is_event, names, valid)
        out = []
        for i, t in enumerate(frame.rec_times.tolist()):
            gap = t - self.last
            if valid[i] and np.isfinite(gap) and gap >= 0:
                if (gap > CFG.min_seconds and gap > self.limit()
                        and self.reported_for != self.last):
                    self.reported_for = self.last
                    out.append((int(frame.rec_pos[i]), self.last_step, gap))
                self.gaps.append(gap)
            self.last, self.last_step = t, int(frame.rec_steps[i])
        return out


def _check(frames: list[SimpleNamespace], rng: np.random.Generator) -> int:
    """Feed the frames to the rule and the reference: the same alerts and gap history after every
    frame, the same silence on live ticks and at the end of the file. Returns the alerts."""
    rule, ref = StalledStreamRule(CFG, Context()), StreamReference()
    rule.announced = True  # (a writer that promised a run_end: a silence is a stall)
    fired = 0
    for k, frame in enumerate(frames):
        got = [(h.pos, h.alert.step, h.alert.evidence["silence_s"])
               for h in rule.update(frame)]  # type: ignore[arg-type]
        assert got == [(p, s, round(g, 3)) for p, s, g in ref.feed(frame)]
        assert rule.gaps.tolist() == ref.gaps[-CFG.gap_window:]
        assert rule.limit(rule.gaps)[0] == ref.limit()
        fired += len(got)
        if k % 13 == 12 and np.isfinite(ref.last):  # a live tick
            now = ref.last + float(rng.choice([5.0, 100.0, 1000.0]))
            silent = (not ref.finished and ref.reported_for != ref.last
                      and now - ref.last > ref.limit())
            assert len(rule.tick(now)) == int(silent)
            if silent:
                ref.reported_for = ref.last
    # (a last record without a finite time is a silence of unknown length: told, as it was)
    silent = not ref.finished and ref.reported_for != ref.last and not 1e7 - ref.last <= ref.limit()
    assert len(rule.finish(1e7)) == int(silent)
    return fired


@pytest.mark.parametrize("seed", range(4))
def test_the_rule_follows_its_definition_record_by_record(seed: int) -> None:
    rng = np.random.default_rng([seed, 11])
    fired = 0
    for _ in range(300):
        fired += _check(_frames(rng), rng)
    assert fired >= 50


@pytest.mark.parametrize("seed", range(3))
def test_small_live_frames_follow_the_definition(seed: int) -> None:
    rng = np.random.default_rng([seed, 12])
    fired = 0
    for _ in range(40):
        fired += _check(_live_frames(rng), rng)
    assert fired >= 20
