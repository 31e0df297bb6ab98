"""MLflow's file store (``mlruns/``): one folder per experiment, one per run, one file per metric.

The layout, as MLflow's ``FileStore`` writes it::

    mlruns/<experiment_id>/meta.yaml            experiment_id, name, lifecycle_stage
    mlruns/<experiment_id>/<run_id>/meta.yaml   run_id, run_name, status (1 RUNNING, 3 FINISHED,
                                                4 FAILED, 5 KILLED), start_time, end_time (ms)
    .../<run_id>/metrics/<key>                  lines "timestamp value step" (ms; a key with "/"
                                                is nested folders: metrics/train/loss)
    .../<run_id>/params/<key>                   the value as text
    .../<run_id>/tags/mlflow.runName            the run's name

A line may also have 2 fields (no step: step 0) or 5 (a dataset name and digest after the
step); a value is ``nan``, ``inf`` or ``-inf`` as Python prints them. The metric files are
appended text, followed as such (:mod:`~trainwatch.formats._text_files`); ``meta.yaml`` is
re-read when it changes, for the status. Recognised at the ``mlruns`` folder (or a folder that
holds one), an experiment folder, or a run folder. Deleted runs (``lifecycle_stage: deleted``,
or under ``.trash``) are left out.
"""

from __future__ import annotations

import math
import os
import time as _time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from trainwatch.builder import BatchBuilder
from trainwatch.formats._mlflow import END_STATUS, MlflowEvents, status_name
from trainwatch.formats._points import Point
from trainwatch.formats._text_files import TextFilesSource, walk_files
from trainwatch.run_stores import StoredRun

FORMAT = "mlflow_files"
ROOT_NAME = "mlruns"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_meta(folder: Path) -> dict[str, Any] | None:
    """A folder's ``meta.yaml`` as a dict, or None (missing, unreadable, not a mapping)."""
    try:
        with open(folder / "meta.yaml", encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_Loader)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _is_run(meta: dict[str, Any] | None) -> bool:
    return meta is not None and ("run_id" in meta or "run_uuid" in meta)


def _is_experiment(meta: dict[str, Any] | None) -> bool:
    return meta is not None and "experiment_id" in meta and not _is_run(meta)


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _run_folders(path: Path) -> list[tuple[Path, dict[str, Any]]] | None:
    """(run folder, its meta) of what ``path`` is: a run, an experiment, an ``mlruns`` folder, or
    a folder holding ``mlruns``; None when it is none of them."""
    if not path.is_dir():
        return None
    meta = read_meta(path)
    if _is_run(meta):
        return [(path, meta)] if (path / "metrics").is_dir() else None
    if _is_experiment(meta):
        runs = [(c, m) for c in _children(path) if _is_run(m := read_meta(c))]
        return [(c, m) for c, m in runs if m.get("lifecycle_stage") != "deleted"]
    root = path / ROOT_NAME if (path / ROOT_NAME).is_dir() else path
    experiments = [c for c in _children(root) if _is_experiment(read_meta(c))]
    if not experiments:
        return None
    out: list[tuple[Path, dict[str, Any]]] = []
    for e in experiments:
        out += _run_folders(e) or []
    return out


def runs_in(path: Path) -> tuple[str, list[StoredRun]] | None:
    found = _run_folders(path)
    if found is None:
        return None
    runs = []
    for folder, meta in found:
        run_id = str(meta.get("run_id") or meta.get("run_uuid") or folder.name)
        name = _run_name(folder, meta) or run_id
        status = status_name(meta.get("status"))
        runs.append(StoredRun(
            store=path, run_id=run_id, name=name, format=FORMAT, steps=_last_step(folder),
            updated=_newest_mtime(folder), status=END_STATUS.get(status, "running"),
            source=partial(MlflowFilesRun, folder, run_id, name)))
    runs.sort(key=lambda r: (r.updated or 0.0, r.run_id))
    return FORMAT, runs


def _run_name(folder: Path, meta: dict[str, Any]) -> str | None:
    try:
        return (folder / "tags" / "mlflow.runName").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        name = meta.get("run_name")
        return str(name) if name else None


def _metric_files(folder: Path) -> Iterator[tuple[str, Path]]:
    return walk_files(folder / "metrics")


def _last_step(folder: Path) -> int | None:
    """The largest step among the metric files' last lines (each file's end read only)."""
    best: int | None = None
    for _key, path in _metric_files(folder):
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 256))
                last = f.read().decode("utf-8", "replace").rstrip("\n").rsplit("\n", 1)[-1]
            parts = last.split()
            step = int(parts[2]) if len(parts) >= 3 else 0
        except (OSError, ValueError):
            continue
        best = step if best is None else max(best, step)
    return best


def _newest_mtime(folder: Path) -> float | None:
    times = []
    for _key, path in _metric_files(folder):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=None)


def parse_metric_line(text: str) -> tuple[float, float, int]:
    """``"1750000000000 0.5 10"`` -> (time in s, value, step); ValueError for anything else."""
    parts = text.split()
    if len(parts) not in (2, 3, 5):
        raise ValueError(f"expected 'timestamp value step', got {len(parts)} fields")
    step = int(parts[2]) if len(parts) >= 3 else 0
    return int(parts[0]) / 1000, float(parts[1]), step


class MlflowFilesRun(TextFilesSource):
    """One run folder of an ``mlruns/`` store, polled for new metric lines and its status."""

    format = FORMAT

    def __init__(self, folder: Path, run_id: str, run_name: str, *,
                 clock: Callable[[], float] = _time.time) -> None:
        super().__init__(folder, run_id, clock=clock)
        self.events = MlflowEvents(run_id, run_name)
        self._meta: dict[str, Any] | None = None
        self._meta_stamp: int | None = None
        self._status = "RUNNING"

    def restart(self) -> None:
        super().restart()
        self.events.reset()

    @property
    def holding(self) -> bool:
        return self.events.merger.holding

    def watch_paths(self) -> list[Path]:
        return [*super().watch_paths(), self.root / "meta.yaml"]

    def series_files(self) -> Iterator[tuple[str, Path]]:
        return _metric_files(self.root)

    def parse(self, key: str, line: int, text: str) -> Point | None:
        t, value, step = parse_metric_line(text)
        if not math.isfinite(t):
            raise ValueError("timestamp is not a number")
        return key, step, t, value

    def before_read(self) -> None:
        self._status = status_name((self._read_meta() or {}).get("status"))

    def add(self, builder: BatchBuilder, points: list[Point], *, final: bool) -> None:
        meta = self._meta or {}
        status = "RUNNING" if self.has_more else self._status
        params = None
        if not self.events.started or self.events.ended:
            params = {k: v for k, p in walk_files(self.root / "params")
                      if (v := _read_text(p)) is not None}
        self.events.add(builder, points, status, meta.get("start_time"), meta.get("end_time"),
                        params, final=final)

    def _read_meta(self) -> dict[str, Any] | None:
        """``meta.yaml``, re-read only when it changed (MLflow rewrites it at the end)."""
        try:
            st = os.stat(self.root / "meta.yaml").st_mtime_ns
        except OSError:
            return self._meta
        if st != self._meta_stamp:
            self._meta, self._meta_stamp = read_meta(self.root), st
        return self._meta


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
