"""The report's figures from series streamed past in chunks (#15) against the whole-array
functions they replace: every accumulator of ``series_walk``, the LR shape, the exact median's
narrowing walks, the run tally's counts, and whole reports of runs with resumed segments. Seeded
data, fed in random chunkings."""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest

from trainwatch.batch import RecordBatch, iter_joined
from trainwatch.commands import series_walk
from trainwatch.commands.check import (
    BACKFILL_JOIN,
    backfill_batches,
    count_steps,
    run_check,
)
from trainwatch.commands.report import (
    BARS,
    build_report,
    classify_lr,
    spark_text,
    sparkline,
)
from trainwatch.commands.run_summary import (
    Series,
    collect_series,
    moving_average,
    role_moves,
    summarize_metric,
)
from trainwatch.commands.series_walk import (
    ExactMedian,
    LrAcc,
    MetricAcc,
    MovingMin,
    SparkAcc,
    TailAcc,
    ValTurnAcc,
)
from trainwatch.commands.tally import RunTally, SeriesTally, StepSet, Thinned
from trainwatch.commands.verdict import TAIL, _val_turn, tail_trend, tail_trend_of
from trainwatch.load import LoadedRun, LoadError, load_run
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.rules import load_rules_config
from trainwatch.rules.detectors.stats import distinct, median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.synthetic import clean_run, fault_run


def _chunks(rng: np.random.Generator, n: int) -> list[slice]:
    """Random cut points, never an empty chunk (the walks give none): one chunk, sometimes."""
    if n == 0:
        return []
    if rng.random() < 0.2:
        return [slice(0, n)]
    cuts = np.sort(rng.choice(np.arange(1, max(n, 2)), size=min(n - 1, rng.integers(1, 12)),
                              replace=False)) if n > 1 else np.array([], dtype=np.int64)
    edges = [0, *cuts.tolist(), n]
    return [slice(a, b) for a, b in itertools.pairwise(edges) if b > a]


def _series(rng: np.random.Generator, n: int, nan_share: float = 0.02) -> tuple[np.ndarray,
                                                                                  np.ndarray]:
    steps = np.cumsum(rng.integers(1, 4, n)).astype(np.int64)
    values = 3.0 * np.exp(-np.arange(n) / max(n, 1) * 3) + 0.1 * rng.standard_normal(n)
    values[rng.random(n) < nan_share] = np.nan
    values[rng.random(n) < nan_share / 4] = np.inf
    return steps, values


SIZES = (0, 1, 2, 5, 19, 20, 21, 99, 400, 1001, 5003)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("smooth", [True, False])
def test_metric_acc_is_summarize_metric(n: int, smooth: bool) -> None:
    rng = np.random.default_rng(n * 2 + smooth)
    steps, values = _series(rng, n)
    ref = summarize_metric("m", Series(steps, values, np.zeros(n)), smooth=smooth)
    acc = MetricAcc("m", n, int(np.isfinite(values).sum()), smooth=smooth)
    for sl in _chunks(rng, n):
        acc.feed(steps[sl], values[sl])
    assert _same(acc.result(), ref)


def _same(a: object, b: object) -> bool:
    """Dataclasses equal field for field (floats bit for bit, NaN equal to NaN)."""
    return all(x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))
               for x, y in zip(astuple(a), astuple(b), strict=True))  # type: ignore[arg-type]


@pytest.mark.parametrize("w", (1, 2, 3, 50))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_moving_min_is_moving_average_then_argmin(w: int) -> None:
    rng = np.random.default_rng(w)
    for v in (rng.standard_normal(997) + 5,  # (the second overflows: numpy warns)
              np.array([1e308, 1e308, 1.0, 2.0, 3.0, 0.5, 0.25])):  # an overflowing sum: NaN
        ref = moving_average(v, w)
        mm = MovingMin(w)
        for sl in _chunks(rng, v.size):
            mm.feed(v[sl])
        nan = np.flatnonzero(np.isnan(ref))
        best = int(nan[0]) if nan.size else int(np.argmin(ref))
        assert mm.best_index == best
        assert _bits(mm.best) == _bits(float(ref[best])) and _bits(mm.last) == _bits(float(ref[-1]))


def _bits(x: float) -> bytes:
    return np.float64(x).tobytes() if not math.isnan(x) else b"nan"


@pytest.mark.parametrize("n", (1, 2, 3, 4, 10, 333))
def test_val_turn_acc_is_val_turn(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    steps, values = _series(rng, n, nan_share=0.1)
    acc = ValTurnAcc(int(np.isfinite(values).sum()))
    for sl in _chunks(rng, n):
        acc.feed(steps[sl], values[sl])
    assert acc.result() == _val_turn(steps, values)


@pytest.mark.parametrize("n", (10, 99, 100, 101, 2000, 7777))
def test_tail_acc_gives_tail_trend(n: int) -> None:
    rng = np.random.default_rng(200 + n)
    steps, values = _series(rng, n)
    acc = TailAcc(int(np.isfinite(values).sum()), TAIL)
    for sl in _chunks(rng, n):
        acc.feed(steps[sl], values[sl])
    assert tail_trend_of(*acc.tail()) == tail_trend(steps, values)


def _sparkline_ref(values: np.ndarray, width: int = 48) -> str:
    """The report's sparkline as it was, on the whole array."""
    v = np.asarray(values, dtype=np.float64)
    n = min(width, v.size)
    if n == 0:
        return ""
    edges = np.linspace(0, v.size, n + 1).astype(np.int64)
    means, bad = np.empty(n), np.zeros(n, dtype=bool)
    for i in range(n):
        b = v[edges[i]:edges[i + 1]]
        f = b[np.isfinite(b)]
        bad[i] = f.size < b.size
        means[i] = f.mean() if f.size else math.nan
    ok = np.isfinite(means)
    if not ok.any():
        return "×" * n
    lo, hi = float(means[ok].min()), float(means[ok].max())
    scale = (len(BARS) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join("×" if bad[i] or not ok[i] else
                   BARS[round((means[i] - lo) * scale) if scale else 3] for i in range(n))


@pytest.mark.parametrize("n", (0, 1, 2, 47, 48, 49, 500, 4801))
def test_spark_acc_is_the_whole_array_sparkline(n: int) -> None:
    rng = np.random.default_rng(300 + n)
    _steps, values = _series(rng, n, nan_share=0.01)
    acc = SparkAcc(n, 48)
    for sl in _chunks(rng, n):
        acc.feed(None, values[sl])
    assert spark_text(acc.means, acc.bad) == _sparkline_ref(values) == sparkline(values)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("hold", (8, 100, 1 << 17))
@pytest.mark.parametrize("guess", ["none", "sample", "misleading"])
def test_exact_median_over_walks(seed: int, hold: int, guess: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Narrowed over several walks when the values do not fit, guessed from a sample (a right
    one or a wrong one): the same bits as the median of them all (ties, negatives, wide ranges,
    a constant run)."""
    monkeypatch.setattr(series_walk, "HOLD", hold)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    kind = seed % 3
    if kind == 0:
        v = rng.lognormal(13, 0.03, n)
    elif kind == 1:
        v = np.round(rng.standard_normal(n), 1) * 1e-3  # many ties
    else:
        v = np.concatenate([rng.standard_normal(n - 2) * 1e300, [-1e308, 1e308]])
    v[rng.random(v.size) < 0.05] = np.nan
    f = v[np.isfinite(v)]
    thinned = Thinned()
    thinned.add(f if guess == "sample" else f * 3 + 1)
    sample = None if guess == "none" else thinned.sorted()
    med = ExactMedian(f.size, float(f.min()), float(f.max()), sample)
    walks = 0
    while True:
        walks += 1
        for sl in _chunks(rng, v.size):
            med.feed(None, v[sl])  # type: ignore[arg-type]
        if med.walked():
            break
        assert walks < 20
    assert med.value == median(f)
    if f.size <= hold or (guess == "sample" and kind == 0 and f.size * 0.07 < hold):
        assert walks == 1


def test_exact_median_of_one_repeated_value() -> None:
    med = ExactMedian(5, 2.5, 2.5)
    assert med.walked() and med.value == 2.5


# --------------------------------------------------------------------------------- LR shape


def _lr(kind: str, n: int, warm: int = 0) -> np.ndarray:
    t = np.linspace(0, 1, n)
    y = {
        "constant": np.full(n, 3e-4),
        "cosine": 3e-4 * 0.5 * (1 + np.cos(np.pi * t)),
        "linear": 3e-4 * (1 - t) + 1e-6,
        "step": 3e-4 * 0.1 ** np.floor(t * 3.999),
        "cyclic": 3e-4 * (0.55 + 0.45 * np.cos(6 * np.pi * t)),
        "spent": 3e-4 * np.clip(1 - t / 0.8, 0, None),
        "noisy": 3e-4 * (1 + 0.3 * np.sin(np.arange(n) * 1.7)),
    }[kind]
    if warm:
        y[:warm] = y[warm] * np.arange(1, warm + 1) / warm
    return y


def _classify_lr_ref(steps: np.ndarray, lr: np.ndarray) -> str:
    """The kind as the whole-array least-squares classifier named it (before #15)."""
    x, y = steps.astype(np.float64), lr.astype(np.float64)
    peak_i = int(np.argmax(y))
    peak = float(y[peak_i])
    warm_end = 0
    if peak_i > 0 and y[0] < 0.9 * peak:
        top = int(np.argmax(y >= 0.999 * peak))
        if np.all(np.diff(y[: top + 1]) >= 0):
            warm_end = top
    tx, ty = x[warm_end:], y[warm_end:] / peak
    low = ty <= 1e-3
    spent = ty.size if low.all() else int(np.argmin(low[::-1]))
    suffix = ""
    if spent >= max(3, 0.05 * ty.size) and spent < ty.size:
        suffix = f", then ~0 from step {int(tx[-spent]):,}"
        tx, ty = tx[: ty.size - spent + 1], ty[: ty.size - spent + 1]

    def r2(design: np.ndarray) -> float:
        coef, *_ = np.linalg.lstsq(design, ty, rcond=None)
        tot = float(((ty - ty.mean()) ** 2).sum())
        return 1.0 - float(((ty - design @ coef) ** 2).sum()) / tot if tot > 0 else 1.0

    if ty.size < 3 or float(ty.max() - ty.min()) <= 0.01:
        kind = "constant"
    elif (float(ty[int(np.argmin(ty)):].max() - ty.min()) > 0.2 * (1 - ty.min())
          and ty[-1] > ty.min() * 1.2):
        kind = "cyclic"
    else:
        rel = np.abs(np.diff(ty)) / np.maximum(ty[:-1], 1e-30)
        jumps = int((rel > 0.05).sum())
        if jumps <= 10 and np.count_nonzero(rel > 1e-6) <= 2 * jumps:
            kind = "step decay"
        else:
            t = (tx - tx[0]) / (float(tx[-1] - tx[0]) or 1.0)
            one = np.ones_like(t)
            r_lin = r2(np.vstack([one, t]).T)
            r_cos = max(r2(np.vstack([one, 0.5 * (1 + np.cos(np.pi * np.minimum(t / f, 1)))]).T)
                        for f in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0))
            kind = ("cosine decay" if r_cos > r_lin else "linear decay") \
                if max(r_lin, r_cos) >= 0.995 else "decay"
    return ("warmup + " if warm_end else "") + kind + suffix


@pytest.mark.parametrize("kind", ["constant", "cosine", "linear", "step", "cyclic", "spent",
                                  "noisy"])
@pytest.mark.parametrize("warm", [0, 37])
def test_lr_shape_names_what_least_squares_named(kind: str, warm: int) -> None:
    n = 3000
    steps = np.arange(1, n + 1, dtype=np.int64) * 10
    y = _lr(kind, n, warm)
    got = classify_lr(steps, y)
    assert got is not None
    assert got.kind == _classify_lr_ref(steps, y)
    assert got.peak == float(y.max()) and got.final == float(y[-1]) and got.start == float(y[0])
    # streamed in chunks, through the report's accumulator: the same schedule
    t = SeriesTally()
    t.add(steps, y, np.zeros(n, dtype=np.int32))
    acc = LrAcc(t)
    rng = np.random.default_rng(len(kind) + warm)
    for _ in range(3):
        for sl in _chunks(rng, n):
            acc.feed(steps[sl], y[sl])
        if acc.walked():
            break
    assert acc.schedule is not None and acc.schedule.kind == got.kind
    assert acc.schedule == got or kind in ("cosine", "linear", "noisy")  # (R² sums may round)


# ------------------------------------------------------------------------------- run tally


@pytest.mark.parametrize("seed", range(4))
def test_step_set_counts_distinct_steps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = [rng.integers(-5, 200_000, rng.integers(0, 20_000)) for _ in range(6)]
    parts.append(np.arange(70_000, 90_000))  # a dense page
    parts.append(rng.integers(0, 2**60, 50))  # sparse, far apart
    s = StepSet()
    for p in parts:
        s.add(p)
    assert len(s) == distinct(np.concatenate(parts)).shape[0]


def _resumed_jsonl(tmp_path: Path) -> Path:
    run = clean_run(3, 3000)
    lines = run.jsonl().decode().splitlines()
    def step(line: str) -> int:
        return int(json.loads(line).get("step", 0) or 0)

    first = [ln for ln in lines if step(ln) <= 2000 and "run_end" not in ln]
    again = [ln for ln in lines if step(ln) > 1500]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(first + ["{not json", *again]) + "\n")
    return path


def test_tally_and_report_match_the_whole_arrays(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed run (points rewritten), read in small chunks, every median narrowed over walks:
    the figures the whole-array code gives."""
    monkeypatch.setattr(series_walk, "HOLD", 64)
    monkeypatch.setattr("trainwatch.load.READ_CHUNK", 16 << 10)
    path = _resumed_jsonl(tmp_path)
    run = load_run(path)
    batches = list(run.main)
    assert len(batches) > 5
    cfg = load_rules_config(None)
    checked = run_check(run, cfg)
    tally = checked.tally
    assert tally.records == sum(b.n_records for b in batches)
    assert len(tally.steps) == count_steps(batches)
    assert tally.malformed == 1
    report = build_report(run, cfg, checked)
    series = collect_series(batches)
    assert report.loss == summarize_metric("loss", series["loss"])
    assert report.val_loss == summarize_metric("val_loss", series["val_loss"], smooth=False)
    tp = series["throughput"].values
    assert report.throughput == median(tp[np.isfinite(tp)])
    assert report.lr == classify_lr(series["lr"].steps, series["lr"].values)
    assert report.sparklines["loss"] == _sparkline_ref(series["loss"].values)
    assert report.role_moves == role_moves(batches, getattr(cfg, "roles", None) or DEFAULT_ROLES)
    # the same report from the batches held in a list (the path tests and benches use)
    # (alerts apart: a run without run_end is judged stalled against the wall clock)
    held = build_report(LoadedRun(path, run.format, batches), cfg).to_dict()
    streamed = report.to_dict()
    assert [a["rule"] for a in held.pop("alerts")] == [a["rule"] for a in streamed.pop("alerts")]
    assert held == streamed


def test_backfill_groups_as_the_whole_stream_grouping() -> None:
    """Joined as a held list was joined: a new name starts a group, else at most the bound."""
    run = fault_run("nan", 1)
    batches = run.batches(chunk_bytes=4 << 10)
    seen: set[str] = set()
    pieces: list[list[RecordBatch]] = [[]]
    for b in batches:
        if pieces[-1] and not seen.issuperset(b.series):
            pieces.append([])
        seen.update(b.series)
        pieces[-1].append(b)
    ref = [g for p in pieces for g in iter_joined(p, BACKFILL_JOIN)]
    got = list(backfill_batches(iter(batches)))
    assert [(g.first_record, g.n_records) for g in got] == \
        [(g.first_record, g.n_records) for g in ref]


def test_streams_are_read_again_on_each_walk_and_a_lost_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(clean_run(1, 500).jsonl())
    run = load_run(path)
    first = [b.n_records for b in run.main]
    assert first == [b.n_records for b in run.main]  # re-iterable, the same batches
    path.unlink()
    with pytest.raises(LoadError, match="disappeared while reading"):
        list(run.main)


def test_run_tally_of_a_list_equals_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(fault_run("spike", 2).jsonl())
    run = load_run(path)
    a, b = RunTally(), RunTally()
    for x in run.main:
        a.add(x)
    for x in list(run.main):
        b.add(x)
    assert (a.records, len(a.steps), a.step_range, a.time_range, list(a.series)) == \
        (b.records, len(b.steps), b.step_range, b.time_range, list(b.series))
