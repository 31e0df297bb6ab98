"""Getting a person's attention for an error alert: the terminal bell and a desktop notification.

The notification is an escape sequence the terminal turns into a system notification: OSC 9
(iTerm2, WezTerm, kitty, Windows Terminal, foot) and OSC 777 (rxvt, Konsole, GNOME VTE). Inside
tmux both must be wrapped in a DCS passthrough (tmux needs ``allow-passthrough on``), or tmux
eats them. The text comes from a log, so it is stripped of every control character first: a
BEL or ESC inside it would end the sequence early and turn the rest into terminal input.
"""

from __future__ import annotations

import os
import re

from trainwatch.tui.sanitize import clean

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f;]")
MAX_TEXT = 200


def notification_sequences(title: str, body: str, tmux: bool | None = None) -> str:
    """OSC 9 and OSC 777 sequences carrying ``title: body`` (wrapped for tmux when inside it)."""
    t = _UNSAFE.sub(" ", clean(title, 60))
    b = _UNSAFE.sub(" ", clean(body, MAX_TEXT))
    seqs = [f"\x1b]9;{t}: {b}\x07", f"\x1b]777;notify;{t};{b}\x07"]
    if tmux is None:
        tmux = bool(os.environ.get("TMUX"))
    if tmux:
        # DCS tmux; <sequence with each ESC doubled> ST
        seqs = ["\x1bPtmux;" + s.replace("\x1b", "\x1b\x1b") + "\x1b\\" for s in seqs]
    return "".join(seqs)
