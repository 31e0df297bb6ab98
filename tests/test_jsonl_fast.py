"""The JSONL fast path and the read loop: whatever the bytes and however they are cut, the records
are those of a stdlib reference, one line at a time.

The generator writes mostly plain records (so whole chunks take the fast path) with rare lines of
every kind the fast path must refuse or handle: bare NaN/Infinity tokens, tokens touching other
number characters, real values equal to the token sentinels, CRLF, blank and blank-looking lines,
two records on one line, a record cut over two lines, events, new keys, garbage.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from typing import NamedTuple

import msgspec
import numpy as np
import pytest

from trainwatch.formats import _jsonl_fast as fast
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.formats.read import read_file, read_with

LONG_KEY = "a_metric_name_longer_than_thirty_one_bytes"


def _anomaly(rng: random.Random, step: int, plain: str) -> list[str]:
    """One odd line (or two, for a record cut in half) in place of ``plain``."""
    kind = rng.randrange(25)
    if kind == 0:
        return [plain.replace('"loss": ', '"loss": NaN, "x": ', 1)]
    if kind == 1:
        return [json.dumps({"step": step, "loss": rng.choice([math.inf, -math.inf, math.nan])})]
    if kind == 2:
        return [json.dumps({"step": math.nan, "loss": 1.0})]  # step NaN: the record index
    if kind == 3:
        return [json.dumps({"step": step, "loss": rng.choice([7e9, 9.87e22, -9.87e22])})]
    if kind == 4:
        return [plain + "\r"]
    if kind == 5:
        return [rng.choice(["", "   ", "\t", "\r"])]
    if kind == 6:
        return ["  " + plain + " \t"]
    if kind == 7:
        return [plain + rng.choice(["", " ", ",", "\r"]) + '{"step": 1, "loss": 2}']
    if kind == 8:
        cut = rng.randrange(1, len(plain))
        return [plain[:cut], plain[cut:]]
    if kind == 9:
        return ["garbage {"]
    if kind == 10:
        bad = rng.choice(["1NaN", "NaN5", "-NaN", "NaNaN", "NaN.5", "1eNaN", "2Infinity",
                          "Infinity1", "--Infinity", "Infinitye3", "+Infinity", "0Infinity"])
        return [f'{{"step": {step}, "loss": {bad}}}']
    if kind == 11:
        return [json.dumps({"step": step, "loss": 1.0, f"new_{rng.randrange(3)}": rng.random()})]
    if kind == 12:
        return [json.dumps({"event": "eval", "step": step, "note": "x"})]
    if kind == 13:
        return [json.dumps({"step": step, "loss": rng.choice(["nan", "inf", "-inf", "NaN"])})]
    if kind == 14:
        return [json.dumps({"step": step, "loss": rng.choice([-0.0, 0, 10**6, 1e308, 5e-324])})]
    if kind == 15:
        return [f'{{"step": {step}, "loss": 1.5}}{{"step": {step}, "loss": 2.5}}']
    if kind == 16:
        return [plain, f'{{"step": {step},', '"loss": 3}']  # a record over two lines
    if kind == 17:
        return ["[1, 2]"]
    if kind == 18:
        return [json.dumps({"step": step, "loss": -math.inf, LONG_KEY: math.nan})]
    if kind == 19:
        return [json.dumps({"step": step + 0.75, "loss": 1.0})]
    if kind == 20:
        return [json.dumps({"step": -2.5, "loss": 1.0})]
    if kind == 21:
        return [plain.replace("}", ', "loss": NaN}')]  # a duplicate key: the last one wins
    if kind == 22:
        return [json.dumps({"step": step, "time": math.inf, "loss": 1.0})]
    if kind == 23:  # a repeated key whose last value equals a token's sentinel
        real = rng.choice(["7e9", "9.87e+22", "7000000000"])
        return [plain.replace("}", f', "loss": {rng.choice(["NaN", "Infinity"])}, "loss": {real}}}')]
    return [json.dumps({"step": step, "loss": True})]


def mostly_plain(rng: random.Random, n: int, odd: float) -> bytes:
    lines: list[str] = []
    for step in range(n):
        rec: dict = {"step": step, "time": 1.7e9 + step / 8, "loss": rng.random() * 3,
                     "lr": rng.random() * 1e-3, LONG_KEY: rng.random()}
        if rng.random() < 0.2:
            del rec["lr"]  # an absent key: NaN in its column, no point in its series
        plain = json.dumps(rec)
        lines.extend(_anomaly(rng, step, plain) if rng.random() < odd else [plain])
    data = "\n".join(lines)
    return (data if rng.random() < 0.5 else data + "\n").encode()


class Reference(NamedTuple):
    """What a stdlib parse of the whole file, one line at a time, gives."""

    series: dict[str, list[tuple[int, float]]]
    """key -> [(step, value)] in record order."""
    bad: list[int]
    """Malformed line numbers, in order."""
    records: list[tuple[int, int, int]]
    """(line, step, segment) per record (events included), in line order."""
    rewinds: list[tuple[int, int, int, int]]
    """(line, from step, to step, new segment)."""
    events: list[tuple[str, int, int]]
    """(name, step, line)."""


def reference(data: bytes) -> Reference:
    """The records of ``data`` per docs/format.md, with the stdlib and no trainwatch code."""
    nonfinite = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "infinity": math.inf}
    ref = Reference({}, [], [], [], [])
    index, segment, last = 0, 0, None
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    for no, ln in enumerate(lines, 1):
        ln = ln[:-1] if ln.endswith(b"\r") else ln
        if not ln.strip():
            continue
        try:
            rec = json.loads(ln)
        except ValueError:
            ref.bad.append(no)
            continue
        if type(rec) is not dict:
            ref.bad.append(no)
            continue
        s = rec.get("step")
        if type(s) is float and math.isfinite(s):
            s = int(s)
        if rec.get("event") is not None:
            # the generator's events all have a step; without one they take the metric one before
            step = s if type(s) is int else (0 if last is None else last)
            index += 1
            ref.records.append((no, step, segment))
            ref.events.append((rec["event"], step, no))
            continue
        step = s if type(s) is int else index
        index += 1
        if last is not None and step < last:
            segment += 1
            ref.rewinds.append((no, last, step, segment))
        last = step
        ref.records.append((no, step, segment))
        for k, v in rec.items():
            if k in ("step", "time", "rank") or type(v) is bool:
                continue
            if type(v) in (int, float):
                ref.series.setdefault(k, []).append((step, float(v)))
            elif type(v) is str and v.lower() in nonfinite:
                ref.series.setdefault(k, []).append((step, nonfinite[v.lower()]))
    return ref


def same_as_reference(batches: list, data: bytes) -> None:
    """Series, record order, steps, segments, rewinds, events and malformed lines all equal."""
    ref = reference(data)
    got: dict[str, list[tuple[int, float]]] = {}
    for b in batches:
        for k, ch in b.series.items():
            got.setdefault(k, []).extend(zip(ch.steps.tolist(), ch.values.tolist()))
    assert set(got) == set(ref.series)
    for k, pts in ref.series.items():
        assert [s for s, _ in got[k]] == [s for s, _ in pts], k
        np.testing.assert_array_equal([v for _, v in got[k]], [v for _, v in pts], err_msg=k)
    assert [m.line for b in batches for m in b.malformed] == ref.bad
    assert sum(b.n_records for b in batches) == len(ref.records)
    assert [s for b in batches for s in b.steps.tolist()] == [s for _, s, _ in ref.records]
    assert [g for b in batches for g in b.segments.tolist()] == [g for _, _, g in ref.records]
    rewinds = [(r.line, r.from_step, r.to_step, r.segment) for b in batches for r in b.rewinds]
    assert rewinds == ref.rewinds
    assert [(e.name, e.step, e.line) for b in batches for e in b.events] == ref.events


@pytest.mark.parametrize("seed", range(12))
def test_fast_path_matches_the_reference_however_the_file_is_read(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    data = mostly_plain(rng, 600, odd=rng.choice([0.0, 0.004, 0.02, 0.1]))
    same_as_reference([JsonlParser("t", clock=lambda: 0.0).parse(data)], data)
    f = tmp_path / "m.jsonl"
    f.write_bytes(data)
    for chunk in (97, rng.randint(1, 200), rng.randint(200, 5000), rng.randint(5000, 60000)):
        same_as_reference(read_file(f, chunk_bytes=chunk), data)


def short_lines(rng: random.Random, n: int) -> bytes:
    """Short records, many with NaN/Infinity, some with a new key, some stepping back, a few
    events and bad lines: a 97-byte chunk then holds a few lines of which often none is plain."""
    lines: list[str] = []
    for i in range(n):
        u = rng.random()
        if u < 0.02:
            lines.append(json.dumps({"event": "ckpt", "step": i}))
            continue
        if u < 0.03:
            lines.append(rng.choice(["garbage", "", "[1]"]))
            continue
        rec: dict = {"step": i if rng.random() > 0.05 else max(0, i - 7)}
        for k in ("loss", "acc"):
            v = rng.random()
            if v < 0.7:
                rec[k] = rng.choice([math.nan, math.inf, -math.inf]) if v < 0.25 else round(v, 3)
        if rng.random() < 0.08:
            rec[f"new{rng.randrange(40)}"] = 1
        lines.append(json.dumps(rec))
    return ("\n".join(lines) + rng.choice(["", "\n"])).encode()


@pytest.mark.parametrize("seed", range(12))
def test_short_token_lines_keep_their_order_in_small_chunks(seed: int, tmp_path: Path) -> None:
    """A chunk's token lines are parsed after its other lines; the batch must still be in line
    order (it was not when no line of the chunk took the column path: a false rewind)."""
    rng = random.Random(500 + seed)
    data = short_lines(rng, 400)
    f = tmp_path / "m.jsonl"
    f.write_bytes(data)
    for chunk in (97, rng.randint(40, 300), 1 << 20):
        same_as_reference(read_file(f, chunk_bytes=chunk), data)


def test_token_line_before_a_chunk_of_new_keys_is_not_a_rewind() -> None:
    p = JsonlParser("t", clock=lambda: 0.0)
    p.parse(b'{"step": 9, "loss": 1.0}\n')
    b = p.parse(b'{"step": 10, "loss": NaN}\n{"step": 11, "loss": 1.0, "val_loss": 2.0}\n', 2)
    assert b.steps.tolist() == [10, 11]
    assert b.segments.tolist() == [0, 0] and not b.rewinds
    np.testing.assert_array_equal(b.series["loss"].values, [np.nan, 1.0])
    # events too stay in line order when the token line is an event
    chunk = b'{"step": 12, "new": 1}\n{"event": "eval", "x": NaN}\n{"event": "save"}\n{"step": 13, "b": 1}\n'
    b = p.parse(chunk, 4)
    assert b.steps.tolist() == [12, 12, 12, 13] and not b.rewinds
    assert [(e.name, e.line) for e in b.events] == [("eval", 5), ("save", 6)]


@pytest.mark.parametrize("seed", range(4))
def test_parse_buffer_never_keeps_the_buffer_and_counts_lines(seed: int) -> None:
    """read_file refills one buffer: a batch must not change when the buffer does."""
    rng = random.Random(100 + seed)
    data = mostly_plain(rng, 400, odd=0.01)
    p = JsonlParser("t", clock=lambda: 0.0)
    buf = bytearray(len(data))
    batches, pos, line = [], 0, 1
    while pos < len(data):
        cut = data.find(b"\n", min(len(data) - 1, pos + rng.randint(0, 4000))) + 1 or len(data)
        n = cut - pos
        buf[:n] = data[pos:cut]
        batch, n_lines = p.parse_buffer(memoryview(buf)[:n], line)
        assert n_lines == data.count(b"\n", pos, cut) + (not data[pos:cut].endswith(b"\n"))
        buf[:] = b"\xff" * len(buf)  # the next read overwrites everything
        batches.append(batch)
        line += n_lines
        pos = cut
    same_as_reference(batches, data)


def test_read_file_cuts_at_every_byte_the_same(tmp_path: Path) -> None:
    """Buffer ends exactly at a newline, a line longer than the buffer, CRLF, no final newline."""
    lines = [json.dumps({"step": i, "loss": i / 4}) for i in range(12)]
    lines[5] = json.dumps({"step": 5, "loss": 1.25, "note": "x" * 300})  # longer than most buffers
    data = ("\r\n".join(lines[:4]) + "\r\n" + "\n".join(lines[4:])).encode()  # no final newline
    f = tmp_path / "m.jsonl"
    f.write_bytes(data)
    for chunk in range(1, len(data) + 2):
        same_as_reference(read_file(f, chunk_bytes=chunk), data)


def test_read_with_a_reader_without_parse_buffer_gets_bytes(tmp_path: Path) -> None:
    class Plain:
        kind, format = "lines", "jsonl"

        def __init__(self) -> None:
            self.inner = JsonlParser("t", clock=lambda: 0.0)
            self.calls: list[tuple[type, int]] = []

        def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False):
            self.calls.append((type(data), first_line))
            return self.inner.parse(data, first_line)

    data = b"".join(b'{"step": %d, "loss": 1}\n' % i for i in range(50)) + b"garbage"
    f = tmp_path / "m.jsonl"
    f.write_bytes(data)
    reader = Plain()
    batches = read_with(reader, f, chunk_bytes=100)  # type: ignore[arg-type]
    same_as_reference(batches, data)
    assert {t for t, _ in reader.calls} == {bytes}
    assert [ln for _, ln in reader.calls] == sorted({ln for _, ln in reader.calls})


def test_tokens_take_the_fast_path_and_real_sentinel_values_stay_real() -> None:
    p = JsonlParser("t")
    p.parse(b'{"step": 0, "loss": 1.0, "lr": 0.5}\n')
    schema = p._schema
    assert schema is not None
    tokens = b'{"step": 1, "loss": NaN, "lr": -Infinity}\n{"step": 2, "loss": Infinity}\n'
    block = schema.decode(tokens)
    assert block is not None and block.lines == 2
    np.testing.assert_array_equal(block.columns["loss"], [np.nan, np.inf])
    assert block.present["loss"].tolist() == [True, True]
    assert block.columns["lr"][0] == -np.inf and np.isnan(block.columns["lr"][1])
    # a real value equal to a sentinel: the fast path must refuse the chunk, the careful one is exact
    for real in (7e9, 9.87e22, -9.87e22):
        chunk = tokens + b'{"step": 3, "loss": %r, "lr": NaN}\n' % real
        assert schema.decode(chunk) is None
        b = p.parse(chunk)
        np.testing.assert_array_equal(b.series["loss"].values, [np.nan, np.inf, real])
    # a token touching a digit is a bad line, even when a real sentinel value would make the
    # sentinel count come out right ("1NaN" -> "17e9", one sentinel short; 7e9 one too many)
    for bad, real in ((b"1NaN", 7e9), (b"NaN9", 7e9), (b"2Infinity", 9.87e22), (b"-NaN", -7e9)):
        chunk = b'{"step": 1, "loss": %s}\n{"step": 2, "loss": %r}\n' % (bad, real)
        assert schema.decode(chunk) is None
        b = p.parse(chunk, first_line=10)
        assert [m.line for m in b.malformed] == [10]
        assert b.series["loss"].values.tolist() == [real]


def test_tokens_refuse_a_schema_whose_keys_hold_a_token_or_sentinel_text() -> None:
    """A token inside a key is overwritten too: "NaN" -> "7e9". Were "7e9" a known key, the
    record would decode with the wrong key; with such a schema the token path is off."""
    for known, key in (("7e9", "NaN"), ("x9.87e+22", "xInfinity"), ("NaN_count", "NaN_count"),
                       ("a:b", "a:b")):
        p = JsonlParser("t", clock=lambda: 0.0)
        p.parse(b'{"step": 0, "%s": 1.0}\n' % known.encode())
        assert p._schema is not None and not p._schema.tokens_ok
        data = b'{"step": 1, "%s": 7e9}\n{"step": 2, "%s": NaN}\n' % (key.encode(), known.encode())
        assert p._schema.decode(data) is None
        b = p.parse(data, 2)
        assert b.series[key].values.tolist()[0] == 7e9
        assert np.isnan(b.series[known].values[-1])
    schema = fast.FastSchema(["step", "time", "loss"])
    assert schema.tokens_ok
    # a token in an unknown key: the rewritten key is unknown too, and the decode fails
    assert schema.decode(b'{"step": 1, "NaN": 7e9}\n') is None


def test_a_repeated_key_cannot_hide_a_token_behind_a_real_sentinel_value() -> None:
    """msgspec keeps a repeated key's last value: "loss": NaN, "loss": 7e9 would leave one
    sentinel for one token, and the token's NaN would replace the real 7e9."""
    p = JsonlParser("t", clock=lambda: 0.0)
    p.parse(b'{"step": 0, "loss": 1.0, "acc": 1.0}\n')
    schema = p._schema
    assert schema is not None
    for line, loss in (
        (b'{"step": 1, "loss": NaN, "loss": 7e9, "acc": 1}', 7e9),
        (b'{"step": 1, "loss": Infinity, "loss": 9.87e+22, "acc": 1}', 9.87e22),
        (b'{"step": 1, "loss": -Infinity, "loss": -9.87e+22, "acc": 1}', -9.87e22),
        (b'{"step": 1, "acc": NaN, "loss": 2, "loss": 7e9}', 7e9),  # on the token's line ...
        (b'{"step": 1, "loss": NaN, "loss": 2, "acc": 1}', 2.0),
    ):
        chunk = line + b'\n{"step": 2, "loss": 3, "acc": 4}\n'
        assert schema.decode(chunk) is None
        b = p.parse(chunk, 2)
        assert b.series["loss"].values.tolist() == [loss, 3.0]
    # ... or on another line: the token's line lost its sentinel, another line has a real one
    chunk = b'{"step": 1, "loss": NaN, "loss": 2, "acc": 1}\n{"step": 2, "loss": 7e9, "acc": 4}\n'
    assert schema.decode(chunk) is None
    assert p.parse(chunk, 4).series["loss"].values.tolist() == [2.0, 7e9]
    # colons inside strings are not pairs: a schema key never holds one, so only a key made
    # unknown could, and that line fails the decode anyway
    assert schema.decode(b'{"step": 1, "loss": NaN, "a:c": 1}\n') is None
    block = schema.decode(b'{"step": 1, "loss": NaN}\n{"acc": Infinity}')
    assert block is not None and block.lines == 2


def test_decode_refuses_a_line_over_the_length_limit() -> None:
    """Padding or repeated keys make a line the Struct accepts longer than MAX_LINE_BYTES; the
    careful path reports it, so the fast path must not take the chunk."""
    schema = fast.FastSchema(["step", "time", "loss", "acc"])
    limit = fast.MAX_LINE_BYTES
    ok = b'{"step": 0, "loss": 2.0}\n'

    def line(size: int, loss: bytes = b"1.0") -> bytes:
        head, tail = b'{"step": 1, "loss": ' + loss, b', "acc": 1}'
        return head + b" " * (size - len(head) - len(tail)) + tail

    assert len(line(limit)) == len(line(limit, b"NaN")) == limit
    too_long = (
        ok + line(limit + 1) + b"\n" + ok,
        ok + line(limit + 1),  # the final line, without a newline
        line(limit + 1) + b"\n",  # the first line
        ok + line(limit + 1, b"NaN") + b"\n",  # on the token path
        ok + b'{"step": 1, ' + b'"loss": 1, ' * (limit // 11) + b'"acc": 1}\n',  # repeated keys
    )
    for data in too_long:
        assert schema.decode(data) is None
    for data in (ok + line(limit) + b"\n" + ok, ok + line(limit), ok + line(limit, b"NaN")):
        block = schema.decode(data)
        assert block is not None and block.lines == 2 + data.endswith(ok)
        assert block.columns["acc"][1] == 1.0


@pytest.mark.parametrize("n_keys", [1, 15, 16, 40])
def test_msgpack_columns_equal_the_slow_columns(n_keys: int) -> None:
    rng = random.Random(n_keys)
    keys = [f"k{i}" + "x" * rng.choice([0, 30, 300]) + "é" * rng.randint(0, 2) for i in range(n_keys)]
    schema = fast.FastSchema(keys)
    assert schema._layout is not None
    values = [-0.0, 0.0, 1e308, -5e-324, 1.5, 10**15, -3]
    lines = [
        json.dumps({k: rng.choice(values) for k in keys if rng.random() < 0.7}) for _ in range(50)
    ]
    objs = schema.many.decode(("[" + ",".join(lines) + "]").encode())
    quick, slow = schema.columns(objs), schema._columns_slow(objs)
    for k in keys:
        np.testing.assert_array_equal(quick[k], slow[k])
        assert np.array_equal(np.signbit(quick[k]), np.signbit(slow[k]))


@pytest.mark.parametrize(
    "data, ok",
    [
        (b'{"a": 1}\n{"a": 2}\n', True),
        (b'{"a": 1}\r\n{"a": 2}', True),
        (b'{"a": 1}\n{"a": 2} ', False),  # a final line must end in "}"
        (b'\n{"a": 1}\n', False),
        (b'\r\n{"a": 1}\n', False),
        (b'{"a": 1} \n', False),
        (b'{"a":\n1}\n', False),
        (b'', True),
    ],
)
def test_record_line_ends(data: bytes, ok: bool) -> None:
    ends = fast.record_line_ends(np.frombuffer(data, dtype=np.uint8))
    assert (ends is not None) == ok
    if ok:
        assert ends.tolist() == [i for i, c in enumerate(data) if c == 0x0A]


def test_pieces_cover_the_chunk_at_line_ends() -> None:
    rng = random.Random(7)
    data = b"".join(b"x" * rng.choice([3, 50, 900]) + b"\n" for _ in range(400))
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0x0A)
    spans = fast._pieces(ends, len(data), piece=1000)
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert all(data[stop - 1] == 0x0A for _, stop in spans)
    assert all(stop - start <= 1000 or data.count(b"\n", start, stop) == 1 for start, stop in spans)


def test_sentinels_parse_to_their_values_and_keep_the_token_lengths() -> None:
    assert len(fast._NAN_TEXT) == 3 and len(fast._INF_TEXT) == 8
    assert msgspec.json.decode(fast._NAN_TEXT) == fast._NAN_VALUE == float(fast._NAN_TEXT)
    assert msgspec.json.decode(fast._INF_TEXT) == fast._INF_VALUE == float(fast._INF_TEXT)


def test_without_a_regular_layout_the_slow_columns_give_the_same_block() -> None:
    """The MessagePack layout is checked once per schema; if msgspec ever wrote another, the
    fast path must still be right (only slower)."""
    data = mostly_plain(random.Random(3), 200, odd=0.0)
    schema = fast.FastSchema(["step", "time", "loss", "lr", LONG_KEY])
    quick = schema.decode(data)
    schema._layout = None
    slow = schema.decode(data)
    assert quick is not None and slow is not None and quick.lines == slow.lines == 200
    assert list(quick.columns) == list(slow.columns)
    for k in quick.columns:
        np.testing.assert_array_equal(quick.columns[k], slow.columns[k])


def test_fields_follow_the_records_and_series_keep_their_order() -> None:
    """msgspec matches keys fastest in the writer's order; a batch's series stay in the order
    they always had (step, time, then the learnt keys sorted), which the TUI's charts follow."""
    p = JsonlParser("t")
    lines = b"".join(b'{"step": %d, "zeta": 1, "alpha": 2, "time": 5}\n' % i for i in range(3))
    b = p.parse(lines)
    assert p._schema is not None
    assert p._schema.keys == ["step", "zeta", "alpha", "time"]
    assert list(b.series) == ["alpha", "zeta"]
    assert p._schema.decode(lines) is not None


def test_fast_reserved_keys_follow_the_generic_rules() -> None:
    """A non-finite step or time is absent (record index; the last own time, here the first read's); a step is truncated."""
    p = JsonlParser("t", clock=lambda: 5.0)
    p.parse(b'{"step": 0, "time": 1.0, "loss": 1}\n')
    chunk = b'{"step": Infinity, "time": -Infinity, "loss": 2}\n{"step": -2.5, "time": NaN, "loss": 3}\n'
    assert p._schema is not None and p._schema.decode(chunk) is not None
    b = p.parse(chunk, first_line=2)
    assert b.steps.tolist() == [1, -2]
    assert b.times.tolist() == [1.0, 1.0]


def test_a_metric_on_every_record_shares_the_batch_arrays_read_only() -> None:
    p = JsonlParser("t")
    b = p.parse(b"".join(b'{"step": %d, "loss": 1, "lr": 2}\n' % i for i in range(3))
                + b'{"step": 3, "loss": 1}\n')
    loss, lr = b.series["loss"], b.series["lr"]
    assert loss.steps is b.steps and loss.times is b.times and loss.segments is b.segments
    assert lr.steps.tolist() == [0, 1, 2] and lr.rows.tolist() == [0, 1, 2]
    for a in (b.steps, b.times, b.segments, loss.rows):
        assert not a.flags.writeable
