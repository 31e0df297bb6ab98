"""Shared plumbing for the line-oriented framework readers (detectron2, mmcv, mmengine).

Each of those formats is JSON Lines with its own idea of what a key means. The plumbing here
splits a chunk into numbered lines, decodes each one (tolerating Python's bare ``NaN`` and
``Infinity`` tokens), reports bad lines, and hands every decoded object to the subclass, which
turns it into zero or more records for the :class:`~trainwatch.builder.BatchBuilder`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._decode import SKIPPED, decode_or_report
from trainwatch.formats._textlines import TextLinesReader


def rename_time(obj: dict[str, Any]) -> dict[str, Any]:
    """detectron2, mmcv and mmengine all log ``time`` as *seconds per iteration*, not a clock.

    It becomes the ``time_per_iter`` series so the builder does not take it for the reserved
    unix timestamp (which would put every point in January 1970).
    """
    if "time" in obj:
        obj = dict(obj)
        obj["time_per_iter"] = obj.pop("time")
    return obj


class JsonLinesReader(TextLinesReader):
    """Base of a ``lines`` reader whose lines are JSON objects with format-specific keys.

    Subclasses set ``format`` and implement :meth:`_handle`; they may override :meth:`reset`
    (calling this one) to clear their own bookkeeping.
    """

    format = "jsonl"

    def _handle_line(self, line: bytes, line_no: int, builder: BatchBuilder) -> None:
        obj = decode_or_report(line, line_no, builder)
        if obj is SKIPPED:
            return
        if type(obj) is not dict:
            builder.add_malformed(
                line_no, f"expected a JSON object, got {type(obj).__name__}; line skipped"
            )
            return
        self._handle(obj, line_no, builder)

    def _handle(self, obj: dict[str, Any], line_no: int, builder: BatchBuilder) -> None:
        raise NotImplementedError

    def _add_meta(self, meta: Mapping[str, Any]) -> None:
        self._meta.update(meta)
