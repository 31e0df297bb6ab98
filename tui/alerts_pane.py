"""The alerts pane: newest first, coloured by severity; enter opens the evidence."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from trainwatch.humanize import fmt_count
from trainwatch.tui.run_model import AlertEntry
from trainwatch.tui.sanitize import clean

SEVERITY_ICON = {"error": ("✖", "bold red"), "warning": ("▲", "bold yellow"), "info": ("●", "blue")}
MAX_SHOWN = 500


def alert_line(entry: AlertEntry, show_run: bool = False) -> Text:
    a = entry.alert
    icon, style = SEVERITY_ICON.get(a.severity, ("●", ""))
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    text.append(f"{icon} ", style=style)
    text.append(f"{fmt_count(a.step):>7} ", style="dim")
    if show_run:
        text.append(clean(entry.run_id, 20) + " ", style="dim italic")
    text.append(clean(a.rule, 30), style=style)
    text.append(" " + clean(a.message, 300))
    return text


def option_id(entry: AlertEntry) -> str:
    return f"{entry.run_id}\x1f{entry.seq}"


class AlertsPane(OptionList):
    """Shows a list of :class:`AlertEntry`; the app keeps the list, this only draws it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self._entries: dict[str, AlertEntry] = {}
        self._shown: tuple[str, ...] = ()

    def show_entries(self, entries: list[AlertEntry], show_run: bool = False) -> None:
        """Show ``entries`` (oldest first as kept) newest first; keeps the highlighted one."""
        newest = list(reversed(entries[-MAX_SHOWN:]))
        ids = tuple(option_id(e) for e in newest)
        if ids == self._shown:
            return
        keep = self.highlighted_entry()
        self._entries = {option_id(e): e for e in newest}
        self._shown = ids
        self.clear_options()
        self.add_options(Option(alert_line(e, show_run), id=option_id(e)) for e in newest)
        if keep is not None and option_id(keep) in self._entries:
            self.highlighted = ids.index(option_id(keep))
        elif ids:
            self.highlighted = 0
        self.border_subtitle = f"{len(entries)} alert{'s' if len(entries) != 1 else ''}"

    def highlighted_entry(self) -> AlertEntry | None:
        option = self.highlighted_option
        if option is None or option.id is None:
            return None
        return self._entries.get(option.id)

    def entry(self, option_id_: str | None) -> AlertEntry | None:
        return self._entries.get(option_id_ or "")
