"""What ``trainwatch PATH`` points at: one file, one run directory, a store of runs (a folder of
run directories, an MLflow or trackio database, ``mlruns/``, a DVCLive folder: see
:mod:`trainwatch.run_stores`), or nothing yet. Pure file-system logic (no Textual), run off the
UI thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainwatch.load import CONSOLE_NAMES, rank_of
from trainwatch.run_folders import metric_files, run_dirs
from trainwatch.run_stores import (
    OpenedStore,
    SelectError,
    StoredRun,
    display_names,
    open_store,
    select_run,
)

TargetKind = Literal["file", "run", "sweep", "waiting"]
FILE_SUFFIXES = (".jsonl", ".json", ".log", ".csv", ".txt", ".wandb")
"""A missing PATH ending like this is a file to wait for; anything else is a run directory."""
DEFAULT_METRICS = "metrics.jsonl"


@dataclass(frozen=True)
class RunSpec:
    """One run to follow."""

    run_id: str
    """Unique display name (the path relative to the watched folder)."""
    root: Path
    """The run directory (a single file's parent)."""
    metric_files: tuple[Path, ...]
    """Metric files; the first without a rank is the main stream, the others are rank streams."""
    console: Path | None
    """The text log shown in the console pane (may not exist yet)."""
    stored: StoredRun | None = None
    """A store's run that is not a run directory (a database's rows, an ``mlruns/`` run): read
    through its source, with no metric files of its own."""

    @property
    def main_file(self) -> Path | None:
        plain = [f for f in self.metric_files if rank_of(f) is None]
        if plain:
            return plain[0]
        ranked = sorted(self.metric_files, key=lambda f: rank_of(f) or 0)
        return ranked[0] if ranked else None


@dataclass(frozen=True)
class WatchTarget:
    path: Path
    kind: TargetKind
    runs: tuple[RunSpec, ...]
    read_only: bool
    """Someone else's files: we can read them but not write (never stop/restart such a run)."""


def find_metric_files(run_dir: Path) -> list[Path]:
    """The metric files of a run directory (the readers' detection decides what counts)."""
    return metric_files(run_dir)


def _console_beside(directory: Path, exclude: tuple[Path, ...] = ()) -> Path:
    """The run's console log: one of the names a run directory gives it (``console.log``...),
    else ``console.log`` (followed until it appears). Another text log beside the metrics is
    not this run's: a folder of downloaded logs puts one run's stdout beside another's
    ``trainer_state.json``."""
    for name in CONSOLE_NAMES:
        c = directory / name
        if c.is_file() and c not in exclude:
            return c
    return directory / CONSOLE_NAMES[0]


def is_read_only(path: Path) -> bool:
    """True when the files belong to someone else or cannot be written by us."""
    p = path if path.exists() else path.parent
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = p.stat()
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        return True
    return not os.access(p, os.W_OK)


def _run_spec(run_dir: Path, run_id: str) -> RunSpec | None:
    files = find_metric_files(run_dir)
    if not files:
        return None
    if run_dir.is_symlink() and run_dir not in files[0].parents:
        # read through the link's target (W&B's latest-run): the run is that folder's, and when
        # the link moves to a new run, the rescan finds a run of another name, not this one's
        run_id = files[0].parent.name
    return RunSpec(run_id, run_dir, tuple(files), _console_beside(run_dir, tuple(files)))


def _waiting_run(run_dir: Path) -> RunSpec:
    return RunSpec(run_dir.name or str(run_dir), run_dir, (run_dir / DEFAULT_METRICS,),
                   run_dir / CONSOLE_NAMES[0])


def discover(path: Path, run: str | None = None) -> WatchTarget:
    """Decide what ``path`` is and which files to follow. Never raises for a missing path.

    ``run`` (``--run``) picks one run of a store by name or id; one it does not match leaves
    every run (the CLI refuses such a ``--run`` before the app starts)."""
    path = Path(path)
    ro = is_read_only(path)
    store = _store(path)
    if store is not None and store.runs:
        runs = store.runs
        if run is not None:
            try:
                runs = (select_run(store, run),)
            except SelectError:
                pass
        specs = stored_specs(runs)
        return WatchTarget(path, "run" if len(specs) == 1 and store.format != "folder" else
                           "sweep", specs, ro)
    if path.is_file():
        console = _console_beside(path.parent, (path,))
        spec = RunSpec(path.name, path.parent, (path,), console if console.is_file() else None)
        return WatchTarget(path, "file", (spec,), ro)
    if not path.exists():
        if path.suffix.lower() in FILE_SUFFIXES or path.name.startswith("events.out.tfevents"):
            spec = RunSpec(path.name, path.parent, (path,), None)
            return WatchTarget(path, "waiting", (spec,), ro)
        return WatchTarget(path, "waiting", (_waiting_run(path),), ro)
    if not path.is_dir():
        spec = RunSpec(path.name, path.parent, (path,), None)
        return WatchTarget(path, "file", (spec,), ro)
    own = _run_spec(path, path.name or str(path))
    if own is not None:
        return WatchTarget(path, "run", (own,), ro)
    return WatchTarget(path, "waiting", (_waiting_run(path),), ro)


def _store(path: Path) -> OpenedStore | None:
    try:
        return open_store(path)
    except Exception:  # noqa: BLE001 - a store being created or locked: look again later
        return None


def stored_specs(runs: tuple[StoredRun, ...] | list[StoredRun]) -> tuple[RunSpec, ...]:
    """A spec per store run: a run directory's files, or the run's source."""
    names = display_names(runs)
    out = []
    for r in runs:
        if r.directory is not None:
            spec = _run_spec(r.directory, r.run_id)
            if spec is not None:
                out.append(spec)
            continue
        root = r.store if r.store.is_dir() else r.store.parent
        out.append(RunSpec(names[r], root, (), None, stored=r))
    return tuple(out)


def find_runs(folder: Path, depth: int = 2) -> list[RunSpec]:
    """Run directories below ``folder`` (up to ``depth`` levels), newest first (at most
    :data:`trainwatch.run_folders.MAX_RUNS`)."""
    return [RunSpec(r.rel, r.path, r.files, _console_beside(r.path, r.files))
            for r in run_dirs(folder, depth)]
