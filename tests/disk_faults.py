"""A disk that fills up under a :class:`~trainwatch.RunWriter`: :func:`flaky_disk` (the ``disk``
fixture) replaces :func:`trainwatch.appendfile.open_append` with files whose writes fail like a
full disk while ``disk.full`` is set (the writer's tests and the framework integrations' use it)."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainwatch import appendfile


class FlakyFile:
    """Wraps a real file; while ``state.full`` every write fails like a full disk. With
    ``state.short``, the first failing write first writes half its bytes (a short write)."""

    def __init__(self, real: Any, state: DiskState) -> None:
        self.real, self.state = real, state

    def write(self, data: Any) -> int:
        st = self.state
        if st.full:
            if st.short:
                st.short = False
                return self.real.write(bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real.write(data)

    def fileno(self) -> int:
        return self.real.fileno()

    def close(self) -> None:
        self.real.close()


@dataclass
class DiskState:
    full: bool = False
    short: bool = False
    opened: list[Path] = field(default_factory=list)


def flaky_disk(monkeypatch: pytest.MonkeyPatch) -> DiskState:
    """Every metrics file opened from now on (the test's end) is a :class:`FlakyFile`."""
    state = DiskState()
    real_open = appendfile.open_append

    def flaky_open(path: Path) -> FlakyFile:
        state.opened.append(path)
        return FlakyFile(real_open(path), state)

    monkeypatch.setattr(appendfile, "open_append", flaky_open)
    return state
