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
from textual.widgets import DataTable, Footer, OptionList

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
from trainwatch.tui.header import HeaderBar
from trainwatch.tui.keys import bindings
from trainwatch.tui.metrics_table import MetricsTable
from trainwatch.tui.sanitize import markup_safe

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

N_CHARTS = 4
SLOW_HZ = 2.0
"""Refresh rate of the metrics table and the charts' titles."""
NARROW = 100
MEDIUM = 120
SHORT = 30


def chart_title(parts: list[tuple[str, str, str]]) -> str:
    """Markup for a chart's border title: each line's name in its colour and its last value."""
    return "  ".join(f"[{color}]━ {markup_safe(label, 40)}[/] {markup_safe(value)}"
                     for label, color, value in parts)


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
        yield Footer()

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
        self.set_class(model.spec.console is None, "-no-console-file")
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
        for chart, panel in self._panels:
            title = chart_title(last_value_text(panel, app.models)) if panel else ""
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
            subtitle = markup_safe(app.view.describe()) + (" · log" if spec.log_y else "")
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
        visible = self.query_one(ConsolePane).display
        self.set_class(visible, "-console-hidden")
        self.set_class(not visible, "-console-shown")

    def highlighted_alert(self):
        return self.query_one(AlertsPane).highlighted_entry()
