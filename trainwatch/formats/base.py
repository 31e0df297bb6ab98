"""What a reader of one file format looks like to the tailer and the loaders.

Three kinds, because real writers behave in three ways:

* ``lines``: the file only grows, one record per line (JSONL, detectron2, mmcv, text logs,
  Keras CSV). The tailer tracks the byte offset and partial line and hands the reader whole
  lines with the 1-based number of the first one.
* ``snapshot``: the writer rewrites the whole file (HF ``trainer_state.json``, Lightning's
  ``metrics.csv`` when a column appears). The tailer re-reads the whole file when it changes;
  the reader returns only records it has not returned before, or a batch with ``reset=True``
  when the history it returned earlier changed.
* ``stream``: a binary append-only format with its own framing (TensorBoard event files, W&B
  ``.wandb`` logs). The tailer hands over new bytes; the reader keeps any incomplete frame
  itself. A stream that also carries the run's console text (W&B) has a ``take_text()`` that
  returns the lines completed since the last call and the number of the first (or None); the
  tailer and the loaders hand them on as a ``console.log``'s lines.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from trainwatch.batch import RecordBatch

ReaderKind = Literal["lines", "snapshot", "stream"]


@runtime_checkable
class LineReader(Protocol):
    kind: ReaderKind  # "lines"
    format: str

    def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False) -> RecordBatch:
        """Parse whole lines (each ending in a newline, except possibly the file's last)."""
        ...


@runtime_checkable
class SnapshotReader(Protocol):
    kind: ReaderKind  # "snapshot"
    format: str

    def parse_snapshot(self, data: bytes) -> RecordBatch | None:
        """Parse the whole file. None means "half-written, try again shortly"."""
        ...


@runtime_checkable
class StreamReader(Protocol):
    kind: ReaderKind  # "stream"
    format: str

    def feed(self, data: bytes, *, reset: bool = False) -> RecordBatch:
        """Consume new bytes; an incomplete trailing frame is kept for the next call."""
        ...


Reader = LineReader | SnapshotReader | StreamReader
