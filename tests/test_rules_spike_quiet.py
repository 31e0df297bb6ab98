"""The spike detector's quiet-frame path (spike_quiet.accept_quiet) against the point-by-point
reference, fed as a live tail feeds it (frames of 1 to a few dozen points): after every frame
the detector's state is the reference's, not only its alerts, on data made to reach the path's
edges: warm-up (no baseline yet), the early maximum completed inside a frame and, where it
fires, crossed by the next points, frames that end on a refresh boundary or cross one, the tail
guard's bar set by dips, and a zero median."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from test_rules_spike_fastpath import _dips_and_spikes

from trainwatch.rules import load_rules_config
from trainwatch.rules.detectors.spike_detector import SpikeDetector

CFG = load_rules_config()
RULES = ("loss_spike", "grad_explosion", "step_time_outlier")


def _early_then_faults(seed: int, n: int = 3500) -> np.ndarray:
    """A grad norm around 1 whose points 100-110 are 12x the early maximum (in warm-up: severe
    on their own), then noise with dips, spikes, a zero stretch and a level shift longer than
    ``rebase_points`` (the baseline restarts: warm-up again, mid-run)."""
    rng = np.random.default_rng(seed)
    x = 1.0 + 0.05 * rng.standard_normal(n)
    x[100:110] = 12.5
    x[rng.random(n) < 0.01] *= 0.3
    x[rng.choice(np.arange(300, n), 20, replace=False)] *= rng.uniform(1.5, 20.0, 20)
    x[2000:2300] = 0.0
    x[2500:2900] = 40.0 + 0.05 * rng.standard_normal(400)
    return x


def _state(d: SpikeDetector) -> tuple:
    """What decides the detector's next alerts (the tail guard's part only when it is on)."""
    accepted = np.concatenate((d.ring, d._tail))[-d.W:].tolist()
    ep = d.episode
    # (an ended episode's count of quiet points is never read again: the pass, like this path,
    # adds a stretch's points at once, past the re-arming count)
    tail = (list(d.e_hist), d.emax, d.blk_e) if d.track_tail else ()
    return (accepted, d.n_acc, d.ok, d.win.tolist(), d.med if d.ok else None,
            d.early_n, d.early_max, d.flag_run,
            (ep.active, ep.count, ep.quiet if ep.active else None, ep.escalated, ep.last_start), tail)


def fed_alike(cfg: object, x: np.ndarray, seed: int) -> Iterator[tuple[slice, list, bool]]:
    """Feed the detector and its point-by-point reference the same live frames of ``x``
    (:func:`_frames`): for each, its slice, the detector's events, and whether the two agree on
    events, flagged points and state."""
    steps = np.arange(x.shape[0]) * 3
    fast, ref = SpikeDetector(cfg), SpikeDetector(cfg, vectorized=False)  # type: ignore[arg-type]
    lo = 0
    for k in _frames(seed, x.shape[0]):
        sl = slice(lo, lo + k)
        got, want = fast.update(x[sl], steps[sl]), ref.update(x[sl], steps[sl])
        yield sl, got[0], (got[0] == want[0] and got[1].tolist() == want[1].tolist()
                           and _state(fast) == _state(ref))
        lo += k


def _frames(seed: int, n: int) -> list[int]:
    """Frame lengths as a live tail makes them: mostly a few to a few dozen points."""
    rng = np.random.default_rng(seed)
    out, total = [], 0
    while total < n:
        k = int(rng.choice([1, 3, 13, 15, 31, 32, 33, 64, int(rng.integers(2, 80))]))
        out.append(k)
        total += k
    return out


@pytest.mark.parametrize("rule", RULES)
def test_quiet_frames_leave_the_reference_state(rule: str) -> None:
    base = CFG.rules[rule]
    variants = [base, dataclasses.replace(base, early_max_fires=True, min_ratio=1.1),
                dataclasses.replace(base, refresh=7, window=50, min_points=20)]
    quiet = 0
    for cfg in variants:
        for seed, x in enumerate((_early_then_faults(0), _dips_and_spikes(1, n=3000))):
            for sl, events, alike in fed_alike(cfg, x, seed):
                assert alike, (rule, cfg, seed, sl)
                quiet += not events and x[sl].shape[0] > 8
    assert quiet > 300  # most frames took the quiet path


@pytest.mark.parametrize("lines_per_read", [1, 7, 64])
def test_a_zero_early_maximum_reads_the_same_live_and_whole(lines_per_read: int) -> None:
    """An early maximum of zero is -0.0 or 0.0 as the frames came (Python's max keeps the first
    of equal values, numpy's reduction its own): the alert's evidence says 0.0 either way. (The
    spike rules keep exact zeros out of the detector, a zero-inflated loss's, so a loss of zeros
    no longer makes one: the detector fed directly does.)"""
    import json

    from trainwatch.formats.jsonl import JsonlParser
    from trainwatch.rules import RuleEngine

    vals = ["-0.0"] + ["0.0"] * 299 + ["50.0"] + ["0.0"] * 20
    lines = [f'{{"step":{i},"time":{i}.0,"loss":{v}}}\n'.encode() for i, v in enumerate(vals)]
    # the rules: zeros are no baseline and no spike (the zeros are learning_stalled's story)

    def evidence(k: int, live: bool) -> list[str]:
        p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
        e = RuleEngine(CFG, live=live)
        for i in range(0, len(lines), k):
            e.feed(p.parse(b"".join(lines[i:i + k]), i + 1))
        e.finish(now=0.0)
        return [json.dumps(a.to_dict()["evidence"]) for a in e.alerts if a.rule == "loss_spike"]

    assert evidence(len(lines), live=False) == evidence(lines_per_read, live=True) == []
    # the detector: its early maximum, -0.0 or 0.0 as the points came, reads 0.0 in the evidence
    from trainwatch.rules.builtin.spikes import LossSpikeRule
    from trainwatch.rules.engine.base import Context

    x = np.array([float(v) for v in vals])
    got = []
    for k in (len(vals), lines_per_read):
        rule = LossSpikeRule(CFG.loss_spike, Context())
        evs = []
        for i in range(0, len(vals), k):
            evs += rule.det.update(x[i:i + k], np.arange(i, min(i + k, len(vals))))[0]
        got.append([rule._evidence(None, ev)["early_max"] for ev in evs])  # type: ignore[arg-type]
    assert got[0] and len(got[0]) == len(got[1])
    assert {str(v) for g in got for v in g} == {"0.0"}
