"""The record framing of W&B's ``.wandb`` files: a LevelDB log with a W&B header, read as bytes
arrive.

The file starts with a 7-byte header (``:W&B``, magic ``0xBEE1`` little-endian, version 0), then
is a sequence of 32 KiB blocks counted from the start of the file. Each block holds chunks::

    uint32 crc | uint16 length | uint8 type | data[length]          (little-endian)

``crc`` is the standard CRC-32 (zlib's, not LevelDB's masked CRC-32C: wandb-core opens its
logs with ``CRCAlgoIEEE``, and the old Python writer used ``zlib.crc32``) of the type byte and
the data. A record that fits the rest of its block is one FULL chunk; a longer one is a FIRST
chunk, MIDDLE chunks filling whole blocks, and a LAST chunk. Fewer than 7 bytes left in a block
are zero padding, and a chunk header of zeros marks the rest of its block as padding too (as
wandb-core's reader treats it).

What this reader guarantees:

* A chunk or header cut by the end of the bytes so far is kept for the next :meth:`feed`: a
  file still being written ends mid-record all the time, and that is not an error.
* A chunk whose checksum fails, whose length runs past its block or whose type is unknown is
  corrupt: the rest of its block is skipped (the next chunk cannot be found inside it) and
  reading goes on at the next block; the record it belonged to is lost, nothing else. One
  problem is reported per corrupt stretch, with its byte offset, however many blocks it spans.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

BLOCK = 32768
CHUNK_HEADER = 7
WANDB_HEADER = b":W&B\xe1\xbe"
"""Ident and magic; the seventh byte is the version."""
WANDB_VERSION = 0
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_CHUNK = struct.Struct("<IHB")
_FULL_SEED = zlib.crc32(bytes([_FULL]))


@dataclass
class Framed:
    """What one :meth:`LogFramer.feed` found."""

    records: list[tuple[int, bytes]] = field(default_factory=list)
    """(file offset of the record's first chunk, record bytes), in file order."""
    problems: list[str] = field(default_factory=list)
    """One line each, naming the byte offset: corrupt data skipped, or not a W&B file."""


class LogFramer:
    """Reassembles the records of one ``.wandb`` file from its bytes, fed in order."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._offset = 0
        """File offset of ``_buf[0]``."""
        self._skip = 0
        """Bytes still to drop before the next chunk (the rest of a corrupt or padded block)."""
        self._parts: list[bytes] | None = None
        """The chunks so far of a record split over blocks."""
        self._part_start = 0
        self._lost = False
        """A corrupt stretch was reported and no record has started since: stay quiet."""
        self._checked = False
        """The W&B header was read and is valid."""
        self._dead = False
        """The header was wrong: nothing in this file is read."""

    @property
    def buffered(self) -> int:
        """Bytes held for the next call: an unfinished chunk and the chunks of a split record."""
        return len(self._buf) + sum(map(len, self._parts or ()))

    def feed(self, data: bytes) -> Framed:
        out = Framed()
        if self._dead:
            return out
        if self._skip:
            drop = min(self._skip, len(data))
            self._skip -= drop
            self._offset += drop
            data = data[drop:]
        buf = self._buf
        buf += data
        pos = 0
        if not self._checked:
            pos = self._check_header(out)
            if pos <= 0:  # incomplete, or not a W&B log
                return out
        with memoryview(buf) as view:
            pos = self._chunks(view, pos, out)
        del buf[:pos]
        self._offset += pos
        return out

    def unfinished(self) -> tuple[int, int] | None:
        """(file offset, bytes from there to the end) of a record or chunk the bytes so far end
        inside, else None. Zero padding at the end does not count."""
        if self._dead:
            return None
        if self._parts is not None:
            return self._part_start, self._offset + len(self._buf) - self._part_start
        if any(self._buf):
            return self._offset, len(self._buf)
        return None

    # ------------------------------------------------------------------ internals
    def _check_header(self, out: Framed) -> int:
        """Position after the file header; 0 while it is incomplete, -1 when it is wrong."""
        buf = self._buf
        if len(buf) < CHUNK_HEADER:
            if buf and not WANDB_HEADER.startswith(bytes(buf[: len(WANDB_HEADER)])):
                return self._not_wandb(out)
            return 0
        if bytes(buf[:6]) != WANDB_HEADER:
            return self._not_wandb(out)
        if buf[6] != WANDB_VERSION:
            out.problems.append(
                f"W&B log version {buf[6]} (this reader knows version {WANDB_VERSION}); "
                "nothing read: update trainwatch"
            )
            return self._die()
        self._checked = True
        return CHUNK_HEADER

    def _not_wandb(self, out: Framed) -> int:
        out.problems.append(
            "not a W&B log (it does not start with ':W&B'); nothing read: give the run's "
            "run-*.wandb file or its folder"
        )
        return self._die()

    def _die(self) -> int:
        self._dead = True
        self._buf.clear()
        return -1

    def _chunks(self, view: memoryview, pos: int, out: Framed) -> int:
        """Read every whole chunk from ``pos``; returns where the unread bytes start."""
        n = len(view)
        base = self._offset
        data = view.tobytes()  # slices of bytes: one copy per record, checked and kept as is
        unpack, crc32, append = _CHUNK.unpack_from, zlib.crc32, out.records.append
        while True:
            left = BLOCK - (base + pos) % BLOCK
            if left >= CHUNK_HEADER and n - pos >= CHUNK_HEADER and self._parts is None:
                # a whole record in one chunk, intact: nearly every record
                crc, length, kind = unpack(data, pos)
                end = pos + CHUNK_HEADER + length
                if kind == _FULL and length + CHUNK_HEADER <= left and end <= n:
                    payload = data[pos + CHUNK_HEADER : end]
                    if crc32(payload, _FULL_SEED) == crc:
                        self._lost = False
                        append((base + pos, payload))
                        pos = end
                        continue
            if left < CHUNK_HEADER:  # a block's zero trailer
                if n - pos < left:
                    return pos
                pos += left
                continue
            if n - pos < CHUNK_HEADER:
                return pos
            crc, length, kind = _CHUNK.unpack_from(view, pos)
            if crc == 0 and length == 0 and kind == 0:
                if self._parts is not None:
                    pos = self._corrupt(view, pos, left, "zeroed chunk inside a record", out)
                else:
                    pos = self._skip_block(n, pos, left)  # padding to the block's end
                continue
            end = pos + CHUNK_HEADER + length
            if CHUNK_HEADER + length > left or not _FULL <= kind <= _LAST:
                why = f"chunk type {kind}" if not _FULL <= kind <= _LAST else "chunk runs past its block"
                pos = self._corrupt(view, pos, left, why, out)
                continue
            if end > n:
                return pos
            if zlib.crc32(view[pos + 6 : end]) != crc:
                pos = self._corrupt(view, pos, left, "checksum mismatch", out)
                continue
            self._chunk(kind, data[pos + CHUNK_HEADER : end], base + pos, out)
            pos = end

    def _chunk(self, kind: int, data: bytes, offset: int, out: Framed) -> None:
        parts = self._parts
        if kind == _FULL or kind == _FIRST:
            if parts is not None and not self._lost:
                out.problems.append(
                    f"record at byte {self._part_start} is cut off by the record at byte "
                    f"{offset}; dropped"
                )
            self._lost = False
            if kind == _FULL:
                self._parts = None
                out.records.append((offset, data))
            else:
                self._parts, self._part_start = [data], offset
            return
        if parts is None:  # the rest of a record whose start was lost
            if not self._lost:
                out.problems.append(
                    f"chunk at byte {offset} continues a record whose start is missing; dropped"
                )
                self._lost = True
            return
        parts.append(data)
        if kind == _LAST:
            self._parts = None
            out.records.append((self._part_start, b"".join(parts)))

    def _corrupt(self, view: memoryview, pos: int, left: int, why: str, out: Framed) -> int:
        """Report (once per stretch), drop the record in progress, skip to the next block."""
        offset = self._offset + pos
        if not self._lost:
            out.problems.append(
                f"corrupt data at byte {offset} ({why}); skipped to the next block at byte "
                f"{offset + left}"
            )
            self._lost = True
        self._parts = None
        return self._skip_block(len(view), pos, left)

    def _skip_block(self, n: int, pos: int, left: int) -> int:
        """Skip the ``left`` bytes to the block's end, those not here yet as they arrive."""
        if pos + left <= n:
            return pos + left
        self._skip = pos + left - n
        return n
