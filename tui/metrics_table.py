"""The metrics table: every series with a sparkline, last, min, max and trend.

Cells are :class:`~rich.text.Text` built from sanitised names (a DataTable would parse a plain
string as markup). Rows update in place, and only for series whose data changed.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.widgets import DataTable

from trainwatch.humanize import fmt_num
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.store import Series, SeriesStore
from trainwatch.tui.sanitize import safe_text
from trainwatch.tui.sparkline import NONFINITE_MARK, sparkline, trend

SPARK_WIDTH = 8
NAME_WIDTH = 13
NUM_WIDTH = 8
COLUMNS = (("metric", "Metric", NAME_WIDTH), ("spark", " Trend", SPARK_WIDTH + 1),
           ("last", "Last", NUM_WIDTH + 1), ("min", "Min", NUM_WIDTH), ("max", "Max", NUM_WIDTH))
"""(key, label, width). No cell padding: every column but the first starts with its own space."""
FULL_WIDTH = sum(w for _k, _l, w in COLUMNS) + 1


def spark_text(values, width: int = SPARK_WIDTH, pad: str = " ") -> Text:
    """A sparkline with its NaN/inf buckets in red."""
    line = sparkline(values, width)
    text = Text(pad + line, style="cyan", no_wrap=True)
    for i, ch in enumerate(line):
        if ch == NONFINITE_MARK:
            text.stylize("bold red", i + len(pad), i + len(pad) + 1)
    return text


def _num(x: float | None, style: str = "") -> Text:
    return Text(fmt_num(x), style=style, justify="right", no_wrap=True, overflow="ellipsis")


def row_cells(series: Series) -> list[Text]:
    pts = series.query(max_points=SPARK_WIDTH * 4)
    last = series.last
    bad = last is not None and not math.isfinite(last)
    name = safe_text(series.name, max_len=NAME_WIDTH if not series.nonfinite else NAME_WIDTH - 3)
    name.overflow = "ellipsis"
    if series.nonfinite:
        name.append(" ×", style="bold red")
    last_cell = _num(last, "bold red" if bad else "bold")
    last_cell.append(trend(series.tail(64).values), style="dim")
    return [name, spark_text(pts.values), last_cell, _num(series.min), _num(series.max)]


def ordered_names(store: SeriesStore) -> list[str]:
    """Training roles first (in role order), then the rest as they first appeared."""
    names = store.names()
    roles = DEFAULT_ROLES.resolve(names)
    first = [roles[r] for r in ("loss", "val_loss", "grad_norm", "lr", "throughput", "step_time")
             if r in roles]
    return first + [n for n in names if n not in first]


class MetricsTable(DataTable):
    """Rows keyed by series name."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, cell_padding=0)
        self._names: list[str] = []
        self._store_id = 0
        self._shown_columns: tuple[tuple[str, str, int], ...] = ()
        self._store: SeriesStore | None = None
        self._cells: dict[str, list[Text]] = {}
        self._matches = None

    def on_resize(self) -> None:
        if self._store is not None and self._columns() != self._shown_columns:
            self.sync(self._store, None, self._matches)

    def _columns(self) -> tuple[tuple[str, str, int], ...]:
        """All columns when they fit, else name, sparkline and last value."""
        return COLUMNS if self.size.width == 0 or self.size.width >= FULL_WIDTH else COLUMNS[:3]

    def _set_columns(self) -> None:
        self.clear(columns=True)
        self._names = []
        self._shown_columns = self._columns()
        for key, label, width in self._shown_columns:
            self.add_column(Text(label, justify="left" if key in ("metric", "spark") else "right"),
                            key=key, width=width)

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def selected_name(self) -> str | None:
        if 0 <= self.cursor_row < len(self._names):
            return self._names[self.cursor_row]
        return None

    def sync(self, store: SeriesStore, changed: set[str] | None, matches) -> None:
        """Bring the rows up to date. ``changed`` None means everything may have changed."""
        self._store, self._matches = store, matches
        wanted = [n for n in ordered_names(store) if matches(n)]
        if self._columns() != self._shown_columns:
            self._set_columns()
        if wanted != self._names or id(store) != self._store_id:
            self._rebuild(store, wanted)
            return
        for name in self._names if changed is None else changed:
            s = store.get(name)
            if s is None or name not in self._cells:
                continue
            old = self._cells[name]
            new = row_cells(s)[: len(self._shown_columns)]
            self._cells[name] = new
            for (key, _label, _w), a, b in zip(self._shown_columns, old, new):
                if a != b:  # an unchanged cell costs nothing
                    self.update_cell(name, key, b)

    def _rebuild(self, store: SeriesStore, wanted: list[str]) -> None:
        keep = self.selected_name()
        self.clear()
        self._names = wanted
        self._store_id = id(store)
        self._cells = {}
        for name in wanted:
            s = store.get(name)
            if s is not None:
                self._cells[name] = row_cells(s)[: len(self._shown_columns)]
                self.add_row(*self._cells[name], key=name)
        if keep in wanted:
            self.move_cursor(row=wanted.index(keep))
