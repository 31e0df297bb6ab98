"""``state_detach`` / ``memory_growth`` when memory and step time are logged at different rates.

A memory window reads the step time over its *step* span, and a step-time window reads the
memory over its own: memory logged every 10 steps makes a 200-point memory window read ~2,000
step times. Live, the tracks carry only a few hundred points between frames, so each must hold
what the other's windows can still read, or the live alerts differ from the file read whole
(and they did: memory_growth live where the file said state_detach). These tests feed the file
whole and in reads of 1, 7 and 64 lines and want the same alerts, field for field; and check the
tracks against a reference that keeps every point, and that what they hold stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from test_rules_data import parse_live

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.memory_growth import GrowthAnalysis, StateDetachRule
from trainwatch.rules.detectors.trend_track import TrendTrack
from trainwatch.rules.engine.base import Points

GROWTH_RULES = ("state_detach", "memory_growth")


def _ramp_run(seed: int, n: int, start: int,
              fields: list[tuple[str, int, float, float, float]]) -> bytes:
    """Steps 1..n; each of ``fields`` = (name, every, level, rise, sd) logged every ``every``
    steps at ``level * (1 + rise * ramp)`` plus noise, the ramp going from 0 at ``start`` to 1 at
    the end (values drawn in the order of ``fields``)."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(1, n + 1):
        ramp = max(0, s - start) / (n - start)
        vals = [f'"step":{s}', f'"time":{s}.0']
        for name, every, level, rise, sd in fields:
            if s % every == 0:
                vals.append(f'"{name}":{level * (1 + rise * ramp) + rng.normal(0, sd)!r}')
        out.append("{" + ",".join(vals) + "}")
    return ("\n".join(out) + "\n").encode()


def _sparse_memory_run() -> bytes:
    """Memory every 10 steps, step time every step; both ramp from step 500 (a detach bug)."""
    return _ramp_run(0, 3000, 500, [("loss", 1, 2.0, 0.0, 0.01), ("step_time", 1, 0.5, 1.0, 0.04),
                                    ("memory", 10, 1000.0, 0.3, 0.5)])


def _sparse_time_run() -> bytes:
    """Step time every 20 steps, memory every step; both ramp from step 1000."""
    return _ramp_run(1, 6000, 1000, [("loss", 1, 2.0, 0.0, 0.01), ("memory", 1, 1000.0, 0.2, 2.0),
                                     ("step_time", 20, 0.5, 1.0, 0.002)])


def _rare_memory_run() -> bytes:
    """Memory every 40 steps: a 200-point memory window spans 8,000 step times, more than a
    window reads (GrowthAnalysis.span_cap: 3,200), so the cap decides what is read."""
    return _ramp_run(2, 12000, 2000, [("step_time", 1, 0.5, 1.0, 0.02),
                                      ("memory", 40, 1000.0, 0.3, 0.5)])


def _analysis(e: RuleEngine) -> GrowthAnalysis:
    return next(r.analysis for r in e._rules if isinstance(r, StateDetachRule))


def _alerts(data: bytes, lines: int | None, sizes: list[tuple[int, int]] | None = None
            ) -> list[tuple[object, ...]]:
    """The growth alerts, every field, of ``data`` read whole (``lines`` None) or live in reads
    of ``lines`` lines; ``sizes``: the points both tracks hold after each frame, appended."""
    e = RuleEngine(load_rules_config(), live=lines is not None)
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    rows = data.splitlines(keepends=True)
    k = lines or len(rows)
    analysis = _analysis(e)
    for i in range(0, len(rows), k):
        e.feed(p.parse(b"".join(rows[i:i + k]), i + 1))
        if sizes is not None:
            sizes.append((analysis.time_track._n_held, analysis.mem_track._n_held))
    e.finish(now=1e9)
    return [(a.rule, a.step, a.severity, a.metric, a.message, sorted(a.evidence.items()))
            for a in e.alerts if a.rule in GROWTH_RULES]


@pytest.mark.parametrize(("make", "step"), [(_sparse_memory_run, 2500), (_sparse_time_run, 1400),
                                            (_rare_memory_run, None)])
def test_alerts_do_not_depend_on_the_reads_when_rates_differ(make: Callable[[], bytes],
                                                             step: int | None) -> None:
    data = make()
    whole = _alerts(data, None)
    # (the joint ramp is found: a test of nothing would pass on no alert at all)
    assert [a[0] for a in whole] == ["state_detach"], whole
    if step is not None:
        assert whole[0][1] == step
    for lines in (1, 7, 64):
        assert _alerts(data, lines) == whole, lines


def test_what_the_tracks_hold_stays_bounded_live() -> None:
    # memory every 40 steps: the step time a memory window spans (8,000 points) is more than it
    # reads; one-line reads hold at most two caps and a frame however long the run
    sizes: list[tuple[int, int]] = []
    _alerts(_rare_memory_run(), 1, sizes)
    cap = _analysis(RuleEngine(load_rules_config(), live=True)).span_cap
    held_t = max(t for t, _ in sizes)
    assert cap < held_t <= 2 * cap + 1, (held_t, cap)  # (a cap's worth is read: it is held)
    assert max(m for _, m in sizes) <= 2 * cap + 1
    # and a long flat run with memory on one record in three stays flat after its first windows
    sizes = []
    rng = np.random.default_rng(3)
    recs = [f'{{"step":{s},"time":{s}.0,"step_time":{1.0 + rng.normal(0, 0.01)!r}'
            + (f',"memory":{1000.0 + rng.normal(0, 0.5)!r}' if s % 3 == 0 else "") + "}"
            for s in range(1, 20001)]
    _alerts(("\n".join(recs) + "\n").encode(), 1, sizes)
    # (the step time: the ~600 steps of 200 memory points and a frame; the memory: a window and
    # a frame)
    later = sizes[len(sizes) // 4:]
    assert max(t for t, _ in later) <= 3 * 200 + 1 and max(m for _, m in later) <= 200 + 1


# ------------------------------------------------------------------ the tracks against a reference
def _frames(seed: int, n: int) -> list[tuple[Points, Points]]:
    """n records (steps rising by 0 to 2: some repeat) in frames of 0 to 30; the step time on
    some records, the memory on others, at rates that change along the run."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 3, n)) + 1
    pos = np.arange(n) * 2 + 5
    phase = (np.arange(n) // 300) % 3
    has_t = rng.random(n) < np.array([0.9, 0.05, 0.5])[phase]
    has_m = rng.random(n) < np.array([0.05, 0.9, 0.5])[phase]
    vals = rng.normal(100.0, 1.0, n)
    out, i = [], 0
    while i < n:
        k = int(rng.choice([0, 1, 2, 7, 30]))
        sl = np.arange(i, min(n, i + k))
        pair = tuple(Points(name, steps[sl[h[sl]]], vals[sl[h[sl]]], steps[sl[h[sl]]] * 0.5,
                            pos[sl[h[sl]]]) for name, h in (("t", has_t), ("m", has_m)))
        out.append(pair)  # type: ignore[arg-type]
        i += k
    return out


def _reference_held(steps: list[int], keep: int, cap: int, since: float) -> int:
    """How many of the points so far a window may read: the last keep, and those at step
    ``since`` or later (up to cap)."""
    r = sum(1 for s in steps if s >= since)
    return min(len(steps), max(keep, min(cap, r)))


@pytest.mark.parametrize("seed", range(4))
def test_each_track_holds_what_the_other_windows_read(seed: int) -> None:
    keep, cap, w_t, w_m = 20, 90, 8, 20
    tt = TrendTrack(keep, ranged=False, window=w_t, cap=cap)
    mt = TrendTrack(keep, window=w_m, cap=cap)
    tt.read_by, mt.read_by = mt, tt
    seen: dict[str, list[int]] = {"t": [], "m": []}
    vals: dict[str, list[float]] = {"t": [], "m": []}
    rng = np.random.default_rng(seed + 100)
    for t_pts, m_pts in _frames(seed, 3000):
        def reach(name: str, window: int, own: str) -> float:
            s = seen[name]
            if not s:  # (the other's next point comes no earlier than this series' last step)
                return float(seen[own][-1]) if seen[own] else -math.inf
            return float(s[max(0, len(s) - (window - 1))])
        t_since, m_since = reach("m", w_m, "t"), reach("t", w_t, "m")
        assert (tt.from_step(), mt.from_step()) == (t_since, m_since)
        if rng.random() < 0.5:
            m_from = mt.held_from()  # (as the analysis asks it: before the other track moves)
            for track, pts, name, since, frm in ((tt, t_pts, "t", t_since, None),
                                                 (mt, m_pts, "m", m_since, m_from)):
                p = track.push(pts, frm)
                n_old = _reference_held(seen[name], keep, cap, since)
                assert (p.n_old, p.c0) == (n_old, len(seen[name]))
                lo = len(seen[name]) - n_old
                assert p.steps.tolist() == seen[name][lo:] + pts.steps.tolist()
                assert p.values.tolist() == vals[name][lo:] + pts.values.tolist()
        else:
            tt.advance(t_pts)
            mt.advance(m_pts)
        for name, pts in (("t", t_pts), ("m", m_pts)):
            seen[name] += pts.steps.tolist()
            vals[name] += pts.values.tolist()
        # bounded: a cap and the oldest frame (at most a push: a cap and a frame) beyond it
        assert tt._n_held <= 2 * cap + 30 and mt._n_held <= 2 * cap + 30


def test_a_read_span_is_cut_to_its_last_cap_points() -> None:
    from trainwatch.rules.detectors.growth import span_window

    t = TrendTrack(10).push(Points("t", np.arange(1, 101), np.arange(100.0), np.zeros(100),
                                   np.arange(100)))
    m = TrendTrack(10).push(Points("m", np.arange(10, 101, 10), np.ones(10), np.zeros(10),
                                   np.arange(9, 100, 10)))
    ev = m.evals(5, 1, 0)
    x, _ = span_window(ev, 0, t)  # memory at steps 10..50: step times 10..50
    assert x.tolist() == list(range(10, 51))
    x, y = span_window(ev, 0, t, cap=7)
    assert x.tolist() == list(range(44, 51)) and y.tolist() == [float(v) for v in range(43, 50)]


def test_a_track_window_must_fit_its_keep() -> None:
    with pytest.raises(ValueError, match="window"):
        TrendTrack(10, window=11)


def test_random_reads_give_the_whole_files_alerts() -> None:
    data = _sparse_memory_run()
    whole = _alerts(data, None)
    e = RuleEngine(load_rules_config(), live=True)
    for b in parse_live(data, seed=5, max_lines=40):
        e.feed(b)
    e.finish(now=1e9)
    assert [(a.rule, a.step, a.severity, a.metric, a.message, sorted(a.evidence.items()))
            for a in e.alerts if a.rule in GROWTH_RULES] == whole
