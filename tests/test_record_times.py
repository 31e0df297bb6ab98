"""A record without a ``time`` of its own takes the last own time before it (docs/format.md):
filling each with the time it was read put "now" between a script's timed records, which a
backfill read as an hour's silence before every timed one (stalled_stream fired 200 times on a
clean file) and a report as a run lasting until now."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainwatch.formats.jsonl import JsonlParser
from trainwatch.record_values import fill_times

NAN = math.nan


def _clock() -> float:
    return 1e9


@pytest.mark.parametrize(("times", "carried", "want"), [
    ([NAN, NAN], None, [1e9, 1e9]),  # a stream that never gives a time: the read time
    ([NAN, NAN], 5.0, [5.0, 5.0]),  # none in this read: the last one of an earlier read
    ([1.0, NAN, NAN, 4.0, NAN], None, [1.0, 1.0, 1.0, 4.0, 4.0]),
    ([NAN, NAN, 3.0, NAN], None, [3.0, 3.0, 3.0, 3.0]),  # before the first: the next own time
    ([NAN, 3.0], 2.0, [2.0, 3.0]),  # ... unless an earlier read gave one
])
def test_absent_times_take_the_last_own_time(times: list[float], carried: float | None,
                                             want: list[float]) -> None:
    assert fill_times(np.array(times), carried, _clock).tolist() == want


def _lines(n: int, every: int, t0: float) -> bytes:
    recs = []
    for s in range(1, n + 1):
        r: dict[str, float] = {"step": s, "loss": 2.0 / (1 + 0.01 * s)}
        if s % every == 0:
            r["time"] = t0 + s
        recs.append(json.dumps(r) + "\n")
    return "".join(recs).encode()


@pytest.mark.parametrize("lines_per_read", [1, 3, 10_000])
def test_times_are_the_same_however_the_file_is_read(lines_per_read: int) -> None:
    data = _lines(50, 10, 100.0).splitlines(keepends=True)
    p = JsonlParser("m.jsonl", clock=_clock)
    times = np.concatenate([p.parse(b"".join(data[i:i + lines_per_read])).times
                            for i in range(0, len(data), lines_per_read)])
    # steps 1-9 come before any own time: read whole they take step 10's; read piecemeal the
    # stream has given none yet, so the read time (what a live watch knows then)
    head = [110.0] * 9 if lines_per_read > 9 else [1e9] * 9
    assert times[:9].tolist() == head
    assert times[9:].tolist() == [100.0 + 10 * (s // 10) for s in range(10, 51)]


def test_check_finds_no_stall_in_a_file_timed_one_record_in_ten(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(
        _lines(2000, 10, 1.7e9) + b'{"event": "run_end", "status": "ok"}\n')
    out = subprocess.run([sys.executable, "-m", "trainwatch", "check", str(tmp_path),
                          "--format", "json", "--fail-on", "warning"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["alerts"] == []
