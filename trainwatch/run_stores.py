"""Stores: a path that holds several runs (an MLflow database, an ``mlruns/`` folder, a trackio
project, a DVCLive folder, a TensorBoard log directory or any folder of run directories), the
runs it lists, and how each one is read.

Every multi-run format is one *opener*: a function that, given a path, returns its format's name
and the runs the path holds (a list of :class:`StoredRun`), or None when the path is not that
format's. :func:`open_store`
tries them in the order of :data:`OPENERS`; a new format (W&B's ``.wandb`` files, say) plugs in
by adding its ``"module:function"`` there. Openers are imported only when a path is opened, so
``trainwatch check`` on a plain file never loads them.

A run is read one of two ways:

* ``directory``: it is a run directory like any other (a TensorBoard sub-folder): its files are
  found and followed as for ``trainwatch RUN_DIR``;
* ``source``: a :class:`RunSource` made on demand: something polled for what is new (rows of a
  database, lines of many small files), handing over :class:`~trainwatch.batch.RecordBatch`
  values like any reader. One poll reads to the end (``final``: also what a live read holds back);
  the live TUI polls it when its files change (see :mod:`trainwatch.source_tailer`).

No Textual here, and nothing that writes: a store being written by its tool is only read.
"""

from __future__ import annotations

import importlib
import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from trainwatch.batch import RecordBatch

OPENERS: tuple[str, ...] = (
    "trainwatch.formats.mlflow_db:runs_in",
    "trainwatch.formats.trackio:runs_in",
    "trainwatch.formats.mlflow_files:runs_in",
    "trainwatch.formats.dvclive:runs_in",
    "trainwatch.run_folders:runs_in",
)
"""Who recognises a store, most specific first (a folder of run directories last: an ``mlruns/``
folder holds directories too)."""


class RunSource(Protocol):
    """One run of a store, read incrementally. Not thread-safe: one thread polls it."""

    name: str
    """Unique key of this run's stream (store path and run id): what batches name as source."""
    has_more: bool
    """The last poll stopped before the end (a large backlog is read in bounded steps)."""
    holding: bool
    """A live poll held back the newest step (another series may still add to it): poll again
    soon even without a file event."""

    def watch_paths(self) -> Sequence[Path]:
        """The files whose changes may mean new data (events on them are only hints)."""
        ...

    def poll(self, *, final: bool = False) -> list[RecordBatch]:
        """What is new since the last poll. ``final``: the writer is done (or we read once):
        hand on everything, the newest step included. Raises OSError (and the store's own
        errors, e.g. ``sqlite3.Error``) when the store cannot be read just now."""
        ...

    def last_written(self) -> float | None:
        """Unix time of the newest record read so far (when the backlog was written)."""
        ...


@dataclass(frozen=True, slots=True)
class StoredRun:
    """One run a store lists. Equal when it names the same run the same way (its progress,
    ``steps`` and ``updated``, is left out: a rescan that sees it grow finds nothing new)."""

    store: Path
    """The path the store was opened at."""
    run_id: str
    """Unique in the store (MLflow's run id, trackio's run name, a folder's relative path)."""
    name: str
    """What a person calls it (the run name; may repeat in a store)."""
    format: str
    """``mlflow``, ``mlflow_files``, ``trackio``, ``dvclive`` or a run directory's format."""
    steps: int | None = field(default=None, compare=False)
    """The last step logged so far (None: nothing yet, or not known without reading it all)."""
    updated: float | None = field(default=None, compare=False)
    """Unix time of the newest record (or of the newest file)."""
    status: str | None = field(default=None, compare=False)
    """``running``, ``finished``, ``crashed``, ``interrupted`` where the store says."""
    directory: Path | None = None
    """Set for a run that is a run directory: read it as one."""
    source: Callable[[], RunSource] | None = field(default=None, compare=False)
    """Set for any other run: makes a fresh reader of it."""


@dataclass(frozen=True, slots=True)
class OpenedStore:
    path: Path
    format: str
    """The store's kind, for messages (``mlflow``, ``trackio``...; ``folder`` for run folders)."""
    runs: tuple[StoredRun, ...]


class SelectError(ValueError):
    """``--run`` matched no run, or several, or it is needed and missing: one line for a person,
    and the runs to list (:func:`format_runs`)."""

    def __init__(self, message: str, runs: Sequence[StoredRun] = ()) -> None:
        super().__init__(message)
        self.runs = tuple(runs)


def open_store(path: Path) -> OpenedStore | None:
    """The runs ``path`` holds, when it is a store; None for a file or folder of one run (or
    nothing known). Raises OSError (or ``sqlite3.Error``) for a store that cannot be read."""
    path = Path(path)
    if path.is_dir():
        from trainwatch.run_folders import metric_files

        if metric_files(path):
            return None  # a run directory (an mlflow.db or dvclive/ beside its metrics is not it)
    for ref in OPENERS:
        module, func = ref.split(":")
        opener = getattr(importlib.import_module(module), func)
        found = opener(path)
        if found is not None:
            fmt, runs = found
            return OpenedStore(path, fmt, tuple(runs))
    return None


def select_run(store: OpenedStore, wanted: str | None) -> StoredRun:
    """The run ``wanted`` names (its id, its name, or a unique start of its id); the only run
    when ``wanted`` is None. Raises :class:`SelectError` otherwise."""
    runs = store.runs
    where = str(store.path)
    if wanted is None:
        if len(runs) == 1:
            return runs[0]
        if not runs:
            raise SelectError(f"{where}: holds no runs yet")
        example = runs[0].name if _unique_name(runs, runs[0]) else runs[0].run_id
        raise SelectError(f"{where} holds {len(runs)} runs: pick one with --run NAME_OR_ID "
                          f"(e.g. --run {_quoted(example)})", runs)
    for pick in (lambda r: r.run_id == wanted, lambda r: r.name == wanted,
                 lambda r: len(wanted) >= 4 and r.run_id.startswith(wanted)):
        hits = [r for r in runs if pick(r)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise SelectError(f"{where}: --run {_quoted(wanted)} matches {len(hits)} runs; "
                              "give the run's id instead", hits)
    raise SelectError(f"{where}: no run named or with the id {_quoted(wanted)}; "
                      f"it holds {len(runs)} run{'s' if len(runs) != 1 else ''}", runs)


def display_names(runs: Sequence[StoredRun]) -> dict[StoredRun, str]:
    """A unique name per run for tables: its name, with the start of its id where names repeat."""
    count: dict[str, int] = {}
    for r in runs:
        count[r.name] = count.get(r.name, 0) + 1
    return {r: r.name if count[r.name] == 1 else f"{r.name} ({r.run_id[:8]})" for r in runs}


def format_runs(runs: Sequence[StoredRun], now: float | None = None) -> str:
    """The runs as a table a person picks from: name, id, format, steps, last update."""
    from trainwatch.humanize import fmt_ago, fmt_count
    from trainwatch.safe_text import clean

    now = _time.time() if now is None else now
    rows = [("NAME", "ID", "FORMAT", "STEPS", "LAST UPDATE")]
    for r in runs:
        ago = "-" if r.updated is None else fmt_ago(now - r.updated)
        status = f" ({r.status})" if r.status and r.status != "running" else ""
        rows.append((clean(r.name), clean(r.run_id), r.format,
                     "-" if r.steps is None else fmt_count(r.steps), ago + status))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _unique_name(runs: Sequence[StoredRun], run: StoredRun) -> bool:
    return sum(r.name == run.name for r in runs) == 1


def _quoted(text: str) -> str:
    """A name as a shell word (names may hold spaces)."""
    import shlex

    return shlex.quote(text)
