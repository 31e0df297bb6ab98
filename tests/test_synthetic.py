"""The labelled run generator of bench/detect.py: deterministic per seed, and every fault is where
its label says (so a bench miss is the rules' fault, not the generator's)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.synthetic import (
    FAULT_RULES,
    GRAPH_EVERY,
    PROBE_ATTACHED,
    PROBE_GRAPH,
    SHAPES,
    SyntheticRun,
    clean_run,
    fault_run,
)


def _med(x: np.ndarray) -> float:
    return float(np.median(x))


def _at(run: SyntheticRun, name: str, step: int) -> int:
    """Index of ``step`` in the train columns."""
    return int(np.searchsorted(run.train["step"], step))


@pytest.mark.parametrize("kind", list(FAULT_RULES))
def test_fault_runs_are_deterministic_per_seed(kind: str) -> None:
    a, b, c = fault_run(kind, 7), fault_run(kind, 7), fault_run(kind, 8)
    assert a.jsonl() == b.jsonl()
    assert a.label == b.label
    assert a.jsonl() != c.jsonl()
    for r in a.ranks:
        assert a.rank_jsonl(r) == b.rank_jsonl(r)


def test_clean_runs_are_deterministic_and_cover_every_shape() -> None:
    assert clean_run(3, 500).jsonl() == clean_run(3, 500).jsonl()
    assert clean_run(3, 500).jsonl() != clean_run(4, 500).jsonl()
    assert {clean_run(s, 200).shape for s in range(len(SHAPES))} == set(SHAPES)


@pytest.mark.parametrize("seed", range(6))
def test_clean_runs_look_like_healthy_training(seed: int) -> None:
    run = clean_run(seed, 2000)
    tr = run.train
    assert run.label.kind == "clean" and run.label.rule is None
    for k, v in tr.items():
        assert np.isfinite(v).all(), k
    loss = tr["loss"]
    assert _med(loss[-200:]) < 0.8 * _med(loss[:50])
    assert np.all(np.diff(tr["time"]) > 0)
    assert np.diff(tr["time"]).max() < 60  # evals and checkpoints pause, nothing stalls
    assert np.isfinite(run.val["val_loss"]).all() and len(run.val["step"]) >= 5
    assert run.ended and b'"event":"run_end"' in run.jsonl()
    assert run.jsonl().count(b'"event":"eval"') == len(run.val["step"])
    assert (PROBE_ATTACHED in tr) == (seed % 4 == 0)


@pytest.mark.parametrize("kind", list(FAULT_RULES))
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_jsonl_parses_back_to_the_columns(kind: str, seed: int) -> None:
    run = fault_run(kind, seed, n_before=300)
    batches = run.batches(chunk_bytes=16 << 10)  # several reads, like a tailer
    assert len(batches) > 1
    assert not any(b.malformed for b in batches)
    chunks = [b.series["loss"] for b in batches if "loss" in b.series]
    steps = np.concatenate([c.steps for c in chunks])
    loss = np.concatenate([c.values for c in chunks])
    assert np.array_equal(steps, run.train["step"])
    np.testing.assert_allclose(loss, run.train["loss"], rtol=1e-6, equal_nan=True)
    val = np.concatenate([b.series["val_loss"].values for b in batches if "val_loss" in b.series])
    np.testing.assert_allclose(val, run.val["val_loss"], rtol=1e-6, equal_nan=True)
    assert run.label.rule == FAULT_RULES[kind]
    assert 1 <= run.label.step <= run.n_steps
    for r, rb in run.rank_batches().items():
        assert all(b.rank == r for b in rb)
        assert sum(len(b.series["step_time"]) for b in rb) == run.n_steps


SEEDS = [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("seed", SEEDS)
def test_nan_starts_at_the_label(seed: int) -> None:
    run = fault_run("nan", seed, n_before=300)
    finite = np.isfinite(run.train["loss"])
    assert int(run.train["step"][np.argmin(finite)]) == run.label.step
    assert not finite[_at(run, "loss", run.label.step):].any()


@pytest.mark.parametrize("seed", SEEDS)
def test_spikes_are_their_labelled_size_at_the_label(seed: int) -> None:
    for kind in ("spike", "spike_sustained"):
        run = fault_run(kind, seed, n_before=300)
        loss, i = run.train["loss"], _at(run, "loss", run.label.step)
        base = _med(loss[i - 50:i])
        size = run.label.params["size"]
        assert loss[i] / base > 0.8 * size
        assert loss[i - 50:i].max() / base < 1.6
        if kind == "spike":
            assert loss[i + 1] / base < 1.6  # one step only
        else:
            n = int(run.label.params["length"])
            assert _med(loss[i:i + n]) / base > 0.7 * size


@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_faults_start_at_the_label(seed: int) -> None:
    run = fault_run("grad_explosion", seed, n_before=300)
    g, i = run.train["grad_norm"], _at(run, "grad_norm", run.label.step)
    base = _med(g[i - 50:i])
    assert g[i] / base > 0.3 * run.label.params["size"]
    assert g[i - 1] / base < 3
    run = fault_run("grad_vanishing", seed, n_before=300)
    g, i = run.train["grad_norm"], _at(run, "grad_norm", run.label.step)
    tau = int(run.label.params["tau"])
    assert g[i + 10 * tau] < 1e-3 * _med(g[i - 50:i])
    assert g[i - 1] > 0.3 * _med(g[i - 50:i])


@pytest.mark.parametrize("seed", SEEDS)
def test_loss_trend_faults_start_at_the_label(seed: int) -> None:
    run = fault_run("plateau", seed, n_before=300)
    loss, i = run.train["loss"], _at(run, "loss", run.label.step)
    assert run.train["lr"].max() < 1e-5  # the diagnosis this fault stands for: LR too low
    assert _med(loss[:50]) > 1.1 * _med(loss[i - 50:i])  # it was learning before
    after, end = _med(loss[i:i + 300]), _med(loss[-300:])
    assert abs(end - after) / after < 0.02  # and not at all after

    run = fault_run("divergence", seed, n_before=300)
    loss, i = run.train["loss"], _at(run, "loss", run.label.step)
    d = int(run.label.params["doubling_steps"])
    ratio = _med(loss[i + d - 5:i + d + 5]) / _med(loss[i - 10:i])
    assert 1.6 < ratio < 2.5

    run = fault_run("frozen", seed, n_before=300)
    loss, i = run.train["loss"], _at(run, "loss", run.label.step)
    assert np.all(loss[i:] == loss[i]) and (loss[i] == 0) == bool(run.label.params["zero"])
    assert np.all(loss[1:i] != loss[:i - 1])  # no two equal floats before the fault


@pytest.mark.parametrize("seed", SEEDS)
def test_overfit_turns_at_the_labelled_evaluation(seed: int) -> None:
    run = fault_run("overfit", seed, n_before=300)
    vs, vl = run.val["step"], run.val["val_loss"]
    k = int(np.searchsorted(vs, run.label.step))
    assert vs[k] == run.label.step and run.label.step % run.label.params["eval_every"] == 0
    rate = run.label.params["rise_per_eval"]
    assert vl[-1] > vl[k] * (1 + 6 * rate)
    assert k >= 3 and vl[k] < vl[k - 3]  # still improving just before the turn
    loss, i = run.train["loss"], _at(run, "loss", run.label.step)
    assert _med(loss[-100:]) <= _med(loss[i - 100:i]) * 1.01  # train loss did not rise


@pytest.mark.parametrize("seed", SEEDS)
def test_lr_runs_out_at_the_label(seed: int) -> None:
    run = fault_run("lr_exhausted", seed, n_before=300)
    lr, i = run.train["lr"], _at(run, "lr", run.label.step)
    assert lr[i:].max() <= 1e-6 * lr.max()
    assert lr[i // 2] > 0.3 * lr.max()
    assert run.n_steps > run.label.step + 500


@pytest.mark.parametrize("seed", SEEDS)
def test_resource_faults_start_at_the_label(seed: int) -> None:
    for kind in ("detach", "detach_probe"):
        run = fault_run(kind, seed, n_before=300)
        tr, i = run.train, _at(run, "step_time", run.label.step)
        g = run.label.params["growth"]
        n = run.n_steps - i
        before = _med(tr["step_time"][i - 50:i])
        assert _med(tr["step_time"][-10:]) > 0.7 * (1 + g * (n - 10)) * before
        assert np.quantile(tr["step_time"][i - 50:i], 0.9) < 1.3 * before  # (rare hiccups)
        assert tr["memory"][-1] > tr["memory"][i - 1] * 1.02
        if kind == "detach":
            assert PROBE_GRAPH not in tr and PROBE_ATTACHED not in tr
            continue
        attached = tr[PROBE_ATTACHED]
        assert not attached[:i].any() and attached[i:].all()
        probe = tr[PROBE_GRAPH]
        assert np.all(probe[:i] == probe[0]) and probe[-1] > 100 * probe[i - 1]
        lines = [ln for ln in run.jsonl().splitlines() if b'"graph_size"' in ln]
        assert len(lines) == run.n_steps // GRAPH_EVERY  # logged every 10th step, like the trainer

    run = fault_run("memory_growth", seed, n_before=300)
    mem, i = run.train["memory"], _at(run, "memory", run.label.step)
    flat = mem[10:i]
    assert flat.max() / flat.min() < 1.01
    expect = mem[i] * run.label.params["rate_per_step"] * (run.n_steps - 1 - i)
    assert abs((mem[-1] - mem[i]) - expect) < 0.05 * expect + 0.01 * mem[i]
    assert _med(run.train["step_time"][-50:]) < 1.2 * _med(run.train["step_time"][i - 50:i])


@pytest.mark.parametrize("seed", SEEDS)
def test_stalls_are_at_the_label(seed: int) -> None:
    run = fault_run("stall_gap", seed, n_before=300)
    t, i = run.train["time"], _at(run, "time", run.label.step)
    gaps = np.diff(t)
    assert gaps[i] >= run.label.params["gap_s"]
    assert np.delete(gaps, i).max() < 60
    assert run.ended

    run = fault_run("stall_end", seed, n_before=300)
    assert not run.ended and b"run_end" not in run.jsonl()
    assert int(run.train["step"][-1]) == run.label.step
    assert run.now - float(run.train["time"][-1]) == pytest.approx(run.label.params["gap_s"])


@pytest.mark.parametrize("seed", SEEDS)
def test_straggler_is_the_labelled_rank_from_the_label(seed: int) -> None:
    run = fault_run("straggler", seed, n_before=300)
    bad = int(run.label.params["rank"])
    assert set(run.ranks) == {0, 1, 2, 3} and bad != 0
    i = _at(run, "time", run.label.step)
    slow = run.label.params["slowdown"]
    for r, cols in run.ranks.items():
        dt = cols["step_time"]
        ratio = _med(dt[i:]) / _med(dt[:i][10:])
        assert ratio == pytest.approx(slow if r == bad else 1.0, rel=0.1), r
        # the others wait for the straggler at the all-reduce; it waits for nobody
        wait = _med(cols["sync_wait"][i:]) / _med(dt[:i][10:])
        assert wait == (pytest.approx(slow - 1, abs=0.15) if r != bad else pytest.approx(0, abs=0.05))
