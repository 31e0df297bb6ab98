"""Wake-up sources for the tailer: file-system events as *hints* that a file may have changed.

An event never carries data and is never counted: it only sets a flag that makes the tail worker
read from its tracked offsets sooner. Events can fire twice, late or not at all (watchdog #93,
#1003, #1006; network file systems see none), so the worker also reads on a timer (the
backstop) and loses nothing when every event goes missing.

We watch the *directory* of each file, never the file itself: a file watch dies with its inode,
so it would miss a rotated or re-created file. When the directory does not exist yet, the nearest
existing ancestor is watched (non-recursively) until it appears, then the watch moves down.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Protocol

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

log = logging.getLogger(__name__)

# Opened / closed-without-write events are left out on purpose: our own reads cause them, and
# a reader woken by its own reads would spin. Modified also fires on attribute changes (atime
# from our reads); that costs one stat, because the tailer opens a file only when it changed.
_EVENT_FILTER = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]


class WakeSource(Protocol):
    """Something that calls ``wake()`` when the watched files may have changed."""

    def start(self) -> None: ...

    def update(self, paths: Collection[Path]) -> str | None:
        """Watch these files from now on; returns a one-line problem, or None."""
        ...

    def stop(self, timeout: float = 1.0) -> None: ...


class NoWake:
    """Pure polling (network file systems where inotify sees nothing): never wakes anyone."""

    def start(self) -> None:
        pass

    def update(self, paths: Collection[Path]) -> str | None:
        return None

    def stop(self, timeout: float = 1.0) -> None:
        pass


def nearest_existing_dir(path: Path) -> Path:
    """The file's directory if it exists, else its closest existing ancestor."""
    d = path.parent
    while not d.is_dir() and d != d.parent:
        d = d.parent
    return d


def _dir_ident(d: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(d)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class _Hint(FileSystemEventHandler):
    """Runs on watchdog's thread: checks the path and sets the flag, nothing else."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake
        self.relevant: frozenset[str] = frozenset()
        """Normalised paths whose events matter (replaced whole, never mutated: read lock-free)."""
        self.watched: frozenset[str] = frozenset()
        """The watched directories themselves."""
        self.dead: set[str] = set()
        """Watched directories seen deleted or moved: their watch is gone (set.add is atomic)."""

    def dispatch(self, event: FileSystemEvent) -> None:
        src = os.path.normpath(os.fsdecode(event.src_path))
        if event.is_directory and event.event_type in ("deleted", "moved") and src in self.watched:
            # the kernel dropped this watch; a directory re-created at the same path may even
            # get the same inode back, so its identity alone would not tell us
            self.dead.add(src)
            self.wake()
            return
        relevant = self.relevant
        for p in (src, event.dest_path and os.path.normpath(os.fsdecode(event.dest_path))):
            if p and p in relevant:
                self.wake()
                return


class DirWatcher:
    """Watches the directories of a set of files with a watchdog ``Observer``.

    ``update`` is called by the tail worker on each cycle (it costs one ``stat`` per watched
    directory): it moves a watch to a directory that has just appeared, and re-creates a watch
    whose directory was deleted or replaced (the kernel drops a watch with its inode).
    """

    def __init__(
        self,
        wake: Callable[[], None],
        *,
        observer_factory: Callable[[], BaseObserver] = Observer,
    ) -> None:
        self._wake = wake
        self._factory = observer_factory
        self._observer: BaseObserver | None = None
        self._handler = _Hint(wake)
        self._watches: dict[Path, tuple[ObservedWatch, tuple[int, int] | None]] = {}
        """Watched directory -> (watch, (st_dev, st_ino) of the directory when scheduled)."""
        self._lock = threading.Lock()
        self._failed: str | None = None

    def start(self) -> None:
        try:
            self._observer = self._factory()
            self._observer.start()
        except Exception as e:  # noqa: BLE001 - inotify limits, no backend: use the backstop
            self._observer = None
            self._failed = f"file events unavailable ({e}); falling back to polling"
            log.warning(self._failed)

    def update(self, paths: Collection[Path]) -> str | None:
        """Make the watches match ``paths``; returns a one-line message when watching failed."""
        with self._lock:
            if self._observer is None:
                return self._failed
            wanted: dict[Path, tuple[int, int] | None] = {}
            relevant: set[str] = set()
            for p in paths:
                p = Path(os.path.abspath(p))
                d = nearest_existing_dir(p)
                wanted[d] = _dir_ident(d)
                relevant.add(str(p))
                q = p.parent
                while q != d and q != q.parent:  # directories still to be created
                    relevant.add(str(q))
                    q = q.parent
            self._handler.relevant = frozenset(relevant)
            alive = {e.watch for e in self._observer.emitters if e.is_alive()}
            dead = set(self._handler.dead)
            self._handler.dead -= dead  # in place: a marker added meanwhile stays for next time
            problem = None
            for d in list(self._watches):
                watch, ident = self._watches[d]
                if str(d) in dead or watch not in alive or d not in wanted or wanted[d] != ident:
                    self._unschedule(watch)
                    del self._watches[d]
            for d, ident in wanted.items():
                if d in self._watches or ident is None:
                    continue
                try:
                    watch = self._observer.schedule(
                        self._handler, str(d), recursive=False, event_filter=_EVENT_FILTER
                    )
                except FileNotFoundError:  # gone again already: look again on the next pass
                    self._wake()
                    continue
                except OSError as e:  # inotify limits, permissions
                    problem = f"{d}: cannot watch for changes ({e.strerror or e}); polling instead"
                    continue
                self._watches[d] = (watch, ident)
                # events between the directory appearing and this watch starting were missed
                self._wake()
            self._handler.watched = frozenset(str(d) for d in self._watches)
            return problem

    def _unschedule(self, watch: ObservedWatch) -> None:
        assert self._observer is not None
        try:
            self._observer.unschedule(watch)
        except (KeyError, OSError, RuntimeError):  # the emitter died with its directory
            pass

    def stop(self, timeout: float = 1.0) -> None:
        """Stops the observer and joins its threads (dispatcher, emitters, inotify reader)."""
        with self._lock:
            obs, self._observer = self._observer, None
            self._watches.clear()
        if obs is None:
            return
        obs.stop()
        if obs.is_alive():
            obs.join(timeout)
