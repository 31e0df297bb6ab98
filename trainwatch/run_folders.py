"""A folder of run directories (``runs/``, a TensorBoard log directory, a sweep) as a store.

Each folder below (two levels deep at most, hidden ones skipped) that is a run directory by
:func:`~trainwatch.formats.detect.find_metric_files` is a run, named by its path relative to
the folder: a TensorBoard log directory's sub-folders with event files (``runs/exp1``,
``runs/exp2/eval``) are runs, as TensorBoard itself shows them. A folder that is a run directory
itself is not a store (it is one run); nor is a folder with no run below it. Runs are listed
newest first (by their metric files' mtime), :data:`MAX_RUNS` at most, so a huge ``runs/``
stays usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainwatch.run_stores import StoredRun

FORMAT = "folder"
MAX_RUNS = 200
DEPTH = 2


@dataclass(frozen=True, slots=True)
class RunDir:
    """A run directory found below a folder."""

    path: Path
    rel: str
    """Its path relative to the folder (the run's name)."""
    files: tuple[Path, ...]
    """Its metric files (:func:`~trainwatch.formats.detect.find_metric_files`)."""
    mtime: float
    """The newest of their mtimes (0 when none can be read)."""


def metric_files(run_dir: Path) -> list[Path]:
    """The metric files of a run directory; [] for a folder that is not one (or unreadable)."""
    from trainwatch.formats.detect import find_metric_files

    try:
        return list(find_metric_files(run_dir))
    except (OSError, ValueError):
        return []


def run_dirs(folder: Path, depth: int = DEPTH) -> list[RunDir]:
    """Run directories below ``folder`` (up to ``depth`` levels), newest first, at most
    :data:`MAX_RUNS`."""
    found: list[RunDir] = []
    _walk(folder, folder, depth, found)
    found.sort(key=lambda r: (-r.mtime, r.rel))
    return found[:MAX_RUNS]


def _walk(root: Path, d: Path, depth: int, found: list[RunDir]) -> None:
    if depth <= 0 or len(found) >= MAX_RUNS * 2:
        return
    try:
        children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")
                          and not is_sibling_link(p))  # W&B's latest-run: a run listed anyway
    except OSError:
        return
    for child in children:
        files = metric_files(child)
        if not files:
            _walk(root, child, depth - 1, found)
            continue
        mtimes = []
        for f in files:
            try:
                mtimes.append(f.stat().st_mtime)
            except OSError:
                continue
        found.append(RunDir(child, child.relative_to(root).as_posix(), tuple(files),
                            max(mtimes, default=0.0)))


def runs_in(path: Path) -> tuple[str, list[StoredRun]] | None:
    """The runs below the folder ``path`` when it is a folder of runs (not a run itself)."""
    from trainwatch.formats.detect import detect_format, read_head

    if not path.is_dir():
        return None  # (a run directory never gets here: see open_store)
    found = run_dirs(path)
    if not found:
        return None
    runs = []
    for r in found:
        try:
            fmt = detect_format(r.files[0], read_head(r.files[0]))
        except (OSError, ValueError):
            fmt = "unknown"
        runs.append(StoredRun(store=path, run_id=r.rel, name=r.rel, format=fmt,
                              updated=r.mtime or None, directory=r.path))
    return FORMAT, runs


def is_sibling_link(path: Path) -> bool:
    """``path`` is a link to a folder beside it (W&B's ``wandb/latest-run``): a second name
    for a run that a listing of the folder already holds."""
    if not path.is_symlink():
        return False
    try:
        return path.resolve().parent == path.parent.resolve()
    except OSError:
        return False
