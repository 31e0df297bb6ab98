"""A run's console text that arrives in pieces inside a metrics stream (W&B's output records),
turned into whole lines as a terminal shows them, numbered from 1 as a ``console.log`` would be.
"""

from __future__ import annotations

from trainwatch.tailer import MAX_LINE_BYTES, drop_overwritten, terminal_text


class ConsoleText:
    """Collects text pieces per output stream (stdout, stderr) and hands on completed lines.

    A piece need not end a line (a print is often two pieces: the text, then its newline), so
    each stream keeps its unfinished line apart: stderr never lands inside a stdout line. A
    progress bar redrawn with ``\\r`` keeps only its current text while it waits for its newline.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._partial: dict[int, bytes] = {}
        self._lines: list[str] = []
        self._next = 1
        """Number of the next line handed on."""

    def add(self, stream: int, text: bytes) -> None:
        buf = self._partial.pop(stream, b"") + text
        if b"\n" in text:
            *whole, buf = buf.split(b"\n")
            self._lines.extend(terminal_text(line) for line in whole)
        buf = drop_overwritten(buf)
        if len(buf) > self.max_line_bytes:  # a runaway line: hand on what there is
            self._lines.append(terminal_text(buf))
            buf = b""
        if buf:
            self._partial[stream] = buf

    def flush(self) -> None:
        """The writer is done: its unfinished lines are whole."""
        for stream in sorted(self._partial):
            self._lines.append(terminal_text(self._partial[stream]))
        self._partial.clear()

    def take(self) -> tuple[tuple[str, ...], int] | None:
        """The lines completed since the last call and the number of the first; None if none."""
        if not self._lines:
            return None
        lines, self._lines = tuple(self._lines), []
        first = self._next
        self._next += len(lines)
        return lines, first
