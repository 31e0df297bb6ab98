"""CSV cells and rows shared by the Lightning and Keras readers.

A cell is text; what it stands for: empty (or Keras' ``NA``) means the metric was not logged in
that row, which is *absent*, never zero; ``nan``/``inf``/``-inf`` (any case) are real
non-finite values; anything else that parses as a float is a value; other text is kept as a
note by the builder (e.g. Keras writes list-valued logs as ``"[0.1, 0.2]"``).
"""

from __future__ import annotations

import csv
import math
from typing import Any

from trainwatch.record_values import NONFINITE_STRINGS

ABSENT_CELLS = frozenset({"", "na", "n/a", "none", "null"})
"""Cells that mean "not logged in this row"."""


def cell_value(cell: str) -> float | str | None:
    """None for an absent cell, a float for a number (NaN/inf included), else the text."""
    s = cell.strip()
    low = s.lower()
    if low in ABSENT_CELLS:
        return None
    x = NONFINITE_STRINGS.get(low)
    if x is not None:
        return x
    try:
        return float(s)
    except ValueError:
        return s


def step_value(cell: str) -> int | None:
    """An integer step from a cell (``"12"``, ``"12.0"``), or None."""
    v = cell_value(cell)
    if type(v) is float and math.isfinite(v) and v == int(v):
        return int(v)
    return None


def split_row(line: str, delimiter: str = ",") -> list[str]:
    """One CSV line -> cells, with the csv module's quoting rules."""
    if '"' not in line:
        return line.split(delimiter)
    try:
        return next(csv.reader([line], delimiter=delimiter), [])
    except csv.Error:
        # a bare CR inside a quoted row (a binary or mangled file): the csv module refuses it;
        # a plain split keeps every character, and the reader's cell-count check reports the row
        return line.split(delimiter)


def sniff_delimiter(header: str) -> str:
    """The delimiter of a header line: ``,`` unless only ``;`` or a tab appears in it."""
    for d in (",", ";", "\t"):
        if d in header:
            return d
    return ","


def is_header(cells: list[str]) -> bool:
    """A header names its columns: no cell of it is a number."""
    return bool(cells) and all(type(cell_value(c)) is str for c in cells)


def row_record(header: list[str], cells: list[str]) -> dict[str, Any]:
    """Non-absent cells of a row keyed by their column (extra cells beyond the header dropped)."""
    rec: dict[str, Any] = {}
    for name, cell in zip(header, cells):
        v = cell_value(cell)
        if v is not None:
            rec[name] = v
    return rec
