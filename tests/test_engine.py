"""The rule engine as a whole: live == backfill, ordering, mute, rewinds, resets, the API."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_rules_data import clean, idx, parse_all, parse_live, set_loss, to_jsonl

import trainwatch.rules as rules_pkg
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RULE_IDS, Alert, RuleEngine, load_rules_config

CFG = load_rules_config()


def _faulty(seed: int) -> bytes:
    """A run with one of everything the main stream can show."""
    run = clean(3500, ("exp", "cosine", "heavy", "step")[seed % 4], noise=0.03, seed=seed)
    run["loss"][idx(run, 600)] *= 4.0  # spike
    run["grad_norm"][idx(run, 900):idx(run, 903)] *= 300.0  # explosion
    run["time"][idx(run, 1101):] += 400.0  # stall
    run["step_time"][idx(run, 1300)] *= 8  # slow step
    k = np.maximum(0, run["step"] - 1400)
    run["memory"] = run["memory"] * (1 + 3e-4 * k)  # leak
    set_loss(run, 1800, run["mean"][idx(run, 1800)])  # plateau
    run["throughput"][idx(run, 2500):idx(run, 2700)] *= 0.5  # a slow patch
    run["loss"][idx(run, 3300):] = np.nan  # and it dies
    attached = (run["step"] >= 3400).astype(float)
    return to_jsonl(run, extra={"probe/state_attached": attached}, end=False)


def _feed(batches, live: bool = False) -> RuleEngine:
    e = RuleEngine(CFG, live=live)
    out: list[Alert] = []
    for b in batches:
        out += e.feed(b)
    assert out == e.alerts  # feed returns exactly what it adds
    return e


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_live_equals_backfill(seed: int) -> None:
    data = _faulty(seed)
    whole = _feed(parse_all(data)).alerts
    rules = {a.rule for a in whole}
    assert {"loss_spike", "grad_explosion", "stalled_stream", "step_time_outlier",
            "memory_growth", "plateau", "nan_inf", "state_detach", "throughput_drop"} <= rules, rules
    for chunking in range(2):
        live = _feed(parse_live(data, seed=seed * 7 + chunking, max_lines=25), live=True).alerts
        assert live == whole


def test_point_by_point_equals_backfill() -> None:
    run = clean(900, "heavy", noise=0.03, seed=11)
    run["loss"][idx(run, 500)] *= 5.0
    run["loss"][idx(run, 850):] = np.nan
    data = to_jsonl(run)
    whole = _feed(parse_all(data)).alerts
    assert [a.rule for a in whole] == ["loss_spike", "nan_inf"]
    assert _feed(parse_live(data, max_lines=1), live=True).alerts == whole


def test_alerts_come_in_record_order_and_serialise() -> None:
    alerts = _feed(parse_all(_faulty(0))).alerts
    steps = [a.step for a in alerts if a.rule != "stalled_stream"]
    assert steps == sorted(steps)
    for a in alerts:
        json.dumps(a.to_dict(), allow_nan=False)
        assert a.message.endswith(".") and "\n" not in a.message
        assert a.causes and a.fixes and a.rule in RULE_IDS
        assert list(a.causes) == sorted(a.causes, key=lambda c: -c.confidence)


def test_mute_and_unmute() -> None:
    run = clean(3000, "exp", seed=3)
    run["loss"][idx(run, 1000)] *= 4
    run["loss"][idx(run, 2000)] *= 4
    batches = parse_all(to_jsonl(run))
    lines = to_jsonl(run).splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if b'"step":1500,' in ln)
    p = JsonlParser("m", clock=lambda: 0.0)
    e = RuleEngine(CFG)
    e.mute("loss_spike")
    assert e.feed(p.parse(b"".join(lines[:cut]), 1)) == []
    e.unmute("loss_spike")
    got = e.feed(p.parse(b"".join(lines[cut:]), cut + 1))
    assert [(a.rule, a.step) for a in got] == [("loss_spike", 2000)]
    with pytest.raises(ValueError, match="unknown rule id 'nope'"):
        e.mute("nope")
    assert len(batches) == 2


def test_a_resumed_run_does_not_repeat_alerts_on_replayed_steps() -> None:
    first = clean(1500, "exp", seed=4)
    first["loss"][idx(first, 1200)] *= 4  # a data spike: it replays after the resume
    second = clean(2000, "exp", seed=4)
    second["loss"][idx(second, 1200)] *= 4
    second["grad_norm"][idx(second, 1300):idx(second, 1303)] *= 500  # new in the replay
    keep = second["step"] > 1000
    for k in ("step", "time", "loss", "lr", "grad_norm", "step_time", "throughput", "memory"):
        second[k] = second[k][keep]
    second["time"] = second["time"] + 5000.0
    data = to_jsonl(first, end=False) + to_jsonl(second, start=False)
    alerts = _feed(parse_all(data)).alerts
    assert [(a.rule, a.step) for a in alerts if a.rule in ("loss_spike", "grad_explosion")] == [
        ("loss_spike", 1200), ("grad_explosion", 1300)]
    live = _feed(parse_live(data, seed=5), live=True).alerts
    assert live == alerts


def test_a_reset_stream_does_not_repeat_alerts() -> None:
    run = clean(2000, "exp", seed=6)
    run["loss"][idx(run, 1000)] *= 4
    data = to_jsonl(run)
    p = JsonlParser("m", clock=lambda: 0.0)
    e = RuleEngine(CFG)
    first = e.feed(p.parse(data, 1))
    assert [a.rule for a in first if a.severity != "info"] == ["loss_spike"]
    assert e.feed(p.parse(data, 1, reset=True)) == []  # the file was replaced by itself
    assert len(e.alerts) == len(first)


def test_odd_batches() -> None:
    p = JsonlParser("m", clock=lambda: 0.0)
    e = RuleEngine(CFG)
    assert e.feed(p.parse(b"")) == []
    assert e.feed(p.parse(b'{"event":"run_start","time":1.0}\n')) == []
    assert e.feed(p.parse(b'{"step":1,"time":2.0,"loss":"nan"}\n')) != []
    assert e.feed(p.parse(b'not json\n{"step":2,"time":3.0,"acc":0.5}\n')) == []
    assert e.finish(now=4.0) == []
    assert e.feed_console([], 1) == []


def test_public_api() -> None:
    for name in ("RuleEngine", "load_rules_config", "RulesConfig", "ConfigError", "Alert",
                 "RULE_IDS"):
        assert hasattr(rules_pkg, name)
    e = RuleEngine()
    assert e.alerts == [] and e.live is True
    assert set(RULE_IDS) <= set(e.rule_ids)


def test_no_ui_or_torch_imports() -> None:
    code = ("import sys, trainwatch.rules, trainwatch.rules.engine.engine; "
            "bad = [m for m in ('textual', 'rich', 'plotext', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_faults_read_live_in_long_frames_fire_their_rules() -> None:
    """Reads of up to 2500 lines make frames of many blocks at once: every fault in these runs
    is still told (the block rules take a frame's blocks in one pass)."""
    datas = [_faulty(s) for s in range(4)]
    for seed in range(4):  # plus divergence, vanishing gradients and a long plateau
        run = clean(4000, ("exp", "heavy")[seed % 2], noise=0.06, seed=20 + seed)
        m = run["mean"][idx(run, 1500)]
        set_loss(run, 1500, m)
        k = np.arange(4000 - idx(run, 3000))
        set_loss(run, 3000, m * 2 ** (k / 400))
        run["grad_norm"][idx(run, 1500):idx(run, 2500)] *= 1e-4
        datas.append(to_jsonl(run))
    for seed in range(2):  # the LR at its floor while the loss improves, then ~0; a frozen loss
        run = clean(5000, "exp", seed=30 + seed)
        run["lr"][idx(run, 1000):] *= 0.03
        run["lr"][idx(run, 3500):] = 0.0
        run["loss"][idx(run, 4500):] = run["loss"][idx(run, 4500)]
        datas.append(to_jsonl(run))
    alerts = [_feed(parse_live(d, seed=2, max_lines=2500)).alerts for d in datas]
    rules = {a.rule for run in alerts for a in run}
    assert {"plateau", "divergence", "grad_vanishing", "throughput_drop", "memory_growth",
            "state_detach", "stalled_stream", "lr_exhausted", "learning_stalled"} <= rules, rules


# ------------------------------------------------------------------ live stalls by arrival time
DAY = 86400.0


def _old_log(start: bool = True) -> list[bytes]:
    """Lines of a clean run whose timestamps are 1000 days old (a replayed log, or a writer on
    another machine whose clock is far behind): they arrive now."""
    run = clean(400, "exp", seed=12)
    run["time"] = run["time"] - 1000 * DAY
    return to_jsonl(run, start=start, end=False).splitlines(keepends=True)


def _arrive(e: RuleEngine, lines: list[bytes], t0: float, *, ticks: bool,
            arrival: bool = True) -> tuple[list[Alert], float]:
    """Feed 10 lines a second from ``t0`` (as a tailer would), ticking after each read as the
    UI does; returns every alert and the last arrival time."""
    p = JsonlParser("m", clock=lambda: 0.0)
    got: list[Alert] = []
    now = t0
    for i in range(0, len(lines), 10):
        now = t0 + i / 10
        got += e.feed(p.parse(b"".join(lines[i:i + 10]), i + 1), now=now if arrival else None)
        if ticks:
            got += e.tick(now)
    return got, now


@pytest.mark.parametrize("announced", [True, False])
def test_live_silence_is_measured_from_arrival(announced: bool) -> None:
    t0 = 1.8e9
    e = RuleEngine(CFG, live=True)
    got, last = _arrive(e, _old_log(start=announced), t0, ticks=True)
    assert [a for a in got if a.rule == "stalled_stream"] == []  # arriving now: no stall
    assert e.tick(last + 30) == []  # silent, but for less than the limit (60 s)
    fired = e.tick(last + 61)
    assert [(a.rule, a.step) for a in fired] == [("stalled_stream", 400)]
    ev = fired[0].evidence
    assert ev["silence_s"] == pytest.approx(61) and ev["last_arrival_time"] == last
    assert ev["last_record_time"] < t0 - 999 * DAY  # the writer's own clock, for the record
    assert e.tick(last + 600) == []  # once
    if announced:
        # the old call (no arrival time) judges by the records' clock: each record that arrives
        # looks 1000 days late, and the run "stalls" again and again while it is writing
        old = RuleEngine(CFG, live=True)
        got, last = _arrive(old, _old_log(start=announced), t0, ticks=True, arrival=False)
        stalls = [a for a in got if a.rule == "stalled_stream"]
        assert len(stalls) > 1 and stalls[0].evidence["silence_s"] > 999 * DAY


def test_a_backlog_read_at_start_keeps_its_semantics() -> None:
    """History read when watching begins arrives all at once: a log that was already silent by
    its own clock then is idle, not stalled, unless it promised a run_end (then a silence from
    when we read it is a stall)."""
    t0 = 1.8e9
    for announced, expect in ((False, []), (True, [("stalled_stream", 400)])):
        e = RuleEngine(CFG, live=True)
        p = JsonlParser("m", clock=lambda: 0.0)
        e.feed(p.parse(b"".join(_old_log(start=announced)), 1), now=t0)
        assert e.tick(t0 + 1) == []
        got = e.tick(t0 + 120) + e.tick(t0 + 7200)
        assert [(a.rule, a.step) for a in got] == expect
    # a backfill ignores arrival times: the records' clock judges, at finish() too
    e = RuleEngine(CFG, live=False)
    p = JsonlParser("m", clock=lambda: 0.0)
    e.feed(p.parse(b"".join(_old_log()), 1), now=t0)
    assert e.tick(t0 + 7200) == []
    assert [(a.rule, a.step) for a in e.finish(now=t0)] == [("stalled_stream", 400)]


def test_arrival_times_do_not_change_what_feed_returns() -> None:
    data = _faulty(1)
    plain = _feed(parse_live(data, seed=3, max_lines=50), live=True).alerts
    e = RuleEngine(CFG, live=True)
    timed = [a for i, b in enumerate(parse_live(data, seed=3, max_lines=50))
             for a in e.feed(b, now=1.8e9 + i)]
    assert timed == plain == e.alerts


@pytest.mark.parametrize("seed", range(3))
def test_context_recent_and_count_before_against_the_whole_history(seed: int) -> None:
    """What rules ask the context about a role (the last n finite values at or before a record,
    the finite points before one) equals a direct reading of every point fed so far."""
    from trainwatch.rules.engine.base import HISTORY, Context, Frame, Points

    rng = np.random.default_rng(seed)
    ctx = Context()
    all_pos: list[int] = []
    all_val: list[float] = []
    pos0 = 0
    for _ in range(12):
        n = int(rng.integers(0, 400))
        pos = pos0 + np.sort(rng.choice(np.arange(1, 3 * n + 2), n, replace=False))
        val = rng.normal(size=n)
        val[rng.random(n) < 0.1] = np.nan
        pts = Points("loss", pos * 10, val, pos.astype(float), pos.astype(np.int64))
        fr = Frame(0, {"loss": "loss"}, {"loss": pts} if n else {}, (), pos * 10,
                   pos.astype(float), pos, np.zeros(n, dtype=bool))
        ctx.frame = fr
        finite = ~np.isnan(val)
        hist_pos = np.asarray(all_pos[-HISTORY:], dtype=np.int64)
        hist_val = np.asarray(all_val[-HISTORY:])
        # queries are for records of the frame (or the one just before it: "the loss before")
        for q in [*rng.integers(pos0, pos0 + 3 * n + 5, 6).tolist(), pos0 - 1]:
            keep = pos[finite] <= q
            ref_pos = np.concatenate([hist_pos[hist_pos <= q], pos[finite][keep]])
            ref_val = np.concatenate([hist_val[hist_pos <= q], val[finite][keep]])
            for k in (1, 5, 300):
                s, v = ctx.recent("loss", q, k)
                assert v.tolist() == ref_val[-k:].tolist()
                assert s.tolist() == (ref_pos[-k:] * 10).tolist()
            before = len(all_pos) + int(np.count_nonzero(pos[finite] < q))
            assert ctx.count_before("loss", q) == before
        ctx.end_frame(fr)
        ctx.frame = None
        all_pos += pos[finite].tolist()
        all_val += val[finite].tolist()
        pos0 = int(pos[-1]) + 1 if n else pos0


def test_resolved_roles_are_remembered_per_table() -> None:
    from trainwatch.roles import DEFAULT_ROLES, RoleTable

    names = {"loss", "lr-AdamW", "lr-SGD", "memory", "acc"}
    mine = DEFAULT_ROLES.extended({"lr": ["lr-SGD"]})
    for table in (DEFAULT_ROLES, mine, DEFAULT_ROLES, mine):  # the second time, remembered
        fresh = RoleTable(table.aliases, table.patterns)  # (nothing remembered yet)
        assert table.resolve(names) == fresh.resolve(names)
        assert frozenset(names) in table._resolved  # type: ignore[attr-defined]
    assert mine.resolve(names)["lr"] == "lr-SGD"
    got = DEFAULT_ROLES.resolve(names)
    got["loss"] = "changed"  # each caller gets its own dict
    assert DEFAULT_ROLES.resolve(names)["loss"] == "loss"


def test_equally_ranked_names_resolve_the_same_in_any_order() -> None:
    # two pattern matches for one role: the winner must not depend on a set's iteration order
    from trainwatch.roles import DEFAULT_ROLES

    for names in (["lr-SGD", "lr-AdamW", "loss"], ["loss", "lr-AdamW", "lr-SGD"]):
        assert DEFAULT_ROLES.resolve(names)["lr"] == "lr-AdamW"
        assert DEFAULT_ROLES.resolve(reversed(names))["lr"] == "lr-AdamW"


def test_rules_are_built_per_config_in_frame_order(tmp_path: Path) -> None:
    """The engine builds the rules the config enables (a rule that also raises another's alerts
    while either is on), in frame order, then the custom rules."""
    from trainwatch.rules.engine.engine import _RULES

    off = tmp_path / "off.yaml"
    off.write_text("plateau: false\nmemory_growth: false\nstalled_stream: false\n"
                   "console_error: false\n"
                   "custom:\n  - id: acc_low\n    metric: acc\n    below: 0.5\n")
    cfg_off = load_rules_config(off)
    for cfg in (CFG, cfg_off, CFG, cfg_off):
        e = RuleEngine(cfg, live=False)
        built = [r.id for r in e._rules]
        assert built == [*[rid for rid, _c in _RULES if rid in built], *[c.id for c in cfg.custom]]
        on = cfg is CFG
        assert all((rid in built) == on for rid in ("plateau", "memory_growth", "stalled_stream"))
        assert "console_error" in built  # (state_detach's console errors are its to tell)
        assert ("plateau" in e._enabled) == on and ("acc_low" in e._enabled) == (not on)


def test_a_reset_forgets_the_rank_streams() -> None:
    """A reset (the main stream read again from the top) builds the rules anew: the rank rule
    forgets what the rank streams brought."""
    from test_rules_system import _rank_streams

    e = RuleEngine(CFG, live=False)
    assert e.finish(now=0.0) == []  # no rank stream: nothing to compare
    for r, data in _rank_streams(2).items():
        for b in parse_all(data, f"metrics.rank{r}.jsonl"):
            e.feed_rank(r, b)
    p = JsonlParser("m", clock=lambda: 0.0)
    e.feed(p.parse(to_jsonl(clean(200, "exp", seed=1)), 1, reset=True))
    assert [a.rule for a in e.finish(now=0.0) if a.rule == "rank_straggler"] == []
    for r, data in _rank_streams(2).items():
        for b in parse_all(data, f"metrics.rank{r}.jsonl"):
            e.feed_rank(r, b)
    assert [(a.rule, a.step) for a in e.finish(now=0.0) if a.rule == "rank_straggler"] == [
        ("rank_straggler", 510)]


def _read_in(lines: list[bytes], k: int, live: bool) -> list[Alert]:
    """The alerts of ``lines`` fed in reads of ``k`` lines (``live``: as the TUI feeds them)."""
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    e = RuleEngine(CFG, live=live)
    for i in range(0, len(lines), k):
        e.feed(p.parse(b"".join(lines[i:i + k]), i + 1))
    e.finish(now=1e9)
    return e.alerts


@pytest.mark.parametrize("lines_per_read", [1, 7, 300])
def test_a_series_counts_from_the_record_it_first_appears_at(lines_per_read: int) -> None:
    """Roles are resolved from the names seen so far: a series that first appears after
    another one's point counts from that record however the stream is read. Here the first
    record has only a step time: throughput_drop falls back to its inverse there, then reads
    the logged throughput (read whole, the frame is cut at the second record)."""
    recs = ['{"step":1,"time":1.0,"step_time":0.5}']
    recs += [f'{{"step":{s},"time":{s}.0,"throughput":{550.0 if s < 200 else 100.0}}}'
             for s in range(2, 260)]
    lines = [(r + "\n").encode() for r in recs]

    def drops(k: int, live: bool) -> list[tuple[int, str]]:
        return [(a.step, a.message) for a in _read_in(lines, k, live)
                if a.rule == "throughput_drop"]

    one_by_one = drops(1, live=True)
    assert one_by_one and one_by_one[0][0] == 240
    assert drops(lines_per_read, live=lines_per_read < 300) == one_by_one


def test_a_role_moves_to_a_better_named_series_at_the_same_record_however_read() -> None:
    """``train_loss`` is the loss until a series named ``loss`` (ranked first) appears at record
    300: read whole, the frame is cut there, so the rules read the loss role as they do fed
    record by record. The loss rules start over on ``loss`` (no spike at its jump), and the run's
    count of loss points goes on: a NaN at step 350 is 350 points into the run, not within the
    first 100 (without the cut, read whole, ``loss`` would be the loss from the first record and
    the NaN its 50th point)."""
    rng = np.random.default_rng(0)
    recs = []
    for s in range(1, 601):
        r = {"step": s, "time": float(s), "train_loss": 1.0 + 0.01 * rng.standard_normal()}
        if s > 300:
            r["loss"] = math.nan if s == 350 else 5.0 + 0.01 * rng.standard_normal()
        recs.append(r)
    lines = [(json.dumps(r) + "\n").encode() for r in recs]

    def alerts(k: int, live: bool) -> list[tuple[str, int, str | None, str]]:
        return [(a.rule, a.step, a.metric, a.message) for a in _read_in(lines, k, live)]

    one_by_one = alerts(1, live=True)
    assert [(r, s) for r, s, _m, _t in one_by_one] == [("nan_inf", 350)]
    assert "after only" not in one_by_one[0][3]
    assert alerts(7, live=True) == one_by_one
    assert alerts(len(lines), live=False) == one_by_one


def test_a_memory_series_that_comes_late_counts_from_its_first_record() -> None:
    """Until a memory series comes, state_detach may tell a missing detach from the step time
    alone (time_only): read whole, the frame is cut where memory first appears, so a step time
    that ramps before it is told as it is fed record by record."""
    rng = np.random.default_rng(0)
    recs = []
    for s in range(1, 1201):
        r = {"step": s, "time": float(s), "step_time": 0.5 * (1 + s / 50) + rng.normal(0, 0.01)}
        if s >= 400:
            r["memory"] = 1000.0 + rng.normal(0, 0.5)
        recs.append(r)
    lines = [(json.dumps(r) + "\n").encode() for r in recs]

    def detach(k: int, live: bool) -> list[tuple[int, str]]:
        return [(a.step, a.message) for a in _read_in(lines, k, live) if a.rule == "state_detach"]

    one_by_one = detach(1, live=True)
    assert [s for s, _m in one_by_one] == [40]
    assert detach(7, live=True) == one_by_one
    assert detach(len(lines), live=False) == one_by_one


def test_lightnings_per_step_loss_stays_the_loss_after_an_epoch_ends() -> None:
    """Lightning logs ``self.log(..., on_step=True, on_epoch=True)`` as ``train_loss_step`` on
    every step and ``train_loss_epoch`` at each epoch's end: the loss is the per-step series
    before and after the first epoch's value comes (else the loss rules would read one point
    per epoch from then on)."""
    from trainwatch.roles import DEFAULT_ROLES

    assert DEFAULT_ROLES.resolve({"train_loss_epoch", "train_loss_step"})["loss"] == \
        "train_loss_step"
    lines = [(json.dumps({"step": s, "time": float(s), "train_loss_step": 2.0 - s / 1000}
                         | ({"train_loss_epoch": 1.9} if s == 100 else {})) + "\n").encode()
             for s in range(1, 301)]
    e = RuleEngine(CFG, live=True)
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    for i, line in enumerate(lines):
        e.feed(p.parse(line, i + 1))
        assert e._roles["loss"] == "train_loss_step", i
