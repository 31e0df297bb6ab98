"""A yes/no question before doing something that cannot be undone (stopping a run)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from trainwatch.tui.sanitize import clean, safe_text


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True for ``y``, False for ``n`` or esc."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "dismiss(True)", "Yes"),
        Binding("n,escape", "dismiss(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(safe_text(self.question, style="bold"))
            if self.detail:
                yield Static(Text(clean(self.detail), style="dim"))

    def on_mount(self) -> None:
        box = self.query_one("#confirm")
        box.border_title = "Confirm"
        box.border_subtitle = "y yes · n no"
