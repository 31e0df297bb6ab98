"""``trainwatch PATH --once``: read what the files hold, render one screen as text, exit.

The same app as the live TUI (same factory, same widgets), run headless at a fixed size. Useful
in CI logs, over a pipe, and as the cheapest way to look at a run from a script.
"""

from __future__ import annotations

import time
from dataclasses import replace

from textual.app import App
from textual.pilot import Pilot

from trainwatch.tui.app import make_app
from trainwatch.tui.config import AppConfig

LOAD_TIMEOUT_S = 30.0


def screen_text(app: App) -> str:
    """The app's current screen as plain text, one line per terminal row."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    rows = ["".join(seg.text for strip in line for seg in strip) for line in update.strips]
    return "\n".join(row.rstrip() for row in rows) + "\n"


def render_once(config: AppConfig, width: int = 120, height: int = 40) -> str:
    """Render one screen of ``config.path`` at ``width`` x ``height`` and return it as text."""
    app = make_app(replace(config, once=True, bell=False, notify=False))
    out: list[str] = []

    async def capture(pilot: Pilot) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not app.settled() and time.monotonic() < deadline:
            await pilot.pause(0.02)
        await pilot.pause()  # one more refresh: the last changes reach the screen
        out.append(screen_text(app))
        app.exit()

    app.run(headless=True, size=(width, height), auto_pilot=capture)
    return out[0] if out else ""
