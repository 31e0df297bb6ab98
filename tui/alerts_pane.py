"""The alerts pane: newest first, coloured by severity; enter opens the evidence.

Each alert is two screen lines: severity glyph, rule, step (and metric), then the message, dimmed.
The pane's CSS (``text-wrap: nowrap; text-overflow: ellipsis``) cuts each line to the width with an
ellipsis. Rows are built once per alert and kept, so a new alert costs one new row, not a rebuild of
every row shown.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from trainwatch.humanize import fmt_count
from trainwatch.tui.run_model import AlertEntry
from trainwatch.tui.sanitize import clean

SEVERITY_ICON = {"error": ("✖", "bold red"), "warning": ("▲", "bold yellow"), "info": ("●", "blue")}
MAX_SHOWN = 200
"""Newest alerts shown; older ones are counted in a note (the detail screen stays one key away)."""
_OLDER_ID = "\x1folder"
"""Option id of the "+N older" note (no alert id starts with the separator)."""


def alert_line(entry: AlertEntry, show_run: bool = False) -> Text:
    """The two-line prompt of one alert; every untrusted string goes through :func:`clean`."""
    a = entry.alert
    icon, style = SEVERITY_ICON.get(a.severity, ("●", ""))
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    text.append(f"{icon} ", style=style)
    text.append(clean(a.rule, 40), style=style)
    text.append(f" step {fmt_count(a.step)}", style="dim")
    if a.metric:
        text.append(" · " + clean(a.metric, 60), style="dim")
    if show_run:
        text.append(" · " + clean(entry.run_id, 20), style="dim italic")
    # clean() turns newlines into "⏎", so the message is exactly the second line
    text.append("\n  " + clean(a.message, 300), style="dim")
    return text


def option_id(entry: AlertEntry) -> str:
    return f"{entry.run_id}\x1f{entry.seq}"


def older_note(hidden: int) -> Text:
    return Text(f"+{hidden:,} older alert{'s' if hidden != 1 else ''} not shown", style="dim italic",
                no_wrap=True, overflow="ellipsis", end="")


class AlertsPane(OptionList):
    """Shows a list of :class:`AlertEntry`; the app keeps the list, this only draws it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self._entries: dict[str, AlertEntry] = {}
        """Shown alerts by option id."""
        self._rows: dict[str, Option] = {}
        """The built row of each shown alert, reused while it stays shown."""
        self._shown: tuple[str, ...] = ()
        """Option ids of the shown alerts, newest first."""
        self._show_run = False
        """Whether the rows name their run (they are rebuilt when this changes)."""
        self._hidden = 0
        """Alerts older than the newest :data:`MAX_SHOWN`, counted in the note."""
        self.rows_built = 0
        """Alert rows built since creation (tests assert one new alert builds one row)."""

    def show_entries(self, entries: Sequence[AlertEntry], show_run: bool = False) -> None:
        """Show ``entries`` (oldest first as kept) newest first; keeps the highlighted one."""
        newest = list(reversed(entries[-MAX_SHOWN:]))
        ids = tuple(option_id(e) for e in newest)
        hidden = len(entries) - len(newest)
        self.border_subtitle = f"{len(entries)} alert{'s' if len(entries) != 1 else ''}"
        if ids == self._shown and hidden == self._hidden and show_run == self._show_run:
            return
        if show_run != self._show_run:
            self._rows.clear()
            self._show_run = show_run
        keep = self.highlighted_entry()
        rows: dict[str, Option] = {}
        for oid, entry in zip(ids, newest):
            row = self._rows.get(oid)
            if row is None:
                row = Option(alert_line(entry, show_run), id=oid)
                self.rows_built += 1
            rows[oid] = row
        self._rows = rows
        self._entries = {oid: e for oid, e in zip(ids, newest)}
        self._shown = ids
        self._hidden = hidden
        options: list[Option] = list(rows.values())
        if hidden:
            options.append(Option(older_note(hidden), id=_OLDER_ID, disabled=True))
        # OptionList only appends, and newest-first needs the new rows on top, so the list is
        # re-set from the kept rows: each keeps its rendered visual and its measured height, so
        # this is bookkeeping over at most MAX_SHOWN rows, not a rebuild of them.
        self.set_options(options)
        # set_options scrolled to the top; highlighting scrolls just enough to show the kept alert
        if keep is not None and option_id(keep) in self._entries:
            self.highlighted = ids.index(option_id(keep))
        elif ids:
            self.highlighted = 0

    def highlighted_entry(self) -> AlertEntry | None:
        option = self.highlighted_option
        if option is None or option.id is None:
            return None
        return self._entries.get(option.id)

    def entry(self, option_id_: str | None) -> AlertEntry | None:
        return self._entries.get(option_id_ or "")
