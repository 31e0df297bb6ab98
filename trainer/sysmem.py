"""Resident memory of this process, cheaply (stdlib only)."""

from __future__ import annotations

import os
import resource
import sys

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 4096 / 2**20


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def rss_mb() -> float:
    """Current resident set size in MB (peak RSS where /proc is missing, e.g. macOS)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


class RssReader:
    """``rss_mb()`` from a descriptor kept open: one ``pread`` per call instead of an open, a
    read and a close (a few microseconds instead of tens, which matters every few steps)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = -1

    def __call__(self) -> float:
        pid = os.getpid()
        if self._fd is None or self._pid != pid:  # a forked child must read its own file
            try:
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                self._pid = pid
            except OSError:
                return peak_rss_mb()
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) * _PAGE_MB
        except (OSError, ValueError, IndexError):
            return rss_mb()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
