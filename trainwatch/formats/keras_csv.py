"""Keras' ``CSVLogger`` file (``training.log`` by default; a ``lines`` reader).

What the callback does, and the choices made here:

* A header row (``epoch,accuracy,loss,...,val_loss``), then one row per epoch, written with
  the csv module's default ``\\r\\n`` line ends. The ``epoch`` column (0-based) is the step;
  every other column is a series under its own name.
* Cells: a key missing from an epoch's logs is written ``NA``: absent, like an empty cell.
  ``nan``/``inf``/``-inf`` are real non-finite values. Other text is kept as a note.
* A non-default ``separator`` (``;``, tab) is taken from the header line.
* **The header again** (a second run appended to the file without Keras' ``append=True``
  logic, or files concatenated) switches to the new columns. When the new run's epochs start
  over, the builder reports the rewind and starts a new segment; a resumed run that continues
  at ``initial_epoch`` continues the curve.
* A row whose cell count differs from the header's is reported and skipped (the columns cannot
  be matched), as is a row before any header.
* The file has no clock: record times are the moment we read them.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable

from trainwatch.builder import BatchBuilder
from trainwatch.formats._csv import is_header, row_record, sniff_delimiter, split_row, step_value
from trainwatch.formats._textlines import TextLinesReader


class KerasCsvReader(TextLinesReader):
    """Parses whole lines of one Keras ``CSVLogger`` file."""

    format = "keras_csv"

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        super().__init__(source, clock=clock)
        self._header: list[str] | None = None
        self._delimiter = ","
        self._step_col: int | None = None

    def reset(self) -> None:
        super().reset()
        self._header = None

    def _handle_line(self, raw: bytes, line_no: int, builder: BatchBuilder) -> None:
        line = raw.decode("utf-8", errors="replace")
        if line_no == 1:
            line = line.lstrip("\ufeff")
        if not line.strip():  # a lone BOM, or Unicode spaces the bytes check let through
            return
        delimiter = self._delimiter if self._header is not None else sniff_delimiter(line)
        cells = split_row(line, delimiter)
        if is_header(cells):
            self._set_header(line)
            self._meta["columns"] = self._header
            return
        if self._header is None:
            builder.add_malformed(line_no, "data row before the CSV header; row skipped")
            return
        if len(cells) != len(self._header):
            builder.add_malformed(
                line_no,
                f"row has {len(cells)} cells but the header has {len(self._header)}; "
                "row skipped",
            )
            return
        rec = row_record(self._header, cells)
        if self._step_col is not None:
            rec.pop(self._header[self._step_col], None)
            step = step_value(cells[self._step_col])
            if step is not None:
                rec["step"] = step
        builder.add_record(rec, line_no)

    def _set_header(self, line: str) -> None:
        self._delimiter = sniff_delimiter(line)
        self._header = [c.strip() for c in split_row(line, self._delimiter)]
        self._step_col = self._header.index("epoch") if "epoch" in self._header else None
