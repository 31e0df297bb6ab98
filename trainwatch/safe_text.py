"""Text from someone else's file, made safe to put on a terminal.

Metric names, console lines, alert messages, event fields and paths come from files that anyone
(or any crashing script) may have written. Printed raw they could move the cursor, clear the
screen, retitle the window, set the clipboard (OSC 52) or hide text with bidi overrides.
:func:`clean` is the one cleaning for every way trainwatch shows them: what the headless
commands print, and the TUI (``trainwatch.tui.sanitize`` adds the escaping of Rich markup). The
JSON outputs keep the exact text (``json.dumps`` escapes it).
"""

from __future__ import annotations

import re

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
    """``text`` with escape sequences removed and control characters dropped: one line.

    Tabs become a space and newlines a visible ``⏎`` (one record, one alert, is one line on the
    screen). ``max_len`` cuts the result with an ellipsis, so one runaway line cannot cost a
    whole frame.
    """
    if not text.isprintable():
        text = _ESCAPE_SEQ.sub("", text)
        text = text.replace("\t", " ").replace("\r\n", "⏎").replace("\n", "⏎")
        text = _CONTROL.sub("", text)
    if max_len is not None and len(text) > max_len:
        text = text[: max(0, max_len - 1)] + "…"
    return text
