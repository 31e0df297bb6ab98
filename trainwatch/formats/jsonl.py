"""JSON Lines parsing: the format trainwatch writes and any script can write.

Speed matters here (a 1 M-line file must load in seconds), so the common case takes the fast
path of :mod:`trainwatch.formats._jsonl_fast`: the chunk's lines are decoded by msgspec into a
Struct whose fields are the metric keys learned from earlier lines, then turned into columns
without building dicts. Lines with Python's bare NaN/Infinity tokens take it too, with the tokens
swapped for sentinels. Anything the fast path rejects (a new key, an event, a nested object, a
bad line) is decoded line by line by the generic path, which applies every rule of
docs/format.md.
"""

from __future__ import annotations

import json
import time as _time
from collections.abc import Callable, Iterable
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
from trainwatch.formats._jsonl_fast import FastSchema

MAX_FAST_FIELDS = 256
UTF8_BOM = b"\xef\xbb\xbf"


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
        """The fast path's keys in column order."""
        self._fields: list[str] = []
        """The same keys in the order records hold them (the Struct's field order)."""
        self._schema: FastSchema | None = None

    def reset(self) -> None:
        """The file was truncated or replaced: parse from the top again."""
        self.state.reset()

    def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False) -> RecordBatch:
        """Parse ``data`` (whole lines, each ending in newline, or a final line at end of file).

        ``first_line`` is the 1-based line number of the first line in ``data``.
        """
        return self.parse_buffer(data, first_line, reset=reset)[0]

    def parse_buffer(
        self, data: Any, first_line: int = 1, *, reset: bool = False
    ) -> tuple[RecordBatch, int]:
        """:meth:`parse` for any bytes-like ``data``, also returning how many lines it held.

        ``data`` is only read during the call and nothing returned refers to it, so a caller may
        refill the same buffer for the next chunk (``read_file`` does). A final line without a
        newline counts as a line.
        """
        if reset:
            self.reset()
        if first_line == 1 and bytes(data[:3]) == UTF8_BOM:
            # Windows tools (PowerShell's Out-File, Notepad) start a file with one: it is not
            # part of the first record, which would otherwise be lost as malformed
            data = bytes(data[3:])
        builder = BatchBuilder(self.source, self.state, self.format, self.clock)
        if self._schema is None:
            self._learn_from_head(bytes(data[: 1 << 16]).split(b"\n"))
        n_lines = self._parse_span(data, first_line, builder)
        self._learn(builder.seen_keys)
        return builder.build(reset=reset), n_lines

    def _parse_span(self, data: Any, first_line: int, builder: BatchBuilder) -> int:
        """Whole lines -> records; returns the number of lines. Record positions are line
        numbers, so paths can interleave."""
        if not len(data):
            return 0
        n_lines = self._fast_block(data, first_line, builder)
        if n_lines is not None:
            return n_lines
        data = bytes(data)  # the slower paths below use bytes' methods
        n_lines = data.count(b"\n") + (not data.endswith(b"\n"))
        schema = self._schema
        if schema is not None and (b"NaN" in data or b"Infinity" in data):
            # Python's json.dumps writes bare NaN/Infinity, and not every line is a plain record:
            # find just the token lines (bytes.find, no per-line loop), keep the clean spans fast.
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
            if clean and self._fast_block(joined, first_line, builder, numbers) is None:
                for a, sp in clean:
                    self._careful(sp, a, builder)
            self._token_lines(token_lines, builder)
            return n_lines
        self._careful(data, first_line, builder, try_fast=False)  # it just failed above
        return n_lines

    def _careful(
        self, data: bytes, first_line: int, builder: BatchBuilder, *, try_fast: bool = True
    ) -> None:
        """Line by line: empty lines skipped, long lines reported, the rest fast where possible."""
        if try_fast and self._fast_block(data, first_line, builder) is not None:
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
        if any(len(ln) > MAX_LINE_BYTES for _, ln in items):
            # the joined decode would take a line the careful path skips: that one is reported
            long = [(no, ln) for no, ln in items if len(_line_body(ln)) > MAX_LINE_BYTES]
            items = [(no, ln) for no, ln in items if len(_line_body(ln)) <= MAX_LINE_BYTES]
            for line_no, ln in long:
                builder.add_malformed(line_no, too_long(_line_body(ln)))
        if not items:
            return
        try:
            objs = json.loads(b"[" + b",".join(ln for _, ln in items) + b"]")
            if len(objs) != len(items):
                raise ValueError("line count mismatch")
        except (ValueError, RecursionError):
            for line_no, ln in items:
                self._parse_one(_line_body(ln), line_no, builder)
            return
        for (line_no, _), obj in zip(items, objs):
            builder.add_record(obj, line_no, line_no)

    # ------------------------------------------------------------------ paths
    def _fast_block(
        self,
        data: Any,
        first_line: int,
        builder: BatchBuilder,
        numbers: np.ndarray | None = None,
    ) -> int | None:
        """The common case: every line is a plain record of known keys. One decode, no split.

        Returns the number of lines, or None (having added nothing) when any line needs the
        careful path: an event, a new key, an empty line, a malformed line, a line longer than
        MAX_LINE_BYTES (:meth:`FastSchema.decode` refuses those).
        ``numbers`` are the lines' own numbers when they are not consecutive from ``first_line``.
        """
        schema = self._schema
        if schema is None:
            return None
        block = schema.decode(data)
        if block is None:
            return None
        n = block.lines
        lines = np.arange(first_line, first_line + n, dtype=np.int64) if numbers is None else numbers
        builder.add_columns(lines, lines, block.columns, block.present)
        return n

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
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            # (msgspec raises UnicodeDecodeError for an unknown key that is not UTF-8)
            objs, ok, rejected = [], [], []
            one = schema.one.decode
            for i in idx:
                try:
                    objs.append(one(lines[i]))
                    ok.append(i)
                except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
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
        seen: dict[str, None] = {}  # in the records' own key order: see _learn
        for ln in lines[:probe]:
            try:
                rec = decode_json(ln)
            except (ValueError, RecursionError):
                continue
            if type(rec) is dict and "event" not in rec:
                seen.update(
                    (k, None) for k, v in rec.items()
                    if type(v) in (int, float) and k != "rank"
                )
        if seen:
            self._learn(seen)

    def _learn(self, seen: Iterable[str]) -> None:
        """Grow the fast path's schema with plain numeric keys the generic path saw.

        The Struct's fields keep the order the keys came in (``seen`` is ordered), which msgspec
        decodes fastest; the columns keep the order they always had (step, time, then each
        learning's new keys sorted), which is the order of a batch's series.
        """
        ok = [k for k in dict.fromkeys(seen) if k != "rank" and _fast_key_ok(k)]
        # step and time are always fields: a record without them just leaves them NaN
        metrics = sorted(k for k in ok if k not in ("step", "time"))
        new = [k for k in ["step", "time", *metrics] if k not in self._keys]
        if not new or len(self._keys) + len(new) > MAX_FAST_FIELDS:
            return
        fresh = set(new)
        self._fields = self._fields + [k for k in dict.fromkeys([*ok, "step", "time"]) if k in fresh]
        self._keys = self._keys + new
        self._schema = FastSchema(self._fields, order=self._keys)


def _fast_key_ok(key: str) -> bool:
    """msgspec cannot name a field with a quote, backslash or control character: such keys (odd,
    but legal JSON) stay on the generic path rather than break the fast one."""
    return not any(ch in '"\\' or ord(ch) < 0x20 for ch in key)


def _line_body(line: bytes) -> bytes:
    """A line without its ``\n`` or ``\r\n``: what the careful path measures and decodes."""
    if line.endswith(b"\n"):
        return line[:-2] if line.endswith(b"\r\n") else line[:-1]
    return line.rstrip(b"\r")  # the chunk's last line: the careful path strips every "\r"


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
