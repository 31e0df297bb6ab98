"""A yes/no question before doing something that cannot be undone (stopping a run), or before
quitting while a run started here is still training."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from trainwatch.tui.sanitize import clean, safe_text


class ConfirmScreen(ModalScreen[bool | None]):
    """Dismissed with True for ``y``, False for ``n``; enter gives ``default`` (when there is
    one); esc gives False, or None (do nothing at all) when ``cancellable``."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("enter", "default", "Default", show=False),
        Binding("escape", "cancel", "Cancel", show=False),
    ]

    def __init__(self, question: str, detail: str = "", *, default: bool | None = None,
                 cancellable: bool = False, title: str = "Confirm") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.default = default
        """What enter answers; None: enter does nothing."""
        self.cancellable = cancellable
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(safe_text(self.question, style="bold"))
            if self.detail:
                yield Static(Text(clean(self.detail), style="dim"))

    def on_mount(self) -> None:
        box = self.query_one("#confirm")
        box.border_title = self.title_text
        yes = "Y yes" if self.default is True else "y yes"
        no = "N no" if self.default is False else "n no"
        parts = [yes, no] + (["esc cancel"] if self.cancellable else [])
        box.border_subtitle = " · ".join(parts)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def action_default(self) -> None:
        if self.default is not None:
            self.dismiss(self.default)

    def action_cancel(self) -> None:
        self.dismiss(None if self.cancellable else False)
