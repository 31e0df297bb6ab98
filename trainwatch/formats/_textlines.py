"""The skeleton every ``lines`` reader shares, whatever one line holds (CSV rows, text logs).

A ``lines`` reader keeps one :class:`~trainwatch.builder.StreamState` across calls, and each
call splits its chunk into numbered lines, skips the blank ones, hands every other line to the
subclass and returns one batch with the meta that call found. Only what a line means differs
from one format to the next, so that is the single hook, :meth:`TextLinesReader._handle_line`.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder, StreamState


def split_lines(data: bytes) -> list[bytes]:
    """Whole lines of ``data`` without their ends; CRLF and a missing final newline are fine."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


class TextLinesReader:
    """Base of a ``lines`` reader: state, clock, reset and the parse loop.

    Subclasses set ``format`` and implement :meth:`_handle_line`; they may override
    :meth:`reset` (calling this one) to clear their own bookkeeping.
    """

    kind = "lines"
    format = "lines"

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
            # a blank line is nothing in any format: checked on the bytes, before any decoding
            if line.strip():
                self._handle_line(line, first_line + i, builder)
        return builder.build(reset=reset, meta=self._meta or None)

    def _handle_line(self, line: bytes, line_no: int, builder: BatchBuilder) -> None:
        """Add what one non-blank line (without its end) holds to ``builder``."""
        raise NotImplementedError
