"""When the app redraws: what changed since the last frame, and how often a frame may come.

A mixin of :class:`~trainwatch.tui.app.TrainwatchApp`. Every message that changes what is shown
marks it (:meth:`Redraws._mark`); one redraw later takes everything marked since and hands it to
the data screens. A lone record is drawn at once (``max_fps`` at most), a stream at
:data:`STREAM_FPS`; the time each frame reached the screen is kept for the benches.

The state lives in ``TrainwatchApp.__init__`` with the rest of the app's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

    _Base = TrainwatchApp
else:
    _Base = object

STREAM_BATCHES = 5
"""More live batches than this within a second is a stream. A writer flushing up to five times
a second is not one: each of its records is drawn at once. The reader merges reads closer than
0.1 s, so a stream arrives as about ten batches a second however fast it is written."""
STREAM_FPS = 2.5
"""Frames per second while data streams in (a frame costs ~10 ms of CPU at 120x40)."""


@dataclass
class Dirty:
    """What changed since the last redraw."""

    full: bool = False
    changed: set[str] = field(default_factory=set)
    alerts: bool = False
    console: list[str] = field(default_factory=list)
    reset_console: bool = False
    drawn_steps: list[tuple[float, int | None]] = field(default_factory=list)


class Redraws(_Base):
    def _mark(self, *, full: bool = False) -> None:
        """Something changed: draw soon: at once (``max_fps`` at most), or while data streams
        in (:data:`STREAM_BATCHES`) at :data:`STREAM_FPS`, so a fast writer costs a few frames
        a second, not one per read."""
        self._dirty.full |= full
        if self._flush_pending:
            return
        self._flush_pending = True
        now = time.monotonic()
        recent = sum(1 for t in self._arrivals if now - t < 1.0)
        self._streaming = recent > STREAM_BATCHES
        fps = (min(self.config.max_fps, STREAM_FPS) if self._streaming and not full
               else self.config.max_fps)
        delay = self._last_flush + 1.0 / fps - now
        if delay <= 0:
            self.call_later(self._redraw)  # after the messages already queued: they coalesce
        else:
            self._flush_timer = self.set_timer(delay, self._redraw)

    def _redraw(self) -> None:
        """Draw everything marked since the last redraw.

        Not named ``_flush``: Textual's ``App._flush(stderr)`` is what a ``print(flush=True)``
        inside the running app calls, and overriding it broke every such print."""
        self._flush_pending = False
        self._flush_timer = None
        self._last_flush = time.monotonic()
        dirty, self._dirty = self._dirty, Dirty()
        for screen in self._data_screens():
            screen.refresh_data(full=dirty.full, changed=dirty.changed, alerts=dirty.alerts,
                                console=dirty.console, reset_console=dirty.reset_console,
                                streaming=self._streaming)
        model = self.current_model()
        has_data = model is not None and model.last_step is not None
        step: int | None = None
        record = bool(dirty.drawn_steps) or (has_data and not self.first_frame.is_set())
        if record:
            steps = [s for _t, s in dirty.drawn_steps] or [model.last_step if model else None]
            step = max((s for s in steps if s is not None), default=None)
        if record:
            self.call_after_refresh(self._frame_drawn, step)

    def _frame_drawn(self, step: int | None) -> None:
        """After the frame reached the screen: note what it showed, and when."""
        self.frames.append((time.monotonic(), step))
        if len(self.frames) > 10_000:
            del self.frames[:5000]
        self.first_frame.set()

    def _data_screens(self) -> Iterable[Any]:
        """The top screen and, under a modal, the screen it covers."""
        for screen in reversed(self.screen_stack):
            if hasattr(screen, "refresh_data"):
                yield screen
                return

    def settled(self) -> bool:
        """History loaded and every change drawn: what ``--once`` and snapshots wait for."""
        return (self.loaded.is_set() and not self._flush_pending
                and all(getattr(s, "settled", lambda: True)() for s in self._data_screens()))
