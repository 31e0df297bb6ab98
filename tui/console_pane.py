"""The console pane: the run's text log (``console.log``), newest at the bottom.

A small scroll view over a bounded deque of sanitised lines. (Textual's ``Log`` starts a thread
per write to measure line widths; a busy training log would start dozens a second.) tqdm's
carriage-return redraws arrive collapsed by the tailer; consecutive redraws of the same bar that
were written as separate lines are folded here too.
"""

from __future__ import annotations

import re
from collections import deque

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.events import MouseScrollUp
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from trainwatch.tui.sanitize import clean

MAX_LINE = 1000
_ERROR = re.compile(r"Traceback|Error\b|error:|FAILED|Killed|CUDA out of memory|nan\b", re.IGNORECASE)
_WARN = re.compile(r"warn(ing)?\b", re.IGNORECASE)
_BAR = re.compile(r"^(.*?)\s*\d{1,3}%\|")
"""The description before a tqdm bar (``Epoch 1:  42%|████ ...``)."""
ERROR_STYLE = Style(color="red", bold=True)
WARN_STYLE = Style(color="yellow")


def collapse_bars(lines: list[str], previous: str | None) -> tuple[list[str], bool]:
    """Fold consecutive redraws of one progress bar into the last one.

    Returns the lines to add and whether the first of them replaces ``previous``.
    """
    out: list[str] = []
    replaces = False
    for line in lines:
        m = _BAR.match(line)
        last = out[-1] if out else previous
        if m is not None and last is not None:
            lm = _BAR.match(last)
            if lm is not None and lm.group(1) == m.group(1):
                if out:
                    out[-1] = line
                else:
                    replaces = True
                    out.append(line)
                continue
        out.append(line)
    return out, replaces


class ConsolePane(ScrollView, can_focus=True):
    def __init__(self, *, max_lines: int = 2000, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._width = 0
        self.follow = True
        """Keep the newest line in view (until the user scrolls up)."""

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def clear(self) -> None:
        self._lines.clear()
        self._width = 0
        self.virtual_size = Size(0, 0)
        self.refresh()

    def add_lines(self, lines: list[str]) -> None:
        """Append raw lines (they are sanitised here)."""
        if not lines:
            return
        cleaned = [clean(ln, MAX_LINE) for ln in lines]
        new, replaces = collapse_bars(cleaned, self._lines[-1] if self._lines else None)
        if replaces and self._lines:
            self._lines.pop()
        self._lines.extend(new)
        self._width = max(self._width, max(cell_len(ln) for ln in new))
        self.virtual_size = Size(self._width, len(self._lines))
        if self.follow:
            self._follow_end()
        self.refresh()

    def _follow_end(self) -> None:
        # forced: until the next layout a pane that has just started to overflow has no
        # scrollbar yet, and Textual refuses to scroll it (the newest lines stayed out of view)
        self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        self.call_after_refresh(self._sync_scrollbar)

    def _sync_scrollbar(self) -> None:
        # Textual moves the thumb only when the scrollbar is already shown: after the layout
        # that adds it, put the thumb where the (forced) scroll went
        if self.show_vertical_scrollbar:
            self.vertical_scrollbar.position = self.scroll_y

    def on_resize(self) -> None:
        if self.follow:  # a new size moves the end: stay on it
            self._follow_end()

    # the user scrolling up stops following the end; scrolling back down resumes it
    def action_scroll_up(self) -> None:
        self.follow = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.follow = False
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.follow = False
        super().action_scroll_home()

    def action_scroll_down(self) -> None:
        super().action_scroll_down()
        self.follow = self.scroll_target_y >= self.max_scroll_y

    def action_page_down(self) -> None:
        super().action_page_down()
        self.follow = self.scroll_target_y >= self.max_scroll_y

    def action_scroll_end(self) -> None:
        self.follow = True
        super().action_scroll_end()

    def on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        # Textual also runs Widget's own handler (it walks the MRO): only note it here
        self.follow = False

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base = self.rich_style
        i = scroll_y + y
        if i >= len(self._lines):
            return Strip.blank(width, base)
        text = self._lines[i]
        style = base
        if _ERROR.search(text):
            style = base + ERROR_STYLE
        elif _WARN.search(text):
            style = base + WARN_STYLE
        strip = Strip([Segment(text, style)])
        return strip.crop_extend(scroll_x, scroll_x + width, base)
