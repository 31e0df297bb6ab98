"""JSON Lines parsing: the format trainwatch writes and any script can write.

Speed matters here (a 1 M-line file must load in seconds), so the common case takes a fast path:
the chunk's lines are decoded in one msgspec call into a Struct whose fields are the metric
keys learned from earlier lines, then turned into columns without building dicts. Anything the
fast path rejects (a new key, an event, a nested object, NaN tokens, a bad line) is decoded line
by line by the generic path, which applies every rule of docs/format.md.
"""

from __future__ import annotations

import json
import re
import time as _time
from typing import Any, Callable

import msgspec
import numpy as np

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState

MAX_LINE_BYTES = 1 << 20
"""Lines longer than this are skipped and reported (a runaway print, not a metric record)."""
MAX_FAST_FIELDS = 256
_NONFINITE_TOKEN = re.compile(rb"NaN|Infinity")
_generic_decoder = msgspec.json.Decoder()


def _decode_generic(line: bytes) -> Any:
    """Decode one line; bare NaN/Infinity tokens (Python's json.dumps) go through the stdlib."""
    try:
        return _generic_decoder.decode(line)
    except msgspec.DecodeError:
        pass
    text = line.decode("utf-8")  # raises UnicodeDecodeError: reported by the caller
    return json.loads(text)  # accepts NaN, Infinity, -Infinity; raises ValueError otherwise


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
        self.astuple = msgspec.structs.astuple

    def columns(self, objs: list[Any]) -> dict[str, np.ndarray]:
        if not objs:
            return {}
        table = np.array([self.astuple(o) for o in objs], dtype=np.float64)
        return {k: table[:, i] for i, k in enumerate(self.keys)}


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
        if b"\r" in data:  # CRLF line ends (Windows writers, Keras' CSVLogger)
            data = data.replace(b"\r\n", b"\n").rstrip(b"\r")
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        if not lines:
            return builder.build(reset=reset)

        # classify: empty (skipped), too long (reported), needs generic path, fast candidate
        fast_idx: list[int] = []
        slow_idx: list[int] = []
        has_tokens = _NONFINITE_TOKEN.search(data) is not None
        long_lines = max(map(len, lines)) > MAX_LINE_BYTES
        if not has_tokens and not long_lines and b"\n\n" not in data and lines[0] and self._schema:
            fast_idx = list(range(len(lines)))
        else:
            for i, ln in enumerate(lines):
                if not ln or ln.isspace():
                    continue
                if len(ln) > MAX_LINE_BYTES:
                    builder.add_malformed(
                        first_line + i, f"line is {len(ln):,} bytes (limit {MAX_LINE_BYTES:,}); skipped"
                    )
                    continue
                if self._schema is None or (has_tokens and _NONFINITE_TOKEN.search(ln)):
                    slow_idx.append(i)
                else:
                    fast_idx.append(i)

        if fast_idx:
            slow_idx.extend(self._parse_fast(lines, fast_idx, first_line, builder))
            slow_idx.sort()
        for i in slow_idx:
            self._parse_one(lines[i], first_line + i, i, builder)

        self._learn(builder.seen_keys)
        return builder.build(reset=reset)

    # ------------------------------------------------------------------ paths
    def _parse_fast(
        self, lines: list[bytes], idx: list[int], first_line: int, builder: BatchBuilder
    ) -> list[int]:
        """Decode ``lines[idx]`` column-wise; returns the indices that need the generic path."""
        schema = self._schema
        assert schema is not None
        sel = lines if len(idx) == len(lines) else [lines[i] for i in idx]
        try:
            objs = schema.many.decode(b"[" + b",".join(sel) + b"]")
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
            pos = np.asarray(ok, dtype=np.int64)
            builder.add_columns(pos, pos + first_line, schema.columns(objs))
        return rejected

    def _parse_one(self, line: bytes, line_no: int, pos: int, builder: BatchBuilder) -> None:
        if not line.strip():
            return
        try:
            rec = _decode_generic(line)
        except UnicodeDecodeError:
            builder.add_malformed(line_no, "invalid UTF-8; line skipped")
            return
        except ValueError as e:
            builder.add_malformed(line_no, f"not valid JSON ({_short(e)}); line skipped")
            return
        except RecursionError:
            builder.add_malformed(line_no, "JSON nested too deeply; line skipped")
            return
        builder.add_record(rec, line_no, pos)

    def _learn(self, seen: set[str]) -> None:
        """Grow the fast path's schema with plain numeric keys the generic path saw."""
        # step and time are always fields: a record without them just leaves them NaN
        new = [k for k in ["step", "time", *sorted(seen)] if k not in self._keys]
        if not new or len(self._keys) + len(new) > MAX_FAST_FIELDS:
            return
        self._keys = self._keys + new
        self._schema = _FastSchema(self._keys)


def _short(e: Exception) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return msg[:120]
