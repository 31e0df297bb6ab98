"""Per-step records on their way to ``RunWriter``, written in short bursts. Stdlib only.

Encoding a record costs a few microseconds in a tight loop but several times that when each
call comes between two steps of PyTorch work, which evicts the encoder from the CPU caches. So
step records are kept (with their own timestamp) and handed to the writer a burst at a time:
every ``burst`` records or ``max_age`` seconds, whichever comes first, and always before an
event, so the file keeps the order things happened in. A watcher sees a record at most
``max_age`` s later than it would otherwise (plus the writer's own flush interval).
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Writer(Protocol):
    def log(self, metrics: dict[str, Any] | None = None, /, step: Any = None,
            **values: Any) -> None: ...

    def event(self, name: str, /, step: Any = None, **fields: Any) -> None: ...

    def close(self, status: str = "finished", exit_code: int | None = 0, **fields: Any) -> None: ...


class StepLog:
    """The trainer's single way to write: step records (buffered), events, the end."""

    def __init__(self, main: Writer | None, rank: Writer | None = None, burst: int = 16,
                 max_age: float = 0.1) -> None:
        self.main = main
        """Rank 0's ``metrics.jsonl`` writer (None on other ranks)."""
        self.rank = rank
        """This rank's ``metrics.rank{r}.jsonl`` writer (None when not distributed)."""
        self.burst = burst
        self.max_age = max_age
        self._buf: list[tuple[Writer, int, dict[str, Any]]] = []
        self._since = 0.0

    def record(self, step: int, rec: dict[str, Any], rank_rec: dict[str, Any] | None = None
               ) -> None:
        """Queue one step's record (and its per-rank record); ``time`` is stamped now."""
        now = time.time()
        if not self._buf:
            self._since = now
        if self.main is not None:
            rec["time"] = now
            self._buf.append((self.main, step, rec))
        if self.rank is not None and rank_rec is not None:
            rank_rec["time"] = now
            self._buf.append((self.rank, step, rank_rec))
        if len(self._buf) >= self.burst or now - self._since >= self.max_age:
            self.flush()

    def flush(self) -> None:
        buf, self._buf = self._buf, []
        for w, step, rec in buf:
            w.log(rec, step=step)

    def event(self, name: str, **fields: Any) -> None:
        self.flush()
        if self.main is not None:
            self.main.event(name, **fields)

    def close(self, status: str, exit_code: int, **fields: Any) -> None:
        self.flush()
        for w in (self.main, self.rank):
            if w is not None:
                w.close(status=status, exit_code=exit_code, **fields)
