"""The engine's frames against a plain reference: every series' record positions, the event
mask and the events, whatever shortcut the engine takes (positions shared between series on the
same records, the event mask of the uncovered records, a whole batch or a cut one)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainwatch.batch import concat_batches
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.engine.base import Frame, Points

CFG = load_rules_config()


def _lines(seed: int) -> list[dict]:
    """Metric records (loss, lr, grad_norm, memory on every one; val_loss now and then, a text
    note now and then), events between them, a resume that replays steps."""
    rng = np.random.default_rng(seed)
    out: list[dict] = [{"event": "run_start", "step": 0, "time": 1000.0}]
    t, step = 1000.0, 0
    for i in range(400):
        step += 1
        t += 0.5
        if i == 250:
            step -= 40  # a resume: a new segment
        rec = {"step": step, "time": t, "loss": float(rng.normal(2, 0.1)), "lr": 1e-3,
               "grad_norm": float(rng.lognormal()), "memory": 1e9 + i}
        if i % 37 == 5:
            rec["val_loss"] = float(rng.normal(2, 0.1))
        if i % 53 == 7:
            rec["note"] = "text"  # kept as a note, not a series
        if i % 61 == 11:
            rec["loss"] = float("nan")
        out.append(rec)
        if rng.random() < 0.05:
            out.append({"event": "checkpoint", "step": step, "time": t})
    out.append({"event": "run_end", "step": step, "time": t + 1})
    return out


def _batches(lines: list[dict], cuts: list[int]):
    p = JsonlParser("m.jsonl", clock=lambda: 0.0)
    data = [json.dumps(x).encode() + b"\n" for x in lines]
    out, line = [], 1
    for lo, hi in zip([0, *cuts], [*cuts, len(data)]):
        out.append(p.parse(b"".join(data[lo:hi]), line))
        line += hi - lo
    return [b for b in out if b.n_records]


def _reference(batch, lo: int, hi: int) -> tuple[dict, np.ndarray, list]:
    """Each series' positions in records lo:hi, the event mask and the events, the plain way:
    the events are the records no series and no note covers, in order."""
    base = batch.first_record
    pos = {}
    for name, ch in batch.series.items():
        keep = (ch.rows >= lo) & (ch.rows < hi)
        if keep.any():
            pos[name] = ch.rows[keep].astype(np.int64) + base
    covered = np.zeros(batch.n_records, dtype=bool)
    for ch in batch.series.values():
        covered[ch.rows] = True
    for row, _f in batch.notes:
        covered[row] = True
    ev_rows = np.flatnonzero(~covered)
    assert ev_rows.shape[0] == len(batch.events)
    inside = [(r, ev) for r, ev in zip(ev_rows.tolist(), batch.events) if lo <= r < hi]
    mask = np.zeros(hi - lo, dtype=bool)
    mask[[r - lo for r, _ev in inside]] = True
    return pos, mask, [ev for _r, ev in inside]


@pytest.mark.parametrize("cuts", [[], [1], [100, 101, 300], list(range(1, 430, 7))])
@pytest.mark.parametrize("joined", [False, True])
def test_frames_match_the_plain_reference(cuts: list[int], joined: bool) -> None:
    batches = _batches(_lines(len(cuts)), cuts)
    if joined:
        batches = [concat_batches(batches)]
    e = RuleEngine(CFG, live=False)
    seen: list[Frame] = []

    def spy(frame: Frame) -> list:
        seen.append(frame)
        return []

    e._rules[0].update = spy  # type: ignore[method-assign]
    n_frames = 0
    for b in batches:
        before = len(seen)
        e.feed(b)
        wanted = e._wanted
        segs = b.segments
        frames = seen[before:]
        # the frames tile the batch and end at every segment's end (and where a series whose
        # role changes what a rule reads first appears: see test_engine.py)
        bounds = [int(fr.rec_pos[0]) - b.first_record for fr in frames] + [b.n_records]
        assert bounds[0] == 0 and bounds == sorted(set(bounds))
        assert set((np.flatnonzero(np.diff(segs)) + 1).tolist()) <= set(bounds)
        for fr, lo, hi in zip(frames, bounds, bounds[1:]):
            pos, mask, events = _reference(b, lo, hi)
            assert set(fr.series) == {n for n in pos if n in wanted}
            for name, pts in fr.series.items():
                assert isinstance(pts, Points)
                np.testing.assert_array_equal(pts.pos, pos[name])
                assert pts.pos.dtype == np.int64
                ch = b.series[name]
                keep = (ch.rows >= lo) & (ch.rows < hi)
                np.testing.assert_array_equal(pts.values, ch.values[keep])
                np.testing.assert_array_equal(pts.steps, ch.steps[keep])
            np.testing.assert_array_equal(fr.rec_is_event, mask)
            assert list(fr.events) == events
            np.testing.assert_array_equal(fr.rec_pos, np.arange(lo, hi) + b.first_record)
            np.testing.assert_array_equal(fr.rec_steps, b.steps[lo:hi])
            n_frames += 1
    assert n_frames >= 2  # the resume cuts every feed of it in two


def test_points_and_frames_are_read_only() -> None:
    a = np.arange(3.0)
    pts = Points("x", a, a, a, a)
    with pytest.raises(AttributeError):
        pts.values = a  # type: ignore[misc]
    fr = Frame(0, {}, {"x": pts}, (), a, a, a, a)
    with pytest.raises(AttributeError):
        fr.series = {}  # type: ignore[misc]
    assert pts.finite() is pts and pts.all_finite
    b = np.array([1.0, np.nan, 3.0])
    f = Points("y", b, b, b, b).finite()
    np.testing.assert_array_equal(f.values, [1.0, 3.0])
    assert f.finite() is f
