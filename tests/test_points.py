"""Points of separately stored series joined into records by step (MLflow, DVCLive): read in
any number of polls, cut anywhere, the records are those of one read of everything."""

from __future__ import annotations

import math
import random

import pytest

from trainwatch.formats._points import StepMerger


def written(seed: int, steps: int = 60) -> list[tuple[str, int, float, float]]:
    """Points in the order a client writes them: step after step, each step's keys in any order
    (separate calls, separate files), an eval at times."""
    rng = random.Random(seed)
    out = []
    for s in range(steps):
        step = [("loss", s, 1000.0 + s, 1.0 / (s + 1)), ("lr", s, 1000.0 + s + 0.001, 1e-3)]
        if s % 10 == 9:
            step.append(("eval/loss", s, 1000.0 + s + 0.002, 2.0))
        rng.shuffle(step)
        out += step
    return out


@pytest.mark.parametrize("seed", range(8))
def test_streamed_in_polls_equals_one_read(seed):
    points = written(seed)
    reference = StepMerger().push(points, final=True).as_dicts()
    assert [r["step"] for r in reference] == list(range(60))
    rng = random.Random(100 + seed)
    merger = StepMerger()
    got: list[dict] = []
    i = 0
    while i < len(points):
        n = rng.randint(1, 7)  # a read that finds something (one that finds nothing: below)
        got += merger.push(points[i:i + n]).as_dicts()
        i += n
        # at every poll, what was handed on is a prefix of the reference: never a record a
        # later point would have joined, never a step out of order
        assert got == reference[:len(got)]
    got += merger.push([], final=True).as_dicts()
    assert got == reference


def test_a_quiet_poll_hands_on_the_held_step_and_a_series_going_back_is_a_new_segment():
    m = StepMerger()
    assert m.push([("loss", 0, 1.0, 0.5), ("loss", 1, 2.0, 0.4)]).as_dicts() == [
        {"step": 0, "time": 1.0, "loss": 0.5}]
    assert m.holding
    assert m.push([]).as_dicts() == [{"step": 1, "time": 2.0, "loss": 0.4}]  # nothing new: writer is done
    assert not m.holding
    # the run resumed from step 0: after every step of the first segment, not merged into it
    recs = m.push([("loss", 0, 3.0, 0.9), ("step", 0, 3.0, 7.0), ("loss", 0, 3.5, math.inf)],
                  final=True).as_dicts()
    assert recs == [{"step": 0, "time": 3.0, "loss": 0.9, "step_value": 7.0},
                    {"step": 0, "time": 3.5, "loss": math.inf}]
