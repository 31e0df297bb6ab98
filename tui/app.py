"""The live TUI: ``trainwatch PATH``.

:func:`make_app` is the one factory the CLI and the tests use. The app owns the run models (the
stores) and everything drawn; one ingest thread (see :mod:`trainwatch.tui.ingest`) reads, parses
and runs the rules, and posts immutable messages. Redraws are coalesced: a lone record is drawn
at once (``max_fps`` at most), a stream at :data:`~trainwatch.tui.redraw.STREAM_FPS`; a redraw
draws only what changed, and a chart repaints only the rows that changed. With nothing arriving,
the only timer is the 1 s clock that ages "last record 3 s ago" and lets the rules notice a stall.

This module holds the app's state, its start and stop, and what the ingest messages do to the
run models. The rest are mixins, one job each: :mod:`~trainwatch.tui.redraw` (when to draw),
:mod:`~trainwatch.tui.alert_feed` (alerts, bell, mute), :mod:`~trainwatch.tui.app_actions`
(view keys and navigation) and :mod:`~trainwatch.tui.run_control` (new run, stop, restart,
resume, the quit prompt).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App
from textual.screen import ModalScreen, Screen
from textual.timer import Timer

from trainwatch.tui import messages as m
from trainwatch.tui.alert_feed import AlertFeed
from trainwatch.tui.app_actions import ViewActions
from trainwatch.tui.config import AppConfig, EngineFactory
from trainwatch.tui.dashboard import Dashboard
from trainwatch.tui.header import HeaderInfo, header_info
from trainwatch.tui.ingest import IngestService
from trainwatch.tui.keys import BINDINGS, KEYS
from trainwatch.tui.launch import LaunchForm, LaunchOptions
from trainwatch.tui.redraw import Dirty, Redraws
from trainwatch.tui.run_control import RunControl
from trainwatch.tui.run_model import FileState, RunModel
from trainwatch.tui.run_state import run_state
from trainwatch.tui.runs_screen import RunsScreen
from trainwatch.tui.target import WatchTarget, discover
from trainwatch.tui.view_state import ViewState

__all__ = ["AppConfig", "TrainwatchApp", "make_app"]

PROCESS_EVERY_S = 5.0
"""Seconds between reads of the current run's ``process.json``..."""
LAUNCHED_PROCESS_EVERY_S = 0.5
"""...or, for a run started from this app, at every clock tick."""
MODAL_BLOCKED = frozenset(k.action.split("(")[0] for k in KEYS) - {"quit", "help"}
"""The key table's actions that do nothing while a dialog is open."""


def malformed_note(model: RunModel) -> str:
    """One line: how many lines were skipped, where the first is, and how to see them all."""
    n = model.malformed
    text = f"{n:,} malformed line{'s' if n > 1 else ''} skipped"
    if model.first_malformed is not None and model.spec.metric_files:
        main = model.spec.metric_files[0]
        text += (f" (first: {main.name} line {model.first_malformed:,}; "
                 f"trainwatch inspect {main} lists them)")
    return text


class TrainwatchApp(ViewActions, RunControl, AlertFeed, Redraws, App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "trainwatch"
    BINDINGS = BINDINGS

    def __init__(self, config: AppConfig, engine_factory: EngineFactory | None,
                 target: WatchTarget | None = None, launch: LaunchOptions | None = None) -> None:
        super().__init__()
        self.config = config
        self.launch_options = launch or LaunchOptions.from_env()
        """Where new runs start, the recently-used list, the stop grace period."""
        self.launched: dict[str, Path] = {}
        self.control_status: dict[str, tuple[str, float, bool]] = {}
        self._adopted: list[Path] = []
        self.last_form: LaunchForm | None = None
        """The new-run form as last started (the next ``n`` starts from it)."""
        self.target = target
        self.models: dict[str, RunModel] = {}
        self.current: str | None = None
        self.marked: set[str] = set()
        self.view = ViewState()
        self.muted: set[str] = set()
        self.bell_on = config.bell
        self.notify_on = config.notify
        self.read_only = bool(config.read_only)
        self.notices: dict[str, list[str]] = {}
        self.bells = 0
        """Bells rung for error alerts."""
        self.sent_notifications: list[str] = []
        """Desktop notification texts sent (tests read it; headless apps write nothing)."""
        self.frames: list[tuple[float, int | None]] = []
        """(monotonic time a frame reached the screen, newest step it showed): benches read it."""
        self.first_frame = threading.Event()
        """Set once data is on screen (the ingest thread waits for it before the backlog)."""
        self.loaded = threading.Event()
        """Set when every run's history is loaded (``--once`` waits for it)."""
        self._engine_factory = engine_factory
        self._ingest: IngestService | None = None
        self._ingest_lock = threading.Lock()
        self._closing = False
        self._dirty = Dirty(full=True)
        self._flush_pending = False
        self._flush_timer: Timer | None = None
        self._last_flush = 0.0
        self._streaming = False
        """Data is arriving continuously (frames are rationed, latency matters less)."""
        self._arrivals: deque[float] = deque(maxlen=16)
        self._seq = 0
        self._last_ring = float("-inf")
        self._process: dict[str, Any] = {}
        self._process_at = float("-inf")
        self._rescan_at = time.monotonic()
        self._ingest_ready = threading.Event()
        """Set once the ingest service exists (a run started at once waits for it)."""
        self._quitting = False
        """The user chose to stop the runs started here and quit: the next q just quits."""
        self._quit_asked = False
        self._crash_shown: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Under a dialog (new run, confirm, help), the app's keys other than quit and help
        are off: typing ``r`` in the new-run screen's list must not open the runs list.

        Once quitting, every key is off: ``q n`` typed fast pushed the new-run dialog into an
        app that was shutting down, and it crashed. (``_exit`` is Textual's own flag, set by
        :meth:`exit`; there is no public one.)
        """
        if getattr(self, "_exit", False):
            return False
        return not (action in MODAL_BLOCKED and isinstance(self.screen, ModalScreen))

    def get_default_screen(self) -> Screen:
        return Dashboard()

    def on_mount(self) -> None:
        self.theme = self.config.theme
        self._start_ingest()
        if not self.config.once:
            self.set_interval(1.0, self._on_clock)

    def on_unmount(self) -> None:
        with self._ingest_lock:
            self._closing = True
            if self._ingest is not None:
                self._ingest.stop()
        self._ingest_ready.set()  # a run-follow worker still waiting sees _closing and ends

    @work(thread=True, exclusive=True, group="ingest", exit_on_error=False)
    def _start_ingest(self) -> None:
        """Find the runs, post the newest data of each, then start the ingest thread."""
        target = self.target or discover(self.config.path, self.config.run)
        self.target = target
        self.post_message(m.TargetFound(target))
        service = IngestService(
            self.post_message, self._engine_factory,
            poll_interval=self.config.poll_interval, tail_bytes=self.config.tail_bytes,
            wake_source=self.config.wake_source, clock=self.config.clock,
        )
        with self._ingest_lock:
            if self._closing:
                return
            self._ingest = service
        self._ingest_ready.set()
        for spec in target.runs:
            service.add_run(spec, preview=not self.config.once)
        if self.config.once:
            service.read_all()
            return
        # let the newest data reach the screen before the backlog competes for the CPU
        self.first_frame.wait(0.5)
        with self._ingest_lock:
            if not self._closing:
                service.start()

    @work(thread=True, exclusive=True, group="rescan", exit_on_error=False)
    def _rescan(self) -> None:
        """A folder of runs may gain runs, a missing directory may appear: look again."""
        service, target = self._ingest, self.target
        if service is None or target is None:
            return
        found = discover(self.config.path, self.config.run)
        known = {r.run_id: r for r in target.runs}
        new = tuple(r for r in found.runs if known.get(r.run_id) != r)
        if not new:
            return
        self.target = WatchTarget(target.path, found.kind if found.kind != "waiting" else
                                  target.kind, tuple({**known, **{r.run_id: r for r in new}}
                                                     .values()), target.read_only)
        self.post_message(m.RunsFound(new))  # before any of their data
        for spec in new:
            service.add_run(spec)

    # ------------------------------------------------------------------ messages
    def on_target_found(self, msg: m.TargetFound) -> None:
        t = msg.target
        self.read_only = t.read_only if self.config.read_only is None else self.config.read_only
        for spec in t.runs:
            self.models.setdefault(spec.run_id, RunModel(
                spec, self.config.recent_points, console_lines=self.config.console_lines))
        if self.current is None and t.runs:
            self.current = t.runs[0].run_id
        if t.kind == "sweep" and len(t.runs) > 1 and not self.config.once:
            self.push_screen(RunsScreen())
        self._mark(full=True)

    def on_runs_found(self, msg: m.RunsFound) -> None:
        for spec in msg.runs:
            model = self.models.get(spec.run_id)
            if model is None:
                self.models[spec.run_id] = RunModel(
                    spec, self.config.recent_points, console_lines=self.config.console_lines)
            else:
                model.spec = spec
        current = self.current_model()
        if msg.runs and (current is None or current.last_step is None):
            self.current = msg.runs[0].run_id
        self._mark(full=True)

    def on_preview(self, msg: m.Preview) -> None:
        model = self.models.get(msg.run_id)
        if model is not None:
            model.apply_preview(msg.batches)
            self._mark(full=msg.run_id == self.current)

    def on_batch_arrived(self, msg: m.BatchArrived) -> None:
        model = self.models.get(msg.run_id)
        if model is None:
            return
        changed = model.apply_batch(msg.batch, main=msg.main)
        if not msg.history and msg.batch.n_records:
            model.last_arrival = self.config.clock()
            self._arrivals.append(time.monotonic())
        self._add_alerts(model, msg.alerts, live=not msg.history)
        if msg.run_id == self.current or msg.run_id in self.marked:
            self._dirty.changed |= changed
            if not msg.history:
                self._dirty.drawn_steps.append((msg.read_at, model.last_step))
        self._mark()

    def on_console_lines(self, msg: m.ConsoleLines) -> None:
        model = self.models.get(msg.run_id)
        if model is None:
            return
        if msg.first_line == 1 and model.console:
            # the source started over (a W&B log read again from the top: its console comes
            # in the metrics stream, so no reset of the console file says so)
            model.console.clear()
            if msg.run_id == self.current:
                self._dirty.reset_console = True
        model.console.extend(msg.lines)
        if msg.run_id == self.current:
            self._dirty.console.extend(msg.lines)
        self._add_alerts(model, msg.alerts, live=not msg.history)
        self._mark()

    def on_alerts_raised(self, msg: m.AlertsRaised) -> None:
        model = self.models.get(msg.run_id)
        if model is not None:
            self._add_alerts(model, msg.alerts, live=True)
            self._mark()

    def on_history_loaded(self, msg: m.HistoryLoaded) -> None:
        model = self.models.get(msg.run_id)
        if model is None or model.loaded:
            return
        model.finish_loading()
        if all(x.loaded for x in self.models.values()):
            self.loaded.set()
        self._mark(full=True)

    def on_load_progress(self, msg: m.LoadProgress) -> None:
        model = self.models.get(msg.run_id)
        if model is not None and not model.loaded:
            model.progress = msg.fraction
            self._mark()

    def on_source_status(self, msg: m.SourceStatus) -> None:
        model = self.models.get(msg.run_id)
        if model is None:
            if msg.text:
                self._notice("", msg.text)
            return
        model.files[msg.path] = FileState(msg.state, msg.text)
        if msg.state == "reset" and model.spec.console and msg.path == str(model.spec.console):
            model.console.clear()
            self._dirty.reset_console = True
        self._mark()

    def on_ingest_failed(self, msg: m.IngestFailed) -> None:
        self._notice(msg.run_id, msg.text)
        self.notify(msg.text, severity="error", timeout=8)
        self._mark()

    # ------------------------------------------------------------------ what is shown
    def current_model(self) -> RunModel | None:
        return self.models.get(self.current) if self.current else None

    def overlay_models(self) -> list[RunModel]:
        return [self.models[r] for r in sorted(self.marked) if r in self.models and r != self.current]

    def overlaying(self) -> bool:
        return bool(self.overlay_models())

    def state_of(self, run_id: str) -> str:
        model = self.models[run_id]
        return run_state(model, self.config.clock(), self._process.get(run_id))

    def header_for(self, model: RunModel) -> HeaderInfo:
        notes = [*self.notices.get(model.run_id, []), *self.notices.get("", [])]
        notes += [f.text for f in model.files.values() if f.state in ("waiting", "error") and f.text]
        if model.malformed:
            notes.append(malformed_note(model))
        status, failed = self.status_note(model.run_id) or (None, False)
        if status and failed:  # a start or stop that failed asks for attention
            notes.append(status)
        return header_info(model, self.state_of(model.run_id), self.config.clock(), self.read_only,
                           tuple(notes[-3:]), 1 + len(self.overlay_models()),
                           process=self._process.get(model.run_id),
                           status=None if failed else status)

    def _notice(self, run_id: str, text: str) -> None:
        notes = self.notices.setdefault(run_id, [])
        if text not in notes:
            notes.append(text)
            del notes[:-5]

    def _on_clock(self) -> None:
        """Once a second: age the header, let the rules see the clock, re-read process state."""
        now = self.config.clock()
        if self._ingest is not None:
            self._ingest.tick(now)
            self._ingest.check_loaded()
        # a run started here is watched closely: its crash should show within a second
        ours = self.current in self.launched or (self._adopted and
                                                 self.current in self.launched_runs())
        every = LAUNCHED_PROCESS_EVERY_S if ours else PROCESS_EVERY_S
        if time.monotonic() - self._process_at > every:
            self._process_at = time.monotonic()
            self._read_processes()
        if time.monotonic() - self._rescan_at > self.config.rescan_interval:
            self._rescan_at = time.monotonic()
            if self.target is not None and self.target.kind in ("sweep", "waiting"):
                self._rescan()
        for screen in self._data_screens():
            model = self.models.get(getattr(screen, "run_id", None) or self.current or "")
            header = screen.query("#header")
            if model is not None and header:
                header.first().show(self.header_for(model))
        self.reveal_crash()

    def _read_processes(self) -> None:
        model = self.current_model()
        if model is None or not (model.spec.root / "process.json").is_file():
            return
        from trainwatch.trainer.supervise import read_process

        try:
            self._process[model.run_id] = read_process(model.spec.root)
        except (OSError, ValueError):
            pass



def default_engine_factory(rules: Any) -> EngineFactory:
    """Each run gets its own ``RuleEngine(rules, live=True)`` (the defaults when None)."""
    from trainwatch.rules import RuleEngine, load_rules_config

    cfg = rules if rules is not None else load_rules_config(None)
    return partial(RuleEngine, cfg, live=True)


def make_app(config: AppConfig, launch: LaunchOptions | None = None) -> TrainwatchApp:
    """The app for ``config``: the one factory used by the CLI and by the tests. ``launch``
    says where runs started with ``n`` go (default: from the environment, see
    :meth:`LaunchOptions.from_env`)."""
    factory = config.engine_factory or default_engine_factory(config.rules)
    return TrainwatchApp(config, factory, launch=launch)
