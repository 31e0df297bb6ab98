"""The ingest side of the app: reads, parses, runs the rules, posts immutable messages.

One thread does all of it: the :class:`~trainwatch.tailer.Follower`'s worker, whose callbacks
run the rule engine and post to the app. File events only wake that thread (watchdog's own
thread sets a flag). No Textual here except through the ``post`` callable, and nothing here
touches the store or a widget: the UI thread owns those.

Tail first: before the follower starts reading history from the top, :meth:`IngestService.preview`
reads the last ``tail_bytes`` of each run's main file and posts it, so a 1 M-line file shows its
newest data as fast as a 1 k-line one; the full history then streams in behind a progress bar.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwatch.batch import RecordBatch
from trainwatch.load import rank_of
from trainwatch.rules.engine.alert import Alert
from trainwatch.tailer import Follower, TailStatus
from trainwatch.tui.config import Engine, EngineFactory
from trainwatch.tui.messages import (
    AlertsRaised,
    BatchArrived,
    ConsoleLines,
    HistoryLoaded,
    IngestFailed,
    LoadProgress,
    Preview,
    SourceStatus,
)
from trainwatch.tui.target import RunSpec

log = logging.getLogger(__name__)

Post = Callable[[Any], Any]
BATCH_INTERVAL_S = 0.1
"""Reads asked for closer together than this are merged (a lone append is still read at once):
a fast writer then costs ten batches a second through the rules and the UI, not one per write."""


def make_reader(path: Path) -> Any:
    """The reader for ``path`` (format from its name and first bytes; from its name alone
    while it does not exist yet)."""
    from trainwatch.formats.detect import detect_format
    from trainwatch.formats.detect import make_reader as detect

    try:
        return detect(path)
    except FileNotFoundError:
        return detect(path, fmt=detect_format(path, b""))


@dataclass
class _Run:
    """Ingest-side state of one run. Touched by the follower thread, and by the UI thread only
    under ``lock`` (tick, mute)."""

    spec: RunSpec
    engine: Engine | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    targets: dict[str, int] = field(default_factory=dict)
    """path -> bytes the file held when we started: history is loaded once all are read."""
    loaded: bool = False
    pending_mutes: list[str] = field(default_factory=list)
    engine_failed: bool = False
    console_seen: bool = False
    """The optional console file exists or did once (until then, its absence is not news)."""
    complete_at_pass: int | None = None
    """The follower's pass count when another thread first saw every byte read (see
    :meth:`IngestService.check_loaded`)."""


class IngestService:
    """Follows every file of every run on one thread and posts what is new to the app."""

    def __init__(
        self,
        post: Post,
        engine_factory: EngineFactory | None,
        *,
        poll_interval: float | None = None,
        tail_bytes: int = 256 << 10,
        wake_source: Any = None,
        reader_factory: Callable[[Path], Any] = make_reader,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._post = post
        self._clock = clock
        """The app's clock, the one :meth:`tick` is given: live records carry their arrival."""
        self._engine_factory = engine_factory
        self._tail_bytes = tail_bytes
        self._reader_factory = reader_factory
        self._runs: dict[str, _Run] = {}
        self._routes: dict[str, tuple[_Run, str, int | None]] = {}
        """Followed path -> (run, "main" / "rank" / "console", rank)."""
        self._lock = threading.Lock()  # guards _runs and _routes
        self._follower = Follower(
            on_batch=self._on_batch,
            on_text=self._on_text,
            on_status=self._on_status,
            poll_interval=poll_interval,
            wake_source=wake_source,
            batch_interval=BATCH_INTERVAL_S,
            name="trainwatch-ingest",
        )
        self._started = False

    # ------------------------------------------------------------------ setup
    def add_run(self, spec: RunSpec, *, preview: bool = True) -> None:
        """Follow a run's files; with ``preview``, post the end of its main file first.

        A run already followed only gains the files it did not have (a run directory that
        appeared with a framework's file rather than ``metrics.jsonl``)."""
        with self._lock:
            run = self._runs.get(spec.run_id)
            new_run = run is None
            if run is None:
                run = _Run(spec, self._new_engine(spec))
                self._runs[spec.run_id] = run
            files = [f for f in spec.metric_files if str(f) not in self._routes]
            console = spec.console if spec.console and str(spec.console) not in self._routes else None
        main = spec.main_file
        if spec.stored is not None and new_run:
            self._follow_stored(run, spec)
        for f in files:
            run.targets[str(f)] = _size(f)
        if console is not None:
            run.targets[str(console)] = _size(console)
            run.console_seen = console.exists()
        if preview and new_run and main is not None:
            self._preview(run, main)
        for f in files:
            try:
                self._follower.follow(f, self._reader_factory)
            except Exception as e:  # noqa: BLE001  # unsupported format: say which file, go on
                run.targets.pop(str(f), None)
                self._post(IngestFailed(spec.run_id, _one_line(f, e)))
                continue
            with self._lock:
                self._routes[str(f)] = (run, "main" if f == main else "rank", rank_of(f))
        if console is not None:
            with self._lock:
                self._routes[str(console)] = (run, "console", None)
            self._follower.follow_text(console)
        if new_run:
            # before the follower runs (or with nothing to read) no batch can be on its way;
            # otherwise the follower's own callbacks decide (see check_loaded)
            self._check_loaded(run, settled=not self._started or not any(run.targets.values()))

    def _follow_stored(self, run: _Run, spec: RunSpec) -> None:
        """Follow a store's run (polled; see :mod:`trainwatch.source_tailer`) as the main stream."""
        stored = spec.stored
        assert stored is not None and stored.source is not None
        try:
            source = stored.source()
        except Exception as e:  # noqa: BLE001  # an unreadable store: say which, go on
            self._post(IngestFailed(spec.run_id, _one_line(stored.store, e)))
            return
        run.targets[source.name] = 1
        with self._lock:
            self._routes[source.name] = (run, "main", None)
        self._follower.follow_source(source)

    def _new_engine(self, spec: RunSpec) -> Engine | None:
        if self._engine_factory is None:
            return None
        try:
            return self._engine_factory()
        except Exception as e:  # noqa: BLE001  # a broken rules setup must not stop the watching
            self._post(IngestFailed(spec.run_id, f"rules: cannot start ({e}); no alerts for this run"))
            return None

    def _preview(self, run: _Run, path: Path) -> None:
        """Read and post the last ``tail_bytes`` of a line-based file (newest data first)."""
        try:
            reader = self._reader_factory(path)
            if getattr(reader, "kind", "") != "lines":
                return  # snapshots are read whole anyway; streams need their framing from 0
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start = max(0, size - self._tail_bytes)
                f.seek(start)
                data = f.read(size - start)
        except (OSError, ValueError):
            return  # not there yet, or not a format we know: the follower reports it
        if start:
            nl = data.find(b"\n")
            data = data[nl + 1 :] if nl >= 0 else b""
        cut = data.rfind(b"\n") + 1
        if not cut:
            return
        try:
            batch = reader.parse(data[:cut], 1)
        except Exception:  # noqa: BLE001  # the follower meets these lines too and reports them
            return
        if batch.n_records:
            self._post(Preview(run.spec.run_id, (batch,)))

    def start(self) -> None:
        """Start following (the follower's thread is the ingest thread)."""
        if not self._started:
            self._started = True
            self._follower.start()

    def read_all(self) -> None:
        """Read everything the files hold now, on this thread, as if the runs were over."""
        self._follower.read_once()
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            if not run.loaded:
                run.loaded = True
                self._post(HistoryLoaded(run.spec.run_id))

    def stop(self) -> None:
        """Stop the follower and join its threads (file watcher included)."""
        self._follower.stop(timeout=2.0)
        _release_heap(self)

    # ------------------------------------------------------------------ UI-thread calls
    def mute(self, run_id: str, rule: str) -> None:
        """Mute a rule of a run for this session (applied before the engine's next use)."""
        run = self._runs.get(run_id)
        if run is not None:
            run.pending_mutes.append(rule)

    def tick(self, now: float) -> None:
        """Let the engines see the clock (stalls). Never waits: if the ingest thread is busy
        with a run, that run is clearly not stalled, and it is skipped this time."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            if run.engine is None or not run.loaded or not run.lock.acquire(blocking=False):
                continue
            try:
                alerts = self._guard(run, lambda e: e.tick(now))
            finally:
                run.lock.release()
            if alerts:
                self._post(AlertsRaised(run.spec.run_id, tuple(alerts)))

    def progress(self, run_id: str) -> float:
        run = self._runs.get(run_id)
        return 1.0 if run is None else self._fraction(run)

    # ------------------------------------------------------------------ follower callbacks
    def _on_batch(self, path: str, batch: RecordBatch) -> None:
        route = self._routes.get(path)
        if route is None:
            return
        run, role, rank = route
        # a stall is a silence in *arrivals*: live records carry when they arrived (the writer's
        # clock may be skewed, or its timestamps old); the backlog arrived when the file was
        # last written, which its mtime tells on this machine's clock
        now = self._clock() if run.loaded else self._written_at(path)
        with run.lock:
            if role == "main":
                alerts = self._guard(run, lambda e: e.feed(batch, now))
            else:
                r = rank if rank is not None else (batch.rank or 0)
                alerts = self._guard(run, lambda e: e.feed_rank(r, batch, now))
        self._post(BatchArrived(run.spec.run_id, path, batch, tuple(alerts), role == "main",
                                not run.loaded))
        self._check_loaded(run)

    def _written_at(self, path: str) -> float | None:
        """When the file was last written, on the app's clock (which tests may fake): its
        mtime's age in real time (a store's run: its newest record's), counted back from the
        app's now; None if it cannot be read.

        Judging a backlog by its records' own timestamps raised a stall at startup for a live
        run whose writer's clock runs behind ours; its mtime is recent, an abandoned run's old."""
        written = self._follower.last_written(path)
        if written is None:
            return None
        return self._clock() - max(0.0, time.time() - written)

    def _on_text(self, path: str, lines: list[str], first_line: int) -> None:
        route = self._routes.get(path)
        if route is None:
            return
        run = route[0]
        if route[1] == "console":  # (not a W&B log's console: a console file is still optional)
            run.console_seen = True
        with run.lock:
            alerts = self._guard(run, lambda e: e.feed_console(lines, first_line))
        self._post(ConsoleLines(run.spec.run_id, tuple(lines), first_line, tuple(alerts),
                                not run.loaded))
        self._check_loaded(run)

    def _on_status(self, status: TailStatus) -> None:
        route = self._routes.get(status.path)
        if route is not None and route[1] == "console":
            run = route[0]
            if status.state == "waiting" and not run.console_seen:
                return  # console.log is optional: a run without one is normal, not a problem
            if status.state != "waiting":
                run.console_seen = True
        run_id = route[0].spec.run_id if route else ""
        self._post(SourceStatus(run_id, status.path, status.state, status.message))

    # ------------------------------------------------------------------ helpers
    def _guard(self, run: _Run, call: Callable[[Engine], list[Alert]]) -> list[Alert]:
        """Run an engine call; a failing engine is reported once and switched off."""
        engine = run.engine
        if engine is None:
            return []
        while run.pending_mutes:
            rule = run.pending_mutes.pop()
            try:
                engine.mute(rule)
            except ValueError:  # not one of this engine's rules: nothing to mute
                pass
        try:
            return list(call(engine) or ())
        except Exception as e:  # a rule bug costs alerts, never the ingest thread
            log.exception("%s: rule engine failed", run.spec.run_id)
            run.engine = None
            self._post(IngestFailed(run.spec.run_id, f"rules failed ({type(e).__name__}: {e}); "
                                    "alerts are off for this run, please report this"))
            return []

    def _fraction(self, run: _Run) -> float:
        total = sum(run.targets.values())
        if total <= 0:
            return 1.0
        progress = self._follower.progress()
        done = 0
        for path, target in run.targets.items():
            p = progress.get(path)
            if p is not None:
                done += min(p.bytes_read, target)
        return done / total

    def _check_loaded(self, run: _Run, *, settled: bool = True) -> None:
        """Post the run's load progress, and HistoryLoaded once its backlog is all handed on.

        ``settled``: every byte counted as read has been handed on. True on the follower's
        thread (it reads a chunk, then hands it on, then reads the next); not so on another
        thread, which can see a chunk counted as read while its batch is still being parsed:
        calling the run loaded then would make that batch of old records look live (arrived
        just now, alerts ringing).
        """
        if run.loaded:
            return
        fraction = self._fraction(run)
        if fraction < 1.0:
            run.complete_at_pass = None
            self._post(LoadProgress(run.spec.run_id, fraction))
            return
        if not settled:
            # the pass that read the last byte has handed everything on once a later pass
            # has begun (passes run one after the other on the follower's thread)
            passes = self._follower.passes
            if run.complete_at_pass is None or passes <= run.complete_at_pass:
                if run.complete_at_pass is None:
                    run.complete_at_pass = passes
                return
        run.loaded = True
        self._post(HistoryLoaded(run.spec.run_id))
        _settle_heap(self)

    def check_loaded(self) -> None:
        """Backstop (called by the UI's clock): a backlog of blank lines posts no batch.

        Runs on the UI thread, so it only calls a run loaded once the follower has started a
        pass after the one that read the last byte (a second or two later)."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            self._check_loaded(run, settled=False)


_frozen_by: set[int] = set()
_heap_lock = threading.Lock()


def _settle_heap(owner: object) -> None:
    """A backlog is loaded: move everything alive now out of the collector's way.

    A full (generation 2) collection walks every object the process holds: the widget tree,
    style caches, the loaded history's leftovers. That is 50-150 ms on a busy machine, and it
    lands on whichever frame happens to allocate enough to trigger it: typically the one that
    shows a new alert (measured with ``bench/tui.py``). Those objects live as long as the app,
    so ``gc.freeze()`` parks them in the permanent generation and later collections only walk
    what was allocated since. :func:`_release_heap` gives them back when the service stops.
    """
    with _heap_lock:
        _frozen_by.add(id(owner))
        gc.freeze()


def _release_heap(owner: object) -> None:
    with _heap_lock:
        if id(owner) in _frozen_by:
            _frozen_by.discard(id(owner))
            if not _frozen_by:
                gc.unfreeze()  # the app is going: its objects may be collected again


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _one_line(path: Path, e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if str(path) in text else f"{path}: {text}"
