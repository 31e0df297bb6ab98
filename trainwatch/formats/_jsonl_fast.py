"""The JSONL fast path: a chunk of plain metric records straight into float64 columns.

A stream's records nearly always carry the same numeric keys, so the parser learns them and
builds a :class:`FastSchema`: a msgspec Struct with one float field per key (unknown keys
rejected). A chunk then takes three C-speed steps and no per-value Python work:

1. ``decode_lines`` into Structs, in pieces of about 256 KiB: decoding a whole 4 MiB chunk at
   once keeps every float of it alive together and runs ~1.4x slower from cache misses alone.
2. Each piece's Structs are re-encoded as MessagePack. Every field is then a float64 behind a
   fixed key, so every row has the same bytes layout and one strided numpy view per column
   reads the values out (~4x faster than ``attrgetter`` + ``numpy.fromiter``).
3. numpy checks that the records sit one per line (see :func:`record_line_ends`), which the
   decoder alone does not promise: it accepts any whitespace between values.

Python's ``json.dumps`` writes bare ``NaN`` and ``Infinity``, which are not JSON. A chunk with
such tokens is decoded once more from a copy in which numpy has overwritten each token with a
sentinel number of the same length (see :meth:`FastSchema.decode` for why that is exact).
Anything else the fast path refuses (a new key, an event, a nested object, a blank or bad line)
is the caller's to parse line by line.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec
import numpy as np

from trainwatch.formats._decode import MAX_LINE_BYTES

PIECE_BYTES = 256 << 10
"""Bytes decoded per ``decode_lines`` call: the decoded objects of a piece stay in cache."""

_NAN_TEXT = b"7e9"
_INF_TEXT = b"9.87e+22"
# Same lengths as "NaN" and "Infinity", so a token is overwritten in place and newlines stay put;
# and small exponents, which msgspec parses fast (a 300-digit exponent took 8 us a value).
_NAN_VALUE = msgspec.json.decode(_NAN_TEXT, type=float)
_INF_VALUE = msgspec.json.decode(_INF_TEXT, type=float)
_TOKENS = ("NaN", "Infinity")
_KEY_FREE_TEXTS = (*_TOKENS, _NAN_TEXT.decode(), _INF_TEXT.decode(), ":")
"""Texts no schema key may hold for the token path: see ``FastSchema.tokens_ok``."""
_NUMBER_CHAR = np.zeros(256, dtype=bool)
_NUMBER_CHAR[list(b"0123456789.eE+-")] = True

_NL, _CR, _CLOSE, _COLON = 0x0A, 0x0D, 0x7D, 0x3A  # "\n", "\r", "}", ":"


class FastBlock(NamedTuple):
    """What :meth:`FastSchema.decode` made of a chunk."""

    lines: int
    """Lines in the chunk, one record each (a final line without a newline counts)."""
    columns: dict[str, np.ndarray]
    """key -> float64 value per record; NaN where the record lacked the key, except ..."""
    present: dict[str, np.ndarray]
    """... in the columns given here (those holding a NaN value): where the record had the key."""


class FastSchema:
    """A msgspec Struct with one float field per metric key, and the columns it decodes to."""

    def __init__(self, keys: list[str], order: list[str] | None = None) -> None:
        """``keys`` in the order records usually hold them: msgspec looks each key up from the
        field after the previous one, so matching the writer's order finds every key at the first
        try. ``order`` (the same keys) is the order of the returned columns; default ``keys``."""
        self.keys = keys
        self.order = keys if order is None else order
        if sorted(self.order) != sorted(keys):
            raise ValueError("order must hold the same keys")
        self._field = {k: f"f{i}" for i, k in enumerate(keys)}
        names = [f"f{i}" for i in range(len(keys))]
        struct = msgspec.defstruct(
            "FastRecord",
            [(name, float, float("nan")) for name in names],
            rename=dict(zip(names, keys)),
            forbid_unknown_fields=True,
            gc=False,
        )
        self.one = msgspec.json.Decoder(struct)
        """One record per call (``decode``) or many, separated by whitespace (``decode_lines``)."""
        self.many = msgspec.json.Decoder(list[struct])
        """A JSON array of records (the careful path joins selected lines into one)."""
        self.tokens_ok = not any(t in k for k in keys for t in _KEY_FREE_TEXTS)
        """False when a key holds a token or a sentinel text, or a colon. Then a token inside a key
        could turn it into a known key (``"NaN"`` -> ``"7e9"``); otherwise the rewritten key is
        unknown and the decode fails. A colon would spoil the count of key/value pairs."""
        self._encoder = msgspec.msgpack.Encoder()
        self._row = attrgetter(*names)
        self._layout = _row_layout(struct, keys, self._encoder)

    # ------------------------------------------------------------------ blocks
    def decode(self, buf: Any) -> FastBlock | None:
        """The records of ``buf`` as columns when every line is one record this schema accepts.

        ``buf`` is any bytes-like object; it is only read, and nothing returned refers to it.
        None when any line needs another path, a line longer than ``MAX_LINE_BYTES`` included
        (padding or repeated keys make one that the Struct accepts; the careful path reports it).

        Bare ``NaN``/``Infinity`` tokens are decoded from a copy in which each one is overwritten
        by a sentinel number. That is exact because (1) each token must stand alone, with no
        number character on either side (the minus of ``-Infinity`` aside), so it turns into one
        whole number and nothing else turns into one; (2) no schema key holds a token or a
        sentinel text (``tokens_ok``), so a token inside a key makes an unknown key and fails the
        decode; (3) no line repeats a key (the chunk's pairs, counted by its colons, are as many
        as the fields decoded), so every token's value is in the columns; and (4) the decoded
        sentinels must be exactly as many as the tokens, so a real value equal to a sentinel
        sends the chunk back to the careful path instead of becoming a NaN.
        """
        arr = np.frombuffer(buf, dtype=np.uint8)
        ends = record_line_ends(arr) if arr.shape[0] else None
        if ends is None or _longest_line(ends, int(arr.shape[0])) > MAX_LINE_BYTES:
            return None
        n_lines = int(ends.shape[0]) + int(arr[-1] != _NL)  # a final line without a newline
        cols = self._decode_lines(arr, ends, n_lines)
        if cols is not None:
            return FastBlock(n_lines, cols, {})
        if not self.tokens_ok:
            return None
        nan_at, inf_at = _token_starts(arr, b"NaN"), _token_starts(arr, b"Infinity")
        if not (nan_at.shape[0] or inf_at.shape[0]):
            return None
        if not (_standalone(arr, nan_at, 3, signed=False) and _standalone(arr, inf_at, 8, signed=True)):
            return None
        sub = arr.copy()
        for at, text in ((nan_at, _NAN_TEXT), (inf_at, _INF_TEXT)):
            for j, ch in enumerate(text):
                sub[at + j] = ch
        cols = self._decode_lines(sub, ends, n_lines)
        if cols is None:
            return None
        present: dict[str, np.ndarray] = {}
        seen_nan = seen_inf = fields = 0
        for k, col in cols.items():
            has = ~np.isnan(col)  # where the record had the key: no value decodes to NaN
            fields += int(np.count_nonzero(has))
            is_nan = col == _NAN_VALUE
            is_inf = np.abs(col) == _INF_VALUE
            c_nan, c_inf = int(np.count_nonzero(is_nan)), int(np.count_nonzero(is_inf))
            if c_nan:
                present[k] = has
                col[is_nan] = np.nan
                seen_nan += c_nan
            if c_inf:
                col[is_inf] = np.copysign(np.inf, col[is_inf])
                seen_inf += c_inf
        if seen_nan != nan_at.shape[0] or seen_inf != inf_at.shape[0]:
            return None
        # A repeated key keeps its last value, so a token's value could vanish and a real value
        # equal to its sentinel take its place in the count above. Every string on a line the
        # Struct took is a key, and no key of a schema with tokens_ok holds a colon, so the
        # chunk's colons are its key/value pairs: as many as the fields decoded unless a line
        # repeats a key (each line has at least as many pairs as fields, so totals suffice).
        if int(np.count_nonzero(arr == _COLON)) != fields:
            return None
        return FastBlock(n_lines, cols, present)

    def _decode_lines(
        self, arr: np.ndarray, ends: np.ndarray, n_lines: int
    ) -> dict[str, np.ndarray] | None:
        """Columns of the records in ``arr`` if there are ``n_lines`` (``ends``: its newlines)."""
        if self._layout is None:
            try:
                objs = self.one.decode_lines(arr)
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
                return None  # (UnicodeDecodeError: an unknown key that is not UTF-8)
            return self._columns_slow(objs) if len(objs) == n_lines else None
        dtype, item = self._layout
        mv = memoryview(arr)
        packed = bytearray()
        n = 0
        try:
            for start, stop in _pieces(ends, int(arr.shape[0])):
                objs = self.one.decode_lines(mv[start:stop])
                # MessagePack frames the list with a 1-5 byte header: drop it so rows are contiguous
                at = len(packed)
                self._encoder.encode_into(objs, packed, at)
                del packed[at : len(packed) - len(objs) * item]
                n += len(objs)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            return None  # (UnicodeDecodeError: an unknown key that is not UTF-8)
        if n != n_lines or len(packed) != n * item:
            return None
        rows = np.frombuffer(packed, dtype=dtype, count=n)
        return {k: rows[self._field[k]].astype(np.float64) for k in self.order}

    def columns(self, objs: list[Any]) -> dict[str, np.ndarray]:
        """Decoded records -> one float64 column per key."""
        n = len(objs)
        if not n:
            return {}
        if self._layout is not None:
            dtype, item = self._layout
            packed = self._encoder.encode(objs)
            head = len(packed) - n * item
            if 1 <= head <= 5:
                rows = np.frombuffer(packed, dtype=dtype, count=n, offset=head)
                return {k: rows[self._field[k]].astype(np.float64) for k in self.order}
        return self._columns_slow(objs)

    # ------------------------------------------------------------------ fallbacks
    def _columns_slow(self, objs: list[Any]) -> dict[str, np.ndarray]:
        n, k = len(objs), len(self.keys)
        rows = map(self._row, objs)
        flat = chain.from_iterable(rows) if k > 1 else rows
        table = np.fromiter(flat, dtype=np.float64, count=n * k).reshape(n, k)
        at = {key: i for i, key in enumerate(self.keys)}
        return {key: table[:, at[key]].copy() for key in self.order}


def record_line_ends(arr: np.ndarray) -> np.ndarray | None:
    """Offsets of the newlines of ``arr`` if each of its lines ends with ``}``, else None.

    ``decode_lines`` takes any whitespace between values, so it alone cannot tell one record per
    line from two on one line plus a blank line elsewhere. With this check it can: a line ending
    in ``}`` (``\\r`` allowed before the newline; a final line without one must end in ``}``)
    ends a record, and records cannot cross lines (a record's ``}`` ending a line before its own
    end would end it there). So every line holds at least one whole record, and if the decoder
    found as many records as there are lines, it is exactly one per line. Braces inside keys do
    not matter: a key cannot hold a raw newline, so the ``}`` before one is never in a key.
    """
    size = int(arr.shape[0])
    if size and arr[-1] != _NL and arr[-1] != _CLOSE:
        return None
    ends = np.flatnonzero(arr == _NL)
    if not ends.shape[0]:
        return ends
    if ends[0] == 0:
        return None
    bad = arr[ends - 1] != _CLOSE
    if bad.any():
        crlf = ends[bad]
        if crlf[0] < 2 or not ((arr[crlf - 1] == _CR) & (arr[crlf - 2] == _CLOSE)).all():
            return None
    return ends


def _longest_line(ends: np.ndarray, size: int) -> int:
    """Bytes in the longest line of a buffer of ``size`` bytes with newlines at ``ends``, not
    counting its newline (a ``\r`` before it counts: at worst a line at the limit is refused)."""
    if size <= MAX_LINE_BYTES:
        return size  # no line can be longer than the buffer: skip the scan
    if not ends.shape[0]:
        return size
    last = size - int(ends[-1]) - 1  # a final line without a newline
    return max(int(ends[0]), int(np.diff(ends).max(initial=1)) - 1, last)


def _token_starts(arr: np.ndarray, token: bytes) -> np.ndarray:
    """Offsets at which ``token`` starts in ``arr`` (one numpy scan for its first byte)."""
    at = np.flatnonzero(arr[: max(arr.shape[0] - len(token) + 1, 0)] == token[0])
    for j in range(1, len(token)):
        at = at[arr[at + j] == token[j]]
    return at


def _standalone(arr: np.ndarray, at: np.ndarray, length: int, *, signed: bool) -> bool:
    """True when no token at ``at`` touches a number character or another token."""
    if not at.shape[0]:
        return True
    if at.shape[0] > 1 and (np.diff(at) < length).any():
        return False  # "NaNaN"
    end = at + length
    if _NUMBER_CHAR[arr[end[end < arr.shape[0]]]].any():
        return False
    start = at
    if signed:  # "-Infinity": look past its minus
        start = at - ((at > 0) & (arr[np.maximum(at - 1, 0)] == 0x2D))
    return not _NUMBER_CHAR[arr[start[start > 0] - 1]].any()


def _pieces(ends: np.ndarray, size: int, piece: int = PIECE_BYTES) -> list[tuple[int, int]]:
    """(start, stop) spans of whole lines, each about ``piece`` bytes (a longer line: alone)."""
    if size <= piece:
        return [(0, size)]
    after = ends + 1  # offsets just past each newline
    spans: list[tuple[int, int]] = []
    pos = 0
    while size - pos > piece:
        j = int(np.searchsorted(after, pos + piece, side="right"))
        if j and after[j - 1] > pos:
            cut = int(after[j - 1])
        elif j < after.shape[0]:
            cut = int(after[j])
        else:
            cut = size
        spans.append((pos, cut))
        pos = cut
    if pos < size:
        spans.append((pos, size))
    return spans


def _row_layout(
    struct: type, keys: list[str], encoder: msgspec.msgpack.Encoder
) -> tuple[np.dtype, int] | None:
    """The numpy dtype of one MessagePack-encoded record, and its size; None if not regular.

    A record encodes as a map header, then per field its key (a str header and the UTF-8 bytes)
    and its value: 0xcb and a big-endian float64, as msgspec always writes a float. The layout
    is checked once against a real encoding, so a msgspec that wrote otherwise falls back to
    the slow column builder instead of reading garbage.
    """
    k = len(keys)
    if k >= 1 << 16:
        return None
    offsets: list[int] = []
    at = 1 if k <= 15 else 3
    for key in keys:
        m = len(key.encode("utf-8"))
        at += (1 if m <= 31 else 2 if m <= 255 else 3 if m < 1 << 16 else 5) + m
        offsets.append(at + 1)
        at += 9
    item = at
    probe = encoder.encode(struct())
    if len(probe) != item or any(probe[o - 1] != 0xCB for o in offsets):
        return None
    dtype = np.dtype({
        "names": [f"f{i}" for i in range(k)],
        "formats": [">f8"] * k,
        "offsets": offsets,
        "itemsize": item,
    })
    return dtype, item
