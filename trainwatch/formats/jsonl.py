"""JSON Lines parsing: the format trainwatch writes and any script can write.

Speed matters here (a 1 M-line file must load in seconds), so the common case takes a fast path:
the chunk's lines are decoded in one msgspec call into a Struct whose fields are the metric
keys learned from earlier lines, then turned into columns without building dicts. Anything the
fast path rejects (a new key, an event, a nested object, NaN tokens, a bad line) is decoded line
by line by the generic path, which applies every rule of docs/format.md.
"""

from __future__ import annotations

import json
import time as _time
from collections.abc import Callable
from itertools import chain
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState
from trainwatch.formats._decode import (
    MAX_LINE_BYTES,
    SKIPPED,
    decode_json,
    decode_or_report,
    too_long,
)

MAX_FAST_FIELDS = 256
class _FastSchema:
    """A msgspec Struct with one float field per known metric key; unknown keys are rejected."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        fields = [(f"f{i}", float, float("nan")) for i in range(len(keys))]
        rename = {f"f{i}": k for i, k in enumerate(keys)}
        struct = msgspec.defstruct(
            "FastRecord", fields, rename=rename, forbid_unknown_fields=True, gc=False
        )
        self.many = msgspec.json.Decoder(list[struct])
        self.one = msgspec.json.Decoder(struct)
        self._row = attrgetter(*[f"f{i}" for i in range(len(keys))])

    def columns(self, objs: list[Any]) -> dict[str, np.ndarray]:
        """Struct rows -> one float64 column per key, without an intermediate list of tuples."""
        n, k = len(objs), len(self.keys)
        if not n:
            return {}
        rows = map(self._row, objs)
        flat = chain.from_iterable(rows) if k > 1 else rows
        table = np.fromiter(flat, dtype=np.float64, count=n * k).reshape(n, k)
        return {key: table[:, i] for i, key in enumerate(self.keys)}


class JsonlParser:
    """Parses complete lines of one JSONL source, keeping stream state across calls."""

    kind = "lines"
    format = "jsonl"

    def __init__(
        self,
        source: str,
        *,
        rank: int | None = None,
        clock: Callable[[], float] = _time.time,
    ) -> None:
        self.source = source
        self.clock = clock
        self.state = StreamState(rank=rank)
        self._keys: list[str] = []
        self._schema: _FastSchema | None = None

    def reset(self) -> None:
        """The file was truncated or replaced: parse from the top again."""
        self.state.reset()

    def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False) -> RecordBatch:
        """Parse ``data`` (whole lines, each ending in newline, or a final line at end of file).

        ``first_line`` is the 1-based line number of the first line in ``data``.
        """
        if reset:
            self.reset()
        builder = BatchBuilder(self.source, self.state, self.format, self.clock)
        if self._schema is None:
            self._learn_from_head(data[: 1 << 16].split(b"\n"))
        self._parse_span(data, first_line, builder)
        self._learn(builder.seen_keys)
        return builder.build(reset=reset)

    def _parse_span(self, data: bytes, first_line: int, builder: BatchBuilder) -> None:
        """Whole lines -> records. Record positions are line numbers, so paths can interleave."""
        if not data or self._fast_block(data, first_line, builder):
            return
        if self._schema is not None and (b"NaN" in data or b"Infinity" in data):
            # Python's json.dumps writes bare NaN/Infinity, which the fast decoder rejects. Find
            # just those lines (bytes.find, no per-line loop) and keep the clean spans fast.
            token_lines: list[tuple[int, bytes]] = []
            clean: list[tuple[int, bytes]] = []  # (first line number, whole lines)
            prev, line_at = 0, first_line
            for s, e in _token_line_spans(data):
                if s > prev:
                    span = data[prev:s]
                    clean.append((line_at, span))
                    line_at += span.count(b"\n")
                token_lines.append((line_at, data[s:e]))
                line_at += 1
                prev = e
            if prev < len(data):
                clean.append((line_at, data[prev:]))
            # all clean spans in one decode; numbering comes from the spans
            numbers = np.concatenate(
                [np.arange(a, a + sp.count(b"\n") + (not sp.endswith(b"\n"))) for a, sp in clean]
            ) if clean else None
            joined = b"".join(sp if sp.endswith(b"\n") else sp + b"\n" for _, sp in clean)
            if clean and not self._fast_block(joined, first_line, builder, numbers):
                for a, sp in clean:
                    self._careful(sp, a, builder)
            self._token_lines(token_lines, builder)
            return
        self._careful(data, first_line, builder)

    def _careful(self, data: bytes, first_line: int, builder: BatchBuilder) -> None:
        """Line by line: empty lines skipped, long lines reported, the rest fast where possible."""
        if self._fast_block(data, first_line, builder):
            return
        if b"\r" in data:  # CRLF line ends (Windows writers, Keras' CSVLogger)
            data = data.replace(b"\r\n", b"\n").rstrip(b"\r")
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        fast_idx: list[int] = []
        slow_idx: list[int] = []
        for i, ln in enumerate(lines):
            if not ln or ln.isspace():
                continue
            if len(ln) > MAX_LINE_BYTES:
                builder.add_malformed(first_line + i, too_long(ln))
                continue
            if self._schema is None or b"NaN" in ln or b"Infinity" in ln:
                slow_idx.append(i)
            else:
                fast_idx.append(i)
        if fast_idx:
            slow_idx.extend(self._parse_fast(lines, fast_idx, first_line, builder))
            slow_idx.sort()
        for i in slow_idx:
            self._parse_one(lines[i], first_line + i, builder)

    def _token_lines(self, items: list[tuple[int, bytes]], builder: BatchBuilder) -> None:
        """Lines with NaN/Infinity tokens: one stdlib decode for all of them, per line on error."""
        if not items:
            return
        try:
            objs = json.loads(b"[" + b",".join(ln for _, ln in items) + b"]")
            if len(objs) != len(items):
                raise ValueError("line count mismatch")
        except (ValueError, RecursionError):
            for line_no, ln in items:
                self._parse_one(ln, line_no, builder)
            return
        for (line_no, _), obj in zip(items, objs):
            builder.add_record(obj, line_no, line_no)

    # ------------------------------------------------------------------ paths
    def _fast_block(
        self,
        data: bytes,
        first_line: int,
        builder: BatchBuilder,
        numbers: np.ndarray | None = None,
    ) -> bool:
        """The common case: every line is a plain record of known keys. One decode, no split.

        Returns False (having added nothing) when any line needs the careful path: a NaN token, an
        event, a new key, an empty or CRLF line, a malformed line. A line the Struct accepts cannot
        be anywhere near MAX_LINE_BYTES, so the length limit needs no check here.
        """
        schema = self._schema
        if schema is None:
            return False
        # One copy: newlines become commas inside a bytearray framed as a JSON array. The decode
        # is the validator: an empty line (",,"), a leading blank line or a bad line fails it;
        # "\r" before "\n" is JSON whitespace, so CRLF files stay on the fast path.
        if not data:
            return False
        buf = bytearray(b"[")
        buf += data.replace(b"\n", b",")
        if buf[-1] == 0x2C:  # the final newline's comma closes the array instead
            buf[-1] = 0x5D
        else:
            buf.append(0x5D)
        try:
            objs = schema.many.decode(buf)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        n = len(objs)
        # two objects on one line ("{...},{...}") decode too, but are not JSON Lines
        if n != data.count(b"\n") + (0 if data.endswith(b"\n") else 1):
            return False
        lines = np.arange(first_line, first_line + n, dtype=np.int64) if numbers is None else numbers
        builder.add_columns(lines, lines, schema.columns(objs))
        return True

    def _parse_fast(
        self, lines: list[bytes], idx: list[int], first_line: int, builder: BatchBuilder
    ) -> list[int]:
        """Decode ``lines[idx]`` column-wise; returns the indices that need the generic path."""
        schema = self._schema
        assert schema is not None
        sel = lines if len(idx) == len(lines) else [lines[i] for i in idx]
        try:
            objs = schema.many.decode(b"[" + b",".join(sel) + b"]")
            if len(objs) != len(sel):  # a line held two objects: find it line by line
                raise msgspec.DecodeError("object count differs from line count")
            ok = idx
            rejected: list[int] = []
        except (msgspec.DecodeError, msgspec.ValidationError):
            objs, ok, rejected = [], [], []
            one = schema.one.decode
            for i in idx:
                try:
                    objs.append(one(lines[i]))
                    ok.append(i)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    rejected.append(i)
        if ok:
            lines_no = np.asarray(ok, dtype=np.int64) + first_line
            builder.add_columns(lines_no, lines_no, schema.columns(objs))
        return rejected

    def _parse_one(self, line: bytes, line_no: int, builder: BatchBuilder) -> None:
        if not line.strip():
            return
        rec = decode_or_report(line, line_no, builder)
        if rec is not SKIPPED:
            builder.add_record(rec, line_no, line_no)

    def _learn_from_head(self, lines: list[bytes], probe: int = 16) -> None:
        """Learn the fast path's first schema from the first few plain records of the stream."""
        seen: set[str] = set()
        for ln in lines[:probe]:
            try:
                rec = decode_json(ln)
            except (ValueError, RecursionError):
                continue
            if type(rec) is dict and "event" not in rec:
                seen.update(
                    k for k, v in rec.items()
                    if type(v) in (int, float) and k not in ("step", "time", "rank")
                )
        if seen:
            self._learn(seen)

    def _learn(self, seen: set[str]) -> None:
        """Grow the fast path's schema with plain numeric keys the generic path saw."""
        # step and time are always fields: a record without them just leaves them NaN
        new = [
            k for k in ["step", "time", *sorted(seen)]
            if k not in self._keys and _fast_key_ok(k)
        ]
        if not new or len(self._keys) + len(new) > MAX_FAST_FIELDS:
            return
        self._keys = self._keys + new
        self._schema = _FastSchema(self._keys)


def _fast_key_ok(key: str) -> bool:
    """msgspec cannot name a field with a quote, backslash or control character: such keys (odd,
    but legal JSON) stay on the generic path rather than break the fast one."""
    return not any(ch in '"\\' or ord(ch) < 0x20 for ch in key)


def _token_line_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) byte offsets of the lines holding a NaN or Infinity token, end past its newline."""
    spans: set[tuple[int, int]] = set()
    for tok in (b"NaN", b"Infinity"):
        i = data.find(tok)
        while i != -1:
            s = data.rfind(b"\n", 0, i) + 1
            e = data.find(b"\n", i)
            e = len(data) if e == -1 else e + 1
            spans.add((s, e))
            i = data.find(tok, e)
    return sorted(spans)
