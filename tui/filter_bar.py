"""``/``: a regex that narrows the metrics table and the charts as you type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input


class FilterBar(Input):
    """Hidden until ``/``. Enter keeps the filter and returns to the dashboard; esc clears it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Clear filter", show=False)]

    @dataclass
    class FilterChanged(Message):
        text: str
        done: bool
        """Enter or esc: the user left the filter bar."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder="filter metrics (regex) · enter keep · esc clear", id=id)

    def open(self) -> None:
        self.display = True
        self.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.FilterChanged(event.value, False))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.display = bool(self.value)
        self.post_message(self.FilterChanged(self.value, True))

    def action_cancel(self) -> None:
        self.value = ""
        self.display = False
        self.post_message(self.FilterChanged("", True))
