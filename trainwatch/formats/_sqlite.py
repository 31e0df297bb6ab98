"""Reading another program's SQLite database while it writes (MLflow's ``mlflow.db``, a trackio
project), with the standard library alone.

* Read-only, always: ``file:PATH?mode=ro`` as a URI, so nothing here can write, create the file,
  or take a write lock. (On a WAL database, trackio's, SQLite itself creates the ``-wal`` and
  ``-shm`` side files when they are missing, as for any reader; the database is never written.) A connection is opened for one poll and closed at once (a database that
  is replaced under us is seen on the next poll).
* One poll is one read transaction: every ``SELECT`` in it sees the same snapshot (a run's status
  read as finished cannot be ahead of the rows read with it).
* A busy writer is waited for briefly (``timeout``), then the poll is given up and retried.
* Whether anything changed is first asked of the file system: the database and its ``-wal``
  file (size and mtime). Those are hints, like file events: a poll still queries when they say
  something changed, and the queries decide what is new (by rowid).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_S = 0.5


def is_sqlite(path: Path) -> bool:
    """True for a regular file that starts with SQLite's header."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def watch_paths(db: Path) -> tuple[Path, ...]:
    """The database and its write-ahead log: a WAL writer touches only the ``-wal`` file until a
    checkpoint, so events on the database alone would miss most writes."""
    return (db, db.with_name(db.name + "-wal"))


def stamp(db: Path) -> tuple[int, ...]:
    """(inode, size, mtime) of the database and its ``-wal`` file: unchanged means nothing new."""
    out: list[int] = []
    for p in watch_paths(db):
        try:
            st = os.stat(p)
        except OSError:
            out += (0, -1, 0)
            continue
        out += (st.st_ino, st.st_size, st.st_mtime_ns)
    return tuple(out)


@contextmanager
def read_only(db: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection inside one read transaction; closed on leaving."""
    uri = f"file:{quote(str(Path(db).absolute()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                           check_same_thread=False)
    try:
        conn.execute("BEGIN")
        yield conn
    finally:
        try:
            conn.execute("COMMIT")  # a read transaction: ends the snapshot, writes nothing
        except sqlite3.Error:
            pass
        conn.close()


def tables(db: Path) -> dict[str, set[str]]:
    """Table -> column names, or {} for a file that is not a readable database."""
    if not is_sqlite(db):
        return {}
    try:
        with read_only(db) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: {r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')}
                    for t in names if '"' not in t}
    except sqlite3.Error:
        return {}
