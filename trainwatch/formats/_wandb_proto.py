"""Just enough protobuf decoding to read W&B's ``Record`` messages, by hand.

Field numbers are those of wandb's ``wandb/proto/wandb_internal.proto``; every other field is
skipped by its wire type (:func:`~trainwatch.formats._proto._fields`), so a newer client adding
fields does not break the reader.

* ``Record``: the ``record_type`` oneof: 2 ``history``, 4 ``output``, 5 ``config``, 7 ``stats``,
  13 ``output_raw``, 17 ``run``, 18 ``exit``, 21 ``header`` (others, such as ``summary``,
  ``telemetry`` or ``request``, are not read).
* ``HistoryRecord``: 1 repeated ``HistoryItem``, 2 ``step`` (1 ``num``).
  ``HistoryItem``, ``ConfigItem``, ``StatsItem``: 1 ``key``, 2 repeated ``nested_key``,
  16 ``value_json``.
* ``StatsRecord``: 2 ``timestamp``, 3 repeated ``StatsItem``.
* ``OutputRecord`` / ``OutputRawRecord``: 1 ``output_type`` (0 stderr, 1 stdout),
  2 ``timestamp``, 3 ``line`` (a piece of the stream's text, not always a whole line).
* ``ConfigRecord``: 1 repeated ``update`` (``ConfigItem``).
* ``RunRecord``: 1 ``run_id``, 2 ``entity``, 3 ``project``, 4 ``config``, 6 ``run_group``,
  7 ``job_type``, 8 ``display_name``, 13 ``host``, 14 ``starting_step``, 17 ``start_time``.
* ``RunExitRecord``: 1 ``exit_code`` (int32), 2 ``runtime``, 3 ``not_complete``.
* ``HeaderRecord``: 1 ``version_info`` (1 ``producer``).
* ``google.protobuf.Timestamp``: 1 ``seconds``, 2 ``nanos``.

Item values stay the raw ``value_json`` bytes: the reader decides what they mean.
Errors (truncated message, unknown wire type) raise :class:`ProtoError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainwatch.formats._proto import ProtoError, _fields, _signed, _varint, inner_string

producer = inner_string
"""``HeaderRecord.version_info.producer``: the client version that wrote the file."""

HISTORY, OUTPUT, CONFIG, STATS, OUTPUT_RAW, RUN, EXIT, HEADER = 2, 4, 5, 7, 13, 17, 18, 21
KINDS = frozenset({HISTORY, OUTPUT, CONFIG, STATS, OUTPUT_RAW, RUN, EXIT, HEADER})
"""The record types the reader takes anything from."""
_RECORD_TYPES = frozenset((*range(2, 14), 17, 18, *range(20, 28), 100))
"""The field numbers of the ``record_type`` oneof (16 is ``control``, 19 ``uuid``)."""
_NESTED_SEP = "/"
"""W&B's nested keys (``run.log({"train": {"acc": 1}})``) joined as trainwatch flattens nested
JSON objects: ``train/acc``."""

Item = tuple[str, bytes]
"""(key, value_json)."""


def record_kind(b: bytes) -> tuple[int, int, int] | None:
    """(record type, start, end) of a ``Record``'s payload when it is one of :data:`KINDS`.

    The type is a oneof, so the first of its fields met decides: this reads the few fields
    before it (``num``, ``control``, ``_info``), whatever the record's size."""
    i, n = 0, len(b)
    try:
        if b[0] == 0x08:  # num, first when set
            i = 1
            while b[i] >= 0x80:
                i += 1
            i += 1
        while i < n:
            key = b[i]
            if key < 0x80:
                i += 1
            elif b[i + 1] < 0x80:  # a two-byte tag: fields 16 to 2047 (_info is 200)
                key = (key & 0x7F) | (b[i + 1] << 7)
                i += 2
            else:
                key, i = _varint(b, i)
            fn, wt = key >> 3, key & 7
            if wt == 2:
                size = b[i]
                if size < 0x80:
                    i += 1
                elif b[i + 1] < 0x80:  # sizes up to 16 KiB: most records
                    size = (size & 0x7F) | (b[i + 1] << 7)
                    i += 2
                else:
                    size, i = _varint(b, i)
                if fn in KINDS:
                    if i + size > n:
                        raise ProtoError("length-delimited field runs past its message")
                    return fn, i, i + size
                if fn in _RECORD_TYPES:
                    return None  # another record type
                i += size
            else:
                i = _skip_value(b, i, wt)
    except IndexError:
        raise ProtoError("message truncated") from None
    return None


def history(b: bytes, i: int, end: int, names: dict[bytes, str]) -> tuple[list[Item], int]:
    """The items of a ``HistoryRecord`` and its ``step.num``.

    A row of twenty metrics is twenty items, and this loop is most of a parse: the common item
    shape (one nested key, then the value, every length under 128) is matched in place, and
    key bytes become strings through ``names``, the reader's cache of the keys seen. Any other
    shape goes through :func:`item`."""
    items: list[Item] = []
    step = 0
    try:
        while i < end:
            tag = b[i]
            if tag == 0x0A:  # item (field 1)
                n = b[i + 1]
                if n < 0x80:
                    a = i + 2
                else:
                    n, a = _varint(b, i + 1)
                i = a + n
                if i > end:
                    raise ProtoError("length-delimited field runs past its message")
                k = b[a + 1] if n > 5 and b[a] == 0x12 else 0x80
                v = a + 2 + k  # value_json's tag, in the common shape
                if k < 0x80 and b[v] == 0x82 and b[v + 1] == 0x01 and v + 3 + b[v + 2] == i:
                    kb = b[a + 2 : v]
                    key = names.get(kb)
                    if key is None:
                        key = names[kb] = kb.decode("utf-8", errors="replace")
                    items.append((key, b[v + 3 : i]))
                else:
                    items.append(item(b, a, i))
            elif tag == 0x12:  # step (field 2)
                n, a = _varint(b, i + 1)
                i = a + n
                for fn, wt, x, _z in _fields(b, a, i):
                    if fn == 1 and wt == 0:
                        step = _signed(x)
            else:
                i = _skip_one(b, i)
    except IndexError:
        raise ProtoError("message truncated") from None
    if i != end:
        raise ProtoError("message truncated")
    return items, step


def item(b: bytes, i: int, end: int) -> Item:
    """One ``HistoryItem`` / ``ConfigItem`` / ``StatsItem``: nested keys joined, or the key.

    The common shape (string fields whose lengths fit one byte) is read inline: a history row
    of twenty metrics is twenty of these, and walking them with the generic field iterator
    cost most of the parse."""
    key = ""
    nested: list[str] | None = None
    value = b""
    try:
        while i < end:
            tag = b[i]
            if tag == 0x12 or tag == 0x0A or (tag == 0x82 and b[i + 1] == 0x01):
                at = i + (2 if tag != 0x82 else 3)
                n = b[at - 1]
                if n >= 0x80:
                    n, at = _varint(b, at - 1)
                i = at + n
                if i > end:
                    raise ProtoError("length-delimited field runs past its message")
                if tag == 0x82:
                    value = b[at:i]
                elif tag == 0x12:
                    text = b[at:i].decode("utf-8", errors="replace")
                    nested = [text] if nested is None else [*nested, text]
                else:
                    key = b[at:i].decode("utf-8", errors="replace")
                continue
            i = _skip_one(b, i)
    except IndexError:
        raise ProtoError("message truncated") from None
    return (_NESTED_SEP.join(nested) if nested else key), value


def _skip_one(b: bytes, i: int) -> int:
    """Position after the one field at ``i`` (any field the fast path does not read)."""
    key, j = _varint(b, i)
    return _skip_value(b, j, key & 7)


def _skip_value(b: bytes, j: int, wt: int) -> int:
    """Position after a value of wire type ``wt`` that starts at ``j``."""
    if wt == 0:
        return _varint(b, j)[1]
    if wt == 2:
        n, j = _varint(b, j)
        return j + n
    if wt == 1:
        return j + 8
    if wt == 5:
        return j + 4
    raise ProtoError(f"unsupported wire type {wt}")


def items_of(b: bytes, i: int, end: int, number: int) -> list[Item]:
    """Every item in field ``number`` of a message (``ConfigRecord.update``,
    ``StatsRecord.item``)."""
    return [item(b, a, z) for fn, wt, a, z in _fields(b, i, end) if fn == number and wt == 2]


def timestamp(b: bytes, i: int, end: int) -> float:
    seconds = nanos = 0
    for fn, wt, a, _z in _fields(b, i, end):
        if fn == 1 and wt == 0:
            seconds = _signed(a)
        elif fn == 2 and wt == 0:
            nanos = _signed(a)
    return seconds + nanos / 1e9


def stats(b: bytes, i: int, end: int) -> tuple[float | None, list[Item]]:
    """A ``StatsRecord``'s timestamp and items."""
    when = None
    items: list[Item] = []
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 2 and wt == 2:
            when = timestamp(b, a, z)
        elif fn == 3 and wt == 2:
            items.append(item(b, a, z))
    return when, items


def output(b: bytes, i: int, end: int) -> tuple[int, bytes]:
    """An ``OutputRecord`` / ``OutputRawRecord``: (output type, text bytes)."""
    kind = 0
    text = b""
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 1 and wt == 0:
            kind = a
        elif fn == 3 and wt == 2:
            text = b[a:z]
    return kind, text


@dataclass
class RunInfo:
    """What a ``RunRecord`` says about the run."""

    strings: dict[str, str] = field(default_factory=dict)
    """run_id, entity, project, group, job_type, name, host: those the record sets."""
    config: list[Item] = field(default_factory=list)
    start_time: float | None = None
    starting_step: int = 0


_RUN_STRINGS = {1: "run_id", 2: "entity", 3: "project", 6: "group", 7: "job_type", 8: "name",
                13: "host"}


def run(b: bytes, i: int, end: int) -> RunInfo:
    info = RunInfo()
    for fn, wt, a, z in _fields(b, i, end):
        if wt == 2 and fn in _RUN_STRINGS:
            info.strings[_RUN_STRINGS[fn]] = b[a:z].decode("utf-8", errors="replace")
        elif fn == 4 and wt == 2:
            info.config = items_of(b, a, z, 1)
        elif fn == 14 and wt == 0:
            info.starting_step = _signed(a)
        elif fn == 17 and wt == 2:
            info.start_time = timestamp(b, a, z)
    return info


def exit_record(b: bytes, i: int, end: int) -> tuple[int, bool]:
    """A ``RunExitRecord``'s (exit code, not_complete)."""
    code, not_complete = 0, False
    for fn, wt, a, _z in _fields(b, i, end):
        if fn == 1 and wt == 0:
            code = _int32(a)
        elif fn == 3 and wt == 0:
            not_complete = bool(a)
    return code, not_complete


def _int32(x: int) -> int:
    """A varint read as int32 (a negative int32 is sign-extended to 64 bits on the wire)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x
