"""``state_detach`` / ``memory_growth`` when memory and step time are logged at different rates.

A memory window reads the step time over its *step* span, and a step-time window reads the
memory over its own: memory logged every 10 steps makes a 200-point memory window read ~2,000
step times. Live, the rules carry only the last points between frames, so they must hold what
the windows can still read, or the live alerts differ from the file read whole (and they did:
memory_growth live where the file said state_detach). These tests feed the file whole and in
reads of 1, 7 and 64 lines and want the same alerts, field for field; and check the tails
against a reference that keeps every point, and that what they hold stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_rules_data import parse_live

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.memory_growth import MemoryGrowthRule
from trainwatch.rules.builtin.state_detach import StateDetachRule
from trainwatch.rules.detectors.growth import Tail, span_window
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
    window reads (the span cap: 3,200), so the cap decides what is read."""
    return _ramp_run(2, 12000, 2000, [("step_time", 1, 0.5, 1.0, 0.02),
                                      ("memory", 40, 1000.0, 0.3, 0.5)])


def _held(e: RuleEngine) -> tuple[int, int]:
    """The most step-time and memory points either growth rule holds between frames."""
    rules = [r for r in e._rules if isinstance(r, (StateDetachRule, MemoryGrowthRule))]
    return max(r.time.n for r in rules), max(r.memory.n for r in rules)


def _alerts(data: bytes, lines: int | None, sizes: list[tuple[int, int]] | None = None
            ) -> list[tuple[object, ...]]:
    """The growth alerts, every field, of ``data`` read whole (``lines`` None) or live in reads
    of ``lines`` lines; ``sizes``: the points both tracks hold after each frame, appended."""
    e = RuleEngine(load_rules_config(), live=lines is not None)
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    rows = data.splitlines(keepends=True)
    k = lines or len(rows)
    for i in range(0, len(rows), k):
        e.feed(p.parse(b"".join(rows[i:i + k]), i + 1))
        if sizes is not None:
            sizes.append(_held(e))
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


def test_what_the_rules_hold_stays_bounded_live() -> None:
    # memory every 40 steps: the step time a memory window spans (8,000 points) is more than it
    # reads; one-line reads hold the last cap's worth (what a window reads) however long the run
    sizes: list[tuple[int, int]] = []
    _alerts(_rare_memory_run(), 1, sizes)
    cap = next(r for r in RuleEngine(load_rules_config())._rules
               if isinstance(r, StateDetachRule)).cap
    assert max(t for t, _ in sizes) == cap  # (a cap's worth is read: it is held)
    assert max(m for _, m in sizes) <= cap


# ------------------------------------------------------------------ the tails against a reference
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


@pytest.mark.parametrize("seed", range(4))
def test_a_tail_pushes_the_last_points_then_the_frames(seed: int) -> None:
    # after every frame: the points pushed are the last ``keep`` seen before it and the frame's
    keep = 20
    tails = {"t": Tail(keep), "m": Tail(keep)}
    seen: dict[str, list[tuple[int, float, int]]] = {"t": [], "m": []}
    for pair in _frames(seed, 3000):
        for name, pts in zip("tm", pair):
            p = tails[name].push(pts)
            old = seen[name][max(0, len(seen[name]) - keep):]
            new = list(zip(pts.steps.tolist(), pts.values.tolist(), pts.pos.tolist()))
            assert (p.n_old, p.c0) == (len(old), len(seen[name]))
            assert list(zip(p.steps.tolist(), p.values.tolist(), p.pos.tolist())) == old + new
            seen[name] += new


def test_a_read_span_is_cut_to_its_last_cap_points() -> None:
    t = Tail(10).push(Points("t", np.arange(1, 101), np.arange(100.0), np.zeros(100),
                             np.arange(100)))
    m = Tail(10).push(Points("m", np.arange(10, 101, 10), np.ones(10), np.zeros(10),
                             np.arange(9, 100, 10)))
    ev = m.evals(5, 1, 0)
    x, _ = span_window(ev, 0, t, cap=1000)  # memory at steps 10..50: step times 10..50
    assert x.tolist() == list(range(10, 51))
    x, y = span_window(ev, 0, t, cap=7)
    assert x.tolist() == list(range(44, 51)) and y.tolist() == [float(v) for v in range(43, 50)]


def test_random_reads_give_the_whole_files_alerts() -> None:
    data = _sparse_memory_run()
    whole = _alerts(data, None)
    e = RuleEngine(load_rules_config(), live=True)
    for b in parse_live(data, seed=5, max_lines=40):
        e.feed(b)
    e.finish(now=1e9)
    assert [(a.rule, a.step, a.severity, a.metric, a.message, sorted(a.evidence.items()))
            for a in e.alerts if a.rule in GROWTH_RULES] == whole
