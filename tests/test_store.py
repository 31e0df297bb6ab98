"""The bounded series store against a batch reference that keeps every point (seeded data).

River-style: after every chunk, the streaming store's counters and views are compared with
what a plain array of all points says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from trainwatch.batch import RecordBatch, SeriesChunk, empty_batch
from trainwatch.store import Points, SeriesStore


def chunk(steps, values, segments=None, times=None) -> SeriesChunk:
    steps = np.asarray(steps, dtype=np.int64)
    n = len(steps)
    return SeriesChunk(
        rows=np.arange(n, dtype=np.int32),
        steps=steps,
        values=np.asarray(values, dtype=np.float64),
        times=1e9 + steps * 0.25 if times is None else np.asarray(times, dtype=np.float64),
        segments=np.zeros(n, np.int32) if segments is None else np.asarray(segments, np.int32),
    )


def batch(series: dict[str, SeriesChunk], reset: bool = False) -> RecordBatch:
    any_chunk = next(iter(series.values()), None)
    if any_chunk is None:
        return empty_batch("m.jsonl", reset=reset)
    return RecordBatch(
        source="m.jsonl",
        first_record=0,
        steps=any_chunk.steps,
        times=any_chunk.times,
        segments=any_chunk.segments,
        series=series,
        reset=reset,
    )


@dataclass
class Reference:
    """Every point kept in plain lists; supersession applied point by point."""

    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    all_values: list[float] = field(default_factory=list)
    segment: int = 0

    def add(self, c: SeriesChunk) -> None:
        for s, v, t, g in zip(c.steps.tolist(), c.values.tolist(), c.times.tolist(),
                              c.segments.tolist()):
            if self.steps and (s < self.steps[-1] or (g > self.segment and s == self.steps[-1])):
                keep = sum(1 for x in self.steps if x < s)
                del self.steps[keep:], self.values[keep:], self.times[keep:]
            self.steps.append(s)
            self.values.append(v)
            self.times.append(t)
            self.all_values.append(v)
            self.segment = g

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.array(self.steps, np.int64), np.array(self.values), np.array(self.times)


def feed(store: SeriesStore, ref: Reference, c: SeriesChunk, name: str = "loss") -> None:
    assert store.ingest(batch({name: c})) == {name}
    ref.add(c)


def check_counters(store: SeriesStore, ref: Reference, name: str = "loss") -> None:
    s = store.get(name)
    assert s is not None
    allv = np.array(ref.all_values)
    fin = allv[np.isfinite(allv)]
    assert s.count == len(allv)
    assert s.nonfinite == len(allv) - len(fin)
    assert s.min == (float(fin.min()) if len(fin) else None)
    assert s.max == (float(fin.max()) if len(fin) else None)
    assert s.last is not None and np.array_equal(s.last, allv[-1], equal_nan=True)
    assert s.last_time == ref.times[-1]
    assert s.first_step == ref.steps[0] and s.last_step == ref.steps[-1]


def check_points(p: Points, max_points: int) -> None:
    assert len(p) <= max_points
    assert p.steps.dtype == np.int64 and p.values.dtype == np.float64
    assert len(p.steps) == len(p.values) == len(p.times)
    assert np.all(np.diff(p.steps) >= 0)
    assert not p.steps.flags.writeable and not p.values.flags.writeable


def random_chunks(rng: np.random.Generator, n: int, max_chunk: int):
    """Split 0..n into random chunk slices (sizes 1..max_chunk)."""
    i = 0
    while i < n:
        k = int(rng.integers(1, max_chunk + 1))
        yield slice(i, min(n, i + k))
        i += k


@pytest.mark.parametrize("seed", range(4))
def test_streaming_matches_batch_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    recent = [16, 64, 200, 16][seed]
    store = SeriesStore(recent_points=recent, summary_points=[1, 2, 8, 32][seed])
    ref = Reference()
    n = 6000
    steps = np.cumsum(rng.choice([0, 1, 1, 2], size=n)).astype(np.int64)
    values = rng.normal(size=n).cumsum()
    values[rng.random(n) < 0.002] = np.nan
    values[rng.integers(0, n)] = np.inf
    spikes = rng.choice(n, size=2, replace=False)
    values[spikes[0]], values[spikes[1]] = 1e6, -1e6
    for sl in random_chunks(rng, n, 700):
        feed(store, ref, chunk(steps[sl], values[sl]))
        check_counters(store, ref)
        series = store.get("loss")
        r_steps, r_values, r_times = ref.arrays()
        # exact tail equals the reference tail, times included
        k = int(rng.integers(0, recent + 1))
        tail = series.tail(k)
        assert tail.exact and len(tail) == min(k, len(r_steps))
        assert np.array_equal(tail.steps, r_steps[len(r_steps) - len(tail):])
        assert np.array_equal(tail.values, r_values[len(r_values) - len(tail):], equal_nan=True)
        assert np.array_equal(tail.times, r_times[len(r_times) - len(tail):])
        # the whole range, downsampled: global spikes and every NaN stay visible
        mp = int(rng.choice([50, 400]))
        p = series.query(max_points=mp)
        check_points(p, mp)
        assert p.steps[0] == r_steps[0] and p.steps[-1] == r_steps[-1]
        fin = np.isfinite(r_values)
        for target in (np.max(r_values[fin]), np.min(r_values[fin])):
            at = r_steps[fin][r_values[fin] == target][0]
            assert np.any((p.values == target) & (p.steps == at))
        # each bucket (of the summary, then of the output) keeps its first NaN/inf: every NaN
        # has a non-finite point within one summary bucket plus one output bucket of it
        gap = int(np.max(np.diff(r_steps), initial=0))
        near = (r_steps[-1] - r_steps[0]) / ((mp - 1) // 4) + 1 + series.resolution * gap
        for s in r_steps[~np.isfinite(r_values)]:
            assert np.any(~np.isfinite(p.values) & (np.abs(p.steps - s) <= near)), s


def test_whole_history_is_exact_until_the_summary_coarsens() -> None:
    rng = np.random.default_rng(11)
    store = SeriesStore(recent_points=10, summary_points=100)
    ref = Reference()
    values = rng.normal(size=90)
    values[33] = np.nan
    feed(store, ref, chunk(np.arange(90), values))
    p = store.get("loss").query(max_points=1000)
    r_steps, r_values, r_times = ref.arrays()
    assert p.exact
    assert np.array_equal(p.steps, r_steps) and np.array_equal(p.times, r_times)
    assert np.array_equal(p.values, r_values, equal_nan=True)
    feed(store, ref, chunk(np.arange(90, 1000), rng.normal(size=910)))
    assert not store.get("loss").query(max_points=100_000).exact


def test_memory_stays_bounded() -> None:
    rng = np.random.default_rng(5)
    store = SeriesStore(recent_points=256, summary_points=64)
    sizes = []
    step = 0
    for total in (20_000, 400_000):
        while step < total:
            k = 5000
            vals = {n: chunk(np.arange(step, step + k), rng.normal(size=k)) for n in "abc"}
            store.ingest(batch(vals))
            step += k
        for name in "abc":
            store.get(name).query(max_points=100)  # fills the view cache too
        sizes.append(store.nbytes())
    # per series: a 2x recent buffer of 3 arrays, 64 buckets of 5 slots x 4 arrays + counts,
    # and the cached summary view (5 slots x 3 arrays per bucket)
    bound = 3 * (2 * 256 * 24 + 64 * (5 * 32 + 8) + 64 * 5 * 24)
    # the cached summary view varies a little with how many slots coincide
    assert sizes[1] <= bound and abs(sizes[1] - sizes[0]) <= 0.1 * sizes[0]
    assert store.get("a").resolution > 1000
    s = store.get("a")
    assert s.count == 400_000 and s.first_step == 0 and s.last_step == 399_999


def test_segment_supersedes_overlapping_steps_in_recent_window() -> None:
    store = SeriesStore(recent_points=4096)
    ref = Reference()
    feed(store, ref, chunk(np.arange(1000), -np.ones(1000)))
    # resumed from a checkpoint at step 600: steps 600.. of segment 1 replace the old ones
    feed(store, ref, chunk(np.arange(600, 1500), np.ones(900), segments=np.ones(900)))
    s = store.get("loss")
    p = s.query(max_points=10_000)
    assert p.exact
    assert np.array_equal(p.steps, np.arange(1500))
    assert np.all(p.values[:600] == -1) and np.all(p.values[600:] == 1)
    assert s.count == 1900  # cumulative counters are not rolled back
    assert s.min == -1 and s.max == 1 and s.first_step == 0 and s.last_step == 1499
    check_counters(store, ref)


def test_segment_cut_reaches_into_the_summary() -> None:
    store = SeriesStore(recent_points=128, summary_points=8)
    ref = Reference()
    old = np.linspace(-2, -1, 5000)
    old[4000] = -50.0  # a spike in history, later superseded
    old[100] = np.nan  # a NaN in history, kept
    feed(store, ref, chunk(np.arange(5000), old))
    v0 = store.get("loss").version
    feed(store, ref, chunk(np.arange(2500, 2600), np.ones(100), segments=np.ones(100)))
    s = store.get("loss")
    assert s.version > v0
    p = s.query(max_points=100_000)
    check_points(p, 100_000)
    # nothing of segment 0 at step >= 2500 is left; everything new is there, exactly
    assert np.all(p.values[p.steps >= 2500] == 1)
    assert np.array_equal(p.steps[p.steps >= 2500], np.arange(2500, 2600))
    assert not np.any(p.values == -50.0)
    assert np.isnan(p.values[p.steps < 2500]).any()
    assert s.min == -50.0 and s.count == 5100 and s.nonfinite == 1
    assert s.first_step == 0 and s.last_step == 2599
    # the tail reaches past what the recent window kept after the cut: summary points, inexact
    t = s.tail(200)
    assert not t.exact and np.array_equal(t.steps[-100:], np.arange(2500, 2600))
    assert np.array_equal(s.tail(100).steps, np.arange(2500, 2600)) and s.tail(100).exact
    # a cut before every stored step empties history
    feed(store, ref, chunk([0, 1], [7.0, 8.0], segments=[2, 2]))
    p = s.query()
    assert p.exact and p.steps.tolist() == [0, 1] and p.values.tolist() == [7.0, 8.0]
    check_counters(store, ref)


def test_segment_rules_within_one_chunk() -> None:
    store = SeriesStore(recent_points=64, summary_points=4)
    ref = Reference()
    steps = [0, 1, 2, 2, 3, 4, 1, 2, 5, 5, 6, 3, 3]
    segs = [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    values = np.arange(len(steps), dtype=float)
    feed(store, ref, chunk(steps, values, segments=segs))
    p = store.get("loss").query()
    # rewind to 1 drops 1..4; step 5 repeated by segment 2 replaces 5; the rewind to 3 drops
    # 5 and 6; the two step-3 points of segment 3 are both kept
    assert p.steps.tolist() == ref.steps == [0, 1, 2, 3, 3]
    assert p.values.tolist() == ref.values == [0.0, 6.0, 7.0, 11.0, 12.0]
    check_counters(store, ref)


def test_higher_segment_above_last_step_appends() -> None:
    store = SeriesStore()
    ref = Reference()
    feed(store, ref, chunk([0, 10, 10, 20], [1.0, 2.0, 3.0, 4.0]))
    feed(store, ref, chunk([30, 31], [5.0, 6.0], segments=[1, 1]))
    feed(store, ref, chunk([31], [7.0], segments=[1]))  # equal step, same segment: kept
    feed(store, ref, chunk([31], [9.0], segments=[2]))  # equal step, new segment: replaces
    p = store.get("loss").query()
    assert p.steps.tolist() == [0, 10, 10, 20, 30, 31] and p.values.tolist() == [1, 2, 3, 4, 5, 9]
    feed(store, ref, chunk([31, 31], [1.0, 2.0], segments=[2, 2]))
    p = store.get("loss").query()
    assert p.steps.tolist() == [0, 10, 10, 20, 30, 31, 31, 31]
    assert p.values.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 1.0, 2.0]
    check_counters(store, ref)


def test_query_ranges_and_last_n() -> None:
    store = SeriesStore(recent_points=100, summary_points=1000)
    rng = np.random.default_rng(2)
    values = rng.normal(size=300)
    store.ingest(batch({"x": chunk(np.arange(0, 600, 2), values)}))
    s = store.get("x")
    p = s.query(start=11, end=20)
    assert p.steps.tolist() == [12, 14, 16, 18, 20]
    assert np.array_equal(p.values, values[6:11])
    p = s.query(last_n=150)  # reaches into the (still exact) summary
    assert p.exact and np.array_equal(p.steps, np.arange(300, 600, 2))
    p = s.query(start=100, last_n=3)
    assert p.steps.tolist() == [594, 596, 598]
    p = s.query(end=5, last_n=10)
    assert p.steps.tolist() == [0, 2, 4]
    assert len(s.query(start=1000)) == 0 and len(s.query(last_n=0)) == 0
    p = s.query(max_points=40)
    check_points(p, 40)
    assert not p.exact and int(np.argmax(values)) * 2 in p.steps
    with pytest.raises(ValueError, match="last_n"):
        s.query(last_n=-1)


def test_points_are_snapshots() -> None:
    store = SeriesStore(recent_points=8, summary_points=2)
    store.ingest(batch({"x": chunk(np.arange(10), np.arange(10.0))}))
    before = store.get("x").tail(8)
    kept = before.values.copy()
    store.ingest(batch({"x": chunk(np.arange(10, 100), np.zeros(90))}))
    store.ingest(batch({"x": chunk([5], [1.0], segments=[1])}))
    assert np.array_equal(before.values, kept)
    with pytest.raises(ValueError):
        before.values[0] = 3.0


def test_store_bookkeeping_and_reset() -> None:
    store = SeriesStore()
    assert len(store) == 0 and store.names() == [] and store.get("loss") is None
    v = store.version
    changed = store.ingest(batch({"loss": chunk([0, 1], [1.0, 0.5]), "lr": chunk([0], [0.1]),
                                  "empty": chunk([], [])}))
    assert changed == {"loss", "lr"} and "empty" not in store
    assert store.names() == ["loss", "lr"] and len(store) == 2 and "lr" in store
    assert store.version > v
    v = store.version
    assert store.ingest(batch({"acc": chunk([1], [0.3])})) == {"acc"}
    assert store.names() == ["loss", "lr", "acc"]
    assert store.ingest(batch({})) == set() and store.version == v + 1
    sv = store.get("loss").version
    store.ingest(batch({"loss": chunk([2], [0.25])}))
    assert store.get("loss").version == sv + 1 and store.get("lr").count == 1

    # a truncated source: everything goes, then the batch's own points come in
    v = store.version
    changed = store.ingest(batch({"lr": chunk([0], [0.2])}, reset=True))
    assert changed == {"loss", "lr", "acc"}
    assert store.names() == ["lr"] and store.get("loss") is None and store.version > v
    assert store.get("lr").count == 1 and store.get("lr").last == 0.2
    store.reset()
    assert len(store) == 0 and store.nbytes() == 0


def test_nonfinite_only_series() -> None:
    store = SeriesStore(recent_points=4, summary_points=2)
    store.ingest(batch({"x": chunk(np.arange(50), np.full(50, np.nan))}))
    s = store.get("x")
    assert s.min is None and s.max is None and s.nonfinite == 50 and np.isnan(s.last)
    p = s.query(max_points=10)
    check_points(p, 10)
    assert len(p) and np.all(np.isnan(p.values))


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="recent_points"):
        SeriesStore(recent_points=0)
    with pytest.raises(ValueError, match="summary_points"):
        SeriesStore(summary_points=0)


def test_inconsistent_chunk_is_rejected_with_its_name() -> None:
    store = SeriesStore()
    bad = SeriesChunk(np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int64), np.zeros(2),
                      np.zeros(3), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="'loss'.*differ in length"):
        store.ingest(batch({"loss": bad}))
    assert "loss" not in store and len(store) == 0
