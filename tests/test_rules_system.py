"""System-side rules: stalled_stream, throughput_drop, memory_growth, state_detach,
rank_straggler, console_error, and custom threshold rules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_rules_data import (
    SHAPES,
    clean,
    engine_alerts,
    idx,
    of,
    parse_all,
    parse_live,
    to_jsonl,
)

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import ConfigError, RuleEngine, load_rules_config

SYSTEM_RULES = ("stalled_stream", "throughput_drop", "memory_growth", "state_detach",
                "rank_straggler", "console_error", "run_crashed")


@pytest.mark.parametrize("shape", SHAPES)
def test_quiet_on_clean_runs(shape: str) -> None:
    for seed in range(2):
        run = clean(4000, shape, noise=0.03, seed=seed)
        run["time"] = run["time"] + 30.0 * (run["step"] // 500)  # checkpoint pauses of 30 s
        alerts = engine_alerts(to_jsonl(run), now=float(run["time"][-1]) + 5)
        assert [(a.rule, a.step) for a in alerts if a.rule in SYSTEM_RULES] == [], (shape, seed)


@pytest.mark.parametrize(
    ("rule", "key", "value"),
    [("stalled_stream", "gap_factor", 1), ("throughput_drop", "drop", 1.5),
     ("memory_growth", "min_rho", 0), ("state_detach", "window", 2),
     ("rank_straggler", "ratio", 1.0), ("console_error", "cooldown_lines", -1)],
)
def test_config_errors(rule: str, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"^<overrides>: {rule}\.{key}: expected .*got {value}$"):
        load_rules_config(overrides={rule: {key: value}})


# --------------------------------------------------------------------------- stalled_stream
def test_a_gap_in_a_file_is_a_stall_that_ended() -> None:
    run = clean(2000, "exp", seed=1)
    run["time"][idx(run, 1001):] += 900.0
    alerts = engine_alerts(to_jsonl(run), now=float(run["time"][-1]) + 2)
    assert of(alerts, "stalled_stream") == [(1000, "warning")]
    a = next(a for a in alerts if a.rule == "stalled_stream")
    assert a.evidence["silence_s"] == pytest.approx(900.3, abs=1) and a.evidence["limit_s"] == 60


def test_finish_reports_an_old_file_without_run_end() -> None:
    run = clean(1000, "exp", seed=2)
    last = float(run["time"][-1])
    assert of(engine_alerts(to_jsonl(run, end=False), now=last + 3600), "stalled_stream") == [
        (1000, "warning")]
    assert of(engine_alerts(to_jsonl(run, end=True), now=last + 3600), "stalled_stream") == []
    assert of(engine_alerts(to_jsonl(run, end=False), now=last + 20), "stalled_stream") == []


def test_finish_does_not_fault_a_log_that_never_promised_a_run_end() -> None:
    # framework logs (TensorBoard, HF, text logs) and bare scripts write no run_start/run_end:
    # a file that ended long ago is a finished run, not a stalled one
    run = clean(1000, "exp", seed=2)
    last = float(run["time"][-1])
    bare = to_jsonl(run, start=False, end=False)
    assert of(engine_alerts(bare, now=last + 3600), "stalled_stream") == []
    # live, the same holds for a log that was already silent when watching began...
    live = RuleEngine(load_rules_config(), live=True)
    live.feed(JsonlParser("m", clock=lambda: 0.0).parse(bare))
    assert live.tick(last + 3600) == [] and live.tick(last + 7200) == []
    # ...but a silence that begins while we watch is a stall, announced or not
    live2 = RuleEngine(load_rules_config(), live=True)
    live2.feed(JsonlParser("m", clock=lambda: 0.0).parse(bare))
    assert live2.tick(last + 1) == []
    assert [a.rule for a in live2.tick(last + 3600)] == ["stalled_stream"]


def test_live_tick_reports_a_silence_once() -> None:
    run = clean(1000, "exp", seed=3)
    run["time"][idx(run, 501):] += 300.0
    lines = to_jsonl(run).splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if b'"step":501,' in ln)
    p = JsonlParser("m", clock=lambda: 0.0)
    e = RuleEngine(load_rules_config(), live=True)
    e.feed(p.parse(b"".join(lines[:cut]), 1))
    last = float(run["time"][idx(run, 500)])
    assert e.tick(last + 30) == []
    got = e.tick(last + 120)
    assert [(a.rule, a.step) for a in got] == [("stalled_stream", 500)]
    assert e.tick(last + 200) == []
    e.feed(p.parse(b"".join(lines[cut:]), cut + 1))  # the records come back: no second alert
    assert of(e.alerts, "stalled_stream") == [(500, "warning")]
    assert RuleEngine(load_rules_config(), live=False).tick(1e12) == []


# --------------------------------------------------------------------------- throughput_drop
def test_throughput_drop() -> None:
    run = clean(3000, "exp", seed=4)
    run["throughput"][idx(run, 1500):] *= 0.5
    alerts = engine_alerts(to_jsonl(run))
    found = of(alerts, "throughput_drop")
    assert len(found) == 1 and 1500 < found[0][0] <= 1560
    assert "dropped 50 %" in next(a for a in alerts if a.rule == "throughput_drop").message


@pytest.mark.parametrize("at", [70, 110, 150, 190, 230, 400])
def test_throughput_drop_while_the_reference_fills_is_found(at: int) -> None:
    # a drop among the first blocks of a segment (warm-up, the reference filling) is found, at
    # the same step whole and live
    run = clean(1200, "exp", seed=at)
    run["throughput"][idx(run, at):idx(run, at + 300)] *= 0.5
    data = to_jsonl(run)

    def drops(batches: list) -> list[tuple[int, str]]:
        e = RuleEngine(load_rules_config(), live=True)
        for b in batches:
            e.feed(b)
        return [(a.step, a.message) for a in e.alerts if a.rule == "throughput_drop"]

    found = [drops(f) for f in (parse_all(data), parse_live(data, seed=at, max_lines=150))]
    assert found[0] == found[1]
    assert len(found[0]) == 1 and at < found[0][0][0] <= at + 60, found


def test_throughput_drop_is_one_alert_per_episode() -> None:
    # another job takes the CPU for 60 of every 200 steps (18 s of every minute): one episode,
    # not an alert per dip; after 450 s of full speed the rule re-arms for a new drop
    run = clean(7000, "exp", seed=4)
    s = run["step"]
    run["throughput"][(s >= 1500) & (s < 4500) & ((s - 1500) % 200 < 60)] *= 0.5
    run["throughput"][(s >= 4500) & (s < 4560)] *= 0.8  # between low and recovered
    run["throughput"][s >= 6000] *= 0.5
    alerts = engine_alerts(to_jsonl(run))
    assert of(alerts, "throughput_drop") == [(1540, "warning"), (6040, "warning")]
    a = next(a for a in alerts if a.rule == "throughput_drop")
    assert a.causes[0].cause.startswith("other processes share the CPU or GPU")


def test_throughput_wobbling_around_the_threshold_is_one_drop() -> None:
    # 34 % and 26 % below in turn: each low window used to end the episode at the next one
    # (and never reach two in a row); the band between low and recovered breaks nothing
    run = clean(5000, "exp", seed=1)
    s = run["step"]
    w = s >= 1500
    run["throughput"][w] *= np.where(((s[w] - 1) // 20) % 2 == 0, 0.66, 0.74)
    assert of(engine_alerts(to_jsonl(run)), "throughput_drop") == [(1580, "warning")]


def test_step_time_stands_in_for_throughput() -> None:
    run = clean(3000, "exp", seed=5)
    run["step_time"][idx(run, 1500):] *= 2.0
    data = to_jsonl(run).replace(b',"throughput":', b',"tput_unknown":')
    found = of(engine_alerts(data), "throughput_drop")
    assert len(found) == 1 and 1500 < found[0][0] <= 1560


# --------------------------------------------------------------------------- memory and detach
def test_memory_growth_with_flat_step_time() -> None:
    run = clean(3000, "exp", seed=6)
    k = np.maximum(0, run["step"] - 1000)
    run["memory"] = run["memory"] * (1 + 2e-4 * k)
    alerts = engine_alerts(to_jsonl(run))
    found = of(alerts, "memory_growth")
    assert len(found) == 1 and 1000 < found[0][0] <= 1300
    assert of(alerts, "state_detach") == []
    assert "total_loss += loss" in next(a for a in alerts if a.rule == "memory_growth").causes[0].cause


def _detach_run(seed: int) -> dict:
    run = clean(2000, "exp", seed=seed)
    k = np.maximum(0, run["step"] - 800)
    run["step_time"] = run["step_time"] * (1 + 0.01 * k)
    run["throughput"] = 4096.0 / run["step_time"]
    run["memory"] = run["memory"] * (1 + 0.002 * k)
    return run


def test_detach_from_step_time_and_memory() -> None:
    alerts = engine_alerts(to_jsonl(_detach_run(7)))
    found = of(alerts, "state_detach")
    assert len(found) == 1 and found[0][1] == "warning" and 800 < found[0][0] <= 850
    assert of(alerts, "memory_growth") == [] and of(alerts, "throughput_drop") == []
    a = next(a for a in alerts if a.rule == "state_detach")
    assert "detach" in a.causes[0].cause and "h.detach()" in a.fixes[0]


def test_detach_from_step_time_alone() -> None:
    data = to_jsonl(_detach_run(8)).replace(b',"memory":', b',"host_stuff":')
    found = of(engine_alerts(data), "state_detach")
    assert len(found) == 1 and 800 < found[0][0] <= 900


def test_detach_probe_and_graph_size() -> None:
    run = clean(2000, "exp", seed=9)
    attached = (run["step"] >= 800).astype(float)
    alerts = engine_alerts(to_jsonl(run, extra={"state_attached": attached}))
    assert of(alerts, "state_detach") == [(800, "error")]
    graph = np.where(run["step"] % 10 == 0, 5000.0 + 40.0 * np.maximum(0, run["step"] - 800),
                     np.nan)
    data = to_jsonl(run, extra={"probe/graph_size": graph}).replace(
        b'"probe/graph_size":NaN,', b"")
    found = of(engine_alerts(data), "state_detach")
    assert len(found) == 1 and 800 < found[0][0] <= 1000


# --------------------------------------------------------------------------- rank_straggler
def _rank_streams(slow_rank: int | None, seed: int = 0) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    out = {}
    for r in range(4):
        dt = 0.3 * rng.lognormal(0, 0.04, 1000)
        if r == slow_rank:
            dt[500:] *= 2.0
        t = 1.7e9 + np.cumsum(dt)
        out[r] = "".join(f'{{"step":{s},"time":{ti},"step_time":{d},"loss":1.0}}\n'
                         for s, ti, d in zip(range(1, 1001), t, dt)).encode()
    return out


def test_straggler_backfill_and_live_agree() -> None:
    streams = _rank_streams(2)
    e = RuleEngine(load_rules_config(), live=False)
    for r, data in streams.items():
        for b in parse_all(data, f"metrics.rank{r}.jsonl"):
            assert e.feed_rank(r, b) == []  # compared once every rank's file is in
    got = e.finish(now=0.0)
    assert [(a.rule, a.step, a.evidence["rank"]) for a in got] == [("rank_straggler", 510, 2)]
    live = RuleEngine(load_rules_config(), live=True)
    feeds = {r: parse_live(d, seed=r, max_lines=30) for r, d in streams.items()}
    while any(feeds.values()):
        for r in range(4):
            if feeds[r]:
                live.feed_rank(r, feeds[r].pop(0))
    live.finish(now=0.0)
    assert [(a.step, a.evidence["rank"]) for a in live.alerts] == [(510, 2)]


def test_straggler_episodes_match_the_per_step_definition() -> None:
    """Runs of slow steps are taken a run at a time; the per-step state machine is the
    reference (carried across calls, as batches arrive)."""
    from trainwatch.rules.builtin.rank_straggler import RankStraggler, _RankState
    from trainwatch.rules.engine.base import Context

    cfg = load_rules_config().rules["rank_straggler"]

    def by_step(st: _RankState, slow: list[bool]) -> list[tuple[int, int]]:
        fired = []
        for i, sl in enumerate(slow):
            if sl:
                if st.run == 0:
                    st.run_start = i
                st.run += 1
                st.quiet = 0
                if st.run >= cfg.sustain and not st.active:
                    st.active = True
                    fired.append((i, st.run))
            else:
                st.run = 0
                st.quiet += 1
                if st.active and st.quiet >= cfg.rearm_points:
                    st.active = False
        return fired

    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(300):
        n = int(rng.integers(1, 120))
        slow = rng.random(n) < rng.uniform(0.1, 0.95)
        ref_state, state = _RankState(), _RankState()
        ref = by_step(ref_state, slow.tolist())
        r = RankStraggler(cfg, Context(load_rules_config(), live=False))
        r.inverted = False
        got = []
        cuts = sorted({0, n, *rng.integers(0, n, 3).tolist()})
        for lo, hi in itertools.pairwise(cuts):
            ratio = np.where(slow[lo:hi], 2.0, 1.0)
            steps = np.arange(lo, hi)
            hits = r._episodes(1, state, steps, ratio, ratio, np.ones(hi - lo), steps * 1.0, 4)
            got += [(h.alert.step, h.alert.evidence["steps"]) for h in hits]
        assert got == ref
        assert (state.run, state.active) == (ref_state.run, ref_state.active)
        if state.active:  # (the quiet count only matters while an episode is active)
            assert state.quiet == ref_state.quiet
        checked += len(ref)
    assert checked > 50


def test_no_straggler() -> None:
    e = RuleEngine(load_rules_config(), live=False)
    for r, data in _rank_streams(None).items():
        for b in parse_all(data):
            e.feed_rank(r, b)
    assert e.finish(now=0.0) == []


# --------------------------------------------------------------------------- console
def test_console_errors() -> None:
    e = RuleEngine(load_rules_config())
    lines = [
        "step 10 loss 2.3",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has ...",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has ...",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, ...)",
        ("RuntimeError: Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:0 and cpu!"),
        "RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed.",
        ("RuntimeError: one of the variables needed for gradient computation has been modified "
        "by an inplace operation: [torch.FloatTensor [10]] is at version 2; expected version 1"),
    ]
    got = e.feed_console(lines, 1)
    assert [(a.rule, a.evidence["kind"], a.evidence["line"]) for a in got] == [
        ("console_error", "cuda_oom", 2), ("console_error", "nccl_timeout", 4),
        ("console_error", "device_mismatch", 5), ("console_error", "dataloader_killed", 6),
        ("console_error", "inplace", 7)]
    assert got[0].message == "The GPU ran out of memory (tried to allocate 2.00 GiB)."
    assert got[2].message.endswith("(cuda:0 and cpu).")
    assert all(a.severity == "error" for a in got)


def test_ordinary_console_output_is_quiet() -> None:
    lines = [
        "Epoch 3:  45%|####5     | 450/1000 [01:02<01:16, 7.21it/s, loss=2.31, v_num=0]",
        "UserWarning: torch.cuda.amp.GradScaler(args...) is deprecated.",
        "max memory allocated: 12.3 GiB; reserved 14.0 GiB",
        "Saving checkpoint to runs/x/ckpt_1000.pt (device cuda:0)",
        "NCCL INFO Channel 00/02 : 0 1 2 3",
        "retain_graph is documented in torch.autograd.backward",
        "",
    ] * 50
    assert RuleEngine(load_rules_config()).feed_console(lines, 1) == []


def test_autograd_errors_are_state_detach() -> None:
    e = RuleEngine(load_rules_config())
    got = e.feed_console([
        "    loss.backward(retain_graph=True)",
        ("RuntimeError: one of the variables needed for gradient computation has been modified "
        "by an inplace operation: [torch.FloatTensor [64, 256]] is at version 3; expected "
        "version 2 instead."),
    ], 100)
    assert [(a.rule, a.severity, a.evidence["line"]) for a in got] == [("state_detach", "error", 101)]
    got = RuleEngine(load_rules_config()).feed_console(
        ["RuntimeError: Trying to backward through the graph a second time (or directly ..."], 1)
    assert [(a.rule, a.evidence["kind"]) for a in got] == [("state_detach", "backward_twice")]


# --------------------------------------------------------------------------- custom
def test_custom_threshold_rules() -> None:
    cfg = load_rules_config(overrides={"custom": [
        {"id": "loss_high", "metric": "loss", "above": 8, "for_steps": 10,
         "message": "loss {value} over {threshold} since {since}"},
        {"id": "gn_low", "metric": "grad_norm", "below": 0.01, "severity": "error"},
    ]})
    run = clean(2000, "exp", seed=10)
    run["loss"][idx(run, 1000):idx(run, 1020)] = 9.0
    run["loss"][idx(run, 1500):idx(run, 1505)] = 9.0  # too short
    run["grad_norm"][idx(run, 1800)] = 0.001
    alerts = engine_alerts(to_jsonl(run), cfg)
    assert of(alerts, "loss_high") == [(1009, "warning")]
    assert next(a for a in alerts if a.rule == "loss_high").message == (
        "loss 9 over 8 since 1000")
    assert of(alerts, "gn_low") == [(1800, "error")]
