"""How the user has set up the view: smoothing, x-axis, zoom, outliers, log axes, filter.

A plain value owned by the app and shared by its screens; each key press makes a new one
(``dataclasses.replace``), so "did the view change" is an identity or equality check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

from trainwatch.tui.smoothing import SMOOTHING_STEPS

XMode = Literal["step", "relative", "wall"]
X_MODES: tuple[XMode, ...] = ("step", "relative", "wall")
X_MODE_LABEL = {"step": "step", "relative": "time since start", "wall": "wall clock"}
ZOOM_DEFAULT = 1000
"""Steps shown by ``z`` at first; ``[`` and ``]`` halve and double it."""
LOG_BY_DEFAULT = frozenset({"grad_norm"})
"""Roles drawn on a log axis until the user says otherwise (norms span decades)."""


@dataclass(frozen=True)
class ViewState:
    smoothing: float = 0.0
    x_mode: XMode = "step"
    zoom: int | None = None
    """Show only the last ``zoom`` steps; None shows everything."""
    zoom_size: int = ZOOM_DEFAULT
    robust: bool = False
    """Fit y-ranges to the bulk of the data, clipping outliers at the edge."""
    log_overrides: frozenset[tuple[str, bool]] = frozenset()
    """(chart key, log on?) the user chose with ``y``; other charts use their default."""
    filter_text: str = ""
    filter_error: str | None = None
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------------ queries
    def log_y(self, key: str, default: bool) -> bool:
        for k, v in self.log_overrides:
            if k == key:
                return v
        return default

    def matches(self, name: str) -> bool:
        return self._pattern is None or self._pattern.search(name) is not None

    @property
    def filtering(self) -> bool:
        return self._pattern is not None

    # ------------------------------------------------------------------ changes
    def next_smoothing(self, step: int = 1) -> ViewState:
        steps = SMOOTHING_STEPS
        i = min(range(len(steps)), key=lambda j: abs(steps[j] - self.smoothing))
        return replace(self, smoothing=steps[(i + step) % len(steps)])

    def next_x_mode(self) -> ViewState:
        return replace(self, x_mode=X_MODES[(X_MODES.index(self.x_mode) + 1) % len(X_MODES)])

    def toggle_zoom(self) -> ViewState:
        return replace(self, zoom=None if self.zoom is not None else self.zoom_size)

    def scale_zoom(self, factor: float) -> ViewState:
        size = int(min(max(self.zoom_size * factor, 10), 10**9))
        return replace(self, zoom_size=size, zoom=size)

    def toggle_robust(self) -> ViewState:
        return replace(self, robust=not self.robust)

    def toggle_log(self, key: str, default: bool) -> ViewState:
        now = self.log_y(key, default)
        rest = frozenset(kv for kv in self.log_overrides if kv[0] != key)
        return replace(self, log_overrides=rest | {(key, not now)})

    def with_filter(self, text: str) -> ViewState:
        """A new state filtering by the regex ``text`` (case-insensitive); a bad regex keeps
        the previous pattern and records the error to show."""
        if not text:
            return replace(self, filter_text="", filter_error=None, _pattern=None)
        try:
            pattern = re.compile(text, re.IGNORECASE)
        except re.error as e:
            return replace(self, filter_text=text, filter_error=f"bad regex: {e}")
        return replace(self, filter_text=text, filter_error=None, _pattern=pattern)

    def describe(self) -> str:
        """A short line for chart subtitles: what differs from the plain view."""
        parts = []
        if self.smoothing:
            parts.append(f"smooth {self.smoothing:g}")
        if self.zoom is not None:
            parts.append(f"last {self.zoom:,} steps")
        if self.robust:
            parts.append("outliers clipped")
        if self.x_mode != "step":
            parts.append(X_MODE_LABEL[self.x_mode])
        return " · ".join(parts)
