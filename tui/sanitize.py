"""Make untrusted text safe to put on the terminal.

Metric names, console lines, alert messages and event fields come from files that anyone (or any
crashing script) may have written. The core's :func:`~trainwatch.safe_text.clean` takes out what a
terminal would act on; passed to Rich or Textual as markup they could still restyle or break the
UI (``[bold]``, ``[link=...]``). Everything such a string touches on its way to the screen goes
through :func:`clean` (for :class:`rich.text.Text`, which has no markup) or :func:`markup_safe`
(for strings that end up parsed as markup).
"""

from __future__ import annotations

from rich.text import Text
from textual.markup import escape as _escape_markup

from trainwatch.safe_text import clean

__all__ = ["clean", "markup_safe", "safe_text"]


def markup_safe(text: str, max_len: int | None = None) -> str:
    """:func:`clean` and then escape Rich/Textual markup, for strings embedded in markup."""
    return _escape_markup(clean(text, max_len))


def safe_text(text: str, style: str = "", max_len: int | None = None) -> Text:
    """A :class:`~rich.text.Text` (never parsed as markup) holding the cleaned string."""
    return Text(clean(text, max_len), style=style, no_wrap=True, end="")
