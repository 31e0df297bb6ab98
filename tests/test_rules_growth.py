"""``state_detach`` against ``memory_growth`` when the machine is loaded: a step time lifted by
other processes (a step when load arrives, a burst) is not the steady ramp of an undetached
state, so a memory leak seen meanwhile stays ``memory_growth``; genuine joint ramps stay
``state_detach``. Plus the pure maths of :func:`best_step` and :func:`steady_rise`, and the
growth rules' alerts fed live and whole."""

from __future__ import annotations

import numpy as np
import pytest
from test_rules_data import clean, engine_alerts, idx, of, parse_all, parse_live, to_jsonl

from trainwatch.rules import ConfigError, RuleEngine, load_rules_config
from trainwatch.rules.builtin import state_detach
from trainwatch.rules.detectors.growth import theil_sen
from trainwatch.rules.detectors.rise_shape import best_step, steady_rise
from trainwatch.rules.detectors.stats import spearman

SEEDS = range(6)
GROWTH_RULES = ("state_detach", "memory_growth")


# --------------------------------------------------------------------------- pure maths
def _best_step_reference(y: np.ndarray, min_seg: int) -> tuple[int, float, float]:
    """Every split tried in turn on the 10th-90th percentile-clipped values: the share of their
    variance the two segment means explain; and a least-squares line's R^2 against the index."""
    n = len(y)
    lo, hi = np.sort(y)[n // 10], np.sort(y)[n - 1 - n // 10]
    c = np.clip(y, lo, hi)
    tot = float(((c - c.mean()) ** 2).sum())
    best = (0, -1.0)
    for s in range(min_seg, n - min_seg + 1):
        a, b = c[:s], c[s:]
        share = (len(a) * (a.mean() - c.mean()) ** 2 + len(b) * (b.mean() - c.mean()) ** 2) / tot
        if share > best[1] + 1e-12:
            best = (s, share)
    line = float(np.corrcoef(np.arange(n), c)[0, 1] ** 2)
    return best[0], best[1], line


@pytest.mark.parametrize("seed", range(8))
def test_best_step_matches_trying_every_split(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(12, 80))
    y = rng.lognormal(0, 0.1, n) * (1 + (np.arange(n) > rng.integers(2, n - 2)))
    if seed % 2:
        y = y + 0.02 * np.arange(n)  # and a ramp
    got = best_step(y, max(3, n // 10))
    ref = _best_step_reference(y, max(3, n // 10))
    assert got[0] == ref[0] and got[1:] == pytest.approx(ref[1:], rel=1e-9)


def _shape(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, n])
    x = np.arange(100.0, 100.0 + n)
    k = np.arange(n)
    noise = rng.lognormal(0, 0.03, n)
    if kind == "ramp":
        return x, (1 + 0.01 * k) * noise
    if kind == "hinge":  # a ramp that began inside the window
        return x, (1 + 0.02 * np.maximum(0, k - n // 2)) * noise
    if kind == "step":  # load arrived
        return x, (1 + 1.0 * (k > 0.55 * n)) * noise
    if kind == "burst":  # a load burst that is still on, over a noisy step time
        return x, (1 + 2.0 * (k > 0.65 * n)) * rng.lognormal(0, 0.2, n)
    raise ValueError(kind)


@pytest.mark.parametrize("n", [30, 200])
@pytest.mark.parametrize(("kind", "steady"),
                         [("ramp", True), ("hinge", True), ("step", False), ("burst", False)])
def test_steady_rise_tells_a_ramp_from_a_step(n: int, kind: str, steady: bool) -> None:
    gated = 0
    for seed in SEEDS:
        x, y = _shape(kind, n, seed)
        slope, rho = theil_sen(x, y), spearman(x, y)
        if not (rho >= 0.6 and slope * (x[-1] - x[0]) >= 0.03 * np.median(y)):
            continue  # state_detach's rise bars come first: only what passes them is judged
        gated += 1
        ok, late = steady_rise(x, y, 0.5)
        assert ok is steady, (kind, n, seed, late)
        if kind == "step":
            assert abs(late) < 0.5
    assert gated >= len(SEEDS) // 2  # each shape does rise past the bars


# --------------------------------------------------------------------------- the rules
def test_late_slope_config() -> None:
    assert load_rules_config().rules["state_detach"].time_min_late_slope == 0.5
    with pytest.raises(ConfigError, match=r"state_detach\.time_min_late_slope: expected"):
        load_rules_config(overrides={"state_detach": {"time_min_late_slope": -1}})


def _leak(seed: int, rate: float, noise: float = 0.03) -> dict:
    """A memory leak from step 1000 (``rate`` of the level per step); flat step time."""
    run = clean(2500, "exp", seed=seed)
    rng = np.random.default_rng([seed, 99])
    run["step_time"] = 0.3 * rng.lognormal(0, noise, run["step"].shape[0])
    run["memory"] = run["memory"] * (1 + rate * np.maximum(0, run["step"] - 1000))
    return run


def _load(run: dict, start: int, stop: int | None, factor: float) -> None:
    """Other processes take the CPU from ``start`` (to ``stop``): the step time is ``factor``
    times longer meanwhile."""
    run["step_time"][idx(run, start):None if stop is None else idx(run, stop)] *= factor
    run["throughput"] = 4096.0 / run["step_time"]


def _growth_alerts(run: dict) -> tuple[list, list, list]:
    alerts = engine_alerts(to_jsonl(run))
    mem = [a for a in alerts if a.rule == "memory_growth"]
    return alerts, mem, of(alerts, "state_detach")


def _judged_as_memory_growth(run: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leak is memory_growth; judged on the step time's rise alone (the shape test made to
    pass everything), the same run would be state_detach: the scenario is a real trap."""
    alerts, mem, detach = _growth_alerts(run)
    assert detach == [], [(a.rule, a.step, a.message) for a in alerts]
    assert len(mem) == 1 and 1000 < mem[0].step <= 1300
    if mem[0].evidence.get("step_time_steady") is False:
        assert "not steadily" in mem[0].message
    with monkeypatch.context() as m:
        m.setattr(state_detach, "steady_rise", lambda x, y, min_late: (True, 1.0))
        _, mem, detach = _growth_alerts(run)
    assert mem == [] and len(detach) == 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("rate", "at", "factor"), [
    # memory_growth judges its first rising window (about steps 920-1120) with the load
    # arrived inside it: the step time steps up there, rank-correlated with memory
    (2e-4, 1000, 2.0), (2e-4, 1030, 2.0), (2e-4, 1000, 1.3),
    # a leak fast enough (1.5 % over 30 steps) for the short joint-ramp windows to judge it,
    # and load arriving while they do
    (5e-4, 1040, 1.6), (5e-4, 1080, 1.3),
])
def test_load_arriving_during_a_leak_is_memory_growth(seed: int, rate: float, at: int,
                                                      factor: float,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = _leak(seed, rate)
    _load(run, at, None, factor)
    _judged_as_memory_growth(run, monkeypatch)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("stop", [1150, None])
def test_load_burst_on_a_noisy_step_time_is_memory_growth(
        seed: int, stop: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _leak(seed, 2e-4, noise=0.25)
    _load(run, 1000, stop, 3.0)
    _judged_as_memory_growth(run, monkeypatch)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("time_rate", "mem_rate", "latest"),
                         [(0.01, 0.002, 850), (0.002, 4e-4, 950), (1e-3, 5e-5, 1200)])
def test_joint_linear_ramps_are_state_detach(seed: int, time_rate: float, mem_rate: float,
                                             latest: int) -> None:
    # from fast (caught by the short windows) to slow (only memory_growth's long window sees
    # the step time rising with memory): each time the ramp is steady, so it is state_detach
    run = clean(2000, "exp", seed=seed)
    k = np.maximum(0, run["step"] - 800)
    run["step_time"] = run["step_time"] * (1 + time_rate * k)
    run["throughput"] = 4096.0 / run["step_time"]
    run["memory"] = run["memory"] * (1 + mem_rate * k)
    alerts, mem, detach = _growth_alerts(run)
    assert mem == []
    assert len(detach) == 1 and 800 < detach[0][0] <= latest, detach
    a = next(a for a in alerts if a.rule == "state_detach")
    assert a.evidence["step_time_steady"] is True


# --------------------------------------------------------------------------- live and whole
def _sparse_memory(run: dict, every: int) -> bytes:
    mem = np.where(run["step"] % every == 0, run["memory"], np.nan)
    data = to_jsonl({**run, "memory": mem})
    return data.replace(b',"memory":NaN', b"")


def _growth_alerts_of(batches: list) -> list[tuple[str, int, str, str]]:
    e = RuleEngine(load_rules_config(), live=True)
    for b in batches:
        e.feed(b)
    return [(a.rule, a.step, a.severity, a.message) for a in e.alerts if a.rule in GROWTH_RULES]


@pytest.mark.parametrize("seed", range(3))
def test_sparse_memory_and_the_graph_probe(seed: int) -> None:
    # memory logged every 2nd step: a detach window over the first step times holds memory
    # points the memory rule still counts as warm-up; the same alerts live (a few lines a read)
    # and whole
    run = clean(1500, "exp", seed=seed)
    k = np.maximum(0, run["step"] - 12)
    run["step_time"] = run["step_time"] * (1 + 0.01 * k)
    run["memory"] = run["memory"] * (1 + 0.003 * k)
    leak = clean(1500, "exp", seed=seed)
    leak["memory"] = leak["memory"] * (1 + 2e-4 * np.maximum(0, leak["step"] - 700))
    # and the trainer's graph-size probe (every 10 steps): growing from step 800, or flat with
    # the state probe saying attached from step 900
    probed = clean(1500, "exp", seed=seed)
    on = probed["step"] % 10 == 0
    grows = np.where(on, 5000.0 + 40.0 * np.maximum(0, probed["step"] - 800), np.nan)
    flat = np.where(on, 5000.0, np.nan)
    attached = (probed["step"] >= 900).astype(float)
    datas = [_sparse_memory(run, 2), _sparse_memory(leak, 2), to_jsonl(clean(1500, seed=seed)),
             to_jsonl(probed, extra={"probe/graph_size": grows}).replace(
                 b'"probe/graph_size":NaN,', b""),
             to_jsonl(probed, extra={"probe/graph_size": flat, "state_attached": attached}
                      ).replace(b'"probe/graph_size":NaN,', b"")]
    live = [[(r, s) for r, s, *_ in _growth_alerts_of(parse_live(d, seed=seed, max_lines=8))]
            for d in datas]
    assert live == [[(r, s) for r, s, *_ in _growth_alerts_of(parse_all(d))] for d in datas]
    assert [r for r, _ in live[0]] == ["state_detach"] and live[0][0][1] <= 70, live[0]
    assert [r for r, _ in live[1]] == ["memory_growth"] and live[2] == []
    assert [r for r, _ in live[3]] == ["state_detach"] and 800 < live[3][0][1] <= 1000
    assert live[4] == [("state_detach", 900)]


def _after_firing_runs(seed: int) -> list[bytes]:
    """Runs where one growth rule fires and the stream goes on: the probe first, then a joint
    ramp (and the probe again after it re-arms); memory_growth first, then a second rise with the
    step time ramping; and a resumed run whose replayed segment holds only a leak."""
    probe_first = clean(2000, "exp", seed=seed)
    k = np.maximum(0, probe_first["step"] - 800)
    probe_first["step_time"] = probe_first["step_time"] * (1 + 0.01 * k)
    probe_first["memory"] = probe_first["memory"] * (1 + 0.002 * k)
    s = probe_first["step"]
    attached = ((s >= 700) & (s < 1000) | (s >= 1100)).astype(float)
    leak_then_ramp = clean(2200, "exp", seed=seed)
    s = leak_then_ramp["step"]
    grow = np.clip(s - 400, 0, 500) + np.maximum(0, s - 1300)
    leak_then_ramp["memory"] = leak_then_ramp["memory"] * (1 + 2e-4 * grow)
    leak_then_ramp["step_time"] = leak_then_ramp["step_time"] * (
        1 + 0.002 * np.maximum(0, s - 1300))
    ramp = clean(1200, "exp", seed=seed)
    k = np.maximum(0, ramp["step"] - 600)
    ramp["step_time"] = ramp["step_time"] * (1 + 0.01 * k)
    ramp["memory"] = ramp["memory"] * (1 + 0.002 * k)
    resumed = clean(2000, "exp", seed=seed + 10)
    resumed["memory"] = resumed["memory"] * (1 + 2e-4 * np.maximum(0, resumed["step"] - 1000))
    n = resumed["step"].shape[0]
    tail = {key: v[299:] if isinstance(v, np.ndarray) and v.shape == (n,) else v
            for key, v in resumed.items()}  # steps 300 on, after a restart
    tail["time"] = tail["time"] - tail["time"][0] + ramp["time"][-1] + 60.0
    on = tail["val_step"] >= 300
    tail["val_step"], tail["val_loss"] = tail["val_step"][on], tail["val_loss"][on]
    return [to_jsonl(probe_first, extra={"state_attached": attached}),
            to_jsonl(leak_then_ramp),
            to_jsonl(ramp, end=False) + to_jsonl(tail, start=False)]


@pytest.mark.parametrize("seed", range(2))
def test_after_one_rule_has_fired(seed: int) -> None:
    # the stream goes on after a rule fired: the other yields on the same growth, the probe
    # speaks again once re-armed, a resumed segment starts afresh; live or whole alike
    datas = _after_firing_runs(seed)
    feeds = [lambda d: parse_live(d, seed=seed, max_lines=8), parse_all]
    got = [[_growth_alerts_of(feed(d)) for feed in feeds] for d in datas]
    assert all(live == whole for live, whole in got)
    probe_first, leak_then_ramp, resumed = (live for live, _whole in got)
    assert [(r, sev) for r, _s, sev, _m in probe_first] == [
        ("state_detach", "error"), ("state_detach", "warning"), ("state_detach", "error")]
    assert [r for r, *_ in leak_then_ramp] == ["memory_growth", "state_detach"], leak_then_ramp
    assert [r for r, *_ in resumed] == ["state_detach", "memory_growth"], resumed


def _interleaved(seed: int) -> bytes:
    """A leak and a step-time ramp starting close together, at random: memory windows and
    step-time windows come due at nearby records, and either rule may own the growth."""
    rng = np.random.default_rng([seed, 7])
    run = clean(1600, "exp", seed=seed)
    s = run["step"]
    leak, ramp = int(rng.integers(500, 900)), int(rng.integers(500, 1100))
    run["memory"] = run["memory"] * (1 + rng.uniform(5e-5, 4e-4) * np.maximum(0, s - leak))
    run["step_time"] = run["step_time"] * (1 + rng.uniform(0, 4e-3) * np.maximum(0, s - ramp))
    run["throughput"] = 4096.0 / run["step_time"]
    return to_jsonl(run)


def test_nearby_windows_of_both_rules_give_one_owner() -> None:
    # read whole and live, the same alerts; a growth is one rule's
    datas = [_interleaved(seed) for seed in range(16)]
    whole = [_growth_alerts_of(parse_all(d)) for d in datas]
    assert whole == [_growth_alerts_of(parse_live(d, seed=1, max_lines=8)) for d in datas]
    assert all(len({r for r, *_ in run}) <= 1 for run in whole), whole
    rules = [r for run in whole for r, *_ in run]
    assert "memory_growth" in rules and "state_detach" in rules
