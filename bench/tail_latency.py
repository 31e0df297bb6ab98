"""How long from a line being appended until the follower's callback has its record.

A writer thread appends one JSONL record every 10 ms (flushed at once); the callback notes when
each step arrives. Modes: file events (watchdog/inotify, 2 s backstop) and pure polling at
0.1 s and 0.5 s. Baseline, measured in the same run: a tight loop that reads the file from its
offset as fast as it can (no parsing, no thread hand-off), i.e. the raw append-to-read latency.
Also shown: read passes per second with a writer at 1000 lines/s (merging of wake-ups) and the
CPU the follower uses while nothing changes.

    .venv/bin/python bench/tail_latency.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.tailer import Follower

PERIOD_S = 0.010


def _writer(path: Path, n: int, period: float, sent: np.ndarray, ready: threading.Event) -> None:
    ready.wait()
    with open(path, "ab", buffering=0) as f:
        t0 = time.monotonic()
        for i in range(n):
            line = (json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n").encode()
            f.write(line)
            sent[i] = time.monotonic()
            delay = t0 + (i + 1) * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the writer's pace


def measure_follower(tmp: Path, n: int, poll: float | None, merge: float) -> np.ndarray:
    """Latency (s) of each of ``n`` records through a running Follower."""
    path = tmp / f"m_{poll}_{merge}.jsonl"
    path.touch()
    sent = np.full(n, np.nan)
    seen = np.full(n, np.nan)
    done = threading.Event()

    def on_batch(_p: str, b: RecordBatch) -> None:
        now = time.monotonic()
        steps = b.steps
        seen[steps] = now
        if steps.shape[0] and steps[-1] == n - 1:
            done.set()

    ready = threading.Event()
    w = threading.Thread(target=_writer, args=(path, n, PERIOD_S, sent, ready), name="writer")
    with Follower(on_batch=on_batch, poll_interval=poll, batch_interval=merge) as f:
        f.follow(path, lambda p: JsonlParser(str(p)))
        f.poll_now()
        w.start()
        ready.set()
        w.join()
        done.wait(timeout=5.0 + (poll or 2.0))
    return seen - sent


def measure_tight_loop(tmp: Path, n: int) -> np.ndarray:
    """Baseline: read from the tracked offset in a busy loop; latency until the newline shows."""
    path = tmp / "m_raw.jsonl"
    path.touch()
    sent = np.full(n, np.nan)
    seen = np.full(n, np.nan)
    ready = threading.Event()
    w = threading.Thread(target=_writer, args=(path, n, PERIOD_S, sent, ready), name="writer")
    fd = os.open(path, os.O_RDONLY)
    try:
        w.start()
        ready.set()
        offset, count = 0, 0
        deadline = time.monotonic() + n * PERIOD_S + 5.0
        while count < n and time.monotonic() < deadline:
            data = os.pread(fd, 1 << 20, offset)
            if data:
                now = time.monotonic()
                k = data.count(b"\n")
                seen[count : count + k] = now
                count += k
                offset += len(data)
            else:
                time.sleep(0)  # yield the GIL to the writer thread, then look again
        w.join()
    finally:
        os.close(fd)
    return seen - sent


def merge_rate(tmp: Path, seconds: float) -> tuple[float, int]:
    """A writer at 1000 lines/s: read passes per second the follower makes (events mode)."""
    path = tmp / "m_fast.jsonl"
    path.touch()
    n = int(seconds * 1000)
    sent = np.full(n, np.nan)
    got = [0]
    ready = threading.Event()
    w = threading.Thread(target=_writer, args=(path, n, 0.001, sent, ready), name="writer")
    with Follower(on_batch=lambda _p, b: got.__setitem__(0, got[0] + b.n_records)) as f:
        f.follow(path, lambda p: JsonlParser(str(p)))
        f.poll_now()
        start = f.passes
        t0 = time.monotonic()
        w.start()
        ready.set()
        w.join()
        deadline = time.monotonic() + 5.0
        while got[0] < n and time.monotonic() < deadline:
            time.sleep(0.01)  # waiting for the last records, bounded
        dt = time.monotonic() - t0
        passes = f.passes - start
    return passes / dt, got[0]


def idle_cpu(tmp: Path, seconds: float, poll: float | None) -> float:
    """CPU seconds per second of the whole process while an idle file is followed."""
    path = tmp / "m_idle.jsonl"
    path.write_bytes(b'{"step": 0}\n')
    if poll == 0:  # nothing running at all: the baseline
        c0, t0 = time.process_time(), time.monotonic()
        time.sleep(seconds)  # the measurement window itself
        return (time.process_time() - c0) / (time.monotonic() - t0)
    with Follower(on_batch=lambda _p, _b: None, poll_interval=poll) as f:
        f.follow(path, lambda p: JsonlParser(str(p)))
        f.poll_now()
        c0, t0 = time.process_time(), time.monotonic()
        time.sleep(seconds)  # the measurement window itself
        return (time.process_time() - c0) / (time.monotonic() - t0)


def _fmt(lat: np.ndarray) -> tuple[str, float, float, int]:
    ok = lat[np.isfinite(lat)]
    lost = int(lat.shape[0] - ok.shape[0])
    p50, p99 = (np.percentile(ok, [50, 99]) * 1e3) if ok.size else (np.nan, np.nan)
    return f"p50 {p50:8.3f} ms   p99 {p99:8.3f} ms", float(p50), float(p99), lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer records per mode (~10 s total)")
    args = ap.parse_args()
    n = 100 if args.quick else 500
    print(f"tail latency: one record every {PERIOD_S * 1e3:.0f} ms, {n} records per mode")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base_text, base50, base99, _ = _fmt(measure_tight_loop(tmp, n))
        print(f"  {'baseline: tight read loop':34s}{base_text}")
        modes = [
            ("events, 50 ms merging (default)", None, 0.05),
            ("events, no merging", None, 0.0),
            ("polling every 0.1 s", 0.1, 0.05),
            ("polling every 0.5 s", 0.5, 0.05),
        ]
        for label, poll, merge in modes:
            text, p50, p99, lost = _fmt(measure_follower(tmp, n, poll, merge))
            print(f"  {label:34s}{text}   x{p50 / base50:,.0f} / x{p99 / base99:,.0f} baseline"
                  f"   missing {lost}")
        rate, got = merge_rate(tmp, 1.0 if args.quick else 2.0)
        print(f"  writer at 1000 lines/s: {rate:.1f} read passes/s (vs 1000 appends/s, "
              f"x{1000 / rate:.0f} fewer), {got} records received")
        secs = 2.0 if args.quick else 4.0
        cpu = {k: idle_cpu(tmp, secs, k) * 100 for k in (0, None, 0.5)}
        print(f"  idle CPU of the process: {cpu[None]:.3f} % (events + 2 s backstop), "
              f"{cpu[0.5]:.3f} % (polling 0.5 s), baseline {cpu[0]:.3f} % (nothing running)")

if __name__ == "__main__":
    main()
