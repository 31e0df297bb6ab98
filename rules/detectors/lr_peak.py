"""The highest learning rate seen so far, at any record: what "the LR is at its floor" is judged
against when ``plateau`` diagnoses a plateau it has found.

Most frames never ask (an alert is rare), so a frame's LR points are kept and their highest taken
only when asked, or every 64 frames, or at once for a big frame.
"""

from __future__ import annotations

import numpy as np

from trainwatch.rules.engine.base import Frame, Points


class LrPeak:
    """The highest LR seen so far (at or before a record). The frames' highest are taken when an
    alert asks (most frames never do), from the LR points kept until then."""

    _KEEP = 64
    """Frames whose LR points are kept at most (then their highest is taken)."""
    _BIG = 256
    """Points past which a frame's highest is taken at once (one reduction is cheap next to
    the frame's other work; live frames are a few points)."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._pending: list[Points] = []
        """The LR points of the frames since the peak was last brought up to date."""

    def _settle(self) -> None:
        pending = self._pending
        if not pending:
            return
        # (the frames' finite points, cached on them, in one array: one reduction for up to
        # _KEEP frames, where one per frame cost ~3 us each)
        vals = [p.finite().values for p in pending]
        v = vals[0] if len(vals) == 1 else np.concatenate(vals)
        if v.shape[0]:  # (the ufunc's own reduction: ndarray.max adds a Python wrapper)
            self.peak = max(self.peak, float(np.maximum.reduce(v)))
        pending.clear()

    def at(self, frame: Frame, pos: int) -> float:
        self._settle()
        pts = frame.role("lr")
        if pts is None or not len(pts):
            return self.peak
        fin = pts.finite()  # (cached on the frame's points: other rules ask for it too)
        k = int(fin.pos.searchsorted(pos, side="right"))
        return max(self.peak, float(fin.values[:k].max())) if k else self.peak

    def end_frame(self, frame: Frame) -> None:
        pts = frame.role("lr")
        if pts is not None and len(pts):
            self._pending.append(pts)
            # a big frame is settled at once: its points may be views into a whole joined
            # backlog (trainwatch.batch.concat_batches), which 64 of them would keep alive
            if len(self._pending) >= self._KEEP or len(pts) > self._BIG:
                self._settle()
