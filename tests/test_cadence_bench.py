"""``bench/cadence.py``: labelled runs re-logged at sparse cadences keep their steps, per-epoch
records average the epoch, and a fault's visibility and window follow the logged points."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cadence import log_run
from bench.synthetic import fault_run


def _records(data: bytes) -> list[dict]:
    return [d for d in map(json.loads, data.decode().splitlines()) if "event" not in d]


def test_every_k_keeps_the_step_numbers_and_values() -> None:
    run = fault_run("divergence", 1, n_before=600)
    logged = log_run(run, "10", naming=1)
    recs = _records(logged.data)
    steps = [r["step"] for r in recs]
    assert steps == list(range(10, run.n_steps + 1, 10))
    i = steps[3] - 1
    assert recs[3]["train/loss"] == float(f"{run.train['loss'][i]:.7g}")


def test_per_epoch_averages_the_loss_and_steps_by_epoch() -> None:
    run = fault_run("plateau", 2, n_before=600)
    logged = log_run(run, "epoch", naming=0)
    recs = _records(logged.data)
    assert 15 <= len(recs) <= 60
    first = recs[0]["step"]
    assert [r["step"] for r in recs] == list(range(first, first + len(recs)))
    size = run.n_steps // len(recs)
    assert np.isclose(recs[1]["loss"], float(np.mean(run.train["loss"][size:2 * size])), rtol=1e-5)


def test_a_one_step_spike_is_visible_only_on_a_logged_step() -> None:
    seen = {}
    for seed in range(8):
        run = fault_run("spike", seed, n_before=600)
        on_step = run.label.step % 10 == 0
        seen[seed] = (log_run(run, "10").visible, on_step)
        assert log_run(run, "1").visible
    assert all(vis == on for vis, on in seen.values())


def test_window_opens_at_the_last_logged_point_before_the_fault() -> None:
    run = fault_run("stall_gap", 0, n_before=600)
    logged = log_run(run, "10")
    at = run.label.step
    assert logged.fault_step == at - at % 10
    assert logged.first_point == -(-at // 10) * 10
    assert logged.delay_points(logged.first_point) == 0
    assert logged.delay_points(logged.first_point + 20) == 2
