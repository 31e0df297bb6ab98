"""Joining consecutive record batches (``trainwatch.batch.join_batches``) and the backfill that
feeds joined batches to the rule engine (``trainwatch.commands.check.backfill_batches``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_engine import _faulty
from test_rules_data import clean, idx, parse_all, parse_live, to_jsonl

from trainwatch.batch import RecordBatch, concat_batches, empty_batch, join_batches
from trainwatch.commands.check import backfill_batches
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import RuleEngine, load_rules_config

CFG = load_rules_config()


def _mixed() -> bytes:
    """Records with everything a batch can carry: events, notes (a string value), malformed
    lines, a metric that appears late, and a resume (a rewind, a second segment)."""
    lines = [b'{"event":"run_start","time":0.5,"config":{"lr":0.1}}\n']
    for s in range(1, 61):
        rec = f'{{"step":{s},"time":{s}.0,"loss":{1.0 / s!r}'
        if s >= 25:
            rec += f',"acc":{s / 100!r}'
        if s % 10 == 0:
            rec += ',"phase":"train"'
        lines.append((rec + "}\n").encode())
        if s % 20 == 0:
            lines.append(f'{{"event":"eval","step":{s},"time":{s}.5}}\n'.encode())
        if s == 33:
            lines.append(b"not json\n")
    for s in range(40, 71):  # resumed from a checkpoint at step 40
        lines.append(f'{{"step":{s},"time":{100 + s}.0,"loss":{0.5 / s!r}}}\n'.encode())
    return b"".join(lines)


def _same(a: RecordBatch, b: RecordBatch) -> None:
    assert a.source == b.source and a.rank == b.rank and a.format == b.format
    assert a.first_record == b.first_record and a.reset == b.reset
    for f in ("steps", "times", "segments"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
        assert getattr(a, f).dtype == getattr(b, f).dtype, f
    assert set(a.series) == set(b.series)
    for name, ch in a.series.items():
        other = b.series[name]
        for f in ("rows", "steps", "values", "times", "segments"):
            assert np.array_equal(getattr(ch, f), getattr(other, f)), (name, f)
            assert getattr(ch, f).dtype == getattr(other, f).dtype, (name, f)
    assert a.events == b.events
    assert [(r, dict(f)) for r, f in a.notes] == [(r, dict(f)) for r, f in b.notes]
    assert a.malformed == b.malformed
    assert a.rewinds == b.rewinds


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joined_reads_equal_one_read_of_the_whole_file(seed: int) -> None:
    data = _mixed()
    whole = [JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1)]
    assert whole[0].rewinds and whole[0].notes and whole[0].malformed and whole[0].events
    pieces = parse_live(data, seed=seed, max_lines=7)
    assert len(pieces) > 5
    joined = join_batches(pieces)
    assert len(joined) == 1
    _same(joined[0], whole[0])
    _same(join_batches(parse_all(data))[0], whole[0])  # slow path, then the column fast path


def test_a_group_starts_at_a_reset_a_gap_or_another_source() -> None:
    p = JsonlParser("m", clock=lambda: 0.0)
    a = p.parse(b'{"step":1,"time":1.0,"loss":1.0}\n', 1)
    b = p.parse(b'{"step":2,"time":2.0,"loss":0.9}\n', 2)
    c = p.parse(b'{"step":1,"time":3.0,"loss":1.0}\n', 1, reset=True)
    d = p.parse(b'{"step":2,"time":4.0,"loss":0.9}\n', 2)
    out = join_batches([a, b, c, d])
    assert [(x.first_record, x.n_records, x.reset) for x in out] == [(0, 2, False), (0, 2, True)]
    gap = replace(b, first_record=5)
    assert [x.n_records for x in join_batches([a, gap])] == [1, 1]
    other = replace(b, source="n")
    assert [x.source for x in join_batches([a, other])] == ["m", "n"]
    with pytest.raises(ValueError, match="does not continue"):
        concat_batches([a, gap])


def test_a_group_of_one_is_the_batch_itself_and_max_records_bounds_a_group() -> None:
    pieces = parse_live(_mixed(), seed=4, max_lines=5)
    assert [x is y for x, y in zip(join_batches(pieces[:1]), pieces[:1])] == [True]
    bounded = join_batches(pieces, max_records=30)
    assert all(b.n_records <= 30 for b in bounded) and len(bounded) > 1
    assert sum(b.n_records for b in bounded) == sum(b.n_records for b in pieces)
    _same(join_batches(bounded)[0], join_batches(pieces)[0])
    assert join_batches([]) == []


def test_a_batch_of_malformed_lines_only_joins_in() -> None:
    p = JsonlParser("m", clock=lambda: 0.0)
    a = p.parse(b'{"step":1,"time":1.0,"loss":1.0}\n', 1)
    bad = p.parse(b"oops\n", 2)
    assert bad.n_records == 0 and bad.malformed
    c = p.parse(b'{"step":2,"time":2.0,"loss":0.9}\n', 3)
    (j,) = join_batches([a, bad, c])
    assert j.n_records == 2 and [m.line for m in j.malformed] == [2]
    assert j.series["loss"].rows.tolist() == [0, 1]
    e = empty_batch("m", first_record=2, meta={"max_steps": 10})
    (k,) = join_batches([a, replace(c, first_record=1), e])
    assert k.meta == {"max_steps": 10}


def test_backfill_starts_a_new_batch_where_a_metric_first_appears() -> None:
    # the engine resolves roles from the names seen so far: a later better alias must take
    # over at the record where it appears, as it does fed read by read
    p = JsonlParser("m", clock=lambda: 0.0)
    a = p.parse(b'{"step":1,"time":1.0,"train_loss":1.0}\n', 1)
    b = p.parse(b'{"step":2,"time":2.0,"train_loss":0.9}\n', 2)
    c = p.parse(b'{"step":3,"time":3.0,"train_loss":0.8,"loss":0.8}\n', 3)
    d = p.parse(b'{"step":4,"time":4.0,"train_loss":0.7,"loss":0.7}\n', 4)
    out = list(backfill_batches([a, b, c, d]))
    assert [(x.first_record, x.n_records) for x in out] == [(0, 2), (2, 2)]


def _alerts(batches: list[RecordBatch]) -> list:
    e = RuleEngine(CFG, live=False)
    for b in batches:
        e.feed(b)
    return e.alerts


@pytest.mark.parametrize("seed", [0, 3])
def test_joined_backfill_raises_the_alerts_of_the_reads(seed: int) -> None:
    data = _faulty(seed)
    reads = parse_live(data, seed=seed, max_lines=400)
    joined = list(backfill_batches(reads))
    assert len(reads) > 10 and len(joined) < len(reads)
    got = _alerts(joined)
    assert got == _alerts(reads)
    assert {a.rule for a in got} >= {"loss_spike", "grad_explosion", "nan_inf"}


def test_joined_backfill_of_a_resumed_run() -> None:
    first = clean(1500, "exp", seed=4)
    first["loss"][idx(first, 1200)] *= 4
    second = clean(2000, "exp", seed=4)
    keep = second["step"] > 1000
    for k in ("step", "time", "loss", "lr", "grad_norm", "step_time", "throughput", "memory"):
        second[k] = second[k][keep]
    second["time"] = second["time"] + 5000.0
    second["grad_norm"][idx(second, 1300):idx(second, 1303)] *= 500
    data = to_jsonl(first, end=False) + to_jsonl(second, start=False)
    reads = parse_live(data, seed=2, max_lines=300)
    joined = list(backfill_batches(reads))
    assert len(joined) < len(reads)
    assert _alerts(joined) == _alerts(reads)


def _shared_records(seed: int) -> bytes:
    """Metrics on the same records and on different ones with the same counts: ``x`` and ``y``
    on every metric record, ``a`` on even steps and ``b`` on odd ones, events between them and
    now and then a record with no metric at all (a note only)."""
    rng = np.random.default_rng(seed)
    lines = [b'{"event":"run_start","step":0,"time":0.0}\n']
    for s in range(1, 301):
        if rng.random() < 0.03:
            lines.append(f'{{"step":{s},"time":{s}.1,"phase":"warmup"}}\n'.encode())
        ab = f'"a":{s / 7!r}' if s % 2 == 0 else f'"b":{s / 9!r}'
        lines.append(f'{{"step":{s},"time":{s}.0,"x":{s / 3!r},"y":{-s!r},{ab}}}\n'.encode())
        if rng.random() < 0.08:
            lines.append(f'{{"event":"checkpoint","step":{s},"time":{s}.5}}\n'.encode())
    return b"".join(lines)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_series_on_the_same_records_share_columns_and_stay_exact(seed: int) -> None:
    """The join takes the rows, steps, times and segments of the series on every metric record
    once (events carry no metric values) and compares the others: every column still equals
    one read of the whole file's, and the series on every metric record share theirs."""
    data = _shared_records(seed)
    whole = JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(data, 1)
    pieces = parse_live(data, seed=seed, max_lines=40)
    assert len(pieces) > 10 and sum(1 for p in pieces if p.events) >= 3
    joined = concat_batches(pieces)
    _same(joined, whole)
    x, y = joined.series["x"], joined.series["y"]
    if any(p.n_records - len(p.events) == len(p.series["x"]) for p in pieces):
        assert x.rows is y.rows and x.steps is y.steps and x.times is y.times
    assert not np.shares_memory(x.values, y.values)
    a, b = joined.series["a"], joined.series["b"]
    assert a.rows is not b.rows and not np.shares_memory(a.rows, b.rows)


def test_series_with_the_same_counts_on_other_records_keep_their_own() -> None:
    """``c`` and ``d`` have as many points as each other in every read, on other records: they
    must not be taken for series on the same records."""
    chunks = [(f'{{"step":{s},"time":{s}.0,"c":{s!r},"x":1.5}}\n'
               f'{{"step":{s + 1},"time":{s + 1}.0,"d":{-s!r},"x":2.5}}\n'
               f'{{"event":"eval","step":{s + 1},"time":{s + 1}.5}}\n').encode()
              for s in range(0, 40, 2)]
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    reads = [p.parse(chunk, 1 + 3 * i) for i, chunk in enumerate(chunks)]
    whole = JsonlParser("metrics.jsonl", clock=lambda: 0.0).parse(b"".join(chunks), 1)
    joined = concat_batches(reads)
    _same(joined, whole)
    assert joined.series["c"].rows[0] == 0 and joined.series["d"].rows[0] == 1
