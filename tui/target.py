"""What ``trainwatch PATH`` points at: one file, one run directory, a folder of runs, or nothing
yet. Pure file-system logic (no Textual), run off the UI thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainwatch.load import CONSOLE_NAMES, is_sibling_link, rank_of

TargetKind = Literal["file", "run", "sweep", "waiting"]
FILE_SUFFIXES = (".jsonl", ".json", ".log", ".csv", ".txt", ".wandb")
"""A missing PATH ending like this is a file to wait for; anything else is a run directory."""
DEFAULT_METRICS = "metrics.jsonl"
TEXT_LOG_SUFFIXES = (".log", ".out", ".txt", ".err")
MAX_RUNS = 200
"""A folder of runs is scanned this many runs deep (newest first): a huge runs/ stays usable."""


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
    from trainwatch.formats.detect import find_metric_files as detect

    try:
        return list(detect(run_dir))
    except (OSError, ValueError):
        return []


def _console_beside(directory: Path, exclude: tuple[Path, ...] = ()) -> Path:
    """The run's console log: a conventional name, else the newest other text log beside the
    metrics, else ``console.log`` (followed until it appears)."""
    for name in CONSOLE_NAMES:
        c = directory / name
        if c.is_file() and c not in exclude:
            return c
    try:
        logs = [p for p in directory.iterdir()
                if p.suffix in TEXT_LOG_SUFFIXES and p not in exclude and p.is_file()]
    except OSError:
        logs = []
    if logs:
        return max(logs, key=lambda p: (p.stat().st_mtime, p.name))
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


def discover(path: Path) -> WatchTarget:
    """Decide what ``path`` is and which files to follow. Never raises for a missing path."""
    path = Path(path)
    ro = is_read_only(path)
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
    runs = find_runs(path)
    if runs:
        return WatchTarget(path, "sweep", tuple(runs), ro)
    return WatchTarget(path, "waiting", (_waiting_run(path),), ro)


def find_runs(folder: Path, depth: int = 2) -> list[RunSpec]:
    """Runs below ``folder`` (up to ``depth`` levels), newest first, at most :data:`MAX_RUNS`."""
    found: list[tuple[float, RunSpec]] = []
    _walk(folder, folder, depth, found)
    found.sort(key=lambda t: -t[0])
    return [spec for _m, spec in found[:MAX_RUNS]]


def _walk(root: Path, d: Path, depth: int, found: list[tuple[float, RunSpec]]) -> None:
    if depth <= 0 or len(found) >= MAX_RUNS * 2:
        return
    try:
        children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")
                          and not is_sibling_link(p))  # W&B's latest-run: a run listed anyway
    except OSError:
        return
    for child in children:
        spec = _run_spec(child, str(child.relative_to(root)))
        if spec is None:
            _walk(root, child, depth - 1, found)
            continue
        try:
            mtime = max(f.stat().st_mtime for f in spec.metric_files if f.exists())
        except (OSError, ValueError):
            mtime = 0.0
        found.append((mtime, spec))
