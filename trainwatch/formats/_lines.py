"""Shared plumbing for the line-oriented framework readers (detectron2, mmcv, mmengine).

Each of those formats is JSON Lines with its own idea of what a key means. The plumbing here
splits a chunk into numbered lines, decodes each one (tolerating Python's bare ``NaN`` and
``Infinity`` tokens), reports bad lines, and hands every decoded object to the subclass, which
turns it into zero or more records for the :class:`~trainwatch.builder.BatchBuilder`.
"""

from __future__ import annotations

import json
import time as _time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState

MAX_LINE_BYTES = 1 << 20
"""Lines longer than this are skipped and reported (a runaway print, not a metric record)."""

_decoder = msgspec.json.Decoder()


def split_lines(data: bytes) -> list[bytes]:
    """Whole lines of ``data`` without their ends; CRLF and a missing final newline are fine."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def decode_json(line: bytes) -> Any:
    """Decode one JSON value; bare NaN/Infinity (Python's ``json.dumps``) go through the stdlib.

    Raises ``UnicodeDecodeError`` or ``ValueError`` for a line that is not JSON.
    """
    try:
        return _decoder.decode(line)
    except msgspec.DecodeError:
        pass
    return json.loads(line.decode("utf-8"))


def short_error(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return msg[:120]


def rename_time(obj: dict[str, Any]) -> dict[str, Any]:
    """detectron2, mmcv and mmengine all log ``time`` as *seconds per iteration*, not a clock.

    It becomes the ``time_per_iter`` series so the builder does not take it for the reserved
    unix timestamp (which would put every point in January 1970).
    """
    if "time" in obj:
        obj = dict(obj)
        obj["time_per_iter"] = obj.pop("time")
    return obj


class JsonLinesReader:
    """Base of a ``lines`` reader whose lines are JSON objects with format-specific keys.

    Subclasses set ``format`` and implement :meth:`_handle`; they may override :meth:`reset`
    (calling this one) to clear their own bookkeeping.
    """

    kind = "lines"
    format = "jsonl"

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        self.source = source
        self.clock = clock
        self.state = StreamState()
        self._meta: dict[str, Any] = {}
        """Meta found in the current call; returned with its batch."""

    def reset(self) -> None:
        """The file was truncated or replaced: parse from the top again."""
        self.state.reset()

    def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False) -> RecordBatch:
        """Parse whole lines; ``first_line`` is the 1-based number of the first one."""
        if reset:
            self.reset()
        builder = BatchBuilder(self.source, self.state, self.format, self.clock)
        self._meta = {}
        for i, line in enumerate(split_lines(data)):
            line_no = first_line + i
            if not line.strip():
                continue
            if len(line) > MAX_LINE_BYTES:
                builder.add_malformed(
                    line_no, f"line is {len(line):,} bytes (limit {MAX_LINE_BYTES:,}); skipped"
                )
                continue
            try:
                obj = decode_json(line)
            except UnicodeDecodeError:
                builder.add_malformed(line_no, "invalid UTF-8; line skipped")
                continue
            except ValueError as e:
                builder.add_malformed(line_no, f"not valid JSON ({short_error(e)}); line skipped")
                continue
            except RecursionError:
                builder.add_malformed(line_no, "JSON nested too deeply; line skipped")
                continue
            if type(obj) is not dict:
                builder.add_malformed(
                    line_no, f"expected a JSON object, got {type(obj).__name__}; line skipped"
                )
                continue
            self._handle(obj, line_no, builder)
        return builder.build(reset=reset, meta=self._meta or None)

    def _handle(self, obj: dict[str, Any], line_no: int, builder: BatchBuilder) -> None:
        raise NotImplementedError

    def _add_meta(self, meta: Mapping[str, Any]) -> None:
        self._meta.update(meta)
