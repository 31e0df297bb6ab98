"""One series as a full-screen chart (enter on a metrics row). The view keys work here too."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen

from trainwatch.tui.chart import ChartPanel
from trainwatch.tui.chart_data import build_spec, last_value_text, panel_key, series_panel
from trainwatch.tui.dashboard import chart_title
from trainwatch.tui.footer import KeyFooter
from trainwatch.tui.header import HeaderBar
from trainwatch.tui.keys import bindings
from trainwatch.tui.sanitize import markup_safe

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp


class ChartScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter", "app.pop_screen", "Back"),
        *bindings("charts"),
    ]

    def __init__(self, run_id: str, name: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.series_name = name

    @property
    def twapp(self) -> TrainwatchApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield ChartPanel(id="big-chart")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(ChartPanel).focus()

    def on_resize(self) -> None:
        self.refresh_data(full=True)

    def on_screen_resume(self) -> None:
        self.refresh_data(full=True)

    def refresh_data(self, **_: object) -> None:
        app = self.twapp
        model = app.models.get(self.run_id)
        if model is None or not self.is_mounted:
            return
        self.query_one(HeaderBar).show(app.header_for(model))
        chart = self.query_one(ChartPanel)
        panel = series_panel(model, self.series_name)
        chart.key = panel.key
        key = panel_key(panel, app.models, (app.view, chart.size))
        if key == chart.data_key:
            return
        spec = build_spec(panel, app.models, app.view, chart.plot_px_width())
        chart.show(spec, key)
        chart.border_title = chart_title(last_value_text(panel, app.models))
        chart.border_subtitle = markup_safe(app.view.describe()) + (" · log" if spec.log_y else "")

    def focused_chart(self) -> ChartPanel | None:
        return self.query_one(ChartPanel)

    def first_chart(self) -> ChartPanel:
        return self.query_one(ChartPanel)
