"""The TUI's pure parts (no app running): sanitiser, smoothing, sparklines, the braille renderer,
the view state, run state, header layout, notifications and PATH discovery."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from textual.content import Content

from trainwatch.tui.chart_render import (
    NAN_MARK,
    ChartSpec,
    Mark,
    Scale,
    Trace,
    as_text,
    braille,
    rasterise,
    render,
)
from trainwatch.tui.header import HeaderInfo, header_text
from trainwatch.tui.notify import notification_sequences
from trainwatch.tui.run_model import RunModel, find_total
from trainwatch.tui.run_state import run_state
from trainwatch.tui.sanitize import clean, markup_safe, safe_text
from trainwatch.tui.smoothing import debiased_ema
from trainwatch.tui.sparkline import sparkline, trend
from trainwatch.tui.target import RunSpec, discover
from trainwatch.tui.view_state import ViewState

EVIL = "\x1b[31mred\x1b[0m \x1b]0;pwned title\x07\x1b]52;c;ZXZpbA==\x07[bold]x[/bold]\x07\x08\u202eevil\r\n"


# ---------------------------------------------------------------------- sanitiser
def test_clean_strips_escape_sequences_and_controls():
    out = clean(EVIL)
    assert "\x1b" not in out and "\x07" not in out and "\x08" not in out
    assert "\u202e" not in out and "\r" not in out and "\n" not in out
    assert "pwned" not in out and "ZXZpbA" not in out  # OSC payloads go with their sequence
    assert out.startswith("red ") and "[bold]x[/bold]" in out and out.endswith("evil⏎")


@pytest.mark.parametrize("raw", ["\x9b31m8bit", "\x1bc reset", "tab\there", "\x1bP1$r\x1b\\dcs"])
def test_clean_leaves_only_printable(raw):
    out = clean(raw)
    assert out.isprintable(), repr(out)


def test_clean_keeps_plain_unicode_and_cuts_long_text():
    assert clean("loss/train·ε") == "loss/train·ε"
    assert clean("x" * 50, max_len=10) == "x" * 9 + "…"


def test_markup_in_names_is_shown_literally():
    name = "[bold red]loss[/] [link=http://x]y[/link]"
    assert Content.from_markup(markup_safe(name)).plain == name
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(safe_text(name))
    assert name in console.export_text()


# ---------------------------------------------------------------------- smoothing
def tensorboard_reference(values: list[float], w: float) -> list[float]:
    """TensorBoard's scalar smoothing, transcribed from its TypeScript."""
    last, n, out = 0.0, 0, []
    finite = [v for v in values if math.isfinite(v)]
    if not finite or all(v == finite[0] for v in finite):
        return list(values)
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        last = last * w + (1 - w) * v
        n += 1
        out.append(last / (1 - w**n))
    return out


@pytest.mark.parametrize("w", [0.6, 0.9, 0.99, 0.999])
@pytest.mark.parametrize("n", [1, 7, 5000])
def test_debiased_ema_matches_tensorboard(w, n):
    rng = np.random.default_rng(n)
    x = rng.normal(3, 1, n)
    if n > 5:
        x[n // 3] = np.nan
        x[n // 2] = np.inf
    got = debiased_ema(x, w)
    ref = np.array(tensorboard_reference(x.tolist(), w))
    assert np.allclose(got, ref, rtol=1e-9, atol=1e-9, equal_nan=True)
    assert np.isnan(got[n // 3]) if n > 5 else True


def test_smoothing_off_and_constant_series_pass_through():
    x = np.array([1.0, 2.0, 3.0])
    assert np.array_equal(debiased_ema(x, 0.0), x)
    c = np.array([2.0, 2.0, np.nan, 2.0])
    assert np.array_equal(debiased_ema(c, 0.9), c, equal_nan=True)


# ---------------------------------------------------------------------- sparklines
def test_sparkline_marks_nonfinite_buckets_and_scales():
    v = np.arange(16, dtype=float)
    assert sparkline(v, 8) == "▁▂▃▄▅▆▇█"
    v[5] = np.nan
    s = sparkline(v, 8)
    assert s[2] == "×" and len(s) == 8
    assert sparkline(np.array([1.0, 1.0]), 8) == "▄▄"
    assert sparkline(np.array([np.nan]), 4) == "×"


def test_trend_arrows():
    assert trend(np.linspace(5, 1, 50)) == "↓"
    assert trend(np.linspace(1, 5, 50)) == "↑"
    assert trend(np.random.default_rng(0).normal(1, 0.01, 50)) == "→"


# ---------------------------------------------------------------------- braille renderer
def test_rasterise_joins_points_and_breaks_at_nan():
    scale = Scale(0, 9, 0, 1)
    xs = np.arange(10, dtype=float)
    ys = np.full(10, 0.5)
    ys[5] = np.nan
    grid, bad = rasterise(xs, ys, ~np.isfinite(ys), scale, 20, 8)
    assert bad.tolist() == [round(5 / 9 * 19)]
    cols = np.flatnonzero(grid.any(axis=0))
    gap = set(range(20)) - set(cols.tolist())
    assert gap, "the NaN must leave a gap in the line"
    assert all(c in gap for c in range(round(4 / 9 * 19) + 1, round(6 / 9 * 19)))
    rows = np.flatnonzero(grid.any(axis=1))
    assert len(rows) == 1  # a flat line sits in one pixel row


def test_rasterise_steep_segment_fills_the_column_span():
    scale = Scale(0, 1, 0, 1)
    grid, _ = rasterise(np.array([0.0, 1.0]), np.array([0.0, 1.0]), np.zeros(2, bool), scale, 4, 16)
    # every pixel row is touched: a steep line has no holes
    assert grid.any(axis=1).all()


def test_braille_dot_order():
    grid = np.zeros((4, 2), bool)
    grid[0, 0] = grid[3, 1] = True
    assert braille(grid)[0, 0] == 0x01 | 0x80


def test_render_draws_nan_and_alert_marks_and_labels():
    xs = np.arange(100, dtype=float)
    ys = np.linspace(2, 1, 100)
    ys[70] = np.nan
    spec = ChartSpec((Trace(xs, ys, "cyan"),), (Mark(30, "bold red"),))
    rows = render(spec, 50, 10)
    text = as_text(rows)
    assert len(text) == 10 and all(len(r) == 50 for r in text)
    assert NAN_MARK in text[-2]  # bottom row of the plot
    assert "▼" in text[0]
    assert text[-1].strip().startswith("└0") and text[-1].rstrip().endswith("99")
    assert text[0].lstrip().startswith("2")
    # a value never appears where the NaN is: the NaN is a gap, not a point at 0
    assert any(style == "bold red" for row in rows for _t, style in row)


def test_render_log_axis_and_robust_range():
    xs = np.arange(200, dtype=float)
    ys = np.full(200, 10.0)
    ys[::2] = 1000.0
    ys[50] = 1e9  # one outlier
    log = as_text(render(ChartSpec((Trace(xs, ys, "g"),), log_y=True), 40, 8))
    labels = [float(r.split("┤")[0]) for r in log[:-1] if "┤" in r]
    assert labels[0] > 1e8 and labels[-1] < 20  # decades apart, evenly spaced in log space
    ratios = np.diff(np.log10(labels))
    assert np.allclose(ratios, ratios[0], rtol=0.2)
    robust = render(ChartSpec((Trace(xs, ys, "g"),), robust=True), 40, 8)
    top = as_text(robust)[0].split("┤")[0].strip()
    assert float(top) < 2000  # the outlier no longer sets the range


def test_render_empty_and_tiny():
    assert "waiting for data" in "".join(as_text(render(ChartSpec(()), 40, 6)))
    assert as_text(render(ChartSpec(()), 5, 2)) == ["     ", "     "]


# ---------------------------------------------------------------------- view state
def test_view_state_cycles_and_filter():
    v = ViewState()
    assert v.next_smoothing().smoothing == 0.6
    assert v.next_smoothing(-1).smoothing == 0.99
    assert v.next_x_mode().x_mode == "relative"
    assert v.toggle_zoom().zoom == 1000 and v.toggle_zoom().toggle_zoom().zoom is None
    assert v.scale_zoom(0.5).zoom == 500
    assert v.toggle_log("loss", False).log_y("loss", False) is True
    f = v.with_filter("grad|^lr$")
    assert f.matches("grad_norm") and f.matches("LR") and not f.matches("loss")
    bad = f.with_filter("(")
    assert bad.filter_error and bad.matches("grad_norm") and not bad.matches("loss")
    assert v.with_filter("").matches("anything")


# ---------------------------------------------------------------------- run model and state
def _model(tmp_path: Path, lines: list[dict]) -> RunModel:
    from trainwatch.formats.jsonl import JsonlParser

    spec = RunSpec("r", tmp_path, (tmp_path / "metrics.jsonl",), None)
    m = RunModel(spec)
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    m.apply_batch(JsonlParser("m").parse(data), main=True)
    m.finish_loading()
    return m


def test_run_state_from_events_and_clock(tmp_path):
    recs = [{"event": "run_start", "time": 100.0, "config": {"train": {"steps": 50}}}]
    recs += [{"step": i, "time": 100.0 + i, "loss": 1.0} for i in range(1, 11)]
    m = _model(tmp_path, recs)
    assert m.total_steps == 50 and m.last_step == 10
    assert run_state(m, now=112.0) == "idle"  # all of it was there when we opened the file
    m.last_arrival = 110.0  # ...until a record arrives while we watch
    assert run_state(m, now=112.0) == "running"
    assert run_state(m, now=110.0 + 61) == "stalled"
    assert m.rate() == pytest.approx(1.0)
    m.end = {"status": "finished", "exit_code": 0}
    assert run_state(m, now=1e6) == "finished"
    m.end = {"status": "crashed", "exit_code": 1}
    assert run_state(m, now=1e6) == "crashed"
    empty = RunModel(RunSpec("e", tmp_path, (tmp_path / "x.jsonl",), None))
    empty.finish_loading()
    assert run_state(empty, now=0.0) == "waiting for file"


def test_find_total():
    assert find_total({"trainer": {"max_steps": 1000}}) == 1000
    assert find_total({"lr": 0.1, "steps": True}) is None


def test_header_drops_least_useful_parts_when_narrow():
    info = HeaderInfo("exp", "running", 120, 1000, 3600.0, 600.0, "1.2k tok/s", 2.0, True,
                      None, ())
    wide = header_text(info, 200).plain
    assert all(s in wide for s in ("exp", "running", "120", "ETA", "tok/s", "elapsed", "read-only"))
    narrow = header_text(info, 60).plain
    assert "running" in narrow and "120" in narrow and "elapsed" not in narrow
    assert len(narrow) <= 60


# ---------------------------------------------------------------------- notifications
def test_notification_text_cannot_escape_the_sequence():
    seq = notification_sequences("trainwatch", "loss\x07 \x1b]0;x\x07;nan", tmux=False)
    payloads = re.findall(r"\x1b\](.*?)\x07", seq)
    assert len(payloads) == 2 and payloads[0].startswith("9;") and payloads[1].startswith("777;notify;")
    assert all("\x1b" not in p for p in payloads)
    assert payloads[1].count(";") == 3  # 777;notify;title;body: the body adds none
    wrapped = notification_sequences("t", "b", tmux=True)
    assert wrapped.startswith("\x1bPtmux;\x1b\x1b]9;") and wrapped.endswith("\x1b\\")


# ---------------------------------------------------------------------- discovery
def _write_run(d: Path, n: int = 3) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n"
                                             for i in range(n)))


def test_discover_kinds(tmp_path):
    _write_run(tmp_path / "sweep" / "a")
    _write_run(tmp_path / "sweep" / "b")
    assert discover(tmp_path / "sweep").kind == "sweep"
    assert {r.run_id for r in discover(tmp_path / "sweep").runs} == {"a", "b"}
    run = discover(tmp_path / "sweep" / "a")
    assert run.kind == "run" and run.runs[0].main_file == tmp_path / "sweep" / "a" / "metrics.jsonl"
    f = discover(tmp_path / "sweep" / "a" / "metrics.jsonl")
    assert f.kind == "file" and f.runs[0].console is None
    missing = discover(tmp_path / "later")
    assert missing.kind == "waiting"
    assert missing.runs[0].metric_files == (tmp_path / "later" / "metrics.jsonl",)
    assert discover(tmp_path / "later.jsonl").runs[0].metric_files == (tmp_path / "later.jsonl",)


# ---------------------------------------------------------------------- state, header semantics
def test_state_and_header_of_an_old_file_opened_now(tmp_path):
    """An old run with no end recorded: idle, "last" from its own timestamps, elapsed from its
    first record to its last: whatever the clock says, never running (nothing arrived)."""
    from trainwatch.tui.header import header_info

    recs = [{"step": i, "time": 1.7e9 + 10.0 * i, "loss": 1.0} for i in range(1, 101)]
    m = _model(tmp_path, recs)
    for now in (1.7e9 + 1000.0 + 5.0, 1.7e9 + 1000.0 + 95e6):
        state = run_state(m, now=now)
        assert state == "idle"
        info = header_info(m, state, now, read_only=False)
        assert info.age == pytest.approx(now - (1.7e9 + 1000.0))
        assert info.elapsed == pytest.approx(990.0) and info.eta is None
    assert run_state(m, now=1.7e9 + 1000.0) == "idle"  # even when the timestamps look fresh


def test_header_of_a_live_run_ticks_and_stops_when_it_ends(tmp_path):
    from trainwatch.tui.header import header_info

    recs = [{"event": "run_start", "time": 100.0, "config": {"steps": 1000}}]
    recs += [{"step": i, "time": 100.0 + i, "loss": 1.0} for i in range(1, 11)]
    m = _model(tmp_path, recs)
    m.last_arrival = 5000.0  # the writer's clock is 4890 s behind ours: only spans are used
    info = header_info(m, run_state(m, 5003.0), 5003.0, read_only=False)
    assert info.state == "running" and info.age == pytest.approx(3.0)
    assert info.elapsed == pytest.approx(10.0 + 3.0)
    assert info.eta == pytest.approx(990.0)  # one step a second, 990 to go
    m.end = {"status": "finished", "exit_code": 0}
    info = header_info(m, run_state(m, 9000.0), 9000.0, read_only=False)
    assert info.state == "finished" and info.elapsed == pytest.approx(10.0) and info.eta is None


@pytest.mark.parametrize(("end", "label"), [
    ({"status": "finished", "exit_code": 0}, "finished"),
    ({"status": "crashed", "exit_code": 3, "error": "ValueError: boom"}, "crashed (exit 3)"),
    ({"status": "crashed"}, "crashed"),
    ({"status": "finished", "exit_code": 2}, "crashed (exit 2)"),
    ({"status": "interrupted", "exit_code": 130}, "stopped (exit 130)"),
    ({"status": "unknown"}, "ended"),
])
def test_run_end_decides_the_state_and_its_label(tmp_path, end, label):
    from trainwatch.tui.header import header_info

    m = _model(tmp_path, [{"step": 1, "time": 1.0, "loss": 1.0}])
    m.end = end
    info = header_info(m, run_state(m, now=1e9), 1e9, read_only=False)
    assert info.state == label
    assert header_text(info).plain.count(label) == 1
    assert ("crashed: ValueError: boom" in info.notices) == ("error" in end)


def test_process_record_names_how_a_run_died(tmp_path):
    from trainwatch.trainer.process import ProcessInfo
    from trainwatch.tui.run_state import state_label

    m = _model(tmp_path, [{"step": 1, "time": 1.0, "loss": 1.0}])
    killed = ProcessInfo(None, ("x",), "", 0.0, "killed", signal=9, signal_name="SIGKILL")
    assert run_state(m, 1e9, killed) == "crashed"
    assert state_label(m, "crashed", killed) == "crashed (SIGKILL)"
    exited = ProcessInfo(None, ("x",), "", 0.0, "exited", exit_code=1)
    assert state_label(m, run_state(m, 1e9, exited), exited) == "crashed (exit 1)"


def test_preview_does_not_fake_the_run_start(tmp_path):
    """The file's end shown first must not pose as the whole run (3 min elapsed, then 1 h)."""
    from trainwatch.formats.jsonl import JsonlParser

    m = RunModel(RunSpec("r", tmp_path, (tmp_path / "metrics.jsonl",), None))
    tail = "".join(json.dumps({"step": i, "time": 1000.0 + i, "loss": 1.0}) + "\n"
                   for i in range(900, 1000)).encode()
    m.apply_preview((JsonlParser("m").parse(tail),))
    assert m.last_step == 999 and m.start_time is None
    whole = "".join(json.dumps({"step": i, "time": 1000.0 + i, "loss": 1.0}) + "\n"
                    for i in range(1, 1000)).encode()
    m.apply_batch(JsonlParser("m").parse(whole), main=True)
    m.finish_loading()
    assert m.start_time == 1001.0 and m.last_time == 1999.0


def test_speed_text_units():
    from trainwatch.tui.header import speed_text

    assert speed_text("throughput", 20700.0) == "20.7k/s"
    assert speed_text("train/tokens_per_second", 11400.0) == "11.4k tokens/s"
    assert speed_text("train_samples_per_second", 32.0) == "32 samples/s"
    assert speed_text("tok/s", 5.0) == "5 tok/s"
    assert speed_text("tps", 5.0) == "5 tok/s"


# ---------------------------------------------------------------------- axes
@pytest.mark.parametrize("log_y", [False, True])
def test_axis_of_a_positive_series_never_goes_below_zero(log_y):
    """An LR schedule decaying to 0 (or to 1e-9): no negative label, on any size."""
    xs = np.arange(600, dtype=float)
    ys = 3e-3 * np.sin(np.pi * xs / 600) ** 2
    ys[-1] = 0.0
    for w, h in ((35, 18), (40, 6), (80, 30)):
        spec = ChartSpec((Trace(xs, ys, "m"),), log_y=log_y)
        text = as_text(render(spec, w, h))
        labels = [float(r.split("┤")[0]) for r in text[:-1] if "┤" in r]
        assert min(labels) >= 0 and (min(labels) == 0 or log_y), text
        assert max(labels) >= ys.max()
        assert len(labels) >= 2


def test_axis_of_a_negative_series_stays_below_zero_and_mixed_crosses():
    xs = np.arange(50, dtype=float)
    neg = -np.linspace(1e-3, 5.0, 50)
    labels = [float(r.split("┤")[0]) for r in as_text(render(ChartSpec((Trace(xs, neg, "m"),)), 40, 12))
              if "┤" in r]
    assert max(labels) == 0 and min(labels) <= -5.0
    both = np.linspace(-1.0, 1.0, 50)
    labels = [float(r.split("┤")[0]) for r in as_text(render(ChartSpec((Trace(xs, both, "m"),)), 40, 12))
              if "┤" in r]
    assert min(labels) < -1.0 and max(labels) > 1.0  # padding on both sides where data is


def test_flat_zero_series_gets_a_usable_axis():
    xs = np.arange(20, dtype=float)
    text = as_text(render(ChartSpec((Trace(xs, np.zeros(20), "m"),)), 30, 8))
    labels = [float(r.split("┤")[0]) for r in text[:-1] if "┤" in r]
    assert min(labels) == 0 and max(labels) > 0


def test_y_labels_are_round_numbers_between_exact_edges():
    from trainwatch.tui.chart_render import nice_ticks

    assert nice_ticks(0.0, 0.0031, 3) == [0.001, 0.002, 0.003]
    assert nice_ticks(0.1, 3.7, 3) == [1.0, 2.0, 3.0]
    assert nice_ticks(-0.1, 1.8, 3, log_y=True) == [0.0, 1.0]  # 1 and 10 on a log axis
    near = nice_ticks(0.0, 0.18, 2, log_y=True)  # 1 .. 1.5: round values, not decades
    assert near and all(0 < t < 0.18 for t in near)
    assert np.allclose([10**t for t in near], np.round([10**t for t in near], 2))
    xs = np.arange(100, dtype=float)
    text = as_text(render(ChartSpec((Trace(xs, np.linspace(0.294, 3.5, 100), "c"),)), 40, 18))
    labels = [r.split("┤")[0].strip() for r in text if "┤" in r]
    assert labels[0] == "3.7" and labels[-1] == "0.1"  # the edges, exact
    assert {"1", "2", "3"} <= set(labels)  # round values between


# ---------------------------------------------------------------------- ingest service
class _SlowParser:
    """A JSONL reader whose first parse waits for the test: the window in which a chunk is
    counted as read but its batch is not handed on yet."""

    kind = "lines"
    format = "jsonl"

    def __init__(self, path) -> None:
        import threading

        from trainwatch.formats.jsonl import JsonlParser

        self._inner = JsonlParser(str(path))
        self.entered = threading.Event()
        self.release = threading.Event()

    def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False):
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10), "test never released the parser"
        return self._inner.parse(data, first_line, reset=reset)


def _wait(cond, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)  # polling a condition, bounded by the deadline


def test_backlog_is_never_posted_as_live_when_the_clock_checks_mid_parse(tmp_path):
    """The UI's once-a-second backstop ran while the last chunk of history was being parsed:
    it called the run loaded, and that chunk then arrived as live records (state flipped to
    running, "last 1 s ago"). Now the backstop waits for the follower's next pass."""
    from trainwatch.tui import messages as msg
    from trainwatch.tui.ingest import IngestService

    _write_run(tmp_path / "run", 50)
    spec = RunSpec("run", tmp_path / "run", (tmp_path / "run" / "metrics.jsonl",), None)
    posted: list = []
    readers: list[_SlowParser] = []

    def factory(path):
        readers.append(_SlowParser(path))
        return readers[-1]

    svc = IngestService(posted.append, None, poll_interval=0.05, reader_factory=factory)
    svc.add_run(spec, preview=False)
    svc.start()
    try:
        _wait(lambda: readers and readers[0].entered.is_set())
        for _ in range(3):
            svc.check_loaded()  # the UI clock, while every byte is read but not handed on
        assert not any(isinstance(p, msg.HistoryLoaded) for p in posted)
        readers[0].release.set()
        _wait(lambda: any(isinstance(p, msg.HistoryLoaded) for p in posted))
    finally:
        svc.stop()
    batches = [p for p in posted if isinstance(p, msg.BatchArrived)]
    assert batches and all(b.history for b in batches)
    assert sum(b.batch.n_records for b in batches) == 50
    kinds = [type(p).__name__ for p in posted]
    assert kinds.index("HistoryLoaded") > max(i for i, k in enumerate(kinds) if k == "BatchArrived")


def test_backstop_still_finishes_a_backlog_that_posts_no_batch(tmp_path):
    from trainwatch.tui import messages as msg
    from trainwatch.tui.ingest import IngestService

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n" * 1000)  # blank lines: no batch, no callback
    spec = RunSpec("run", run, (run / "metrics.jsonl",), None)
    posted: list = []
    svc = IngestService(posted.append, None, poll_interval=0.05)
    svc.add_run(spec, preview=False)
    svc.start()
    try:
        def loaded() -> bool:
            svc.check_loaded()
            return any(isinstance(p, msg.HistoryLoaded) for p in posted)

        _wait(loaded)
    finally:
        svc.stop()


def test_missing_console_log_is_not_a_problem_and_is_picked_up_later(tmp_path):
    from trainwatch.tui import messages as msg
    from trainwatch.tui.ingest import IngestService

    _write_run(tmp_path / "run", 5)
    console = tmp_path / "run" / "console.log"
    spec = RunSpec("run", tmp_path / "run", (tmp_path / "run" / "metrics.jsonl",), console)
    posted: list = []
    svc = IngestService(posted.append, None, poll_interval=0.05)
    svc.add_run(spec, preview=False)
    svc.start()
    try:
        _wait(lambda: any(isinstance(p, msg.HistoryLoaded) for p in posted))
        console.write_text("epoch 1\n")
        _wait(lambda: any(isinstance(p, msg.ConsoleLines) for p in posted))
        console.unlink()  # once seen, its disappearance is news
        _wait(lambda: any(isinstance(p, msg.SourceStatus) and p.state == "waiting" for p in posted))
    finally:
        svc.stop()
    statuses = [p for p in posted if isinstance(p, msg.SourceStatus)]
    waiting = [p for p in statuses if p.state == "waiting"]
    assert len(waiting) == 1 and "deleted or moved" in waiting[0].text
    lines_ = [p for p in posted if isinstance(p, msg.ConsoleLines)]
    assert lines_[0].lines == ("epoch 1",) and not lines_[0].history


def test_loaded_history_is_parked_out_of_the_collectors_way(tmp_path):
    """Full collections walking the whole heap cost 50-150 ms on the frame that shows an alert:
    once loaded, the heap is frozen; stopping gives it back."""
    import gc

    from trainwatch.tui import messages as msg
    from trainwatch.tui.ingest import IngestService

    _write_run(tmp_path / "run", 5)
    spec = RunSpec("run", tmp_path / "run", (tmp_path / "run" / "metrics.jsonl",), None)
    posted: list = []
    svc = IngestService(posted.append, None, poll_interval=0.05)
    svc.add_run(spec, preview=False)
    assert gc.get_freeze_count() == 0
    svc.start()
    try:
        _wait(lambda: any(isinstance(p, msg.HistoryLoaded) for p in posted))
        assert gc.get_freeze_count() > 0
    finally:
        svc.stop()
    assert gc.get_freeze_count() == 0


def test_chart_title_always_shows_the_values():
    from trainwatch.tui.dashboard import TITLE_CHROME, chart_title

    parts = [("train/loss", "#5fd7ff", "0.357"), ("validation/loss_of_the_model", "#ffd75f", "nan")]
    wide = Content.from_markup(chart_title(parts, 120)).plain
    assert wide == "━ train/loss 0.357  ━ validation/loss_of_the_model nan"
    for width in (50, 40, 35):
        plain = Content.from_markup(chart_title(parts, width)).plain
        assert len(plain) <= width - TITLE_CHROME, (width, plain)
        assert "0.357" in plain and plain.endswith("nan"), plain
        assert plain.startswith("━ tr") and "…" in plain
    narrow = Content.from_markup(chart_title(parts, 30)).plain  # one line and a count
    assert narrow.endswith("0.357 +1") and len(narrow) <= 30 - TITLE_CHROME
    assert "[bold red]nan[/]" in chart_title(parts, 60)  # a non-finite last value is red
    many = [(f"run{i}:loss", "#fff", "1.23") for i in range(6)]
    tight = Content.from_markup(chart_title(many, 40)).plain
    assert tight.endswith(tuple(f"+{k}" for k in range(1, 6))) and len(tight) <= 34
    evil = [("[bold]x[/bold]", "#fff", "1")]
    assert Content.from_markup(chart_title(evil, 80)).plain == "━ [bold]x[/bold] 1"


# ---------------------------------------------------------------------- engine protocol
@pytest.mark.parametrize("engine_cls", ["RuleEngine", "FakeEngine"])
def test_engines_take_what_the_engine_protocol_promises(engine_cls):
    """The ingest worker calls ``feed(batch, now)``; both engines must accept every call the
    protocol allows, by the same parameter names and defaults (no type checker runs in CI)."""
    import inspect

    from trainwatch.rules import RuleEngine
    from trainwatch.tui.config import Engine
    from trainwatch.tui.testing import FakeEngine

    cls = {"RuleEngine": RuleEngine, "FakeEngine": FakeEngine}[engine_cls]
    methods = [m for m in vars(Engine) if not m.startswith("_")]
    assert {"feed", "feed_rank", "feed_console", "tick", "mute"} <= set(methods)
    for name in methods:
        want = inspect.signature(getattr(Engine, name)).parameters
        got = inspect.signature(getattr(cls, name)).parameters
        assert [(p.name, p.default) for p in want.values()] == [
            (p.name, p.default) for p in got.values()
        ], f"{engine_cls}.{name}"
    assert inspect.signature(Engine.feed).parameters["now"].default is None


@pytest.mark.parametrize("written_ago, stalls", [(0.0, False), (7200.0, True)])
def test_a_backlog_is_judged_by_when_its_file_was_written(tmp_path, written_ago, stalls):
    """The writer's clock runs an hour behind ours. A run whose file was written just now is
    alive (judging by its records' timestamps raised a stall the moment it was opened); one
    whose file was last written two hours ago, with no run_end, has stalled."""
    import os
    import time

    from trainwatch.rules import RuleEngine, load_rules_config
    from trainwatch.tui import messages as msg
    from trainwatch.tui.ingest import IngestService

    run = tmp_path / "run"
    run.mkdir()
    t0 = time.time() - 3600 - 60  # the writer's clock: an hour behind
    rows = [{"event": "run_start", "step": 0, "time": t0}]
    rows += [{"step": i, "time": t0 + 0.5 * i, "loss": 1.0 / i} for i in range(1, 121)]
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mtime = time.time() - written_ago
    os.utime(metrics, (mtime, mtime))
    spec = RunSpec("run", run, (metrics,), None)
    posted: list = []
    svc = IngestService(posted.append, lambda: RuleEngine(load_rules_config(), live=True),
                        poll_interval=0.05)
    svc.add_run(spec, preview=False)
    svc.start()
    try:
        _wait(lambda: any(isinstance(p, msg.HistoryLoaded) for p in posted))
        svc.tick(time.time() + 1)
    finally:
        svc.stop()
    raised = [a for p in posted if isinstance(p, msg.AlertsRaised) for a in p.alerts]
    raised += [a for p in posted if isinstance(p, msg.BatchArrived) for a in p.alerts]
    got = [a for a in raised if a.rule == "stalled_stream"]
    assert bool(got) == stalls, got
    if stalls:
        assert got[0].evidence["silence_s"] == pytest.approx(written_ago, abs=30)


def test_a_start_step_is_information_and_a_failed_one_a_warning(tmp_path):
    """The header's second line marks what asks for attention with a warning sign; the start of
    a run launched here ("started pid N") is information and was shown with one too."""
    from trainwatch.tui.header import header_info, notice_text

    m = _model(tmp_path, [{"step": 1, "time": 1.0, "loss": 1.0}])
    info = header_info(m, run_state(m, now=1e9), 1e9, read_only=False,
                       status="started pid 42 in runs/x")
    line = notice_text(info).plain
    assert "▸ started pid 42 in runs/x" in line and "⚠" not in line
    info = header_info(m, run_state(m, now=1e9), 1e9, read_only=False,
                       notices=("could not start: no such config",))
    assert "⚠ could not start: no such config" in notice_text(info).plain
    assert notice_text(header_info(m, run_state(m, now=1e9), 1e9, read_only=False)) is None
