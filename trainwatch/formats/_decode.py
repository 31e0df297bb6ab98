"""Decoding one JSON line, and the one-line reasons a bad line is skipped with.

Shared by the JSONL parser's careful path and the framework readers built on JSON lines, so a
bad line reads the same whichever reader met it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from trainwatch.builder import BatchBuilder

MAX_LINE_BYTES = 1 << 20
"""Lines longer than this are skipped and reported (a runaway print, not a metric record)."""

_decoder = msgspec.json.Decoder()
_SKIPPED = object()


def decode_json(line: bytes) -> Any:
    """Decode one JSON value; bare NaN/Infinity (Python's ``json.dumps``) go through the stdlib.

    Raises ``UnicodeDecodeError`` or ``ValueError`` for a line that is not JSON.
    """
    try:
        return _decoder.decode(line)
    except msgspec.DecodeError:
        pass
    return json.loads(line.decode("utf-8"))  # accepts NaN, Infinity, -Infinity


def short_error(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return msg[:120]


def too_long(line: bytes) -> str:
    return f"line is {len(line):,} bytes (limit {MAX_LINE_BYTES:,}); skipped"


def decode_or_report(line: bytes, line_no: int, builder: BatchBuilder) -> Any:
    """The decoded value of a line, or :data:`SKIPPED` after reporting why it was skipped."""
    if len(line) > MAX_LINE_BYTES:
        builder.add_malformed(line_no, too_long(line))
        return _SKIPPED
    try:
        return decode_json(line)
    except UnicodeDecodeError:
        builder.add_malformed(line_no, "invalid UTF-8; line skipped")
    except ValueError as e:
        builder.add_malformed(line_no, f"not valid JSON ({short_error(e)}); line skipped")
    except RecursionError:
        builder.add_malformed(line_no, "JSON nested too deeply; line skipped")
    return _SKIPPED


SKIPPED = _SKIPPED
"""Returned by :func:`decode_or_report` for a line that was reported and skipped."""
