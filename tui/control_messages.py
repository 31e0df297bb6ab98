"""Messages from the run-control workers (launching, stopping before quitting) to the UI thread.

Immutable values posted with ``App.post_message``; like :mod:`trainwatch.tui.messages`, which
holds the ingest side's messages and :class:`~trainwatch.tui.messages.SuperviseStep`.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from trainwatch.tui.launch import LaunchPlan


@dataclass
class RunLaunched(Message):
    """The supervisor started ``plan``'s command: the app follows the new run."""

    plan: LaunchPlan
    pid: int
    note: str | None = None
    """A one-line problem that did not stop the launch (the recent list could not be saved)."""


@dataclass
class StopsDone(Message):
    """Every run the user chose to stop before quitting has ended (or could not be stopped)."""
