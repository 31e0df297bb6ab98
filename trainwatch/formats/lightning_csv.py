"""PyTorch Lightning's ``CSVLogger`` ``metrics.csv`` (a ``snapshot``).

What the logger does, and the choices made here:

* One row per ``log_metrics`` call, columns sorted, every row as wide as the header. Rows are
  sparse: a training row leaves the validation columns empty and vice versa. An empty cell is
  *absent* (the metric was not logged at that step), never zero. ``nan``/``inf`` cells are real
  non-finite values.
* When a metric appears for the first time the logger rewrites the whole file with a wider
  header (older versions rewrite it at every flush), so this is a ``snapshot`` reader: each
  read parses the whole file and returns only the rows not returned before. A row is
  recognised by its non-empty cells, so the same row under a wider header is not new.
* The ``step`` column is the step; ``epoch`` is a series like any other.
* Rewriting is not atomic: a read can see the file truncated or half-written. A final line
  without its newline is not complete and is left for the next read; a snapshot holding fewer
  rows than already returned but agreeing with them is a torn write and returns None (retry).
  A snapshot that disagrees with the rows returned earlier (another run's file, edited history)
  comes back whole as a ``reset`` batch.
* The file has no clock: record times are the moment we first read them.
"""

from __future__ import annotations

from collections.abc import Hashable

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder
from trainwatch.formats._csv import is_header, row_record, sniff_delimiter, split_row, step_value
from trainwatch.formats._snapshot import SnapshotReaderBase


class LightningCsvReader(SnapshotReaderBase):
    """Reads successive snapshots of one Lightning ``metrics.csv``."""

    format = "lightning_csv"

    def parse_snapshot(self, data: bytes) -> RecordBatch | None:
        """Parse the whole file; None when it is half-written (nothing complete, or torn)."""
        text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
        lines = text.split("\n")
        lines.pop()  # the text after the last newline: "" or an incomplete row
        lines = [ln.rstrip("\r") for ln in lines]
        if not lines:
            return None
        delimiter = sniff_delimiter(lines[0])
        header = [c.strip() for c in split_row(lines[0], delimiter)]
        if not is_header(header):
            builder = BatchBuilder(self.source, self.state, self.format, self.clock)
            builder.add_malformed(1, "first line is not a CSV header; file not read")
            return builder.build()

        # (line number, record or error) per row, and the row's fingerprint
        rows: list[tuple[int, dict[str, object] | str]] = []
        prints: list[Hashable] = []
        for i in range(1, len(lines)):
            line = lines[i]
            if not line.strip():
                continue
            cells = split_row(line, delimiter)
            if len(cells) > len(header):
                rows.append((i + 1, f"row has {len(cells)} cells but the header has {len(header)}"))
                prints.append(("!", line))
                continue
            rec = row_record(header, cells)
            if "step" in rec:
                step = step_value(cells[header.index("step")])
                if step is None:
                    rec.pop("step")
                else:
                    rec["step"] = step
            rows.append((i + 1, rec))
            prints.append(tuple(sorted((k, repr(v)) for k, v in rec.items())))

        diff = self._history.diff(prints, shorter_is_partial=True)
        if diff.verdict == "partial":
            return None
        reset = diff.verdict == "reset" and len(self._history) > 0
        if reset:
            self.state.reset()
        builder = BatchBuilder(self.source, self.state, self.format, self.clock)
        for line_no, rec in rows[diff.start:]:
            if isinstance(rec, str):
                builder.add_malformed(line_no, f"{rec}; row skipped")
            else:
                builder.add_record(rec, line_no)
        self._history.commit(prints)
        return builder.build(reset=reset, meta={"columns": header})
