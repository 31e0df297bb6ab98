"""MLflow's SQLite store (``mlflow.db``, the default since MLflow 3), read with ``sqlite3`` alone.

Recognised by its tables: ``experiments``, ``runs`` and ``metrics`` with a ``run_uuid`` column
(a folder that holds an ``mlflow.db`` opens it). The tables, as MLflow's SQLAlchemy store writes
them:

* ``runs``: ``run_uuid``, ``name``, ``status`` (``RUNNING``, ``FINISHED``, ``FAILED``,
  ``KILLED``), ``start_time`` and ``end_time`` (ms), ``lifecycle_stage`` (a deleted run is left
  out), ``experiment_id``;
* ``metrics``: one row per (``key``, ``step``) point: ``value``, ``timestamp`` (ms), ``step``,
  ``is_nan`` (a NaN is stored as 0 with ``is_nan`` set; +-inf as +-the largest double, read back
  as +-inf), ``run_uuid``. Rows are read in rowid order, which is the order they were written;
  the points of one step join into one record (:mod:`~trainwatch.formats._points`);
* ``params`` (``key``, ``value``) become the ``run_start`` event's config; ``latest_metrics``
  gives each run's last step for the runs list without reading every row.

Status and end time become events as in :mod:`~trainwatch.formats._mlflow`.
"""

from __future__ import annotations

import math
import sqlite3
import time as _time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._mlflow import END_STATUS, MAX_FLOAT, MlflowEvents, status_name
from trainwatch.formats._sqlite import read_only, tables
from trainwatch.formats._sqlite_source import SqliteRunSource
from trainwatch.run_stores import StoredRun

FORMAT = "mlflow"
DB_NAME = "mlflow.db"


def is_mlflow_db(path: Path) -> bool:
    t = tables(path)
    return {"experiments", "runs", "metrics"} <= t.keys() and "run_uuid" in t["metrics"]


def runs_in(path: Path) -> tuple[str, list[StoredRun]] | None:
    """The runs of the MLflow database at ``path`` (or in the folder ``path``), else None."""
    db = path / DB_NAME if path.is_dir() else path
    if not db.is_file() or not is_mlflow_db(db):
        return None
    with read_only(db) as conn:
        runs = conn.execute(
            "SELECT run_uuid, name, status, start_time, end_time FROM runs "
            "WHERE lifecycle_stage IS NULL OR lifecycle_stage != 'deleted' "
            "ORDER BY start_time, run_uuid").fetchall()
        last = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT run_uuid, max(step), max(timestamp) FROM latest_metrics GROUP BY run_uuid")}
    out = []
    for run_id, name, status, start, end in runs:
        step, ts = last.get(run_id, (None, None))
        updated = max((t for t in (ts, end, start) if t is not None), default=None)
        st = status_name(status)
        out.append(StoredRun(
            store=path, run_id=run_id, name=name or run_id, format=FORMAT, steps=step,
            updated=None if updated is None else updated / 1000,
            status=END_STATUS.get(st, "running"),
            source=partial(MlflowDbRun, db, run_id, name or run_id)))
    return FORMAT, out


class MlflowDbRun(SqliteRunSource):
    """One run of an ``mlflow.db``, polled for new metric rows and its status."""

    format = FORMAT
    table = "metrics"

    def __init__(self, db: Path, run_id: str, run_name: str, *,
                 clock: Callable[[], float] = _time.time) -> None:
        super().__init__(db, run_id, clock=clock)
        self.events = MlflowEvents(run_id, run_name)

    @property
    def holding(self) -> bool:
        return self.events.merger.holding

    def restart(self) -> None:
        super().restart()
        self.events.reset()

    def rows(self, conn: sqlite3.Connection, after: int, limit: int) -> list[Sequence[Any]]:
        return conn.execute(
            "SELECT rowid, key, value, timestamp, step, is_nan FROM metrics "
            "WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (self.run_id, after, limit)).fetchall()

    def read_more(self, conn: sqlite3.Connection) -> Any:
        run = conn.execute("SELECT status, start_time, end_time FROM runs WHERE run_uuid = ?",
                           (self.run_id,)).fetchone()
        params = None
        if not self.events.started or self.events.ended:
            params = dict(conn.execute("SELECT key, value FROM params WHERE run_uuid = ?",
                                       (self.run_id,)).fetchall())
        return run, params

    def add(self, builder: BatchBuilder, rows: list[Sequence[Any]], extra: Any, *,
            final: bool) -> None:
        run, params = extra
        status, start, end = run if run is not None else ("RUNNING", None, None)
        status = status_name(status)
        if self.has_more:  # the status holds for the rows not read yet too
            status = "RUNNING"
        points = [(key, int(step), ts / 1000, _value(value, is_nan))
                  for _rowid, key, value, ts, step, is_nan in rows]
        self.events.add(builder, points, status, start, end, params, final=final)


def _value(value: float, is_nan: int) -> float:
    if is_nan:
        return math.nan
    if value >= MAX_FLOAT:
        return math.inf
    if value <= -MAX_FLOAT:
        return -math.inf
    return float(value)
