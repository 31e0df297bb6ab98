"""Ending a run as ``crashed`` when training dies of an exception the framework never reports.

HF's ``TrainerCallback`` and Keras' ``Callback`` have no exception hook: an exception in a step
leaves ``trainer.train()`` / ``model.fit()`` without ``on_train_end``, and the callback is never
called again. The ways to learn of it, and why this module chains the interpreter's hooks:

* **Wrapping** ``train()`` / ``fit()`` would see the exception, but the callback is handed to the
  framework, not wrapped around the call: it would need the user to change their call, or a
  monkey-patch of the framework. It stays available as an option (each callback is a context
  manager: ``with cb: trainer.train()``), for the case the hooks cannot see: an exception caught
  by the caller (a notebook cell, a retry loop).
* **atexit alone** runs after the exception is gone: it can say the run did not finish, not why
  (that is :mod:`trainwatch.open_writers`' ``unknown``, still the last resort here).
* **``sys.excepthook`` and ``threading.excepthook``** are called with the exception itself, before
  atexit, exactly when it was not caught: the script died of it (or the thread running ``fit``
  did). Chained, not replaced: the previous hook still prints the traceback, and a hook that a
  library installs after ours keeps calling ours. A run is ended only by an exception in the
  thread that started it (a dying helper thread says nothing about the training thread).

Put in front at each run's start unless ours is the current hook already (a hook installed since
that does not call the one before it, as pytest's per-test hook or ``rich.traceback.install``, would
cut ours out; being in a chain twice is harmless: a run ends once), and never removed (another hook
may have chained ours since): with no run watched, ours only passes the exception on.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from types import TracebackType
from typing import Protocol


class Crashable(Protocol):
    """What the hooks ask of a watched run (:class:`~trainwatch.integrations.live_run.LiveRun`)."""

    def end_with(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        """End the run the way the exception says (crashed, interrupted, finished)."""


_watched: dict[Crashable, int] = {}
"""Runs not ended yet, with the ident of the thread that started each."""
_lock = threading.Lock()
_sys_hook: Callable[..., object] | None = None
"""Our latest ``sys.excepthook``."""
_thread_hook: Callable[..., object] | None = None
"""Our latest ``threading.excepthook``."""


def watch(run: Crashable) -> None:
    """End ``run`` when the current thread dies of an uncaught exception."""
    global _sys_hook, _thread_hook
    with _lock:
        _watched[run] = threading.get_ident()
        if sys.excepthook is not _sys_hook:
            sys.excepthook = _sys_hook = _chained_sys(sys.excepthook)
        if threading.excepthook is not _thread_hook:
            threading.excepthook = _thread_hook = _chained_thread(threading.excepthook)


def unwatch(run: Crashable) -> None:
    """``run`` has ended: nothing left to do for it."""
    with _lock:
        _watched.pop(run, None)


def _end_runs_of(
    ident: int | None, exc_type: type[BaseException], exc: BaseException | None
) -> None:
    with _lock:
        runs = [run for run, started_in in _watched.items() if started_in == ident]
    for run in runs:
        with suppress(Exception):  # the hook must reach the previous one whatever happens here
            run.end_with(exc_type, exc)


def _chained_sys(previous: Callable[..., object]) -> Callable[..., None]:
    def sys_hook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        _end_runs_of(threading.get_ident(), exc_type, exc)
        previous(exc_type, exc, tb)

    return sys_hook


def _chained_thread(previous: Callable[..., object]) -> Callable[[threading.ExceptHookArgs], None]:
    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.thread is not None:
            _end_runs_of(args.thread.ident, args.exc_type, args.exc_value)
        previous(args)

    return thread_hook
