"""Just enough protobuf decoding to read TensorBoard ``Event`` messages, by hand.

Only the fields a metric reader needs are decoded (field numbers from tensorflow's
``event.proto``, ``summary.proto`` and ``tensor.proto``); every other field is skipped by its
wire type, so newer writers adding fields do not break the reader.

* ``Event``: 1 ``wall_time`` (double), 2 ``step`` (int64), 3 ``file_version`` (string),
  5 ``summary``, 7 ``session_log``.
* ``Summary``: 1 repeated ``Value``: 1 ``tag``, 2 ``simple_value`` (float), 8 ``tensor``,
  9 ``metadata`` (1 ``plugin_data``: 1 ``plugin_name``).
* ``TensorProto``: 1 ``dtype``, 2 ``tensor_shape`` (2 repeated ``dim``: 1 ``size``),
  4 ``tensor_content``, 5 ``float_val``, 6 ``double_val``, 7 ``int_val``, 10 ``int64_val``,
  11 ``bool_val``, 13 ``half_val`` (half and bfloat16 bits).
* ``SessionLog``: 1 ``status`` (1 START, 2 STOP, 3 CHECKPOINT), 2 ``checkpoint_path``,
  3 ``msg``.

Errors (truncated message, unknown wire type) raise :class:`ProtoError`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")

# TensorProto dtype -> struct format of one element in tensor_content
_CONTENT_FORMAT = {
    1: "<f", 2: "<d", 3: "<i", 4: "<B", 5: "<h", 6: "<b", 9: "<q", 10: "<?",
    17: "<H", 19: "<e", 22: "<I", 23: "<Q",
}
_DT_BFLOAT16 = 14
_DT_HALF = 19


class ProtoError(ValueError):
    """The bytes are not a well-formed message of the expected shape."""


@dataclass(slots=True)
class SummaryValue:
    tag: str
    value: float | None
    """The scalar, or None when the value is not a numeric scalar (histogram, image, text...)."""
    plugin: str | None
    """``metadata.plugin_data.plugin_name`` when the writer sent it (first event of a tag)."""


@dataclass(slots=True)
class ParsedEvent:
    wall_time: float | None = None
    step: int = 0
    file_version: str | None = None
    values: list[SummaryValue] = field(default_factory=list)
    session_status: int | None = None
    session_fields: dict[str, str] = field(default_factory=dict)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    x = b[i]
    if x < 0x80:
        return x, i + 1
    result = x & 0x7F
    shift = 7
    i += 1
    while True:
        x = b[i]
        result |= (x & 0x7F) << shift
        i += 1
        if x < 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise ProtoError("varint too long")


def _fields(b: bytes, i: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value or start, end) of each field in ``b[i:end]``.

    Varints give their value in the third slot; fixed and length-delimited fields give the
    position of their bytes.
    """
    try:
        while i < end:
            key, i = _varint(b, i)
            fn, wt = key >> 3, key & 7
            if wt == 0:
                v, i = _varint(b, i)
                yield fn, 0, v, i
            elif wt == 2:
                n, i = _varint(b, i)
                if i + n > end:
                    raise ProtoError("length-delimited field runs past its message")
                yield fn, 2, i, i + n
                i += n
            elif wt == 1:
                yield fn, 1, i, i + 8
                i += 8
            elif wt == 5:
                yield fn, 5, i, i + 4
                i += 4
            else:
                raise ProtoError(f"unsupported wire type {wt}")
    except IndexError:
        raise ProtoError("message truncated") from None
    if i != end:
        raise ProtoError("message truncated")


# The shape nearly every scalar event has (torch.utils.tensorboard, tensorboardX, TF1 summaries):
# wall_time, step, and a summary with one value made of a tag and a simple_value, every length
# under 128 so each fits one byte. Matching it with one regex is ~3x faster than walking fields.
_SIMPLE_SCALAR = re.compile(
    rb"\x09(.{8})\x10([\x80-\xff]{0,9}[\x00-\x7f])\x2a(.)\x0a(.)\x0a(.)(.+)\x15(.{4})",
    re.DOTALL,
)


def parse_simple_scalar(b: bytes) -> tuple[float, int, str, float] | None:
    """(wall_time, step, tag, value) when ``b`` is an event of the common one-scalar shape."""
    m = _SIMPLE_SCALAR.fullmatch(b)
    if m is None:
        return None
    tag = m.group(6)
    n = len(tag)
    if (m.group(5)[0] != n or m.group(4)[0] != n + 7 or m.group(3)[0] != n + 9
            or len(b) != 21 + n + len(m.group(2))):
        return None
    step, _ = _varint(m.group(2), 0)
    return (_DOUBLE.unpack(m.group(1))[0], _signed(step), tag.decode("utf-8", errors="replace"),
            _FLOAT.unpack(m.group(7))[0])


def parse_event(b: bytes) -> ParsedEvent:
    ev = ParsedEvent()
    for fn, wt, a, z in _fields(b, 0, len(b)):
        if fn == 1 and wt == 1:
            ev.wall_time = _DOUBLE.unpack_from(b, a)[0]
        elif fn == 2 and wt == 0:
            ev.step = _signed(a)
        elif fn == 3 and wt == 2:
            ev.file_version = b[a:z].decode("utf-8", errors="replace")
        elif fn == 5 and wt == 2:
            _parse_summary(b, a, z, ev.values)
        elif fn == 7 and wt == 2:
            _parse_session_log(b, a, z, ev)
    return ev


def _parse_summary(b: bytes, i: int, end: int, out: list[SummaryValue]) -> None:
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 1 and wt == 2:
            out.append(_parse_value(b, a, z))


def _parse_value(b: bytes, i: int, end: int) -> SummaryValue:
    tag = ""
    value: float | None = None
    plugin: str | None = None
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 1 and wt == 2:
            tag = b[a:z].decode("utf-8", errors="replace")
        elif fn == 2 and wt == 5:
            value = _FLOAT.unpack_from(b, a)[0]
        elif fn == 8 and wt == 2:
            value = _tensor_scalar(b, a, z)
        elif fn == 9 and wt == 2:
            plugin = inner_string(b, a, z)  # plugin_data.plugin_name
    return SummaryValue(tag, value, plugin)


def inner_string(b: bytes, i: int, end: int) -> str | None:
    """The string in field 1 of the message in field 1 of ``b[i:end]`` (a summary value's
    ``plugin_data.plugin_name``, a W&B header's ``version_info.producer``), else None."""
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 1 and wt == 2:
            for fn2, wt2, a2, z2 in _fields(b, a, z):
                if fn2 == 1 and wt2 == 2:
                    return b[a2:z2].decode("utf-8", errors="replace")
    return None


def _tensor_scalar(b: bytes, i: int, end: int) -> float | None:
    """The value of a one-element numeric tensor, else None."""
    dtype = 0
    n_elems = 1
    content: bytes | None = None
    vals: list[float] = []
    half_bits: list[int] = []
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 1 and wt == 0:
            dtype = a
        elif fn == 2 and wt == 2:
            n_elems = _shape_elems(b, a, z)
        elif fn == 4 and wt == 2:
            content = b[a:z]
        elif fn in (5, 6) and wt in (1, 2, 5):
            vals.extend(_fixed_values(b, a, z, wt, 4 if fn == 5 else 8))
        elif fn in (7, 10, 11, 13) and wt in (0, 2):
            ints = [a] if wt == 0 else _packed_varints(b, a, z)
            if fn == 13:
                half_bits.extend(ints)
            else:
                vals.extend(float(_signed(x)) for x in ints)
    if n_elems != 1:
        return None
    if content is not None:
        if dtype == _DT_BFLOAT16 and len(content) == 2:
            return _FLOAT.unpack(b"\x00\x00" + content)[0]
        fmt = _CONTENT_FORMAT.get(dtype)
        if fmt is None or struct.calcsize(fmt) != len(content):
            return None
        return float(struct.unpack(fmt, content)[0])
    vals.extend(_half_bits(x, dtype) for x in half_bits)
    if len(vals) == 1 and (dtype in _CONTENT_FORMAT or dtype == _DT_BFLOAT16):
        return vals[0]
    return None


def _signed(x: int) -> int:
    """A varint read as int64 (negative int32/int64 values are sign-extended to 64 bits)."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _shape_elems(b: bytes, i: int, end: int) -> int:
    n = 1
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 2 and wt == 2:
            size = 0
            for fn2, wt2, a2, _z2 in _fields(b, a, z):
                if fn2 == 1 and wt2 == 0:
                    size = _signed(a2)
            n *= size
        elif fn == 3 and wt == 0 and a:
            return -1  # unknown rank: not a scalar we can trust
    return n


def _fixed_values(b: bytes, a: int, z: int, wt: int, width: int) -> list[float]:
    fmt = "<f" if width == 4 else "<d"
    if wt == 2:  # packed
        if (z - a) % width:
            raise ProtoError("packed fixed-width field with a partial element")
        return [x[0] for x in struct.iter_unpack(fmt, b[a:z])]
    return [struct.unpack_from(fmt, b, a)[0]]


def _packed_varints(b: bytes, a: int, z: int) -> list[int]:
    out = []
    try:
        while a < z:
            v, a = _varint(b, a)
            out.append(v)
    except IndexError:
        raise ProtoError("packed varints truncated") from None
    return out


def _half_bits(bits: int, dtype: int) -> float:
    bits &= 0xFFFF
    if dtype == _DT_BFLOAT16:
        return _FLOAT.unpack(struct.pack("<I", bits << 16))[0]
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def _parse_session_log(b: bytes, i: int, end: int, ev: ParsedEvent) -> None:
    ev.session_status = 0
    for fn, wt, a, z in _fields(b, i, end):
        if fn == 1 and wt == 0:
            ev.session_status = a
        elif fn == 2 and wt == 2:
            ev.session_fields["checkpoint_path"] = b[a:z].decode("utf-8", errors="replace")
        elif fn == 3 and wt == 2:
            ev.session_fields["msg"] = b[a:z].decode("utf-8", errors="replace")
