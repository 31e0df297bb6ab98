"""Episodes, not floods: when an anomalous signal turns into alerts.

An episode starts at the first anomalous point while the rule is *armed* and outside its
cooldown; that point fires. It may escalate once (to error) when it persists or turns severe.
It ends, and the rule re-arms, after ``rearm`` consecutive normal points. Anomalous points
during the cooldown are ignored (they neither fire nor start an episode).

The same object serves point-by-point callers (:meth:`hit`, :meth:`normal`) and vectorised ones
(:meth:`scan` over a mask, :meth:`run` over a run of anomalous points): a run is handled in a few
array operations however long it is, so a permanent fault costs nothing per point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

START = "start"
ESCALATE = "escalate"
START_ESCALATED = "start_escalated"
"""An episode whose first point already escalates it (severe at once): one alert, an error."""


@dataclass
class Episode:
    rearm: int = 1
    """Consecutive normal points that end an episode."""
    cooldown: int = 0
    """Steps after an episode's start before another may start."""
    persist: int = 0
    """Anomalous points within one episode that escalate it (0: never by persistence)."""
    active: bool = False
    count: int = 0
    """Anomalous points so far in the current episode."""
    quiet: int = 0
    """Normal points since the last anomalous one (while active)."""
    escalated: bool = False
    last_start: int | None = None
    """Step of the last episode start (for the cooldown)."""

    def reset(self) -> None:
        """Forget everything (a new segment: steps restart, so the cooldown cannot carry)."""
        self.active = False
        self.count = 0
        self.quiet = 0
        self.escalated = False
        self.last_start = None

    def normal(self, n: int = 1) -> None:
        if n <= 0 or not self.active:
            return
        self.quiet += n
        if self.quiet >= self.rearm:
            self.active = False

    def _may_start(self, step: int) -> bool:
        return self.last_start is None or step - self.last_start >= self.cooldown

    def hit(self, step: int, severe: bool = False) -> str | None:
        """One anomalous point. Returns START, ESCALATE, START_ESCALATED or None."""
        out = self._one(int(step), bool(severe))
        return out[-1][1] if out else None

    def run(self, steps: np.ndarray, severe: np.ndarray | None = None) -> list[tuple[int, str]]:
        """A run of consecutive anomalous points; returns (index in the run, kind).

        A start that escalates on the same point is returned once, as START_ESCALATED.
        """
        n = int(steps.shape[0])
        if n == 0:
            return []
        if n == 1:  # most runs are one point: Python numbers, not six array operations
            return self._one(int(steps[0]), severe is not None and bool(severe[0]))
        return self._run_arrays(steps, severe)

    def _one(self, step: int, severe: bool) -> list[tuple[int, str]]:
        """:meth:`run` for a single point (the same decisions, on Python numbers)."""
        out: list[tuple[int, str]] = []
        if not self.active:
            if not self._may_start(step) and self.cooldown > 0:
                return out
            self.active = True
            self.count = 0
            self.escalated = False
            self.last_start = step
            out.append((0, START))
        self.quiet = 0
        if not self.escalated and (severe or 0 < self.persist <= self.count + 1):
            self.escalated = True
            if out:
                out[-1] = (0, START_ESCALATED)
            else:
                out.append((0, ESCALATE))
        self.count += 1
        return out

    def _run_arrays(self, steps: np.ndarray, severe: np.ndarray | None) -> list[tuple[int, str]]:
        """:meth:`run` for any number of points, in a few array operations."""
        n = int(steps.shape[0])
        out: list[tuple[int, str]] = []
        k = 0
        if not self.active:
            if self.last_start is None or self.cooldown <= 0:
                k = 0
            else:
                ok = steps - self.last_start >= self.cooldown
                if not ok.any():
                    return []
                k = int(np.argmax(ok))
            self.active = True
            self.count = 0
            self.escalated = False
            self.last_start = int(steps[k])
            out.append((k, START))
        self.quiet = 0
        if not self.escalated:
            cands = []
            if self.persist > 0:
                i_p = k + max(self.persist - self.count - 1, 0)
                if i_p < n:
                    cands.append(i_p)
            if severe is not None:
                sv = np.flatnonzero(severe[k:])
                if sv.shape[0]:
                    cands.append(k + int(sv[0]))
            if cands:
                i = min(cands)
                self.escalated = True
                if out and out[-1][0] == i:
                    out[-1] = (i, START_ESCALATED)
                else:
                    out.append((i, ESCALATE))
        self.count += n - k
        return out

    def scan(
        self, steps: np.ndarray, mask: np.ndarray, severe: np.ndarray | None = None
    ) -> list[tuple[int, str]]:
        """Points in order, ``mask`` marking the anomalous ones; returns (index, kind) pairs."""
        n = int(mask.shape[0])
        if n == 0:
            return []
        if not mask.any():
            self.normal(n)
            return []
        # runs of True: starts where mask turns on, ends where it turns off
        m = mask.astype(np.int8)
        d = np.diff(np.concatenate(([0], m, [0])))
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1)
        out: list[tuple[int, str]] = []
        prev = 0
        for s, e in zip(starts.tolist(), ends.tolist()):
            self.normal(s - prev)
            sv = None if severe is None else severe[s:e]
            out.extend((s + i, kind) for i, kind in self.run(steps[s:e], sv))
            prev = e
        self.normal(n - prev)
        return out
