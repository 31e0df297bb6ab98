"""Shared fixtures. Every test is checked for leaked threads: a watcher or worker that outlives
its test is a bug (watchdog observers and ingest workers must be stopped and joined)."""

from __future__ import annotations

import threading
import time

import pytest
from disk_faults import DiskState, flaky_disk


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5.0
    while True:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        # asyncio's default executor threads belong to the event loop fixture, not the test
        leaked = [t for t in leaked if not t.name.startswith(("asyncio_", "ThreadPoolExecutor"))]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling for threads to finish joining, bounded by the deadline
    assert not leaked, f"test leaked threads: {[t.name for t in leaked]}"


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> DiskState:
    """Metrics files whose writes fail like a full disk while ``disk.full`` is set."""
    return flaky_disk(monkeypatch)
