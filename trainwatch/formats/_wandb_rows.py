"""W&B history rows read in bulk: rewritten as JSON lines all at once, and decoded into columns
by the JSONL fast path.

A ``HistoryRecord`` is its items, each ``0x0a L | 0x12 K key [0x12 K key...] | 0x82 0x01 V
value_json``, then its ``step`` (``0x12 n [0x08 varint]``). Walking that byte by byte and
building one dict per row cost ~15 us a row of twenty metrics (a 50k-step run: 13 s on a busy
machine). Here:

1. :data:`_ROW` checks a row has the common shape: every length under 128 (one byte), keys
   without control bytes, ``0x82``, quotes or backslashes, values made only of a JSON number,
   ``NaN`` or ``Infinity``. Then each item's bytes split only one way, the way its lengths say:
   a key ends at the ``0x82 0x01`` tag (no 0x82 inside it), a value at the next ``0x0a``
   or ``0x12`` tag (none inside it). A row of any other shape (a string, a media object, a
   boolean, a long key) goes back to the reader, for the one exact decoder
   (:func:`~trainwatch.formats._wandb_proto.history`), against which ``tests/test_wandb.py``
   checks this path on every row of the fixtures.
2. The rows taken (their step fields left off) are joined and rewritten by :func:`rewrite`:
   each item's start to ``,"``, each value tag to ``":``, nested key tags to ``/``. Every row is
   then one JSON line; W&B's ``_step`` and ``_timestamp`` become its step and time.
3. :class:`~trainwatch.formats._jsonl_fast.FastSchema` decodes the lines into columns (keys
   learned from the lines whenever a new one appears), bare ``NaN``/``Infinity`` included.
"""

from __future__ import annotations

import re

import numpy as np

from trainwatch.builder import BatchBuilder
from trainwatch.formats._jsonl_fast import FastBlock, FastSchema

_KEY_TEXT = rb'[^\x00-\x1f\x82"\\]*'
_KEYS = rb"\x12[\x00-\x7f]" + _KEY_TEXT + rb"(?:\x12[\x00-\x7f]" + _KEY_TEXT + rb")*"
_VALUE = rb"(?:-?Infinity|NaN|[-+.0-9eE]+)"
_ITEM = rb"\x0a[\x00-\x7f]" + _KEYS + rb"\x82\x01[\x00-\x7f]" + _VALUE
_STEP = rb"\x12[\x00-\x0b](?:\x08[\x80-\xff]{0,9}[\x00-\x7f])?"
_ROW = re.compile(rb"(?:" + _ITEM + rb")*(" + _STEP + rb")?")
"""A whole row of common items, then its ``step`` field (empty, or one varint ``num``)."""
_ROW_END = b"}\n{"
"""Between the rows' items while they are rewritten: no good row's items hold it."""
_NESTED = re.compile(rb"\x12[\x00-\x7f]")
_KEY_NAMES = re.compile(rb'"([^"]*)":')
_COMMA, _QUOTE, _COLON = ord(","), ord('"'), ord(":")


def rewrite(rows: list[bytes]) -> bytes:
    """Rows of good items (no step field) as JSON lines, one per row.

    In a good row, ``0x0a`` followed two bytes later by ``0x12`` is an item's start and nothing
    else (a length byte before a key of its own length cannot be, a key or a value holds neither
    byte), and ``0x82 0x01`` is a value's tag. So an item's 4 start bytes become ``,"`` and a
    value's 3 tag bytes ``":``, in a few numpy passes over all the rows (a regex substitution per
    item ran ~5x slower); then the tags of nested keys left in a key become ``/``."""
    arr = np.frombuffer(_ROW_END.join(rows), dtype=np.uint8)
    starts = np.flatnonzero((arr[:-2] == 0x0A) & (arr[2:] == 0x12))
    values = np.flatnonzero((arr[:-1] == 0x82) & (arr[1:] == 0x01))
    out = arr.copy()
    out[starts], out[starts + 1] = _COMMA, _QUOTE
    out[values], out[values + 1] = _QUOTE, _COLON
    keep = np.ones(arr.shape[0], dtype=bool)
    keep[starts + 2] = keep[starts + 3] = keep[values + 2] = False
    text = out[keep].tobytes()
    if b"\x12" in text:
        text = _NESTED.sub(b"/", text)
    # each row is ,"k":v,"k2":v2 : its leading comma goes
    return b"{" + text[1:].replace(b"\n{,", b"\n{") + b"}\n"


class HistoryColumns:
    """History rows in the common shape, queued by :meth:`add`, decoded by :meth:`flush`."""

    def __init__(self, renamed: dict[str, str]) -> None:
        self._renamed = renamed
        self._schema: FastSchema | None = None
        self._keys: set[str] = set()
        self._clear()

    def _clear(self) -> None:
        self._pos: list[int] = []
        self._rows: list[bytes] = []
        self._items_end: list[int] = []
        """Where each row's items end (its step field follows)."""
        self._extra: list[tuple[int, dict[str, float]]] = []

    def add(self, b: bytes, a: int, z: int, pos: int, extra: dict[str, float]) -> bool:
        """Queue the row in ``b[a:z]`` (with the ``extra`` values) at position ``pos``; False
        (nothing queued) when the row is not of the common shape."""
        m = _ROW.fullmatch(b, a, z)
        if m is None:
            return False
        if extra:
            self._extra.append((len(self._rows), extra))
        self._pos.append(pos)
        self._rows.append(b[a:z])
        self._items_end.append(m.start(1) - a if m.start(1) >= 0 else z - a)
        return True

    def flush(self, builder: BatchBuilder) -> list[tuple[int, bytes, dict[str, float]]]:
        """Hand the queued rows to ``builder`` as one block of columns. Returns the rows it could
        not take, as (position, row bytes, extra values), for the exact path: none unless a row
        lacks ``_step`` or the decoder refuses the block."""
        rows, pos, extra, ends = self._rows, self._pos, self._extra, self._items_end
        self._clear()
        if not rows:
            return []
        block = self._decode(rewrite([r[:e] for r, e in zip(rows, ends)]))
        if block is None or block.lines != len(rows):
            return self._refused(rows, pos, extra)
        columns, present = self._columns(block.columns, block.present)
        if columns is None or np.isnan(columns["step"]).any():
            return self._refused(rows, pos, extra)
        n = len(rows)
        for row, values in extra:  # system stats riding on the row
            for name, x in values.items():
                if name not in columns:
                    columns[name], present[name] = np.full(n, np.nan), np.zeros(n, dtype=bool)
                elif name not in present:
                    present[name] = ~np.isnan(columns[name])
                columns[name][row], present[name][row] = x, True
        builder.add_columns(np.asarray(pos), np.zeros(n, dtype=np.int64), columns, present)
        return []

    def _decode(self, text: bytes) -> FastBlock | None:
        """The lines as columns; the schema learns the keys of the lines when it lacks some."""
        block = self._schema.decode(text) if self._schema is not None else None
        if block is None:
            keys = {k.decode("utf-8", errors="replace") for k in set(_KEY_NAMES.findall(text))}
            if not keys <= self._keys or self._schema is None:
                self._keys |= keys
                self._schema = FastSchema(sorted(self._keys))
                block = self._schema.decode(text)
        return block

    def _columns(
        self, cols: dict[str, np.ndarray], present: dict[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray]]:
        """The decoded columns with trainwatch's names: ``_step`` the step, ``_timestamp`` the
        time, W&B's other ``_`` keys left out, reserved names renamed; writable copies."""
        if "_step" not in cols:
            return None, {}
        out = {"step": cols["_step"]}
        if "_timestamp" in cols:
            out["time"] = cols["_timestamp"]
        mask: dict[str, np.ndarray] = {}
        for name, col in cols.items():
            if name.startswith("_"):
                continue
            new = self._renamed.get(name, name)
            out[new] = np.array(col)
            mask[new] = present[name] if name in present else ~np.isnan(col)
        return out, mask

    @staticmethod
    def _refused(
        rows: list[bytes], pos: list[int], extra: list[tuple[int, dict[str, float]]]
    ) -> list[tuple[int, bytes, dict[str, float]]]:
        more = dict(extra)
        return [(p, r, more.get(i, {})) for i, (p, r) in enumerate(zip(pos, rows))]
