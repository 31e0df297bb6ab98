"""Dense evaluations are judged pooled (rules/detectors/evals.py), sparse ones one by one."""

from __future__ import annotations

import numpy as np
from test_rules_data import clean, engine_alerts, idx, of, parse_live, to_jsonl

from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.detectors.evals import EvalPool


def test_sparse_evaluations_pass_through_and_dense_ones_are_pooled_per_window() -> None:
    sparse = EvalPool(50)
    assert [sparse.push(float(v), s) for v, s in ((3, 100), (2, 200), (1, 300))] == [
        (3.0, 100), (2.0, 200), (1.0, 300)]
    dense = EvalPool(50)
    got = [dense.push(float(s % 7), s) for s in range(1, 160)]
    # the first two are judged as they come; the third tells they are dense and is the first
    # pooled; then one median per 50-step window, when the next window's first one arrives
    assert got[:3] == [(1.0, 1), (2.0, 2), None]
    pooled = [g for g in got[3:] if g is not None]
    assert pooled == [(float(np.median([s % 7 for s in range(3, 50)])), 49),
                      (float(np.median([s % 7 for s in range(50, 100)])), 99),
                      (float(np.median([s % 7 for s in range(100, 150)])), 149)]


def _val_every_step(n: int, seed: int) -> dict:
    """A healthy run whose val_loss is logged at every step: still falling, Gaussian noise."""
    run = clean(n, "exp", noise=0.03, seed=seed, eval_every=1)
    rng = np.random.default_rng(seed)
    x = np.arange(1, run["val_loss"].shape[0] + 1) / run["val_loss"].shape[0]
    run["val_loss"][:] = 0.4 + 2.6 * np.exp(-5.5 * x) + rng.normal(0, 0.005, x.shape[0])
    return run


def test_a_val_loss_logged_every_step_does_not_flood() -> None:
    for seed in range(3):
        alerts = engine_alerts(to_jsonl(_val_every_step(12_000, seed)))
        assert of(alerts, "overfit") == [], seed
        assert [a for a in alerts if a.rule == "plateau" and a.metric == "val_loss"] == [], seed


def test_pooled_evaluations_still_catch_overfitting_live_as_whole() -> None:
    run = _val_every_step(12_000, 1)
    i = idx(run, 6000)
    v = run["val_loss"]
    k = np.arange(v.shape[0] - i)
    v[i:] = v[i] * (1 + 0.0002 * k)  # rising 1 % every 50 steps while the train loss falls
    data = to_jsonl(run)
    whole = of(engine_alerts(data), "overfit")
    assert whole and 6000 < whole[0][0] <= 6600, whole
    e = RuleEngine(load_rules_config(), live=False)
    for b in parse_live(data, seed=3, max_lines=40):
        e.feed(b)
    assert [(a.step, a.severity) for a in e.alerts if a.rule == "overfit"] == whole


def test_judged_gives_what_push_gives_frame_by_frame() -> None:
    """``judged`` (the loop overfit and plateau share) yields, with the index of the evaluation
    that makes it, exactly what pushing each evaluation would, however the frames are cut."""
    rng = np.random.default_rng(3)
    for steps in (list(range(0, 3000, 500)), list(range(0, 300, 2))):
        values = rng.normal(1.0, 0.1, len(steps)).tolist()
        ref, want = EvalPool(50), []
        for i, (v, s) in enumerate(zip(values, steps)):
            out = ref.push(v, s)
            if out is not None:
                want.append((i, *out))
        for cut in (1, 7, len(steps)):
            pool, got = EvalPool(50), []
            for a in range(0, len(steps), cut):
                got += [(a + i, v, s) for i, v, s in pool.judged(values[a:a + cut], steps[a:a + cut])]
            assert got == want
