"""The app's user actions: navigation, view keys, the command palette.

A mixin of :class:`~trainwatch.tui.app.TrainwatchApp` (kept apart so each module has one job);
every action here only changes what is shown, never the data.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from textual.app import SystemCommand
from textual.screen import Screen

from trainwatch.tui.alert_detail import AlertDetailScreen
from trainwatch.tui.chart_screen import ChartScreen
from trainwatch.tui.dashboard import Dashboard
from trainwatch.tui.help_screen import HelpScreen
from trainwatch.tui.keys import KEYS
from trainwatch.tui.run_model import AlertEntry
from trainwatch.tui.runs_screen import RunsScreen
from trainwatch.tui.view_state import ViewState

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

    _Base = TrainwatchApp
else:
    _Base = object


class ViewActions(_Base):
    # ------------------------------------------------------------------ navigation
    def open_series(self, name: str) -> None:
        if self.current is not None:
            self.push_screen(ChartScreen(self.current, name))

    def open_alert(self, entry: AlertEntry) -> None:
        def done(rule: str | None) -> None:
            if rule:
                self.mute(rule)

        self.push_screen(AlertDetailScreen(entry), done)

    def open_run(self, run_id: str) -> None:
        self.current = run_id
        if isinstance(self.screen, RunsScreen):
            self.pop_screen()
        self._mark(full=True)

    def toggle_mark(self, run_id: str) -> None:
        self.marked ^= {run_id}
        self._mark(full=True)

    def set_filter(self, text: str) -> None:
        self.view = self.view.with_filter(text)
        self._mark(full=True)

    def _set_view(self, view: ViewState) -> None:
        self.view = view
        self._mark(full=True)

    # ------------------------------------------------------------------ actions
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        if isinstance(self.screen, Dashboard):
            self.screen.open_filter()

    def action_toggle_log(self) -> None:
        screen = self.screen
        chart = getattr(screen, "focused_chart", lambda: None)() or (
            screen.first_chart() if hasattr(screen, "first_chart") else None)
        if chart is None or chart.key is None:
            return
        default = chart.spec.log_y if chart.spec is not None else False
        current = self.view.log_y(chart.key, default)
        self._set_view(self.view.toggle_log(chart.key, current))

    def action_smoothing(self, step: int) -> None:
        self._set_view(self.view.next_smoothing(step))

    def action_x_mode(self) -> None:
        self._set_view(self.view.next_x_mode())

    def action_zoom(self) -> None:
        self._set_view(self.view.toggle_zoom())

    def action_zoom_scale(self, factor: float) -> None:
        self._set_view(self.view.scale_zoom(factor))

    def action_outliers(self) -> None:
        self._set_view(self.view.toggle_robust())

    def action_mute(self) -> None:
        if isinstance(self.screen, Dashboard):
            entry = self.screen.highlighted_alert()
            if entry is None:
                self.notify("no alert to mute: m mutes the rule of the alert highlighted in the "
                            "alerts pane", timeout=4)
                return
            self.mute(entry.alert.rule)

    def action_toggle_console(self) -> None:
        if isinstance(self.screen, Dashboard):
            self.screen.toggle_console()

    def action_runs(self) -> None:
        if not isinstance(self.screen, RunsScreen):
            self.push_screen(RunsScreen())

    def action_toggle_bell(self) -> None:
        on = not (self.bell_on or self.notify_on)
        self.bell_on = self.notify_on = on
        self.notify(f"bell and desktop notifications {'on' if on else 'off'}", timeout=3)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for k in KEYS:
            yield SystemCommand(f"{k.title} ({k.shown})", k.help, partial(self.run_action, k.action))
        yield from super().get_system_commands(screen)  # type: ignore[misc]
