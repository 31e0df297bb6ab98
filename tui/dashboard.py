"""The main screen: header, four charts, metrics table, alerts, console, filter, footer.

It draws what the app holds and nothing else: :meth:`Dashboard.refresh_data` is called by the
app's throttled flush, and each part redraws only when its inputs changed (chart specs are
rebuilt only when a series version, the view or the size changed).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.events import Resize
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, OptionList

from trainwatch.tui.alerts_pane import AlertsPane
from trainwatch.tui.chart import ChartPanel
from trainwatch.tui.chart_data import (
    PanelDef,
    build_spec,
    choose_panels,
    last_value_text,
    panel_key,
)
from trainwatch.tui.console_pane import ConsolePane
from trainwatch.tui.filter_bar import FilterBar
from trainwatch.tui.footer import KeyFooter
from trainwatch.tui.header import HeaderBar
from trainwatch.tui.keys import bindings
from trainwatch.tui.metrics_table import MetricsTable
from trainwatch.tui.sanitize import clean, markup_safe

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

N_CHARTS = 4
SLOW_HZ = 2.0
"""Refresh rate of the metrics table and the charts' titles."""
NARROW = 100
MEDIUM = 120
SHORT = 30


TITLE_CHROME = 6
"""Border cells a title cannot use: the two corners and ``─ `` / `` ─`` around it."""
MIN_LABEL = 5
"""A series name is never cut shorter than this (with its ellipsis) to fit a title."""
_NONFINITE = ("nan", "inf", "-inf")


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells in the middle (``train/…/grad_norm``): the start and the
    end of a metric name are what tell two series apart."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "…" + (text[-tail:] if tail else "")


def chart_title(parts: list[tuple[str, str, str]], width: int | None = None) -> str:
    """Markup for a chart's border title: each line's name in its colour and its last value.

    With ``width`` (the chart's), names are shortened so the values always show: a title that
    is too long is cut at its end by the border, and the end is where the values are. Lines
    that still do not fit are left out, counted (``+2``)."""
    items = [(clean(label), color, value) for label, color, value in parts]
    budget = None if width is None else max(width - TITLE_CHROME, 8)

    def size(labels: list[str], n: int, gap: int) -> int:
        body = sum(2 + len(lb) + 1 + len(v) for lb, (_l, _c, v) in zip(labels, items[:n]))
        more = len(f" +{len(items) - n}") if n < len(items) else 0
        return body + gap * (n - 1) + more

    labels = [shorten(lb, 40) for lb, _c, _v in items]
    n, gap = len(items), 2
    if budget is not None:
        if size(labels, n, gap) > budget:
            gap = 1
        while size(labels, n, gap) > budget:
            longest = max(range(n), key=lambda i: len(labels[i]))
            if len(labels[longest]) > MIN_LABEL:
                labels[longest] = shorten(items[longest][0], len(labels[longest]) - 1)
            elif n > 1:
                n -= 1
            else:
                break
    out = []
    for label, (_l, color, value) in zip(labels[:n], items[:n]):
        shown = f"[bold red]{value}[/]" if value in _NONFINITE else markup_safe(value)
        out.append(f"[{color}]━ {markup_safe(label)}[/] {shown}")
    more = f" [dim]+{len(items) - n}[/]" if n < len(items) else ""
    return (" " * gap).join(out) + more


class Dashboard(Screen):
    """The default screen."""

    def __init__(self) -> None:
        super().__init__()
        self._panels: list[tuple[ChartPanel, PanelDef | None]] = []
        self._slow_at = 0.0
        self._slow_timer: Timer | None = None
        self._slow_changed: set[str] = set()
        self._slow_full = False
        self._slow_queued = False

    BINDINGS: ClassVar[list[BindingType]] = bindings("charts", "dashboard")

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="main"):
            with Grid(id="charts"):
                for i in range(N_CHARTS):
                    yield ChartPanel(id=f"chart-{i}")
            with Vertical(id="side"):
                yield MetricsTable(id="metrics")
                yield AlertsPane(id="alerts")
        yield ConsolePane(id="console", max_lines=self.twapp.config.console_lines)
        yield FilterBar(id="filter")
        yield KeyFooter()

    @property
    def twapp(self) -> TrainwatchApp:
        return self.app  # type: ignore[return-value]

    def on_mount(self) -> None:
        self.query_one("#metrics").border_title = "Metrics"
        self.query_one("#alerts").border_title = "Alerts"
        self.query_one("#console").border_title = "Console"
        self.query_one(FilterBar).display = False
        self.query_one("#chart-0").focus()

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width < NARROW, "-narrow")
        self.set_class(NARROW <= event.size.width < MEDIUM, "-medium")
        self.set_class(event.size.height < SHORT, "-short")
        self.refresh_data(full=True)
        # the titles fit the charts' widths, known once this size is laid out
        self.call_after_refresh(self._draw_titles)

    def on_screen_resume(self) -> None:
        self.refresh_data(full=True)

    # ------------------------------------------------------------------ drawing
    def refresh_data(self, *, full: bool = False, changed: set[str] | None = None,
                     alerts: bool = True, console: list[str] | None = None,
                     reset_console: bool = False, streaming: bool = False) -> None:
        app = self.twapp
        model = app.current_model()
        if model is None or not self.is_mounted:
            return
        self.query_one(HeaderBar).show(app.header_for(model))
        self._draw_charts()
        # numbers in the table and chart titles change with every record, but nobody reads
        # them ten times a second: they follow at most SLOW_HZ (the charts do not wait)
        self._slow_changed |= set(changed or ())
        self._slow_full |= full
        wait = self._slow_at + 1.0 / SLOW_HZ - time.monotonic()
        if full or (streaming and wait <= 0):
            self._draw_slow()  # in this frame: one screen update for everything
        elif wait <= 0:
            # after this frame is on screen: the new record must not wait for the table
            self._slow_at = time.monotonic()
            self._slow_queued = True
            self.call_after_refresh(self._draw_slow)
        elif self._slow_timer is None:
            # a later flush usually draws it first (one screen update for both); the timer
            # only makes sure the last values show when the data stops
            self._slow_timer = self.set_timer(wait + 1.0 / SLOW_HZ, self._draw_slow)
        if alerts or full:
            self.query_one(AlertsPane).show_entries(app.visible_alerts(), app.overlaying())
        pane = self.query_one(ConsolePane)
        # console.log is optional: no pane (and no warning) until it has something to show
        # (a W&B log brings its console in the metrics stream, with no console file)
        self.set_class(not model.console, "-no-console-file")
        if reset_console or full:
            pane.clear()
            pane.add_lines(list(model.console))
        elif console:
            pane.add_lines(console)

    def _draw_slow(self) -> None:
        """The metrics table and the charts' titles (values), at most SLOW_HZ times a second."""
        if self._slow_timer is not None:
            self._slow_timer.stop()
        self._slow_timer = None
        self._slow_queued = False
        self._slow_at = time.monotonic()
        app = self.twapp
        model = app.current_model()
        if model is None:
            return
        changed, full = self._slow_changed, self._slow_full
        self._slow_changed, self._slow_full = set(), False
        table = self.query_one(MetricsTable)
        table.sync(model.view, None if full else changed, app.view.matches)
        subtitle = (f"filter /{markup_safe(app.view.filter_text)}/"
                    if app.view.filter_text else f"{len(table.names)} series")
        if app.view.filter_error:
            subtitle = markup_safe(app.view.filter_error, 60)
        table.border_subtitle = subtitle
        self._draw_titles()

    def _draw_titles(self) -> None:
        """Each chart's title: its lines' names and last values, fitted to its width."""
        models = self.twapp.models
        for chart, panel in self._panels:
            title = (chart_title(last_value_text(panel, models), chart.outer_size.width or None)
                     if panel else "")
            if chart.border_title != title:
                chart.border_title = title

    def _draw_charts(self) -> None:
        app = self.twapp
        model = app.current_model()
        assert model is not None
        panels = choose_panels(model, app.overlay_models(), app.view, N_CHARTS)
        self._panels = []
        for i, chart in enumerate(self.query(ChartPanel).results(ChartPanel)):
            panel = panels[i] if i < len(panels) else None
            self._panels.append((chart, panel))
            if panel is None:
                if chart.data_key is not None:
                    chart.show(None)
                    chart.border_subtitle = ""
                continue
            chart.key = panel.key
            key = panel_key(panel, app.models, (app.view, chart.size))
            if key == chart.data_key:
                continue
            spec = build_spec(panel, app.models, app.view, chart.plot_px_width())
            chart.show(spec, key)
            subtitle = " · ".join(x for x in (markup_safe(app.view.describe()),
                                               "log" if spec.log_y else "") if x)
            if chart.border_subtitle != subtitle:
                chart.border_subtitle = subtitle

    def settled(self) -> bool:
        """Everything handed to this screen is drawn (nothing waits for the 2 Hz part)."""
        return self._slow_timer is None and not self._slow_queued

    def focused_chart(self) -> ChartPanel | None:
        f = self.focused
        return f if isinstance(f, ChartPanel) else None

    def first_chart(self) -> ChartPanel:
        return self.query_one("#chart-0", ChartPanel)

    # ------------------------------------------------------------------ events
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        name = event.row_key.value
        if name:
            self.twapp.open_series(name)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        entry = self.query_one(AlertsPane).entry(event.option.id)
        if entry is not None:
            self.twapp.open_alert(entry)

    def on_filter_bar_filter_changed(self, event: FilterBar.FilterChanged) -> None:
        self.twapp.set_filter(event.text)
        if event.done:
            self.first_chart().focus()

    def open_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.open()

    def toggle_console(self) -> None:
        if self.has_class("-no-console-file"):
            model = self.twapp.current_model()
            where = model.spec.console if model is not None else None
            self.notify(f"no console output yet ({where.name if where else 'no console.log'}"
                        " is missing or empty)", timeout=4)
            return
        visible = self.query_one(ConsolePane).display
        self.set_class(visible, "-console-hidden")
        self.set_class(not visible, "-console-shown")

    def highlighted_alert(self):
        return self.query_one(AlertsPane).highlighted_entry()
