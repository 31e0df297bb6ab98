"""The JSON line of one record, as a :class:`~trainwatch.writer.RunWriter` writes it.

JSON numbers, strings, bools, null, lists and nested dicts go as they are; numpy and torch
scalars (and 0-d / 1-element arrays and tensors) through ``.item()``, else ``float()``, without
importing either (:func:`~trainwatch.plainvalues.as_number`); anything else becomes its
``repr()`` (reported once). Non-finite floats are written as bare ``NaN`` / ``Infinity`` /
``-Infinity`` (what ``json.dumps`` does). A record the encoder cannot take as it is (non-str
keys, a cycle) is retried on a sanitised copy; one that still fails is dropped, never raised.

Apart from the writer because it is the one part of a record's path that looks at the values:
the writer decides when and where lines go (threads, the file, the run's lifetime), this how a
record becomes a line, and it is the hot path of ``log()`` (a few us a record).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from trainwatch.appendfile import reason
from trainwatch.plainvalues import NotANumber, as_number, safe_repr, sanitise

try:  # the C encoder, built once per writer: ~0.5 us cheaper per record than json.dumps
    from json.encoder import c_make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover - other Python implementations
    _c_make_encoder = None
_ascii = json.encoder.encode_basestring_ascii


class RecordEncoder:
    """Encodes the records of one file (``path``, named in what it reports) to JSON lines."""

    def __init__(self, path: Path, say_once: Callable[[str, str], None],
                 dropped: Callable[[], None]) -> None:
        self.path = path
        self.coerced = 0
        """Values written as their ``repr()`` because they were not JSON nor number-like."""
        self._say_once = say_once
        """Says a message once per key (the writer's: one stderr line per kind of problem)."""
        self._dropped = dropped
        """Counts a record that could not be encoded as dropped."""
        self._enc = self._make_encoder()

    def _make_encoder(self) -> Callable[[Any, int], Sequence[str]]:
        """``enc(record, 0)`` -> chunks of the record's JSON text (ASCII, NaN as ``NaN``)."""
        if _c_make_encoder is not None:
            # a private signature: checked on a known record, else the public encoder is used
            with suppress(Exception):
                # (markers, default, str encoder, indent, ":", ",", sort_keys, skipkeys, allow_nan)
                # markers=None: no cycle check (a cycle raises RecursionError: the slow path)
                c = _c_make_encoder(None, self._default, _ascii, None, ":", ",", False, False, True)
                if "".join(c({"a": [1, 0.5]}, 0)) == '{"a":[1,0.5]}':
                    return c
        enc = json.JSONEncoder(default=self._default, separators=(",", ":"), check_circular=False)
        return lambda rec, _level: (enc.encode(rec),)  # pragma: no cover

    def _default(self, value: Any) -> Any:
        """Called by the encoder for a value json cannot encode: a number-like, else repr()."""
        try:
            return as_number(value)
        except NotANumber:
            pass
        self.coerced += 1
        if self.coerced == 1:
            self._say_once(
                "repr",
                f"trainwatch: a {type(value).__name__} value is neither a number nor JSON;"
                f" written to {self.path} as its repr() string (log plain numbers instead;"
                " later cases are not reported)",
            )
        return safe_repr(value)

    def encode(self, rec: dict[str, Any]) -> str | None:
        """The record's JSON line (no newline), or None (counted as dropped, reported once)."""
        try:
            return "".join(self._enc(rec, 0))
        except (TypeError, ValueError, RecursionError):
            return self._encode_slow(rec)

    def _encode_slow(self, rec: dict[str, Any]) -> str | None:
        """Non-str keys or a cycle made the encoder fail: retry on a sanitised copy."""
        try:
            return "".join(self._enc(sanitise(rec), 0))
        except Exception as e:  # noqa: BLE001 - a record is never worth a crash
            self._dropped()
            self._say_once(
                "encode",
                f"trainwatch: a record for {self.path} could not be encoded"
                f" ({reason(e)}); dropped",
            )
            return None
