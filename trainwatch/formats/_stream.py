"""What every ``stream`` reader holds (TensorBoard event files, W&B logs): its source, clock and
stream state, and a reset that starts its framing over."""

from __future__ import annotations

import time as _time
from collections.abc import Callable

from trainwatch.builder import BatchBuilder, StreamState


class StreamReaderBase:
    """Base of a ``stream`` reader.

    Subclasses set ``format``, implement ``feed`` and :meth:`_init_stream` (their framing state,
    set at construction and again on :meth:`reset`).
    """

    kind = "stream"
    format = "stream"

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        self.source = source
        self.clock = clock
        self.state = StreamState()
        self._init_stream()

    def _init_stream(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        self.state.reset()
        self._init_stream()

    def _builder(self) -> BatchBuilder:
        """A builder for one batch of this stream."""
        return BatchBuilder(self.source, self.state, self.format, self.clock)
