"""Shared plumbing for the line-oriented framework readers (detectron2, mmcv, mmengine).

Each of those formats is JSON Lines with its own idea of what a key means. The plumbing here
splits a chunk into numbered lines, decodes each one (tolerating Python's bare ``NaN`` and
``Infinity`` tokens), reports bad lines, and hands every decoded object to the subclass, which
turns it into zero or more records for the :class:`~trainwatch.builder.BatchBuilder`.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping
from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState
from trainwatch.formats._decode import SKIPPED, decode_or_report


def split_lines(data: bytes) -> list[bytes]:
    """Whole lines of ``data`` without their ends; CRLF and a missing final newline are fine."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


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
            obj = decode_or_report(line, line_no, builder)
            if obj is SKIPPED:
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
