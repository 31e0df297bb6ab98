"""TensorBoard event files (``events.out.tfevents.*``), read without TensorFlow or TensorBoard.

The file is a TFRecord stream; each frame is::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

(little-endian), and each ``data`` is a serialized ``Event`` (decoded by hand in
``_proto.py``). This is a ``stream`` reader: :meth:`TfEventsReader.feed` takes whatever bytes
arrived and keeps an incomplete final frame for the next call.

Checksums, and what happens when they fail:

* The length's CRC is checked on **every** frame: a wrong length would desynchronise
  everything after it. On a mismatch the reader reports the byte offset once and scans forward
  to the next position where a valid frame header starts.
* The data CRC is checked on every frame the reader **takes values from** (scalars, session
  logs). Frames it skips anyway (graphs, images, histograms, often large) are not checked: a
  pure-Python CRC-32C costs ~0.1 s per MB, and a wrong skipped frame changes nothing. A frame
  failing its data CRC is reported and skipped; the frames after it are still read.

What becomes a record, and the choices made here:

* ``step`` and ``wall_time`` are the record's step and time.
* ``simple_value`` (``torch.utils.tensorboard``, tensorboardX, TF1) and one-element numeric
  ``tensor`` values (TF2 ``tf.summary.scalar``) are series named by their tag. Tags whose
  first event named a plugin other than ``scalars`` (histograms, text, hparams, images...)
  are skipped, as are non-scalar tensors.
* Writers emit one event per tag; consecutive events with the same step are merged into one
  record (a step's tags stay together) until a tag repeats.
* Tags the builder reserves are renamed: ``time`` (detectron2's seconds per iteration, as in
  its ``metrics.json``) -> ``time_per_iter``; ``step``/``event``/``rank`` -> ``<tag>_value``.
* ``file_version`` goes to ``meta``; a ``session_log`` START/STOP/CHECKPOINT becomes a
  ``run_start``/``run_end``/``checkpoint`` event.
* A step lower than the previous one (a restarted run writing to the same file, or a writer
  that logs out of order) is a rewind and starts a new segment, as in every format.
"""

from __future__ import annotations

from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder
from trainwatch.formats._crc32c import masked_crc32c
from trainwatch.formats._proto import ProtoError, parse_event, parse_simple_scalar
from trainwatch.formats._stream import StreamReaderBase

HEADER = 12
FOOTER = 4
MAX_FRAME = 1 << 30
"""A frame header claiming more than this is treated as corrupt even if its CRC matches."""
_SCALAR_PLUGINS = frozenset({"", "scalars"})
_RENAMED = {"time": "time_per_iter", "step": "step_value", "event": "event_value",
            "rank": "rank_value"}
_SESSION_EVENTS = {1: "run_start", 2: "run_end", 3: "checkpoint"}


def _header_ok(buf: bytes | bytearray, pos: int) -> bool:
    length_bytes = bytes(buf[pos:pos + 8])
    crc = int.from_bytes(buf[pos + 8:pos + 12], "little")
    return masked_crc32c(length_bytes) == crc


class TfEventsReader(StreamReaderBase):
    """Consumes the bytes of one event file as they arrive."""

    format = "tfevents"

    def _init_stream(self) -> None:
        self._buf = bytearray()
        self._offset = 0
        """File offset of ``_buf[0]``."""
        self._lost = False
        """True while scanning for a valid header after a corrupt one (reported once)."""
        self._plugins: dict[str, str] = {}
        self._pending: dict[str, Any] | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held for the next call."""
        return len(self._buf)

    def feed(self, data: bytes, *, reset: bool = False) -> RecordBatch:
        """Consume new bytes; an incomplete trailing frame is kept for the next call."""
        if reset:
            self.reset()
        builder = self._builder()
        meta: dict[str, Any] = {}
        buf = self._buf
        buf += data
        n = len(buf)
        pos = 0
        while n - pos >= HEADER:
            if not _header_ok(buf, pos) or (
                int.from_bytes(buf[pos:pos + 8], "little") > MAX_FRAME
            ):
                if not self._lost:
                    builder.add_malformed(
                        0, f"corrupt frame header at byte {self._offset + pos}; "
                        "skipping to the next valid frame",
                    )
                    self._lost = True
                pos = self._resync(buf, pos + 1, n)
                continue
            self._lost = False
            length = int.from_bytes(buf[pos:pos + 8], "little")
            end = pos + HEADER + length + FOOTER
            if end > n:
                break
            self._frame(bytes(buf[pos + HEADER:end - FOOTER]),
                        int.from_bytes(buf[end - FOOTER:end], "little"),
                        self._offset + pos, builder, meta)
            pos = end
        self._flush_pending(builder)
        del buf[:pos]
        self._offset += pos
        return builder.build(reset=reset, meta=meta or None)

    def finish(self) -> RecordBatch:
        """At the end of a closed file: report (and drop) an incomplete final frame."""
        builder = self._builder()
        if self._buf:
            builder.add_malformed(
                0, f"truncated final record: {len(self._buf)} bytes at byte {self._offset} "
                "(the writer was interrupted); dropped",
            )
            self._offset += len(self._buf)
            self._buf.clear()
        return builder.build()

    # ------------------------------------------------------------------ frames
    @staticmethod
    def _resync(buf: bytearray, start: int, n: int) -> int:
        """Position of the next valid frame header, or where an unseen one could start."""
        for j in range(start, n - HEADER + 1):
            if _header_ok(buf, j):
                return j
        return max(start, n - HEADER + 1)

    def _frame(
        self, payload: bytes, crc: int, offset: int, builder: BatchBuilder, meta: dict[str, Any]
    ) -> None:
        simple = parse_simple_scalar(payload)
        if simple is not None:
            wall, step, tag, value = simple
            if self._plugins.get(tag, "") not in _SCALAR_PLUGINS:
                return
            if masked_crc32c(payload) != crc:
                builder.add_malformed(0, f"record at byte {offset}: data CRC mismatch; skipped")
                return
            self._merge(step, wall, {_RENAMED.get(tag, tag): value}, builder)
            return
        try:
            ev = parse_event(payload)
        except ProtoError as e:
            if masked_crc32c(payload) != crc:
                builder.add_malformed(0, f"record at byte {offset}: data CRC mismatch; skipped")
            else:
                builder.add_malformed(0, f"record at byte {offset}: not an Event ({e}); skipped")
            return
        values: dict[str, float] = {}
        for v in ev.values:
            if v.plugin is not None and v.tag not in self._plugins:
                self._plugins[v.tag] = v.plugin
            if v.value is None or self._plugins.get(v.tag, "") not in _SCALAR_PLUGINS:
                continue
            values[_RENAMED.get(v.tag, v.tag)] = v.value
        if not values and ev.session_status is None and ev.file_version is None:
            return  # graph, image, histogram...: not checked, not used
        if masked_crc32c(payload) != crc:
            builder.add_malformed(0, f"record at byte {offset}: data CRC mismatch; skipped")
            return
        if ev.file_version is not None:
            meta["file_version"] = ev.file_version
        if ev.session_status in _SESSION_EVENTS:
            self._flush_pending(builder)
            rec: dict[str, Any] = {"event": _SESSION_EVENTS[ev.session_status], "step": ev.step}
            if ev.wall_time is not None:
                rec["time"] = ev.wall_time
            rec.update(ev.session_fields)
            builder.add_record(rec, 0)
        if values:
            self._merge(ev.step, ev.wall_time, values, builder)

    def _merge(
        self, step: int, wall_time: float | None, values: dict[str, float], builder: BatchBuilder
    ) -> None:
        p = self._pending
        if p is not None and p["step"] == step and not any(k in p for k in values):
            p.update(values)
            return
        self._flush_pending(builder)
        rec: dict[str, Any] = {"step": step, **values}
        if wall_time is not None:
            rec["time"] = wall_time
        self._pending = rec

    def _flush_pending(self, builder: BatchBuilder) -> None:
        if self._pending is not None:
            builder.add_record(self._pending, 0)
            self._pending = None
