"""W&B runs (``run-<id>.wandb``, offline or synced), read without wandb.

The file is W&B's transaction log: LevelDB-style framing (``_leveldb.py``) of protobuf
``Record`` messages (decoded by hand in ``_wandb_proto.py``). This is a ``stream`` reader:
:meth:`WandbReader.feed` takes whatever bytes arrived; a record the bytes end inside is kept
for the next call (a run being written always ends mid-record), and a corrupt block is reported
once, by byte offset, and skipped.

What becomes what:

* ``history`` (one ``run.log`` row): a record. ``_step`` is its step, ``_timestamp`` its time;
  other keys starting with ``_`` (``_runtime``, ``_wandb``) are W&B's own and left out. Each
  item's ``value_json`` is JSON: numbers (and ``NaN``, ``Infinity``) are series, nested keys are
  joined with ``/`` (``train/acc``), as trainwatch flattens nested objects; strings and lists are
  kept as notes; W&B media and histograms (objects with a ``_type``) are left out. A user key
  the format reserves (``step``, ``time``, ``event``, ``rank``) becomes ``<key>_value``.
* ``stats`` (system metrics, sampled every 15 s by default): series ``system/<key>``
  (``system/cpu``, ``system/gpu.0.gpu``...). The latest sample of each rides on the next
  history row rather than making records of its own: the sampler keeps running while training
  hangs, and records of their own would hide that silence from ``stalled_stream``.
* ``output`` / ``output_raw`` (captured stdout and stderr, in pieces): the run's console, in
  whole lines as a terminal shows them; :meth:`WandbReader.take_text` hands them on (the
  ``console_error`` rule reads them).
* ``run``: a ``run_start`` event with ``run_id``, ``name``, ``project``, ``host``, ``config``...;
  ``config`` records update the config (in the batch's ``meta``).
* ``exit``: a ``run_end`` event, ``status`` ``finished`` for exit code 0 else ``crashed``, and
  ``exit_code``.
* ``header``: the writing client's version, ``meta["wandb_version"]``.
"""

from __future__ import annotations

from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder
from trainwatch.formats import _wandb_proto as pb
from trainwatch.formats._console import ConsoleText
from trainwatch.formats._decode import decode_json
from trainwatch.formats._leveldb import WANDB_HEADER, LogFramer
from trainwatch.formats._proto import ProtoError
from trainwatch.formats._stream import StreamReaderBase
from trainwatch.formats._wandb_rows import HistoryColumns
from trainwatch.roles import SYSTEM_PREFIX

MAX_NAMES = 1 << 16
"""History key names remembered; a run logging more distinct keys starts the memory over."""
_RENAMED = {"step": "step_value", "time": "time_value", "event": "event_value",
            "rank": "rank_value"}


class WandbReader(StreamReaderBase):
    """Consumes the bytes of one ``.wandb`` file as they arrive."""

    format = "wandb"

    def _init_stream(self) -> None:
        self._framer = LogFramer()
        self._console = ConsoleText()
        self._stats: dict[str, float] = {}
        """The latest system sample of each key, for the next history row."""
        self._config: dict[str, Any] = {}
        self._names: dict[bytes, str] = {}
        """History keys seen, decoded once (cleared if a run logs a great many)."""
        self._rows = HistoryColumns(_RENAMED)
        self._pos = 0
        """Position of the next record in the batch being built (rows and events interleave)."""

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished record held for the next call."""
        return self._framer.buffered

    def feed(self, data: bytes, *, reset: bool = False) -> RecordBatch:
        """Consume new bytes; an unfinished trailing record is kept for the next call."""
        if reset:
            self.reset()
        builder = self._builder()
        meta: dict[str, Any] = {}
        framed = self._framer.feed(data)
        for problem in framed.problems:
            builder.add_malformed(0, problem)
        self._pos = 0
        for offset, payload in framed.records:
            try:
                self._record(payload, builder, meta)
            except (ProtoError, UnicodeDecodeError) as e:
                builder.add_malformed(0, f"record at byte {offset}: not a W&B Record ({e}); "
                                      "skipped")
        for pos, row, extra in self._rows.flush(builder):
            self._history_row(row, 0, len(row), builder, extra, pos)
        return builder.build(reset=reset, meta=meta or None)

    def _add(self, builder: BatchBuilder, record: dict[str, Any], pos: int | None = None) -> None:
        """A record through the builder's generic path, in its place among the rows."""
        if pos is None:
            pos = self._pos
            self._pos += 1
        builder.add_record(record, 0, pos)

    def finish(self) -> RecordBatch:
        """At the end of a closed file: the console's last line, even without a newline.

        A record the file ends inside is not an error (a run still being written, or one killed
        mid-write); it is named in ``meta["unfinished"]`` as (byte offset, bytes)."""
        self._console.flush()
        builder = self._builder()
        cut = self._framer.unfinished()
        return builder.build(meta={"unfinished": cut} if cut else None)

    def take_text(self) -> tuple[tuple[str, ...], int] | None:
        """Console lines completed since the last call, with the number of the first."""
        return self._console.take()

    # ------------------------------------------------------------------ records
    def _record(self, payload: bytes, builder: BatchBuilder, meta: dict[str, Any]) -> None:
        found = pb.record_kind(payload)
        if found is None:
            return
        kind, a, z = found
        if kind == pb.HISTORY:
            self._history(payload, a, z, builder)
        elif kind == pb.STATS:
            for key, value in pb.stats(payload, a, z)[1]:
                x = _number(value)
                if x is not None:
                    self._stats[SYSTEM_PREFIX + key] = x
        elif kind == pb.OUTPUT or kind == pb.OUTPUT_RAW:
            stream, text = pb.output(payload, a, z)
            self._console.add(stream, text)
        elif kind == pb.RUN:
            self._run(pb.run(payload, a, z), builder, meta)
        elif kind == pb.CONFIG:
            self._config.update(_config(pb.items_of(payload, a, z, 1)))
            meta["config"] = dict(self._config)
        elif kind == pb.EXIT:
            code, not_complete = pb.exit_record(payload, a, z)
            self._console.flush()  # the process is gone: its last line is whole
            if not not_complete:
                self._add(builder, {"event": "run_end", "exit_code": code,
                                    "status": "finished" if code == 0 else "crashed"})
        elif kind == pb.HEADER:
            version = pb.producer(payload, a, z)
            if version:
                meta["wandb_version"] = version

    def _history(self, payload: bytes, a: int, z: int, builder: BatchBuilder) -> None:
        if self._rows.add(payload, a, z, self._pos, self._stats):
            self._pos += 1
        else:  # not the common shape: the exact decoder and the generic path
            self._history_row(payload, a, z, builder, self._stats)
        self._stats = {}

    def _history_row(self, payload: bytes, a: int, z: int, builder: BatchBuilder,
                     extra: dict[str, float], pos: int | None = None) -> None:
        if len(self._names) > MAX_NAMES:
            self._names.clear()
        items, step = pb.history(payload, a, z, self._names)
        rec: dict[str, Any] = {}
        when = None
        for key, value in items:
            if key[:1] == "_":
                if key == "_step":
                    step = int(_number(value) or 0)
                elif key == "_timestamp":
                    when = _number(value)
                continue
            x = _number(value)
            if x is None:
                x = _json(value)
                if type(x) is dict and "_type" in x:
                    continue  # an image, a table, a histogram...
            rec[_RENAMED.get(key, key)] = x
        rec.update(extra)
        rec["step"] = step
        if when is not None:
            rec["time"] = when
        self._add(builder, rec, pos)

    def _run(self, info: pb.RunInfo, builder: BatchBuilder, meta: dict[str, Any]) -> None:
        self._config.update(_config(info.config))
        if info.config:
            meta["config"] = dict(self._config)
        fields: dict[str, Any] = {"event": "run_start", **info.strings,
                                  "config": dict(self._config)}
        if info.start_time:
            fields["time"] = info.start_time
        if info.starting_step:
            fields["step"] = info.starting_step
        self._add(builder, fields)


def is_wandb_head(head: bytes) -> bool:
    """The first bytes of a file are a W&B log's header."""
    return head.startswith(WANDB_HEADER)


def _number(value: bytes) -> float | None:
    """A JSON number (or W&B's ``NaN``, ``Infinity``, ``-Infinity``) as a float, else None."""
    try:
        return float(value)
    except ValueError:
        return None


def _json(value: bytes) -> Any:
    try:
        return decode_json(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _config(items: list[pb.Item]) -> dict[str, Any]:
    """Config items as plain values: W&B's own (``_wandb``) left out, and the ``{"value": x,
    "desc": ...}`` wrapping of older clients undone."""
    out: dict[str, Any] = {}
    for key, value in items:
        if key.startswith("_"):
            continue
        v = _json(value)
        if type(v) is dict and "value" in v and v.keys() <= {"value", "desc"}:
            v = v["value"]
        out[key] = v
    return out
