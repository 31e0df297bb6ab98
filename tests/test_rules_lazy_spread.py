"""The cheap paths of this round, each against its reference:

- a lazy block stream (MAD and noise computed at their first read, rules/detectors/blocks.py) gives the
  eager stream's blocks whether a push's noise is read at once, after later pushes, or never;
- ``divergence``'s vectorised step, which reads the MAD, noise and scatter only at candidate
  blocks (one by one when they are few, in one go when many), stops at the first block the
  per-block reference counts as up, and leaves the reference's state before it.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from test_rules_blocks import _state

import trainwatch.rules.builtin.divergence as dv
from trainwatch.rules import load_rules_config
from trainwatch.rules.builtin.divergence import DivergenceRule
from trainwatch.rules.detectors.blocks import Blocks, BlockStream
from trainwatch.rules.engine.base import Context, Points


def _points(v: np.ndarray, start: int) -> Points:
    n = v.shape[0]
    idx = np.arange(start, start + n)
    return Points("loss", idx, v, idx.astype(np.float64), idx)


def _same(a: Blocks, b: Blocks, what: str) -> None:
    for name in ("med", "mad", "noise", "step", "time", "pos"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), (what, name)


@pytest.mark.parametrize("seed", range(4))
def test_a_lazy_stream_gives_the_eager_blocks_read_now_later_or_never(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 4000
    v = np.exp(-np.arange(n) / 1500.0) * (1.0 + 0.05 * rng.standard_normal(n))
    v[700:800] = 0.0  # (medians of 0: no relative noise there)
    v[1500:1525] *= 1e300  # (a huge spread over a median: treated as no noise)
    for k in (25, 50):
        eager, lazy = BlockStream(k), BlockStream(k, lazy=True)
        later: list[tuple[Blocks, Blocks]] = []
        pos = 0
        while pos < n:  # (parts of 1 to 600 points: pushes of no block, one, or many)
            c = int(rng.integers(1, 600))
            part = _points(v[pos:pos + c], pos)
            a, b = eager.push(part), lazy.push(part)
            assert np.array_equal(a.med, b.med) and np.array_equal(a.pos, b.pos)
            when = rng.random()
            if when < 0.3:
                _same(a, b, "read at once")
            elif when < 0.6:
                later.append((a, b))
            pos += c
        for a, b in later:  # read after later pushes took their errors along unread
            _same(a, b, "read later")
        assert later


def _rule(monkeypatch: pytest.MonkeyPatch, few: int) -> DivergenceRule:
    monkeypatch.setattr(dv, "_FEW", few)
    return DivergenceRule(load_rules_config().rules["divergence"], Context())


@pytest.mark.parametrize("few", [0, 1000])  # the candidates in one go / one by one
def test_divergence_step_stops_where_the_reference_counts_a_rise(
        monkeypatch: pytest.MonkeyPatch, few: int) -> None:
    """Blocks hovering around the rise bar (its noise and scatter terms near the 5 %), after the
    warm-up: the step takes the blocks before the first the reference counts as up, in its
    state, and that block is up."""
    stopped = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = 48
        # a level near 1 with blocks up to ~9 % above it, jumps of a few % (the scatter term)
        med = 1.0 + np.abs(rng.normal(0.0, 0.04, n)) * (rng.random(n) < 0.5)
        mad = rng.uniform(0.0, 0.8, n) * np.where(rng.random(n) < 0.2, 1.0, 0.05)
        noise = rng.uniform(0.0, 0.015, n)
        b = Blocks(med, mad, noise, np.arange(25, 25 * (n + 1), 25), np.arange(float(n)),
                   np.arange(n))
        rule = _rule(monkeypatch, few)
        rule.nblk, rule.best, rule.best_step = 20, 1.0, 0
        rule._last = [1.0, 1.0]
        rule._jl = np.abs(rng.normal(0.0, 0.02, dv.SCATTER_BLOCKS - 1)).tolist()
        rule._start_frame(b)
        twin = copy.copy(rule)
        k = rule._quiet_prefix(b, 0, n)
        for t in range(k):
            assert twin._block(None, b, t, float(med[t]), float(noise[t]),  # type: ignore[arg-type]
                               int(b.step[t])) is None
        assert _state(twin) == _state(rule), seed
        if k < n:  # the block it stopped at is up (an episode under way: no alert made)
            stopped += 1
            twin.active = twin.escalated = True
            twin._block(None, b, k, float(med[k]), float(noise[k]),  # type: ignore[arg-type]
                        int(b.step[k]))
            assert twin.up == 1, seed
    assert 10 < stopped < 60, stopped  # (both outcomes were checked)


def test_lr_peak_taken_when_asked_is_the_highest_lr_before_the_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """plateau's LR peak keeps the frames' LR points and takes their highest only when an alert
    asks (and every few frames): the peak at a record is that of every finite LR before it."""
    from trainwatch.rules.detectors.lr_peak import LrPeak
    from trainwatch.rules.engine.base import Frame

    monkeypatch.setattr(LrPeak, "_KEEP", 3)
    rng = np.random.default_rng(5)
    peak, seen, start = LrPeak(), np.empty(0), 0
    for f in range(20):
        n = int(rng.integers(1, 40))
        lr = rng.uniform(0.0, 1.0, n) * (10.0 if f == 1 else rng.uniform(0.0, 2.0))  # (an early peak)
        lr[rng.random(n) < 0.1] = np.nan
        lr[rng.random(n) < 0.05] = np.inf  # (not finite either: never a peak)
        pts = _points(lr, start)
        pts = Points("lr", pts.steps, lr, pts.times, pts.pos)
        frame = Frame(0, {"lr": "lr"}, {"lr": pts}, (), pts.steps, pts.times, pts.pos,
                      np.zeros(n, dtype=bool))
        for _ask in range(int(rng.integers(1, 3)) if f % 5 == 4 else 0):  # (frames between)
            pos = int(rng.integers(start, start + n))
            upto = np.concatenate((seen, lr[:pos - start + 1]))
            upto = upto[np.isfinite(upto)]
            assert peak.at(frame, pos) == max(0.0, float(np.max(upto, initial=0.0)))
        peak.end_frame(frame)
        seen = np.concatenate((seen, lr))
        start += n


def test_plateau_defers_only_frames_that_cannot_fire(monkeypatch: pytest.MonkeyPatch) -> None:
    """plateau takes the train blocks of a frame that cannot fire at the next frame: every read
    returns the per-block reference's alerts (none late, none lost), with reads short enough
    for frames to be deferred, and the last frame of a file too."""
    from test_rules_data import clean, idx, parse_live, set_loss, to_jsonl

    from trainwatch.rules import RuleEngine
    from trainwatch.rules.builtin.plateau import PlateauRule

    deferred = [0]
    orig = PlateauRule._settle_train

    def counted(self):  # type: ignore[no-untyped-def]
        deferred[0] += self._deferred is not None
        return orig(self)

    monkeypatch.setattr(PlateauRule, "_settle_train", counted)
    fired = 0
    for seed in range(4):
        run = clean(6000, ("exp", "cosine")[seed % 2], noise=(0.01, 0.05)[seed // 2], seed=60 + seed)
        for at in (1500, 4000):  # two plateaus: the second after a re-arm
            set_loss(run, at, run["mean"][idx(run, at)] * (0.5 if at == 4000 else 1.0))
        batches = parse_live(to_jsonl(run), seed=seed, max_lines=(300, 1200)[seed % 2])
        engines = []
        for fast in (True, False):
            e = RuleEngine(load_rules_config(), live=False)
            for r in e._rules:
                if isinstance(r, PlateauRule):
                    r.fast = fast
            engines.append(e)
        for batch in batches:
            got = [[(a.rule, a.step, a.severity, a.message) for a in e.feed(batch)
                    if a.rule == "plateau"] for e in engines]
            assert got[0] == got[1], seed
            fired += bool(got[0])
    assert deferred[0] > 20 and fired >= 4, (deferred, fired)


@pytest.mark.parametrize("seed", range(3))
def test_divergence_jumps_carried_from_frame_to_frame_are_the_streams(seed: int) -> None:
    """Divergence computes a frame's jumps between block medians when first read (often never):
    whether or not each frame read them, the jumps a frame sees (carried + its own) are those of
    the whole stream's block medians, to the bit."""
    rng = np.random.default_rng(20 + seed)
    med = 1.0 + 0.1 * rng.standard_normal(90)
    med[11] = 0.0
    whole = dv.block_jumps(None, med).tolist()
    cuts = sorted(rng.choice(np.arange(1, 90), 8, replace=False).tolist())
    for reads in (rng.random(9) < 0.5, np.zeros(9, bool), np.ones(9, bool)):
        rule = DivergenceRule(load_rules_config().rules["divergence"], Context())
        seen = 0
        for piece, read in zip(np.split(med, cuts), reads):
            n = piece.shape[0]
            rule._start_frame(Blocks(piece, np.zeros(n), np.zeros(n), np.arange(n), np.zeros(n),
                                     np.arange(n)))
            seen += n
            if read or seen == 90:
                got = rule._frame_jumps()
                # (the first block of the stream has no jump)
                assert got == whole[max(0, seen - 1 - len(got)):seen - 1], (seed, seen)
                # (where the jumps of the frame's first block end)
                assert rule._jump0 == len(got) - n + 1
