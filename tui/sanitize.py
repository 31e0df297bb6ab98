"""Make untrusted text safe to put on the terminal.

Metric names, console lines, alert messages and event fields come from files that anyone (or any
crashing script) may have written. Printed raw they could move the cursor, retitle the window,
set the clipboard (OSC 52) or hide text with bidi overrides; passed to Rich or Textual as markup
they could restyle or break the UI (``[bold]``, ``[link=...]``). Everything such a string touches
on its way to the screen goes through :func:`clean` (for :class:`rich.text.Text`, which has no
markup) or :func:`markup_safe` (for strings that end up parsed as markup).
"""

from __future__ import annotations

import re

from rich.text import Text
from textual.markup import escape as _escape_markup

_ESCAPE_SEQ = re.compile(
    r"""
    \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?   # OSC ... BEL or ST (title, clipboard, hyperlinks)
    | \x1b[P^_X][^\x1b]*(?:\x1b\\)?      # DCS / PM / APC / SOS strings
    | \x1b\[[0-?]*[ -/]*[@-~]            # CSI: colours, cursor moves, erase
    | \x1b[ -/]*[0-~]                    # two-byte escapes (ESC c resets the terminal)
    | \x9b[0-?]*[ -/]*[@-~]              # 8-bit CSI
    | \x9d[^\x07\x9c]*[\x07\x9c]?        # 8-bit OSC
    """,
    re.VERBOSE,
)
# C0 and C1 controls, DEL, bidi overrides/isolates and the line/paragraph separators: none of
# them has a visible glyph, and each can reorder or hide what a user reads.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def clean(text: str, max_len: int | None = None) -> str:
    """``text`` with escape sequences removed and control characters dropped.

    Tabs become a space and newlines a visible ``⏎`` (one record is one screen line). ``max_len``
    cuts the result with an ellipsis, so one runaway line cannot cost a whole frame.
    """
    if not text.isprintable():
        text = _ESCAPE_SEQ.sub("", text)
        text = text.replace("\t", " ").replace("\r\n", "⏎").replace("\n", "⏎")
        text = _CONTROL.sub("", text)
    if max_len is not None and len(text) > max_len:
        text = text[: max(0, max_len - 1)] + "…"
    return text


def markup_safe(text: str, max_len: int | None = None) -> str:
    """:func:`clean` and then escape Rich/Textual markup, for strings embedded in markup."""
    return _escape_markup(clean(text, max_len))


def safe_text(text: str, style: str = "", max_len: int | None = None) -> Text:
    """A :class:`~rich.text.Text` (never parsed as markup) holding the cleaned string."""
    return Text(clean(text, max_len), style=style, no_wrap=True, end="")
