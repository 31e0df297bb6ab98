"""Alerts as they reach the app: kept per run, rung as a bell or desktop notification, muted.

A mixin of :class:`~trainwatch.tui.app.TrainwatchApp`. The rules run on the ingest thread; the
alerts they raise arrive inside messages and are filed here, on the UI thread. Only live error
alerts ring (an alert found while reading history is old news), at most once per
:data:`RING_EVERY_S`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from trainwatch.tui.notify import notification_sequences
from trainwatch.tui.run_model import AlertEntry, RunModel

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

    _Base = TrainwatchApp
else:
    _Base = object

RING_EVERY_S = 5.0
"""At most one bell / desktop notification per this many seconds."""


class AlertFeed(_Base):
    def _add_alerts(self, model: RunModel, alerts: tuple, live: bool) -> None:
        if not alerts:
            return
        new = model.add_alerts(alerts, live, self._seq)
        self._seq += len(new)
        self._dirty.alerts = True
        self._ring([e for e in new if e.live])

    def _ring(self, entries: list[AlertEntry]) -> None:
        errors = [e for e in entries if e.alert.severity == "error" and e.alert.rule not in self.muted]
        if not errors or not (self.bell_on or self.notify_on):
            return
        now = time.monotonic()
        if now - self._last_ring < RING_EVERY_S:
            return
        self._last_ring = now
        a = errors[-1].alert
        text = f"{a.rule} at step {a.step}: {a.message}"
        if self.bell_on:
            self.bells += 1
            self.bell()
        if self.notify_on:
            self.sent_notifications.append(text)
            if not self.is_headless and self._driver is not None:
                self._driver.write(notification_sequences(f"trainwatch {errors[-1].run_id}", text))

    def visible_alerts(self) -> list[AlertEntry]:
        runs = [self.current, *sorted(self.marked)] if self.current else []
        out = [e for rid in dict.fromkeys(runs) if rid in self.models
               for e in self.models[rid].alerts if e.alert.rule not in self.muted]
        return sorted(out, key=lambda e: e.seq)

    def mute(self, rule: str) -> None:
        self.muted.add(rule)
        if self._ingest is not None:
            for rid in self.models:
                self._ingest.mute(rid, rule)
        self.notify(f"muted {rule} for this session", timeout=4)
        self._mark(full=True)
