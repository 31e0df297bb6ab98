"""The runs list (a sweep or a runs/ folder): state and a loss sparkline per run.

Enter opens a run on the dashboard; space marks runs whose charts are overlaid on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable

from trainwatch.humanize import fmt_count, fmt_num
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.tui.alerts_pane import SEVERITY_ICON
from trainwatch.tui.footer import KeyFooter
from trainwatch.tui.metrics_table import spark_text
from trainwatch.tui.run_state import STATE_STYLE
from trainwatch.tui.sanitize import safe_text

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp
    from trainwatch.tui.run_model import RunModel

COLUMNS = (("mark", "✓"), ("run", "Run"), ("state", "State"), ("step", "Step"),
           ("loss", "Loss"), ("spark", "Loss trend"), ("alerts", "Alerts"))


def run_cells(model: RunModel, state: str, marked: bool, current: bool) -> list[Text]:
    store = model.view
    loss_name = DEFAULT_ROLES.resolve(store.names()).get("loss")
    loss = store.get(loss_name) if loss_name else None
    worst = model.worst_alert()
    alerts = Text("")
    if worst is not None:
        icon, style = SEVERITY_ICON[worst]
        alerts = Text(f"{icon} {len(model.alerts)}", style=style)
    name = safe_text(model.run_id, style="bold" if current else "", max_len=60)
    return [
        Text("✓" if marked else " ", style="bold green"),
        name,
        Text(state, style=STATE_STYLE.get(state, "")),
        Text(fmt_count(model.last_step), justify="right"),
        Text(fmt_num(loss.last) if loss else "-", justify="right"),
        spark_text(loss.query(max_points=64).values, 16) if loss else Text(""),
        alerts,
    ]


class RunsScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "mark", "Mark / overlay"),
        Binding("escape,r", "close", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    @property
    def twapp(self) -> TrainwatchApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield KeyFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.border_title = "Runs"
        table.border_subtitle = "enter open · space overlay on charts · esc back"
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.refresh_data(full=True)
        table.focus()

    def on_screen_resume(self) -> None:
        self.refresh_data(full=True)

    def refresh_data(self, **_: object) -> None:
        app = self.twapp
        table = self.query_one(DataTable)
        ids = list(app.models)
        rows = {
            rid: run_cells(app.models[rid], app.state_of(rid), rid in app.marked, rid == app.current)
            for rid in ids
        }
        if [str(k.value) for k in table.rows] != ids:
            cursor = table.cursor_row
            table.clear()
            for rid in ids:
                table.add_row(*rows[rid], key=rid)
            if ids:
                table.move_cursor(row=min(cursor, len(ids) - 1))
            return
        for rid in ids:
            for (key, _label), cell in zip(COLUMNS, rows[rid]):
                table.update_cell(rid, key, cell)

    def _selected(self) -> str | None:
        table = self.query_one(DataTable)
        ids = list(self.twapp.models)
        return ids[table.cursor_row] if 0 <= table.cursor_row < len(ids) else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.twapp.open_run(str(event.row_key.value))

    def action_mark(self) -> None:
        rid = self._selected()
        if rid is not None:
            self.twapp.toggle_mark(rid)
            self.refresh_data()

    def action_close(self) -> None:
        self.app.pop_screen()
