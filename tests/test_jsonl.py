"""JSONL parsing: the format contract of docs/format.md, and fast path == careful path."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from trainwatch.formats.jsonl import MAX_LINE_BYTES, JsonlParser


def parse_all(data: bytes, **kw) -> list:
    p = JsonlParser("t", clock=lambda: 1000.0, **kw)
    return [p.parse(data)]


def series(batches, name):
    steps = np.concatenate([b.series[name].steps for b in batches if name in b.series])
    values = np.concatenate([b.series[name].values for b in batches if name in b.series])
    return steps, values


def test_plain_records_become_series_with_steps_and_times():
    (b,) = parse_all(b'{"step": 5, "time": 10.5, "loss": 1.5, "lr": 0.001}\n{"step": 6, "loss": 1.25}\n')
    assert b.n_records == 2
    assert b.steps.tolist() == [5, 6]
    assert b.times.tolist() == [10.5, 10.5]  # absent time -> the last record's own time
    assert b.series["loss"].values.tolist() == [1.5, 1.25]
    assert b.series["lr"].steps.tolist() == [5]
    assert "step" not in b.series and "time" not in b.series


def test_absent_step_is_the_record_index():
    p = JsonlParser("t")
    b1 = p.parse(b'{"loss": 1}\n{"loss": 2}\n')
    b2 = p.parse(b'{"loss": 3}\n', first_line=3)
    assert b1.steps.tolist() == [0, 1]
    assert b2.steps.tolist() == [2]
    assert b2.first_record == 2


def test_nested_objects_flatten_with_slash_and_non_numbers_are_not_series():
    (b,) = parse_all(
        b'{"step": 1, "train": {"loss": 1, "opt": {"lr": 0.1}}, "tag": "x", "ok": true, "v": [1, 2]}\n'
    )
    assert set(b.series) == {"train/loss", "train/opt/lr"}
    assert b.notes == ((0, {"tag": "x", "v": [1, 2]}),)


@pytest.mark.parametrize(
    "token, expected",
    [(b"NaN", math.nan), (b"Infinity", math.inf), (b"-Infinity", -math.inf),
     (b'"nan"', math.nan), (b'"inf"', math.inf), (b'"-inf"', -math.inf), (b'"NaN"', math.nan)],
)
def test_nonfinite_tokens_are_values(token, expected):
    (b,) = parse_all(b'{"step": 1, "loss": 0.5}\n{"step": 2, "loss": ' + token + b"}\n")
    v = b.series["loss"].values[1]
    assert (math.isnan(v) and math.isnan(expected)) or v == expected
    assert b.series["loss"].nonfinite == 1
    assert not b.malformed


def test_malformed_lines_are_counted_with_line_numbers_and_skipped():
    data = b'{"step": 1, "loss": 1}\nnot json\n{"step": 2, "loss": 2}\n[1, 2]\n{"step": 3, "loss"\n'
    (b,) = parse_all(data)
    assert b.series["loss"].values.tolist() == [1.0, 2.0]
    assert [m.line for m in b.malformed] == [2, 4, 5]
    assert all("skipped" in m.reason for m in b.malformed)


def test_invalid_utf8_and_huge_lines_are_reported_not_fatal():
    huge = b'{"step": 9, "blob": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}'
    data = b'{"step": 1, "loss": 1}\n{"step": 2, "name": "\xff\xfe"}\n' + huge + b'\n{"step": 3, "loss": 3}\n'
    (b,) = parse_all(data)
    assert b.series["loss"].steps.tolist() == [1, 3]
    reasons = {m.line: m.reason for m in b.malformed}
    assert set(reasons) == {2, 3}
    assert "UTF-8" in reasons[2]
    assert "limit" in reasons[3]


@pytest.mark.parametrize("other", [b'{"step": 2, "loss": 3.0, "acc": 1}', b'{"step": 2, "loss": 3.0, "new": 1}'])
@pytest.mark.parametrize("loss", [b"1.0", b"NaN"])
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\n-final"])
def test_a_line_over_the_limit_is_malformed_on_every_path(other, loss, end):
    """Whitespace padding makes a plain record as long as any: past MAX_LINE_BYTES it is skipped
    whichever path meets it (column decode, token lines, line by line), at the limit it is not."""
    p = JsonlParser("t", clock=lambda: 0.0)
    p.parse(b'{"step": 0, "loss": 2.0, "acc": 1}\n')  # a learnt schema: the fast paths are open
    end, last = (b"\n", b"") if end == b"\n-final" else (end, end)  # final: no newline

    def line(size: int) -> bytes:
        head, tail = b'{"step": 1, "loss": ' + loss, b', "acc": 1}'
        return head + b" " * (size - len(head) - len(tail)) + tail

    plain = other + end
    b = p.parse(plain + line(MAX_LINE_BYTES + 1) + last, first_line=2)
    assert [m.line for m in b.malformed] == [3] and "limit" in b.malformed[0].reason
    assert b.series["loss"].values.tolist() == [3.0]
    b = p.parse(plain + line(MAX_LINE_BYTES) + last, first_line=4)
    assert not b.malformed
    np.testing.assert_array_equal(b.series["loss"].values, [3.0, float(loss)])


def test_crlf_and_blank_lines():
    (b,) = parse_all(b'{"step": 1, "loss": 1}\r\n\r\n   \n{"step": 2, "loss": 2}\r\n')
    assert b.series["loss"].values.tolist() == [1.0, 2.0]
    assert not b.malformed


def test_events_keep_their_fields_and_take_the_previous_step():
    data = (
        b'{"event": "run_start", "config": {"lr": 0.1}}\n'
        b'{"step": 10, "loss": 1}\n'
        b'{"event": "checkpoint", "path": "ckpt.pt"}\n'
        b'{"event": "run_end", "step": 20, "status": "finished", "exit_code": 0}\n'
    )
    (b,) = parse_all(data)
    names = [e.name for e in b.events]
    assert names == ["run_start", "checkpoint", "run_end"]
    assert b.events[0].fields["config"] == {"lr": 0.1}
    assert b.events[1].step == 10 and b.events[1].line == 3
    assert b.events[2].step == 20 and b.events[2].fields["status"] == "finished"
    assert set(b.series) == {"loss"}  # event fields are not series (config/lr is not a metric)


def test_rewind_starts_a_new_segment_and_is_reported():
    p = JsonlParser("t")
    b1 = p.parse(b'{"step": 1, "loss": 1}\n{"step": 2, "loss": 1}\n{"step": 3, "loss": 1}\n')
    b2 = p.parse(b'{"step": 2, "loss": 2}\n{"step": 3, "loss": 2}\n', first_line=4)
    assert b1.segments.tolist() == [0, 0, 0]
    assert b2.segments.tolist() == [1, 1]
    assert [(r.line, r.from_step, r.to_step, r.segment) for r in b2.rewinds] == [(4, 3, 2, 1)]
    # equal steps (train and eval rows at one step) are not a rewind
    b3 = p.parse(b'{"step": 3, "val_loss": 2}\n', first_line=6)
    assert not b3.rewinds


def test_reset_starts_the_stream_again():
    p = JsonlParser("t")
    p.parse(b'{"step": 1, "loss": 1}\n{"step": 2, "loss": 1}\n')
    b = p.parse(b'{"loss": 5}\n', reset=True)
    assert b.reset and b.steps.tolist() == [0] and b.first_record == 0 and not b.rewinds


def test_two_objects_on_one_line_are_not_silently_split():
    p = JsonlParser("t")
    p.parse(b'{"step": 1, "loss": 1}\n')
    b = p.parse(b'{"step": 2, "loss": 2},{"step": 3, "loss": 3}\n{"step": 4, "loss": 4}\n', first_line=2)
    assert b.series["loss"].steps.tolist() == [4]
    assert [m.line for m in b.malformed] == [2]


def _random_lines(rng: random.Random, n: int) -> list[bytes]:
    out = []
    step = 0
    for i in range(n):
        r = rng.random()
        step += rng.choice([0, 1, 1, 1, 2])
        if r < 0.03:
            out.append(b"garbage {")
        elif r < 0.05:
            out.append(b"")
        elif r < 0.07:
            out.append(json.dumps({"event": "eval", "step": step, "note": "x"}).encode())
        elif r < 0.09 and step > 5:
            step -= rng.randint(1, 5)
            out.append(json.dumps({"step": step, "loss": rng.random()}).encode())
        else:
            rec: dict = {"step": step, "loss": rng.random(), "lr": rng.random() * 1e-3}
            if rng.random() < 0.1:
                rec["loss"] = rng.choice([float("nan"), float("inf"), "nan"])
            if rng.random() < 0.1:
                rec["val_loss"] = rng.random()
            if rng.random() < 0.05:
                rec[f"new_metric_{rng.randint(0, 3)}"] = rng.randint(0, 9)
            if rng.random() < 0.05:
                rec["nested"] = {"a": rng.random()}
            if rng.random() < 0.05:
                del rec["step"]
            out.append(json.dumps(rec).encode())
        if rng.random() < 0.05:
            out[-1] += b"\r"
    return out


def _reference(lines: list[bytes]) -> dict[str, list[tuple[int, float]]]:
    """Independent reference built with the stdlib, one record at a time."""
    ref: dict[str, list[tuple[int, float]]] = {}
    index = 0
    for ln in lines:
        ln = ln.rstrip(b"\r")
        if not ln.strip():
            continue
        try:
            rec = json.loads(ln)
        except ValueError:
            continue
        step = rec.get("step", index)
        index += 1
        if "event" in rec:
            continue

        def walk(d, prefix="", step=step):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, prefix + k + "/", step)
                elif not prefix and k in ("step", "time", "event", "rank") or isinstance(v, bool):
                    continue
                elif isinstance(v, (int, float)) or isinstance(v, str) and v.lower() in ("nan", "inf", "-inf"):
                    ref.setdefault(prefix + k, []).append((step, float(v)))

        walk(rec)
    return ref


@pytest.mark.parametrize("seed", range(8))
def test_any_chunking_gives_the_same_records_as_a_stdlib_reference(seed):
    rng = random.Random(seed)
    lines = _random_lines(rng, 400)
    ref = _reference(lines)
    data = b"\n".join(lines) + b"\n"

    # cut into whole-line chunks at random places (the tailer hands over whole lines)
    p = JsonlParser("t", clock=lambda: 0.0)
    batches = []
    pos, line_no = 0, 1
    while pos < len(data):
        cut = data.find(b"\n", min(len(data) - 1, pos + rng.randint(0, 3000))) + 1
        chunk = data[pos:cut]
        batches.append(p.parse(chunk, line_no))
        line_no += chunk.count(b"\n")
        pos = cut
    whole = JsonlParser("t", clock=lambda: 0.0).parse(data)
    for name, pts in ref.items():
        exp_steps = [s for s, _ in pts]
        exp_vals = np.array([v for _, v in pts])
        for got in (series(batches, name), series([whole], name)):
            assert got[0].tolist() == exp_steps, name
            np.testing.assert_array_equal(got[1], exp_vals)
    assert set(whole.series) == set(ref)
    bad = sum(1 for ln in lines if ln.strip(b"\r").strip() and ln.startswith(b"garbage"))
    assert len(whole.malformed) == bad == sum(len(b.malformed) for b in batches)
    assert sum(len(b.rewinds) for b in batches) == len(whole.rewinds)


def test_keys_with_quotes_backslashes_or_control_characters_are_still_series():
    p = JsonlParser("t")
    odd = ['evil\x1b[31mname', 'quo"te', "back\\slash"]
    lines = [json.dumps({"step": i, **{k: float(i) for k in odd}, "loss": 1.0}) for i in range(5)]
    b = p.parse(("\n".join(lines) + "\n").encode())
    for k in odd:
        assert b.series[k].values.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
