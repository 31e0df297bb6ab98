"""One alert in full: what happened, the evidence, the ranked causes and what to try."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from trainwatch.humanize import fmt_count, fmt_num
from trainwatch.tui.alerts_pane import SEVERITY_ICON
from trainwatch.tui.run_model import AlertEntry
from trainwatch.tui.sanitize import clean, markup_safe, safe_text

MAX_EVIDENCE_ITEMS = 40


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return fmt_num(v, 4) if isinstance(v, float) or abs(v) >= 100_000 else str(v)
    if isinstance(v, (list, tuple)):
        items = [_value(x) for x in list(v)[:8]]
        return "[" + ", ".join(items) + (", …" if len(v) > 8 else "") + "]"
    if isinstance(v, Mapping):  # e.g. nan_inf's {"loss": "NaN"}: read as loss=NaN, not a repr
        pairs = [f"{clean(str(k), 40)}={_value(x)}" for k, x in list(v.items())[:8]]
        return ", ".join(pairs) + (", …" if len(v) > 8 else "")
    return clean(str(v), 120)


def _wrapped(text: str, style: str = "") -> Text:
    """Cleaned text that wraps at the box edge: a cause or a fix cut with "…" cannot be read,
    and this screen is the one place where the whole sentence is shown."""
    return Text(clean(text), style=style, end="")


def detail_renderable(entry: AlertEntry) -> Table:
    """Everything about one alert as one Rich table (no markup parsing anywhere)."""
    a = entry.alert
    icon, style = SEVERITY_ICON.get(a.severity, ("●", ""))
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(style="bold", no_wrap=True, width=11)
    grid.add_column(ratio=1)
    grid.add_row(Text(f"{icon} {a.severity}", style=style), _wrapped(a.message, style="bold"))
    where = f"rule {clean(a.rule)} · step {fmt_count(a.step)}"
    if a.metric:
        where += f" · metric {clean(a.metric, 60)}"
    if not entry.live:
        where += " · found in history"
    grid.add_row("", Text(where, style="dim"))
    if a.evidence:
        grid.add_row("", "")
        ev = Table.grid(padding=(0, 2))
        ev.add_column(style="cyan", no_wrap=True)
        ev.add_column()
        for k, v in list(a.evidence.items())[:MAX_EVIDENCE_ITEMS]:
            ev.add_row(safe_text(str(k), max_len=40), Text(_value(v)))
        grid.add_row("Evidence", ev)
    if a.causes:
        grid.add_row("", "")
        causes = Table.grid(padding=(0, 1))
        causes.add_column(no_wrap=True, width=12)
        causes.add_column(justify="right", width=4)
        causes.add_column(ratio=1)
        for c in a.causes:
            conf = c.confidence if math.isfinite(c.confidence) else 0.0
            conf = min(max(conf, 0.0), 1.0)
            bar = "█" * round(conf * 10) + "░" * (10 - round(conf * 10))
            causes.add_row(Text(bar, style="magenta"), f"{conf:.0%}", _wrapped(c.cause))
        grid.add_row("Causes", causes)
    if a.fixes:
        grid.add_row("", "")
        fixes = Table.grid(padding=(0, 1))
        fixes.add_column(style="green", no_wrap=True)
        fixes.add_column(ratio=1)
        for i, f in enumerate(a.fixes, 1):
            fixes.add_row(f"{i}.", _wrapped(f))
        grid.add_row("Try", fixes)
    return grid


class AlertDetailScreen(ModalScreen[str | None]):
    """Dismissed with the rule id when the user mutes it, else None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "dismiss(None)", "Close"),
        Binding("m", "mute", "Mute rule"),
        # a dialog hides the app's keys (Textual stops the binding chain at a modal screen)
        Binding("question_mark", "app.help", "Help", show=False),
    ]

    def __init__(self, entry: AlertEntry) -> None:
        super().__init__()
        self.entry = entry

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="alert-detail"):
            yield Static(detail_renderable(self.entry), id="alert-body")

    def on_mount(self) -> None:
        box = self.query_one("#alert-detail")
        box.border_title = f"Alert · {markup_safe(self.entry.alert.rule, 40)}"
        box.border_subtitle = "m mute this rule · ? keys · esc close"

    def action_mute(self) -> None:
        self.dismiss(self.entry.alert.rule)
