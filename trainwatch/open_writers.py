"""The writers a process has open: those a script forgot are closed at exit, those a ``fork()``
inherited are dropped in the child.

* **Forgotten writers** are closed at exit with status ``"unknown"`` (exit code ``null``): at
  ``atexit`` time the writer cannot tell a finished script from one that died of an exception.
* **fork()**: in a forked child every inherited writer is dropped without writing (its pending
  records belong to the parent; a ``run_end`` from the child would end the parent's run).

Apart from :mod:`trainwatch.writer` because it is about the process, not one run: one set and two
process hooks, registered once at import, over every writer alive.
"""

from __future__ import annotations

import atexit
import os
from contextlib import suppress
from typing import Protocol


class OpenWriter(Protocol):
    """What the hooks ask of a writer (:class:`~trainwatch.writer.RunWriter`)."""

    def close(self, status: str = ..., exit_code: int | None = ...) -> None: ...

    def _abandon(self) -> None:
        """In a forked child: forget the parent's pending records, write nothing, ever."""


_live: set[OpenWriter] = set()
"""Writers not closed yet (strong references: a forgotten writer is still closed at exit)."""


def opened(w: OpenWriter) -> None:
    """``w`` is open: close it at exit unless it is closed before, drop it in a forked child."""
    _live.add(w)


def closed(w: OpenWriter) -> None:
    """``w`` is closed: nothing left to do for it at exit."""
    _live.discard(w)


def _close_all_at_exit() -> None:
    for w in list(_live):
        with suppress(Exception):  # one broken writer must not stop the others' closing
            w.close(status="unknown", exit_code=None)


def _forget_in_child() -> None:
    for w in list(_live):
        w._abandon()
    _live.clear()


atexit.register(_close_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
