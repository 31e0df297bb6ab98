"""The block-median rules' two paths: runs of quiet blocks taken in one vectorised step must give
the same alerts as the per-block reference, in frames long enough for the vectorised step to run
(:data:`~trainwatch.rules.detectors.blocks.MIN_FAST` blocks or more) and in live-sized ones."""

from __future__ import annotations

import copy
import itertools
import sys
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from test_rules_data import clean, idx, parse_all, parse_live, set_loss, to_jsonl

from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.builtin.divergence import DivergenceRule
from trainwatch.rules.builtin.plateau import PlateauRule
from trainwatch.rules.builtin.throughput_drop import ThroughputDropRule
from trainwatch.rules.detectors.blocks import drive

# bench/ is not a package of the project: make the repository root importable
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.synthetic import clean_run

RULES = (PlateauRule, DivergenceRule, ThroughputDropRule)


def _runs() -> list[bytes]:
    out = []
    for seed in range(4):  # a plateau, a divergence and throughput dips, on clean and noisy losses
        run = clean(9000, ("exp", "heavy", "cosine", "step")[seed], noise=(0.01, 0.06)[seed % 2],
                    seed=40 + seed)
        m = run["mean"][idx(run, 2500)]
        set_loss(run, 2500, m)
        k = np.arange(9000 - idx(run, 6000))
        set_loss(run, 6000, m * 2 ** (k / 600))
        s = run["step"]
        run["throughput"][(s >= 3000) & (s < 4200) & ((s - 3000) % 300 < 90)] *= 0.5
        run["throughput"][s >= 7000] *= 0.6
        out.append(to_jsonl(run))
    return out


def _alerts(batches: list) -> list:
    e = RuleEngine(load_rules_config(), live=False)
    for b in batches:
        e.feed(b)
    return [a for a in e.alerts if a.rule in ("plateau", "divergence", "throughput_drop")]


@pytest.mark.parametrize("reads", ["whole", "live"])
def test_vectorised_runs_match_the_per_block_reference(monkeypatch: pytest.MonkeyPatch,
                                                       reads: str) -> None:
    datas = _runs()
    split = parse_all if reads == "whole" else (lambda d: parse_live(d, seed=3, max_lines=2000))
    taken = dict.fromkeys(RULES, 0)
    for cls in RULES:
        orig = cls._quiet_prefix

        def counted(self, *a, _orig=orig, _cls=cls):  # type: ignore[no-untyped-def]
            k = _orig(self, *a)
            taken[_cls] += k
            return k

        monkeypatch.setattr(cls, "_quiet_prefix", counted)
    fast = [_alerts(split(d)) for d in datas]
    assert all(taken.values()), taken  # the vectorised step did run, for every rule
    for cls in RULES:
        monkeypatch.setattr(cls, "fast", False)
    slow = [_alerts(split(d)) for d in datas]
    assert fast == slow
    fired = {a.rule for run in fast for a in run}
    assert fired == {"plateau", "divergence", "throughput_drop"}, fired


def _state(rule: object) -> str:
    """Everything a rule carries from one frame to the next (its config and context aside; a
    frame whose blocks plateau deferred taken first, divergence's jumps computed; its ``_cols``
    is the frame's values as Python floats, made only when a block is taken one by one)."""
    if isinstance(rule, PlateauRule):
        rule._settle_train()
    if isinstance(rule, DivergenceRule):
        rule._frame_jumps()  # (computed when first read: the same value either way)
    return repr({k: list(v) if isinstance(v, deque) else v for k, v in vars(rule).items()
                 if k not in ("cfg", "ctx", "lr", "blocks", "fast", "_cols")})


@pytest.mark.parametrize("reads", ["whole", "live"])
def test_vectorised_runs_leave_the_per_block_state(monkeypatch: pytest.MonkeyPatch,
                                                  reads: str) -> None:
    """After every batch each rule's whole state is the per-block reference's: a vectorised step
    that got a patience, a reference level or a best wrong fails here even when no alert shows
    it."""
    split = parse_all if reads == "whole" else (lambda d: parse_live(d, seed=5, max_lines=3000))
    for data in _runs()[:2]:
        engines = []
        for fast in (True, False):
            for cls in RULES:
                monkeypatch.setattr(cls, "fast", fast)
            e = RuleEngine(load_rules_config(), live=False)
            engines.append((e, [r for r in e._rules if isinstance(r, RULES)]))
        monkeypatch.undo()
        assert len(engines[0][1]) == len(RULES)
        for batch in split(data):
            for fast, (e, rules) in zip((True, False), engines):
                for r in rules:
                    r.fast = fast
                e.feed(batch)
            for a, b in zip(engines[0][1], engines[1][1]):
                assert _state(a) == _state(b), type(a).__name__


@pytest.mark.parametrize("cls", [PlateauRule, DivergenceRule])
def test_a_vectorised_step_changes_the_state_as_its_blocks_one_by_one(
        monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
    """Each vectorised step, checked on its own: a copy of the rule from before it, given the
    same blocks one by one, fires nothing and ends in the same state (a step whose slip the next
    per-block block happens to overwrite passes the tests above, not this one)."""
    orig = cls._quiet_prefix
    checked = {"blocks": 0, "steps": 0}

    def twin_checked(self, b, i, j):  # type: ignore[no-untyped-def]
        twin = copy.copy(self)
        for name, v in vars(self).items():
            if isinstance(v, deque):
                setattr(twin, name, deque(v, maxlen=v.maxlen))
        k = orig(self, b, i, j)
        for t in range(i, i + k):
            hit = twin._block(None, b, t, float(b.med[t]), float(b.noise[t]), int(b.step[t]))
            assert hit is None
        assert _state(twin) == _state(self)
        checked["blocks"] += k
        checked["steps"] += 1
        return k

    monkeypatch.setattr(cls, "_quiet_prefix", twin_checked)
    # (and long, slowly improving losses: their level restarts the patience every few blocks)
    for data in _runs() + [clean_run(s, n_steps=20_000).jsonl() for s in (1, 2)]:
        for split in (parse_all, lambda d: parse_live(d, seed=5, max_lines=3000)):
            e = RuleEngine(load_rules_config(), live=False)
            for batch in split(data):
                e.feed(batch)
    assert checked["steps"] > 20 and checked["blocks"] > 500, checked


# --------------------------------------------------------------------------- drive
@pytest.mark.parametrize(("n", "loud_share", "ready_share"),
                         [(40, 0.0, 1.0), (3000, 0.0, 1.0), (3000, 0.02, 1.0), (3000, 0.3, 0.7)])
def test_drive_takes_each_block_once_and_bounds_what_a_try_looks_at(
        n: int, loud_share: float, ready_share: float) -> None:
    """Every block is taken once, in order, by one path or the other; a try of the vectorised
    step looks at 8 min_fast blocks, 4x more only right after a try that took all it looked at
    (a try that sorted through the whole rest of a long frame to take 3 blocks made plateau's
    cost on a 50k-step file 3x what it is)."""
    rng = np.random.default_rng(int(n * 10 + loud_share * 100))
    loud = rng.random(n) < loud_share
    ready = rng.random(n + 1) < ready_share
    min_fast = 16
    taken: list[int] = []
    tries: list[tuple[int, int]] = []

    def fast(i: int, j: int) -> int:
        tries.append((i, j))
        hit = np.flatnonzero(loud[i:j])
        k = int(hit[0]) if hit.shape[0] else j - i
        taken.extend(range(i, i + k))
        return k

    drive(n, lambda: bool(ready[len(taken)]), fast, taken.append, min_fast)
    assert taken == list(range(n))
    assert all(j - i >= min_fast for i, j in tries)
    prev: tuple[int, int] | None = None
    for i, j in tries:
        span = 8 * min_fast
        if prev is not None and i == prev[1]:  # right after a try that took all it looked at
            span = 4 * (prev[1] - prev[0])
        assert j - i < span + min_fast or j == n, (prev, (i, j))  # (a short tail goes along)
        prev = (i, j)
    if not loud.any() and ready_share == 1.0:
        assert len(tries) <= 4  # a long quiet frame: a few tries, growing
    if loud_share == 0.02:
        assert sum(j - i for i, j in tries) < 4 * n  # not O(n) a try


# --------------------------------------------------------------------------- plateau on evaluations
def test_plateau_val_best_is_the_definitions_and_skips_needless_noise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation is a new best when it beats the best by max(val_min_delta, noise_factor x
    the evaluations' noise, refreshed every 4): the rule gets the definition's bests while it
    computes the noise only for evaluations that clear val_min_delta alone."""
    import trainwatch.rules.builtin.plateau as plateau_mod
    from trainwatch.rules.detectors.stats import noise_sd
    from trainwatch.rules.engine.base import Context, Points

    calls = []

    def counted(values):  # type: ignore[no-untyped-def]
        calls.append(len(values))
        return noise_sd(values)

    monkeypatch.setattr(plateau_mod, "noise_sd", counted)
    cfg = load_rules_config().rules["plateau"]
    rng = np.random.default_rng(11)
    n = 240  # (an evaluation every 100 steps: sparse, judged one by one)
    # a slow decay (0.2 % an evaluation, under val_min_delta) with steps down and some noise
    x = 3.0 * 0.998 ** np.arange(n) * np.where(np.arange(n) % 37 == 0, 0.97, 1.0).cumprod()
    x *= 1 + 0.002 * rng.standard_normal(n)
    rule = PlateauRule(cfg, Context())
    got = []
    for i, v in enumerate(x.tolist()):
        pts = Points("val_loss", np.array([100 * i]), np.array([v]), np.array([float(i)]),
                     np.array([i]))
        assert rule._val(None, pts) == []  # type: ignore[arg-type]
        got.append((rule.v_best, rule.v_best_step, rule.v_wait))
    want, needed = [], set()
    best, best_step, wait, window, recent = None, 0, 0, (), []
    for i, v in enumerate(x.tolist()):
        recent = (recent + [v])[-max(cfg.val_patience, 16):]
        if i % 4 == 0:
            window = tuple(recent)
        if best is not None and v < best:
            needed.add(i // 4)  # (below the best: the margin was computed for this window)
        if best is None or v < best and v < best - max(
                cfg.val_min_delta, cfg.noise_factor * noise_sd(window)) * abs(best):
            best, best_step, wait = v, 100 * i, 0  # a clear improvement: the patience restarts
            want.append((best, best_step, wait))
            continue
        if v < best:
            best, best_step = v, 100 * i
        wait += 1
        want.append((best, best_step, wait))
    assert got == want
    assert sum(a[0] != b[0] for a, b in itertools.pairwise(want)) > n // 2  # (it moved often)
    assert 0 < sum(w == 0 for _b, _s, w in want) < n // 4  # (and clearly, now and then)
    assert 0 < len(calls) < len(needed) // 2, (len(calls), len(needed))


def test_plateau_vectorised_step_stops_at_a_rearm_even_on_a_slow_improvement() -> None:
    """A block that re-arms the rule and restarts the patience is the per-block path's: the
    vectorised step stops before it, its state that of the blocks before it one by one."""
    from trainwatch.rules.detectors.blocks import Blocks
    from trainwatch.rules.engine.base import Context

    rule = PlateauRule(load_rules_config().rules["plateau"], Context())
    assert rule.cfg.min_delta == 0.01
    rule.nblk, rule.best, rule.best_step, rule.ref, rule.ref_step = 40, 0.985, 1000, 1.0, 900
    rule.prev, rule.wait, rule.since_best, rule.rearm_below = (1.0, 1.0), 3, 5, 0.9865
    # block 3: below the rearm level, and its level (with block 1) below the bar 0.99: a restart
    med = np.array([1.0, 0.989, 0.995, 0.986, 0.99, 0.99])
    n = med.shape[0]
    b = Blocks(med, np.zeros(n), np.zeros(n), np.arange(1050, 1050 + 50 * n, 50),
               np.arange(float(n)), np.arange(n))
    twin = copy.copy(rule)
    twin.recent = deque(rule.recent, maxlen=rule.recent.maxlen)
    assert rule._quiet_prefix(b, 0, n) == 3
    for t in range(3):
        hit = twin._block(None, b, t, float(med[t]), 0.0, int(b.step[t]))  # type: ignore[arg-type]
        assert hit is None
    assert _state(twin) == _state(rule)
    twin._block(None, b, 3, 0.986, 0.0, int(b.step[3]))  # type: ignore[arg-type]
    assert twin.rearm_below is None and twin.ref_step == b.step[3]  # (what the block does)


@pytest.mark.parametrize("seed", range(4))
def test_plateau_first_check_is_the_waits_check(seed: int) -> None:
    """The vectorised step finds its first patience check from the new bests (a constant
    patience): the same block as the check on the array of waits, as it was written first."""
    from trainwatch.rules.builtin.plateau import first_check

    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        patience = int(rng.integers(1, 30))
        every = max(4, patience // 4)
        wait0 = int(rng.integers(0, 3 * patience))
        improved = rng.random(n) < rng.choice([0.0, 0.02, 0.1, 0.5])
        idx = np.arange(n)
        last = np.maximum.accumulate(np.where(improved, idx, -1))
        wait = np.where(last >= 0, idx - last, wait0 + idx + 1)
        stop = (wait >= patience) & ((wait - patience) % every == 0) & ~improved
        hit = np.flatnonzero(stop)
        want = int(hit[0]) if hit.shape[0] else n
        assert first_check(wait0, np.flatnonzero(improved).tolist(), n, patience, every) == want
