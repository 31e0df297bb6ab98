"""Text from someone else's file, made safe to print on one terminal line.

Metric names, console lines and paths come from files trainwatch does not control: a colour code
in a captured log, a name with a newline, a stray ``ESC [2J`` that would clear the screen. What
the headless commands print passes through :func:`one_line`; the JSON outputs keep the exact text
(``json.dumps`` escapes it).
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clears
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks (BEL or ST ends it)
    r"|\x1b[@-Z\\-_]"  # any other two-byte escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """``text`` without escape sequences, tabs as spaces, its other control characters (newlines
    included) as ``?``: a colour code is noise to drop, a bare control character a fact to see."""
    if not _CONTROL.search(text):
        return text  # the usual case: one scan, no copy
    return _CONTROL.sub("?", _ESCAPE.sub("", text).replace("\t", " "))
