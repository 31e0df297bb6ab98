"""``RunWriter``: the metrics writer any training script can use (stdlib only).

One record is one JSON line appended to ``<run_dir>/metrics.jsonl`` (``metrics.rank{N}.jsonl``
per distributed rank), in the format ``trainwatch.formats.jsonl`` reads.

Choices, and why:

* **Background flusher thread.** ``log()`` only encodes the record and appends the line to an
  in-memory list; a daemon thread writes what is pending every ``flush_interval`` seconds. A
  training loop then never waits on the disk (a slow NFS write blocks the flusher, not the step),
  and records still reach the file when the loop stalls right after logging (a long eval, a
  checkpoint, a hang, a deadlock): exactly when the person watching needs them. Flushing from
  ``log()`` "when due" would leave those last records in memory for the whole stall. ``close()``
  stops and joins the thread; ``flush_interval <= 0`` writes every record synchronously instead.
* **Whole lines only** (:mod:`trainwatch.appendfile`). The file is opened unbuffered in append mode and the pending lines are
  joined and written with one ``write`` call, so a record is never split across writes (the OS
  may still cut a write short on a full disk: the torn line is then ended with a newline before
  the next write, so it costs one malformed line, not two records).
* **Never raise into training for I/O.** A full disk, a removed directory, a permission problem:
  one line on stderr (or to ``say``: the framework integrations make it a warning) naming the
  file and what to do, the records are counted in ``dropped``, and
  the file is reopened every few seconds (a fresh file gets the ``run_start`` record again). An
  unwritable run directory at construction is treated the same way: warn once, drop, retry
  (the bundled trainer checks writability up front; a plain script should not die for metrics).
* **Values** (:mod:`trainwatch.record_encoder`): JSON as it is, numpy and torch scalars as
  numbers without importing either, anything else as its ``repr()`` (reported once).
* **config.yaml** is written with a small YAML emitter, not as JSON: JSON is valid YAML 1.2, but
  PyYAML reads YAML 1.1, where ``1e-05`` (how JSON writes a learning rate) is a *string*.
* **Forgotten writers** are closed at exit, and a forked child drops the writers it inherited
  (:mod:`trainwatch.open_writers`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from types import TracebackType
from typing import Any

from trainwatch.appendfile import AppendFile, one_line, reason, say
from trainwatch.open_writers import closed, opened
from trainwatch.plainvalues import (  # (the unused four: importable from here, as they were)
    NotANumber,  # noqa: F401
    as_number,  # noqa: F401
    plain_config,
    safe_repr,  # noqa: F401
    sanitise,  # noqa: F401
)
from trainwatch.record_encoder import RecordEncoder
from trainwatch.yamlout import to_yaml

__all__ = ["RunWriter", "rank_filename", "to_yaml"]

WAKE_PENDING = 8_192
"""Pending lines that wake the flusher before its interval (a tight loop logging fast)."""
MAX_PENDING = 1_000_000
"""Lines kept in memory while the flusher is blocked (a hung network filesystem): beyond, drop."""
STATUSES = ("finished", "crashed", "interrupted", "unknown")
"""``run_end`` statuses this writer produces (a caller may pass any string)."""

_now = time.time
_NUMBER_TYPES = (int, float, bool)


def rank_filename(filename: str, rank: int | None) -> str:
    """``metrics.jsonl`` -> ``metrics.rank3.jsonl`` for rank 3 (unchanged for ``None``)."""
    if rank is None:
        return filename
    p = PurePath(filename)
    name = f"{p.stem}.rank{rank}{p.suffix}" if p.suffix else f"{p.name}.rank{rank}"
    return str(p.with_name(name))


# ---------------------------------------------------------------------------- the writer
class RunWriter:
    """Appends metric records and events of one run (one rank) to a JSONL file."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        config: Any = None,
        filename: str = "metrics.jsonl",
        rank: int | None = None,
        flush_interval: float = 0.5,
        say: Callable[[str], None] = say,
    ) -> None:
        if rank is not None and (not isinstance(rank, int) or rank < 0):
            raise ValueError(f"RunWriter: rank must be a non-negative int or None, got {rank!r}")
        self.run_dir = Path(run_dir)
        """The run's directory (created with its parents)."""
        self.path = self.run_dir / rank_filename(filename, rank)
        """The metrics file this writer appends to."""
        self.rank = rank
        self.flush_interval = float(flush_interval)
        """Seconds between background writes; ``<= 0`` writes each record synchronously."""
        self.dropped = 0
        """Records lost to I/O errors (full disk, removed directory, ...)."""
        self._say = say
        """Where the writer's one-line messages go: stderr, or a framework's warnings."""
        self._lock = threading.Lock()  # guards _pending, _closed, dropped
        self._io_lock = threading.Lock()  # one writer of the file at a time, in order
        self._pending: list[str] = []  # encoded records, without their newline
        self._closed: str | None = None  # None while open, else why ("closed", "forked")
        self._said: set[str] = set()
        self._file = AppendFile(self.path, min(max(4 * self.flush_interval, 0.2), 5.0),
                                self._say_once, self._recovered, say)
        self._encoder = RecordEncoder(self.path, self._say_once, self._count_dropped)
        self._encode = self._encoder.encode
        """The record's JSON line (no newline), or None (counted in ``dropped``, reported once)."""
        self._sync = self.flush_interval <= 0
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

        config = plain_config(config)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._file.outage(f"cannot create the run directory {self.path.parent} ({reason(e)})")
            self._file.defer()
        else:
            if config is not None and rank in (None, 0):  # one config.yaml per run, not per rank
                self._write_config(config)
            self._file.open()
        start: dict[str, Any] = {
            "event": "run_start",
            "time": _now(),
            "config": config if config is not None else {},
            "pid": os.getpid(),
            "host": _hostname(),
            "argv": list(sys.argv),
        }
        if rank is not None:
            start["rank"] = rank
        header = self._file.header = self._encode(start)
        self._put(header)
        self._flush()  # the run is visible to a watcher as soon as the writer exists
        opened(self)
        if self.flush_interval > 0:
            self._thread = threading.Thread(
                target=self._run, name=f"trainwatch-writer:{self.path.name}", daemon=True
            )
            self._thread.start()

    # ------------------------------------------------------------------ public API
    def log(
        self, metrics: Mapping[str, Any] | None = None, /, step: Any = None, **values: Any
    ) -> None:
        """Append one metric record: ``log(step=10, loss=0.5)`` or ``log({"loss": 0.5}, step=10)``.

        ``time`` is added unless given; nested dicts are kept (the reader flattens them with "/").
        """
        rec: dict[str, Any] = (
            {"step": step, "time": _now()} if step is not None else {"time": _now()}
        )
        if metrics is not None:
            if type(metrics) is not dict and not isinstance(metrics, Mapping):
                raise TypeError(
                    f"RunWriter.log: expected a mapping of metrics, got {type(metrics).__name__}"
                )
            rec.update(metrics)
            if step is not None:
                rec["step"] = step  # the keyword wins over a "step" inside the mapping
        if values:
            rec.update(values)
        self._put(self._encode(rec))

    def event(self, name: str, /, step: Any = None, **fields: Any) -> None:
        """Append an event record (``checkpoint``, ``eval``, ...); it is written promptly."""
        rec: dict[str, Any] = {"event": name}
        if step is not None:
            rec["step"] = step
        rec["time"] = _now()
        rec.update(fields)
        self._put(self._encode(rec))
        self._wake.set()

    def flush(self) -> None:
        """Write every pending record now (in the calling thread)."""
        self._flush()

    def close(self, status: str = "finished", exit_code: int | None = 0, **fields: Any) -> None:
        """Write ``run_end``, flush, stop the flusher and close the file. Idempotent."""
        end = self._encode(
            {"event": "run_end", "time": _now(), "status": status, "exit_code": exit_code, **fields}
        )
        with self._lock:
            if self._closed is not None:
                return
            self._closed = "closed"
            if end is not None:
                self._pending.append(end)
        self._stop = True
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self._file.retry_now()  # one last try to reopen, whatever the retry delay
        self._flush()
        with self._io_lock:
            self._file.close()
        closed(self)

    def __enter__(self) -> RunWriter:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close("finished", 0)
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted", 130, error="KeyboardInterrupt")
        elif issubclass(exc_type, SystemExit) and isinstance(exc, SystemExit):
            code = exc.code
            if code is None or code == 0:
                self.close("finished", 0)
            else:
                self.close(
                    "crashed", code if isinstance(code, int) else 1, error=f"SystemExit: {code}"
                )
        else:
            self.close("crashed", 1, error=one_line(exc_type, exc))
        # returning None re-raises the exception

    def __repr__(self) -> str:
        state = self._closed or "open"
        return f"RunWriter({str(self.path)!r}, {state}, dropped={self.dropped})"

    @property
    def coerced(self) -> int:
        """Values written as their ``repr()`` because they were not JSON nor number-like."""
        return self._encoder.coerced

    # ------------------------------------------------------------------ pending records
    def _put(self, line: str | None) -> None:
        if line is None:
            return
        with self._lock:
            n = len(self._pending)
            accepted = self._closed is None and n < MAX_PENDING
            if accepted:
                self._pending.append(line)
        if not accepted:
            self._reject()
        elif self._sync:
            self._flush()
        elif n == WAKE_PENDING:
            self._wake.set()

    def _reject(self) -> None:
        """A record was refused: the writer is closed, inherited by fork, or far behind."""
        with self._lock:
            closed = self._closed
            if closed is None:
                self.dropped += 1
        if closed is None:
            self._say_once(
                "full",
                f"trainwatch: writing {self.path} is blocked ({MAX_PENDING:,} records pending);"
                " dropping records until it catches up (a hung filesystem?)",
            )
        elif closed == "forked":
            self._say_once(
                "forked",
                f"trainwatch: the RunWriter for {self.path} belongs to the parent process;"
                " create a new RunWriter in the child (e.g. with rank=...); record ignored",
            )
        else:
            self._say_once(
                "closed",
                f"trainwatch: log() after close() on the RunWriter for {self.path}; record ignored",
            )

    # ------------------------------------------------------------------ file I/O
    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._stop:
                return
            try:
                self._flush()
            except Exception as e:  # noqa: BLE001 - keep flushing; say it once
                self._say_once(
                    "bug", f"trainwatch: internal error while writing {self.path}: {reason(e)}"
                )

    def _flush(self) -> None:
        with self._io_lock:
            with self._lock:
                batch = self._pending
                if not batch:
                    return
                self._pending = []
            self._write(batch)

    def _write(self, batch: list[str]) -> None:
        """Write ``batch`` (whole lines); holds ``_io_lock``."""
        lost = self._file.write(batch)
        if lost:
            with self._lock:
                self.dropped += lost

    def _recovered(self) -> None:
        self._say(f"trainwatch: writing {self.path} again ({self.dropped} records dropped so far)")

    def _write_config(self, config: Any) -> None:
        target = self.run_dir / "config.yaml"
        tmp = self.run_dir / f".config.yaml.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            text = to_yaml(config)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, target)  # atomic: a reader sees the old file or the whole new one
        except (OSError, ValueError, RecursionError) as e:
            self._say_once(
                "config",
                f"trainwatch: cannot write {target} ({reason(e)});"
                " the config is still in the run_start record",
            )
            try:
                tmp.unlink()
            except OSError:
                pass

    def _count_dropped(self) -> None:
        with self._lock:
            self.dropped += 1

    def _say_once(self, key: str, msg: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self._say(msg)

    def _abandon(self) -> None:
        """In a forked child: forget the parent's pending records, write nothing, ever."""
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._pending = []
        self._closed = "forked"
        self._thread = None
        self._file.forget()


def _hostname() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # pragma: no cover - Windows
        import socket

        return socket.gethostname()
