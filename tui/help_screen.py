"""``?``: every key, built from the same table as the bindings and the command palette."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from trainwatch.tui.keys import KEYS, OTHER_KEYS

INTRO = (
    "Charts show the training roles (loss with val_loss, grad norm, LR, throughput). "
    "▼ marks an alert's step; × marks a NaN/inf (drawn as a gap, never as a value)."
)


def help_table() -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold cyan", no_wrap=True, justify="right")
    t.add_column()
    for k in KEYS:
        t.add_row(Text(k.shown), Text(k.help))
    t.add_row("", "")
    for keys, what in OTHER_KEYS:
        t.add_row(Text(keys), Text(what))
    t.add_row("", "")
    t.add_row("", Text(INTRO, style="dim"))
    return t


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(help_table())

    def on_mount(self) -> None:
        box = self.query_one("#help")
        box.border_title = "trainwatch · keys"
        box.border_subtitle = "esc close"
