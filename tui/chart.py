"""A chart widget: draws a :class:`ChartSpec` with the numpy braille renderer.

It only draws. The app decides when its data changed (by store versions) and hands it a new
spec; the widget renders once per (spec, size) and serves cached strips to Textual.
"""

from __future__ import annotations

from functools import lru_cache

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from trainwatch.tui.chart_render import ChartSpec, Run, render


@lru_cache(maxsize=256)
def _style(spec: str) -> Style:
    return Style.parse(spec) if spec else Style()


class ChartPanel(Widget, can_focus=True):
    """One chart. ``key`` names the chart for per-chart settings (its log axis)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.key: str | None = None
        self.data_key: object = None
        """What the current spec was built from (the app skips rebuilding when unchanged)."""
        self._spec: ChartSpec | None = None
        self._rows: list[list[Run]] = []
        self._strips: list[Strip] = []
        self._raster_size: tuple[int, int] = (0, 0)
        self.renders = 0
        """How many times the chart was rasterised (tests check that idle means no work)."""
        self.repainted_rows = 0
        """Rows repainted so far: a new point usually changes only a few."""

    @property
    def spec(self) -> ChartSpec | None:
        return self._spec

    def show(self, spec: ChartSpec | None, data_key: object = None) -> None:
        """Draw ``spec`` from now on (None: an empty chart). Rasterises at once when the size
        is known, and repaints only the rows that changed."""
        self._spec = spec
        self.data_key = data_key
        width, height = self.size
        if width <= 0 or height <= 0:
            self._raster_size = (0, 0)  # not laid out yet: render_line rasterises
            self.refresh()
            return
        self._update(width, height)

    def plot_px_width(self) -> int:
        """Braille pixels across the plot area (the y labels take about 8 columns)."""
        return max(2 * (self.size.width - 8), 16)

    def on_resize(self) -> None:
        self._raster_size = (0, 0)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        if self._raster_size != (width, height):
            self._update(width, height, repaint=False)
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, self.rich_style)

    def _update(self, width: int, height: int, repaint: bool = True) -> None:
        rows = self._rasterise(width, height)
        same_size = self._raster_size == (width, height) and len(rows) == len(self._rows)
        base = self.rich_style
        if not same_size:
            self._strips = [self._strip(r, width, base) for r in rows]
            changed = range(len(rows))
        else:
            changed = [y for y, (a, b) in enumerate(zip(rows, self._rows)) if a != b]
            for y in changed:
                self._strips[y] = self._strip(rows[y], width, base)
        self._rows, self._raster_size = rows, (width, height)
        self.repainted_rows += len(changed)
        if not repaint or not changed:
            return
        if not same_size or len(changed) > height // 2:
            self.refresh()
        else:
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    def _rasterise(self, width: int, height: int) -> list[list[Run]]:
        if self._spec is None or width <= 0 or height <= 0:
            return [[(" " * max(width, 0), "")] for _ in range(max(height, 0))]
        self.renders += 1
        return render(self._spec, width, height)

    @staticmethod
    def _strip(row: list[Run], width: int, base: Style) -> Strip:
        return Strip([Segment(text, base + _style(style)) for text, style in row], width)

    def text_lines(self) -> list[str]:
        """The chart as plain text at its current size (tests, ``--once``)."""
        return ["".join(t for t, _s in row) for row in self._rows]
