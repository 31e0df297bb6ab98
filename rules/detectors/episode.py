"""Episodes, not floods: when an anomalous signal turns into alerts.

An episode starts at the first anomalous point while the rule is *armed* and outside its
cooldown; that point fires. It may escalate once (to error) when it persists or turns severe.
It ends, and the rule re-arms, after ``rearm`` consecutive normal points. Anomalous points
during the cooldown are ignored (they neither fire nor start an episode).

The same object serves point-by-point callers (:meth:`hit`, :meth:`normal`) and vectorised ones
(:meth:`scan` over a mask, :meth:`run` over a run of anomalous points): a run is decided by a
few scans that stop where they find their point, however long it is, so a permanent fault costs
nearly nothing per point. A caller that holds the run's flags as a Python list already (a spike
detector's short runs) calls :meth:`run_list`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

START = "start"
ESCALATE = "escalate"
START_ESCALATED = "start_escalated"
"""An episode whose first point already escalates it (severe at once): one alert, an error."""
_FEW = 16
"""Longest run whose cooldown is scanned point by point (past it, one array test)."""


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
        out = self.run_list([int(step)], [bool(severe)])
        return out[-1][1] if out else None

    def run(self, steps: np.ndarray, severe: np.ndarray | None = None) -> list[tuple[int, str]]:
        """A run of consecutive anomalous points; returns (index in the run, kind).

        A start that escalates on the same point is returned once, as START_ESCALATED.
        """
        n = int(steps.shape[0])
        return self.run_list(steps if n > _FEW else steps.tolist(),
                             [False] * n if severe is None else severe[:n].tolist())

    def run_list(self, steps: Sequence[int] | np.ndarray, severe: list[bool]
                 ) -> list[tuple[int, str]]:
        """:meth:`run` with the severe flags as a Python list: the same decisions as feeding the
        points one by one to :meth:`hit`, each scan stopping at the point it looks for (the first
        outside the cooldown, ``list.index`` for the first severe point)."""
        n = len(severe)
        out: list[tuple[int, str]] = []
        if n == 0:
            return out
        k = 0
        if not self.active:
            if self.last_start is not None and self.cooldown > 0:
                first, cd = self.last_start, self.cooldown
                if n > _FEW:  # (a long run may sit in the cooldown: one array test)
                    st = np.asarray(steps[:n])
                    k = int(np.argmax(st - first >= cd))
                    k = k if st[k] - first >= cd else n
                else:
                    while k < n and steps[k] - first < cd:
                        k += 1
                if k == n:
                    return out
            self.active = True
            self.count = 0
            self.escalated = False
            self.last_start = int(steps[k])
            out.append((k, START))
        self.quiet = 0
        if not self.escalated:
            i = n  # the escalating point: the persist bar's or the first severe one, if sooner
            if self.persist > 0:
                i = min(n, k + max(self.persist - self.count - 1, 0))
            if True in severe[k:i]:
                i = severe.index(True, k, i)
            if i < n:
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
