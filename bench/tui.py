"""The live TUI's costs, each printed next to a baseline measured in the same run.

  1. time to first frame, 1 M-line file vs 1 k-line file        target: ratio <= 1.5
  2. appended record -> on screen (and its alert), p50/p99       target: p99 <= 100 ms
     baseline: the tailer alone (write -> parsed batch in a callback)
  3. CPU of a full dashboard frame (4 charts + table, 120x40)    target: <= 0.25x naive
     baseline: naive PlotextPlot panels fed the same raw points
  4. idle CPU of the app                                         target: <= 0.5 % of a core
     baseline: a bare Textual app showing one Static
  5. CPU while a writer appends 1,000 lines/s                    target: <= 10 % of a core
     baseline: the same ingest (tailer + parser + rules) with no UI

The app runs headless through Pilot (the same factory as the CLI), with the real rule engine
when it can be loaded, else the test engine (printed). ``--quick`` uses smaller sizes.

    python bench/tui.py            # about 1.5 minutes
    python bench/tui.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

from trainwatch.tailer import Follower
from trainwatch.tui.app import AppConfig, make_app
from trainwatch.tui.chart import ChartPanel
from trainwatch.tui.ingest import make_reader
from trainwatch.tui.testing import FakeEngine, lines

SIZE = (120, 40)


def record(step: int, **values: Any) -> dict[str, Any]:
    """A record stamped now, as a live writer stamps it (the stall rule compares clocks)."""
    return {"step": step, "time": time.time(), **values}


def history(n: int) -> str:
    """n records that ended just now, 0.1 s apart."""
    now = time.time()
    return lines({"step": s, "time": now - (n - s) * 0.1, "loss": 1.0, "lr": 1e-3}
                 for s in range(1, n + 1))


def engine_factory() -> tuple[Any, str]:
    try:
        from trainwatch.rules import RuleEngine, load_rules_config

        cfg = load_rules_config(None)
        return (lambda: RuleEngine(cfg, live=True)), "real rule engine"
    except ImportError:
        return FakeEngine, "test engine (trainwatch.rules.RuleEngine not importable)"


def write_big(path: Path, n: int) -> None:
    """n training-like records, written fast (formatted in blocks, not json.dumps per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        f.write(json.dumps({"event": "run_start", "time": 1.7e9, "config": {"steps": 2 * n}}) + "\n")
        for start in range(0, n, 100_000):
            s = np.arange(start, min(n, start + 100_000))
            loss = 2.5 * np.exp(-s / (n / 5)) + 0.3 + rng.normal(0, 0.02, s.size)
            gn = 1.0 + rng.gamma(2.0, 0.1, s.size)
            f.write("".join(
                f'{{"step": {a}, "time": {1.7e9 + a * 0.1:.1f}, "loss": {b:.5f}, '
                f'"lr": 0.001, "grad_norm": {c:.4f}, "throughput": 20000}}\n'
                for a, b, c in zip(s.tolist(), loss.tolist(), gn.tolist())))


def cfg(path: Path, factory: Any) -> AppConfig:
    return AppConfig(path=path, engine_factory=factory, bell=False, notify=False)


async def wait(cond, timeout: float = 60.0, step: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("bench: condition not met in time")
        await asyncio.sleep(step)


# ---------------------------------------------------------------------- 1. first frame
async def first_frame(path: Path, factory: Any) -> float:
    t0 = time.monotonic()
    app = make_app(cfg(path, factory))
    async with app.run_test(size=SIZE):
        await wait(lambda: app.frames)
        return app.frames[0][0] - t0


async def bench_first_frame(tmp: Path, big_n: int, factory: Any) -> None:
    small, big = tmp / "small" / "metrics.jsonl", tmp / "big" / "metrics.jsonl"
    write_big(small, 1000)
    t = time.monotonic()
    write_big(big, big_n)
    print(f"  (wrote {big_n:,} lines, {big.stat().st_size / 1e6:.0f} MB, in {time.monotonic() - t:.1f} s)")
    rs = [await first_frame(small.parent, factory) for _ in range(3)]
    rb = [await first_frame(big.parent, factory) for _ in range(3)]
    s, b = statistics.median(rs), statistics.median(rb)
    print(f"  1 k lines: {s * 1e3:6.0f} ms   {big_n // 1000:,} k lines: {b * 1e3:6.0f} ms   "
          f"ratio {b / s:.2f}  (target <= 1.5)")


# ---------------------------------------------------------------------- 2. latency
async def bench_latency(tmp: Path, n: int, factory: Any) -> None:
    run = tmp / "lat"
    path = run / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(history(1000))
    app = make_app(cfg(run, factory))
    ui, alerts = [], []
    async with app.run_test(size=SIZE):
        await wait(app.loaded.is_set)
        await asyncio.sleep(0.3)
        step = 1000
        for k in range(n):
            nan = k % 5 == 4
            if nan:  # rules re-arm after ~100 finite steps: write those first, unmeasured
                with path.open("a") as f:
                    f.write(lines(record(step + 1 + i, loss=1.0, lr=1e-3) for i in range(120)))
                step += 120
                await wait(lambda s=step: any(x == s for _t, x in app.frames[-5:]), timeout=5)
                await asyncio.sleep(0.4)
            step += 1
            with path.open("a") as f:
                t = time.monotonic()
                f.write(lines([record(step, loss=math.nan if nan else 1.0, lr=1e-3)]))
            await wait(lambda s=step: any(x == s for _t, x in app.frames[-5:]), timeout=5,
                       step=0.0005)
            drawn = next(t1 for t1, s in reversed(app.frames) if s == step)
            ui.append(drawn - t)
            if nan:
                model = app.current_model()
                assert any(e.alert.step == step for e in model.alerts), "no alert for the NaN"
                alerts.append(drawn - t)
            await asyncio.sleep(0.3)  # one record at a time (a stream is drawn at 3 fps)
    base = tailer_latency(tmp / "lat2", n)
    p = lambda xs, q: float(np.percentile(xs, q)) * 1e3
    print(f"  TUI (record on screen): p50 {p(ui, 50):5.1f} ms  p99 {p(ui, 99):5.1f} ms  "
          f"max {max(ui) * 1e3:5.1f} ms  (target p99 <= 100)")
    print(f"  TUI (NaN alert shown):  p50 {p(alerts, 50):5.1f} ms  p99 {p(alerts, 99):5.1f} ms")
    print(f"  baseline, tailer alone: p50 {p(base, 50):5.1f} ms  p99 {p(base, 99):5.1f} ms")


def tailer_latency(run: Path, n: int) -> list[float]:
    path = run / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(history(1000))
    seen: dict[int, float] = {}
    fol = Follower(on_batch=lambda _p, b: seen.update({int(b.steps[-1]): time.monotonic()}))
    fol.follow(path, make_reader)
    fol.start()
    out = []
    try:
        deadline = time.monotonic() + 10
        while 1000 not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        for k in range(n):
            step = 1001 + k
            with path.open("a") as f:
                t = time.monotonic()
                f.write(lines([record(step, loss=1.0)]))
            deadline = time.monotonic() + 5
            while step not in seen and time.monotonic() < deadline:
                time.sleep(0.0005)
            out.append(seen[step] - t)
            time.sleep(0.3)
    finally:
        fol.stop()
    return out


# ---------------------------------------------------------------------- 3. frame CPU
async def bench_frame(tmp: Path, n: int, factory: Any) -> None:
    run = tmp / "frame"
    write_big(run / "metrics.jsonl", n)
    app = make_app(cfg(run, factory))
    async with app.run_test(size=SIZE) as pilot:
        await wait(app.loaded.is_set)
        await pilot.pause(0.3)
        charts = list(app.screen.query(ChartPanel).results(ChartPanel))

        def ours() -> None:
            for c in charts:
                c.data_key = None  # as if new data had arrived for every chart
            app._dirty.full = True
            app._redraw()
            compose(app)

        t_ours, k_ours = cpu_per_call(ours, 20)
        renders = sum(c.renders for c in charts)
        store = app.current_model().store
        raw = raw_columns(run / "metrics.jsonl", ["loss", "grad_norm", "lr", "throughput"])
    naive_app = NaiveApp(raw, app.current_model().store)
    async with naive_app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        t_naive, k_naive = cpu_per_call(lambda: naive_app.frame(), 3)
    print(f"  raw points per series: {len(raw['loss'][0]):,} (store keeps the newest "
          f"{store.recent_points:,} exact, older as min/max buckets)")
    print(f"  ours:  {t_ours * 1e3:7.1f} ms CPU per full frame ({k_ours} frames, {renders} chart "
          f"rasterisations)")
    print(f"  naive: {t_naive * 1e3:7.1f} ms CPU per full frame ({k_naive} frames, PlotextPlot x4)")
    print(f"  ratio {t_ours / t_naive:.3f}  (target <= 0.25)")


def raw_columns(path: Path, names: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every point of each series, as parsed from the file (what a naive app would plot)."""
    from trainwatch.formats.jsonl import JsonlParser

    batch = JsonlParser(str(path)).parse(path.read_bytes())
    return {nm: (batch.series[nm].steps, batch.series[nm].values) for nm in names}


def compose(app: Any) -> None:
    """Render every visible widget of the screen (what reaching the terminal costs)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    for line in update.strips:
        for strip in line:
            for _seg in strip:
                pass


def cpu_per_call(fn, n: int) -> tuple[float, int]:
    fn()  # warm caches that a long-running app has warm too
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n, n


def NaiveApp(raw: dict[str, tuple[np.ndarray, np.ndarray]], store: Any) -> Any:
    """Four PlotextPlot panels that plot every raw point each frame, plus the same table."""
    from textual.app import App, ComposeResult
    from textual.containers import Grid, Horizontal
    from textual_plotext import PlotextPlot

    from trainwatch.tui.metrics_table import MetricsTable

    class _Naive(App):
        CSS = "#g { grid-size: 2 2; width: 1fr; } #t { width: 50; }"

        def compose(self) -> ComposeResult:
            with Horizontal():
                with Grid(id="g"):
                    for i in range(4):
                        yield PlotextPlot(id=f"p{i}")
                yield MetricsTable(id="t")

        def frame(self) -> None:
            for i, (name, (x, y)) in enumerate(raw.items()):
                p = self.query_one(f"#p{i}", PlotextPlot)
                p.plt.clear_data()
                p.plt.plot(x.tolist(), y.tolist())
                p.plt.title(name)
                p.refresh()
            self.query_one(MetricsTable).sync(store, None, lambda _n: True)
            compose(self)

    return _Naive()


# ---------------------------------------------------------------------- 4. idle
async def bench_idle(tmp: Path, seconds: float, factory: Any) -> None:
    run = tmp / "idle"
    write_big(run / "metrics.jsonl", 20_000)
    app = make_app(cfg(run, factory))
    async with app.run_test(size=SIZE):
        await wait(app.loaded.is_set)
        await asyncio.sleep(1.0)
        ours = await cpu_over(seconds)
    from textual.app import App
    from textual.widgets import Static

    class Bare(App):
        def compose(self):
            yield Static("idle")

    bare = Bare()
    async with bare.run_test(size=SIZE):
        await asyncio.sleep(1.0)
        base = await cpu_over(seconds)
    print(f"  app idle: {ours:.2f} % of a core   baseline bare Textual app: {base:.2f} %   "
          f"(target <= 0.5 %)")


async def cpu_over(seconds: float) -> float:
    t, c = time.monotonic(), time.process_time()
    await asyncio.sleep(seconds)
    return 100.0 * (time.process_time() - c) / (time.monotonic() - t)


# ---------------------------------------------------------------------- 5. ingest 1000 lines/s
WRITER = textwrap.dedent("""
    import json, sys, time
    path, seconds, start = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    t0 = time.monotonic(); step = start
    with open(path, "a", buffering=1) as f:
        while time.monotonic() - t0 < seconds:
            block = "".join(json.dumps({"step": step + i, "time": time.time(), "loss": 1.0 / (step + i),
                            "lr": 1e-3, "grad_norm": 1.0, "throughput": 2e4}) + "\\n" for i in range(50))
            f.write(block); step += 50
            time.sleep(max(0.0, t0 + (step - start) / 1000.0 - time.monotonic()))
""")


def start_writer(path: Path, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(seconds), "1001"])


async def bench_ingest(tmp: Path, seconds: float, factory: Any) -> None:
    run = tmp / "ingest"
    path = run / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(history(1000))
    app = make_app(cfg(run, factory))
    async with app.run_test(size=SIZE):
        await wait(app.loaded.is_set)
        await asyncio.sleep(0.5)
        writer = start_writer(path, seconds)
        ours = await cpu_over(seconds)
        writer.wait()
        frames = len(app.frames)
    base = ingest_only(tmp / "ingest2", seconds, factory)
    print(f"  app: {ours:.1f} % of a core while 1,000 lines/s arrive ({frames} frames drawn)   "
          f"baseline ingest without UI: {base:.1f} %   (target <= 10 %)")


def ingest_only(run: Path, seconds: float, factory: Any) -> float:
    path = run / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(history(1000))
    engine = factory()
    fol = Follower(on_batch=lambda _p, b: engine.feed(b))
    fol.follow(path, make_reader)
    fol.start()
    try:
        time.sleep(0.5)
        writer = start_writer(path, seconds)
        t, c = time.monotonic(), time.process_time()
        writer.wait()
        return 100.0 * (time.process_time() - c) / (time.monotonic() - t)
    finally:
        fol.stop()


# ---------------------------------------------------------------------- main
async def main(quick: bool) -> None:
    factory, which = engine_factory()
    print(f"trainwatch TUI bench ({'quick' if quick else 'full'}; rules: {which})")
    with tempfile.TemporaryDirectory(prefix="tw-bench-") as d:
        tmp = Path(d)
        print("1. time to first frame")
        await bench_first_frame(tmp, 100_000 if quick else 1_000_000, factory)
        print("2. appended record -> screen")
        await bench_latency(tmp, 30 if quick else 100, factory)
        print("3. CPU of a full dashboard frame, 120x40")
        await bench_frame(tmp, 20_000 if quick else 100_000, factory)
        print("4. idle")
        await bench_idle(tmp, 5.0 if quick else 10.0, factory)
        print("5. ingesting 1,000 lines/s")
        await bench_ingest(tmp, 5.0 if quick else 10.0, factory)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller files and shorter windows")
    asyncio.run(main(ap.parse_args().quick))
