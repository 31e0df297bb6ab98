"""The growth detectors against plain references (seeded data): the quick estimate, a series'
windows pushed frame by frame, their trends and the episodes they start, compared after every
frame with a loop over the whole series so far."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from trainwatch.rules.detectors.growth import (
    Episodes,
    Tail,
    quick_growth,
    span_growth,
    theil_sen,
)
from trainwatch.rules.engine.base import Points


def _spearman(x: list[float], y: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:  # average ranks of ties, 1-based
        return [sum(1 for w in v if w < a) + (sum(1 for w in v if w == a) + 1) / 2 for a in v]
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den > 0 else 0.0


def _trend(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """Theil-Sen slope (pairs with distinct x), Spearman rho, slope x span / |median level|."""
    slopes = [(y[j] - y[i]) / (x[j] - x[i])
              for i, j in itertools.combinations(range(len(x)), 2) if x[j] != x[i]]
    slope = float(np.median(slopes))
    level = abs(float(np.median(y)))
    return slope, _spearman(x, y), slope * (x[-1] - x[0]) / level


@pytest.mark.parametrize("n", [2, 3, 30, 31, 200, 333])
def test_theil_sen_is_the_median_of_every_pairs_slope(n: int) -> None:
    rng = np.random.default_rng(n)
    for rep in range(6):
        # steps that repeat (those pairs are left out) or not, values with ties or not
        x = np.cumsum(rng.integers(0 if rep % 2 else 1, 4, n)).astype(float) + 7e9 * (rep == 5)
        y = np.round(rng.normal(1.0, 0.1, n), 1 if rep % 3 == 0 else 9)
        slopes = [(y[j] - y[i]) / (x[j] - x[i])
                  for i, j in itertools.combinations(range(n), 2) if x[j] != x[i]]
        want = float(np.median(slopes)) + 0.0 if slopes else 0.0
        assert theil_sen(x, y) == want


def _quick(v: np.ndarray, first: int, last: int, q: int) -> float:
    a, b = float(np.median(v[first:first + q])), float(np.median(v[last:last + q]))
    return b / a - 1 if a > 0 else (np.inf if b > a else 0.0)


@pytest.mark.parametrize("q", [2, 6, 7, 40])
def test_quick_growth_is_the_ratio_of_the_two_medians(q: int) -> None:
    rng = np.random.default_rng(q)
    v = rng.normal(0.5, 1.0, 600)  # some levels at or below 0
    first = np.sort(rng.integers(0, 500 - 3 * q, 60))
    last = first + q + rng.integers(0, 2 * q, 60)
    want = [_quick(v, f, la, q) for f, la in zip(first.tolist(), last.tolist())]
    assert quick_growth(v, first, last, q).tolist() == pytest.approx(want, rel=1e-12)


def _series(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps rising by 1 or 2 (some repeat), a flat level, then a rise, then flat again."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 3, n)) + 1
    k = np.arange(n)
    level = 100.0 * (1 + 0.002 * np.clip(k - n // 3, 0, n // 3))
    return steps, np.round(level * rng.lognormal(0, 0.003, n), 2)  # (rounded: ties)


@pytest.mark.parametrize("seed", range(3))
def test_windows_and_episodes_pushed_frame_by_frame_match_a_plain_loop(seed: int) -> None:
    window, every, warmup, min_rho, min_growth = 40, 3, 7, 0.8, 0.02
    steps, values = _series(seed, 900)
    rng = np.random.default_rng(seed + 50)
    tail, episodes = Tail(window), Episodes(min_rho, min_growth)
    active, i, n_starts = False, 0, 0
    while i < steps.shape[0]:
        j = min(steps.shape[0], i + int(rng.choice([0, 1, 5, 33, 200])))
        sl = slice(i, j)
        ev = tail.push(Points("m", steps[sl], values[sl], steps[sl] * 1.0,
                              np.arange(i, j) * 2)).evals(window, every, warmup)
        got = list(episodes.starts(ev))
        # the reference: every point c (1-based) of this frame that ends a window, in a loop
        want, ends = [], []
        for c in range(i + 1, j + 1):
            if c < warmup + window or (c - warmup - window) % every:
                continue
            ends.append(c - 1)
            lo = c - window
            q = max(2, window // 5)
            if _quick(values, lo, c - q, q) < min_growth / 2:
                active = False
            elif not active:
                tr = _trend(steps[lo:c].astype(float).tolist(), values[lo:c].tolist())
                if tr[1] >= min_rho and tr[2] >= min_growth:
                    active = True
                    want.append((c - 1, tr))
        assert [int(ev.pos[e]) // 2 for e in ev.end] == ends
        assert [int(ev.pos[ev.end[k]]) // 2 for k, _tr in got] == [c for c, _ in want]
        for (_k, tr), (_c, ref) in zip(got, want):
            assert tr == pytest.approx(ref, rel=1e-9)
        assert episodes.active == active
        n_starts += len(want)
        i = j
    assert n_starts >= 1  # (the rise starts an episode)


def test_span_growth_reads_the_other_series_over_the_windows_steps() -> None:
    rng = np.random.default_rng(4)
    t_steps = np.arange(1, 401)
    m_steps = np.arange(4, 401, 4)  # memory every 4 steps, on the same records
    t = Tail(400).push(Points("t", t_steps, rng.lognormal(0, 0.05, 400), t_steps * 1.0,
                              t_steps * 10))
    m = Tail(400).push(Points("m", m_steps, 1000 + np.arange(100.0) + rng.normal(0, 1, 100),
                              m_steps * 1.0, m_steps * 10))
    ev = t.evals(30, 5, 10)
    mask = np.arange(ev.end.shape[0]) % 2 == 0
    got = span_growth(ev, m, mask, cap=6)
    for k, e in enumerate(ev.end.tolist()):
        first, last = t_steps[e - 29], t_steps[e]
        inside = np.flatnonzero((m_steps >= first) & (m_steps <= last))[-6:]  # (the cap)
        if not mask[k] or inside.shape[0] < 6:
            assert np.isnan(got[k])
        else:
            v = m.values[inside]
            assert got[k] == pytest.approx(_quick(v, 0, v.shape[0] - 6, 6), rel=1e-12)
