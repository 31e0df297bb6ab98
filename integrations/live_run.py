"""One run that a framework integration writes: opened when training starts, one record per log
call, ended with the framework's status. What the three integrations share.

* **Every record reaches the file before the framework goes on** (the writer's
  ``flush_interval=0``: one unbuffered append per record, in the training thread). The point is
  live watching: a record held back for the writer's background thread would arrive half a second
  late, and a callback placed after ours could not read it. A framework logs at most once per
  step, and an append costs microseconds.
* **Never an exception into training.** The writer already survives I/O errors (a full disk, an
  unwritable or removed directory: it drops records and retries, see
  :mod:`trainwatch.appendfile`); its one-line messages become one :class:`TrainwatchWarning` per
  outage instead of a bare stderr line. Anything else that goes wrong here (a bug, a framework
  object that is not what we expect) is one warning, then the run goes quiet: no more records,
  only a last try at ``run_end``.
* **Crashes** the framework does not report are caught by :mod:`.crash_hooks`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwatch.appendfile import reason, say
from trainwatch.integrations import crash_hooks
from trainwatch.plainvalues import NotANumber, as_number, plain_config, safe_repr, sanitise

if TYPE_CHECKING:
    from trainwatch.writer import RunWriter


class TrainwatchWarning(RuntimeWarning):
    """A metrics file that cannot be written (training goes on without it)."""


class LiveRun:
    """The run directory one integration writes (see the module doc)."""

    def __init__(self, run_dir: str | os.PathLike[str], framework: str) -> None:
        self.run_dir = Path(run_dir)
        """Where ``metrics.jsonl`` and ``config.yaml`` go (created with its parents)."""
        self.framework = framework
        """The framework's name, for the messages (``transformers``, ``lightning``, ``keras``)."""
        self.writer: RunWriter | None = None
        """The open run's writer; None before the start and after the end."""
        self.quiet = False
        """An internal error was reported: nothing more is written but a last ``run_end``."""

    @property
    def is_open(self) -> bool:
        return self.writer is not None

    def start(
        self, config: Callable[[], Mapping[str, Any]] | Mapping[str, Any] | None = None
    ) -> None:
        """Open the run: ``config.yaml`` and ``run_start`` (a no-op while it is open). After an
        :meth:`end`, a new start appends a new run to the same file. ``config`` may be a function
        that builds it (from framework objects): it is called under the same guard."""
        if self.writer is not None or self.quiet:
            return
        with self.guard():
            from trainwatch.writer import RunWriter

            cfg = json_safe(config() if callable(config) else config)
            self.writer = RunWriter(self.run_dir, config=cfg, flush_interval=0, say=self._warn)
            crash_hooks.watch(self)

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """One metric record, on the disk when this returns."""
        w = self.writer
        if w is None or self.quiet:
            return
        with self.guard():
            w.log(metrics, step=step)

    def event(self, name: str, step: int | None = None, **fields: Any) -> None:
        w = self.writer
        if w is None or self.quiet:
            return
        with self.guard():
            w.event(name, step=step, **fields)

    def end(self, status: str, exit_code: int | None = 0, **fields: Any) -> None:
        """``run_end`` with ``status`` (a no-op when the run is not open)."""
        w = self._take()
        if w is not None:
            with self.guard():
                w.close(status, exit_code, **fields)

    def end_with(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        """End as the exception says, the way ``with RunWriter(...)`` does: ``crashed`` with its
        ``Type: message``, ``interrupted`` for Ctrl-C, ``finished`` for none or ``exit(0)``."""
        w = self._take()
        if w is not None:
            with self.guard():
                w.__exit__(exc_type, exc, None)

    def _take(self) -> RunWriter | None:
        w, self.writer = self.writer, None
        if w is not None:
            crash_hooks.unwatch(self)
        return w

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Runs an integration's own work: an exception is the one warning, then quiet."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - whatever it is, training must go on
            if not self.quiet:
                self.quiet = True
                self._warn(
                    f"trainwatch: the {self.framework} integration stopped writing {self.run_dir}"
                    f" after an internal error ({reason(e)}); training goes on"
                )

    def _warn(self, message: str) -> None:
        try:
            warnings.warn(message, TrainwatchWarning, stacklevel=3)
        except Exception:  # noqa: BLE001 - ``-W error`` turns a warning into an exception
            say(message)


class EndsOnException:
    """``with callback: trainer.train()``: a run that an exception ends even when the caller
    catches it (a notebook cell, a retry loop), which :mod:`.crash_hooks` cannot see."""

    run: LiveRun

    def __enter__(self) -> EndsOnException:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc_type is not None:
            self.run.end_with(exc_type, exc)


def json_safe(config: Any) -> Any:
    """``config`` as plain JSON values: string keys, numbers for number-likes (numpy and torch
    scalars), the ``repr()`` of anything else (a dtype, a callable, an enum member)."""
    if config is None:
        return None
    return json.loads(json.dumps(sanitise(plain_config(config)), default=_plain))


def _plain(value: Any) -> Any:
    try:
        return as_number(value)
    except NotANumber:
        return safe_repr(value)
