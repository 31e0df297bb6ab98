"""What a ``snapshot`` reader remembers between two reads of a file its writer rewrites whole.

The reader turns each snapshot into a list of records, each with a *fingerprint* (a value that
is equal for the same record in two snapshots, whatever else changed around it, e.g. a CSV
header that grew a column). Comparing the new fingerprints with those already returned gives
one of three answers: some records are new (return just those), the history changed (return
everything again as a reset), or the snapshot is a strict prefix of what was returned, which a
format that cannot tell a torn write from a complete one treats as "half-written, retry".
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

from trainwatch.builder import StreamState

Verdict = Literal["append", "reset", "partial"]


@dataclass(frozen=True, slots=True)
class Diff:
    verdict: Verdict
    start: int
    """Index of the first record to return (0 for a reset)."""


class SnapshotHistory:
    """Fingerprints of the records returned so far, in order."""

    def __init__(self) -> None:
        self._seen: list[Hashable] = []

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        self._seen = []

    def diff(self, new: Sequence[Hashable], *, shorter_is_partial: bool) -> Diff:
        """Compare a new snapshot's fingerprints with the history (does not update it)."""
        old = self._seen
        n_old, n_new = len(old), len(new)
        if n_new >= n_old:
            if list(new[:n_old]) == old:
                return Diff("append", n_old)
            return Diff("reset", 0)
        if shorter_is_partial and list(new) == old[:n_new]:
            return Diff("partial", 0)
        return Diff("reset", 0)

    def commit(self, new: Sequence[Hashable]) -> None:
        """Remember ``new`` as everything returned so far."""
        self._seen = list(new)


class SnapshotReaderBase:
    """What every ``snapshot`` reader holds: the stream state and the history returned so far."""

    kind = "snapshot"
    format = ""

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        self.source = source
        self.clock = clock
        self.state = StreamState()
        self._history = SnapshotHistory()

    def reset(self) -> None:
        self.state.reset()
        self._history.clear()
