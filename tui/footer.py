"""The footer of every full screen: Textual's, with ``? Help`` and ``q Quit`` first.

Textual lists the focused widget's keys, then the screen's, then the app's, so the two keys a
newcomer needs came last and were the first cut off at 80 columns. Moving them to the front keeps
them on screen at any width; the keys that fall off the right edge are still listed by ``?``.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

FIRST = ("help", "quit")
"""Actions shown before every other key, in this order."""


class KeyFooter(Footer):
    def compose(self) -> ComposeResult:
        items = list(super().compose())

        def rank(item: object) -> int:
            action = item.action.removeprefix("app.") if isinstance(item, FooterKey) else ""
            return FIRST.index(action) if action in FIRST else len(FIRST)

        yield from sorted(items, key=rank)  # stable: the other keys keep Textual's order
