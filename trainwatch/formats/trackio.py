"""A trackio project database (``~/.cache/huggingface/trackio/<project>.db``), with ``sqlite3``.

Recognised by its ``metrics`` table with ``run_name``, ``step``, ``timestamp`` and ``metrics``
columns (and no ``run_uuid``: that is MLflow's). As trackio's ``SQLiteStorage`` writes it (WAL
journal):

* ``metrics``: one row per ``trackio.log`` call: ``run_name``, ``run_id`` (since trackio 0.2x;
  older databases have only the name, which is then the id), ``step``, ``timestamp`` (ISO 8601
  text, UTC) and ``metrics``, a JSON object of the values logged (``"NaN"``, ``"Infinity"``,
  ``"-Infinity"`` for non-finite values; nested names as logged, e.g. ``train/loss``). A row is a
  record; two rows at one step (an eval logged apart) are two records at that step.
* ``configs``: the run's ``config`` as JSON (trackio adds ``_Username``, ``_Created``...):
  it goes to the batch's ``meta``, so ``max_steps`` there gives the run's length.

trackio keeps no run status: a run that crashed and one that finished look alike, so no
``run_end`` is made (and no ``run_start``, which would promise one).
"""

from __future__ import annotations

import json
import sqlite3
import time as _time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._sqlite import read_only, tables
from trainwatch.formats._sqlite_source import SqliteRunSource
from trainwatch.run_stores import StoredRun

FORMAT = "trackio"


def runs_in(path: Path) -> tuple[str, list[StoredRun]] | None:
    """The runs of the trackio database at ``path``, else None."""
    if not path.is_file():
        return None
    cols = tables(path).get("metrics", set())
    if not {"run_name", "step", "timestamp", "metrics"} <= cols or "run_uuid" in cols:
        return None
    by = "run_id" if "run_id" in cols else "run_name"
    with read_only(path) as conn:
        rows = conn.execute(
            f"SELECT {by}, min(run_name), max(step), max(timestamp), min(rowid) FROM metrics "
            f"GROUP BY {by} ORDER BY min(rowid)").fetchall()
    runs = [StoredRun(store=path, run_id=str(run_id), name=str(name), format=FORMAT,
                      steps=step, updated=_seconds(ts),
                      source=partial(TrackioRun, path, str(run_id), by == "run_id"))
            for run_id, name, step, ts, _first in rows]
    return FORMAT, runs


def _seconds(iso: Any) -> float | None:
    """ISO 8601 text -> unix seconds (a time without a zone is UTC, as trackio writes it)."""
    if not isinstance(iso, str):
        return None
    try:
        t = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


class TrackioRun(SqliteRunSource):
    """One run of a trackio database, polled for new rows."""

    format = FORMAT
    table = "metrics"

    def __init__(self, db: Path, run_id: str, by_id: bool = True, *,
                 clock: Callable[[], float] = _time.time) -> None:
        super().__init__(db, run_id, clock=clock)
        self._column = "run_id" if by_id else "run_name"
        self._config: dict[str, Any] | None = None

    def rows(self, conn: sqlite3.Connection, after: int, limit: int) -> list[Sequence[Any]]:
        return conn.execute(
            f"SELECT rowid, step, timestamp, metrics FROM metrics "
            f"WHERE {self._column} = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (self.run_id, after, limit)).fetchall()

    def read_more(self, conn: sqlite3.Connection) -> Any:
        if self._config is None and "configs" in _table_names(conn):
            row = conn.execute(f"SELECT config FROM configs WHERE {self._column} = ? LIMIT 1",
                               (self.run_id,)).fetchone()
            self._config = _object(row[0]) if row else None
        return None

    def add(self, builder: BatchBuilder, rows: list[Sequence[Any]], extra: Any, *,
            final: bool) -> None:
        for rowid, step, ts, metrics in rows:
            values = _object(metrics)
            if values is None:
                builder.add_malformed(0, f"metrics row {rowid}: not a JSON object; skipped")
                continue
            rec = {k: v for k, v in values.items() if k not in ("step", "time", "event", "rank")}
            rec.update({f"{k}_value": v for k, v in values.items()
                        if k in ("step", "time", "event", "rank")})
            rec["step"] = step
            t = _seconds(ts)
            if t is not None:
                rec["time"] = t
            builder.add_record(rec)

    def meta(self) -> dict[str, Any] | None:
        if not self._config:
            return None
        return {k: v for k, v in self._config.items() if not k.startswith("_")}


def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _object(text: Any) -> dict[str, Any] | None:
    try:
        obj = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
