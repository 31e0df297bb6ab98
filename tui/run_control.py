"""Starting, stopping, restarting and resuming runs through the supervisor.

A mixin of :class:`~trainwatch.tui.app.TrainwatchApp`. Only runs whose ``process.json`` says
trainwatch started them are ever signalled; every other run is read-only. The blocking parts
(starting a process, waiting out a stop's grace period) run in worker threads that report back
with messages; each step of a stop is shown as it happens.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work

from trainwatch.tui import messages as m
from trainwatch.tui.confirm import ConfirmScreen
from trainwatch.tui.console_pane import ConsolePane
from trainwatch.tui.control_messages import RunLaunched, StopsDone
from trainwatch.tui.dashboard import Dashboard
from trainwatch.tui.launch import (
    LaunchPlan,
    has_checkpoint,
    resume_command,
    runs_base,
    shown_path,
    spec_for,
)
from trainwatch.tui.new_run_screen import NewRunScreen
from trainwatch.tui.recent import save_recent
from trainwatch.tui.run_model import RunModel
from trainwatch.tui.target import RunSpec

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

    _Base = TrainwatchApp
else:
    _Base = object

INGEST_WAIT_S = 10.0
"""How long a new run waits for the ingest service to exist (only right after start-up)."""
STATUS_SHOW_S = 30.0
"""A start/stop step stays on the header's second line this long (a failure until replaced)."""


class RunControl(_Base):
    # ------------------------------------------------------------------ state (see __init__)
    launched: dict[str, Path]
    """Runs started (or restarted) from this app: the ones quitting asks about."""
    control_status: dict[str, tuple[str, float, bool]]
    """The newest start/stop step of each run: (text, monotonic time, is an error)."""
    _adopted: list[Path]

    # ------------------------------------------------------------------ who may be signalled
    def _supervised(self, verb: str) -> tuple[RunModel, Any] | None:
        """The current run and its process record, when trainwatch started it (else a toast)."""
        model = self.current_model()
        if model is None:
            return None
        from trainwatch.trainer.supervise import read_process

        try:
            info = read_process(model.spec.root)
        except (OSError, ValueError) as e:
            self.notify(f"{model.spec.root}: cannot read process.json ({e})", severity="error")
            return None
        if info is None or not info.ours:
            self.notify(f"{verb}: {model.run_id} was not started by trainwatch, so it is "
                        "read-only", severity="warning")
            return None
        return model, info

    def _status(self, run_id: str, text: str, error: bool = False) -> None:
        self.control_status[run_id] = (text, time.monotonic(), error)
        self._mark(full=True)

    def status_note(self, run_id: str) -> tuple[str, bool] | None:
        """The run's newest start/stop step and whether it failed, while it is recent (a failed
        one until the next)."""
        entry = self.control_status.get(run_id)
        if entry is None:
            return None
        text, at, error = entry
        return (text, error) if error or time.monotonic() - at < STATUS_SHOW_S else None

    def adopt_run(self, root: Path) -> None:
        """Count a run started through the supervisor by whoever built this app (``trainwatch
        demo``) as started here: quitting asks whether to keep it running."""
        self._adopted.append(Path(root).absolute())

    def launched_runs(self) -> dict[str, Path]:
        """Run id -> directory of every run started from this app (or adopted)."""
        out = dict(self.launched)
        for root in self._adopted:
            rid = next((r for r, mod in self.models.items()
                        if mod.spec.root.absolute() == root), root.name)
            out.setdefault(rid, root)
        return out

    # ------------------------------------------------------------------ new run
    def action_new_run(self) -> None:
        if self.config.once or isinstance(self.screen, NewRunScreen):
            return

        def done(plan: LaunchPlan | None) -> None:
            if plan is not None:
                self.last_form = plan.form
                self.notify(f"starting {plan.name}…", timeout=3)
                self._launch_worker(plan)

        base = runs_base(self.target, self.launch_options.cwd)
        self.push_screen(NewRunScreen(self.launch_options, base, self.last_form), done)

    @work(thread=True, group="launch", exit_on_error=False)
    def _launch_worker(self, plan: LaunchPlan) -> None:
        from trainwatch.trainer.supervise import SuperviseError, start_run

        try:
            handle = start_run(plan.command, plan.run_dir, cwd=plan.cwd)
        except (SuperviseError, OSError) as e:
            self.post_message(m.SuperviseStep("", f"cannot start {plan.name}: {e}", True))
            return
        form = replace(plan.form, run_dir="")  # the next run gets a fresh directory
        note = save_recent(self.launch_options.recent_file, form)
        self.post_message(RunLaunched(plan, handle.pid, note))

    def on_run_launched(self, msg: RunLaunched) -> None:
        run_id = self.follow_run(msg.plan.run_dir)
        self.launched[run_id] = msg.plan.run_dir
        where = shown_path(msg.plan.run_dir, self.launch_options.cwd)
        self._status(run_id, f"started pid {msg.pid} in {where}")
        self.notify(f"started {msg.plan.name} (pid {msg.pid}) in {where}", timeout=5)
        if msg.note:
            self.notify(msg.note, severity="warning", timeout=8)

    def follow_run(self, root: Path) -> str:
        """Show the run in ``root`` on the dashboard and follow its files; returns its id."""
        spec = spec_for(root, self.target, {rid: mod.spec for rid, mod in self.models.items()})
        if spec.run_id not in self.models:
            self.models[spec.run_id] = RunModel(
                spec, self.config.recent_points, console_lines=self.config.console_lines)
            if self.target is not None:
                self.target = replace(self.target, runs=(*self.target.runs, spec))
            self._follow_worker(spec)
        self.current = spec.run_id
        while len(self.screen_stack) > 1 and not isinstance(self.screen, Dashboard):
            self.pop_screen()
        self._process_at = float("-inf")  # read its process.json at the next tick
        self._mark(full=True)
        return spec.run_id

    @work(thread=True, group="follow", exit_on_error=False)
    def _follow_worker(self, spec: RunSpec) -> None:
        if not self._ingest_ready.wait(INGEST_WAIT_S):
            return
        with self._ingest_lock:
            service = None if self._closing else self._ingest
        if service is not None:
            service.add_run(spec)

    # ------------------------------------------------------------------ stop
    def action_stop_run(self) -> None:
        found = self._supervised("stop")
        if found is None:
            return
        model, info = found
        if not info.alive():
            self.notify(f"{model.run_id} is not running ({info.status()})")
            return
        grace = self.launch_options.stop_grace

        def answer(yes: bool | None) -> None:
            if yes:
                self._stop_worker(((model.run_id, model.spec.root),), grace, False)

        self.push_screen(ConfirmScreen(
            f"Stop run {model.run_id} (pid {info.pid})?",
            f"Sends SIGINT (like Ctrl-C, so it can save a checkpoint), SIGTERM after {grace:g} s, "
            "then SIGKILL."), answer)

    @work(thread=True, group="supervise", exit_on_error=False)
    def _stop_worker(self, runs: tuple[tuple[str, Path], ...], grace: float, quit_after: bool
                     ) -> None:
        """Stop each run in turn, posting every step; with ``quit_after``, then StopsDone."""
        from trainwatch.trainer.supervise import StopStep, SuperviseError, stop_run

        for run_id, root in runs:
            def step(st: StopStep, run_id: str = run_id) -> None:
                text = st.message
                if st.action == "signal" and st.signal_name != "SIGINT":
                    text += f" after {st.elapsed:.1f} s" if st.elapsed < 10 else \
                        f" after {st.elapsed:.0f} s"  # the grace period, as it really was
                self.post_message(m.SuperviseStep(run_id, text, st.action == "gave_up"))

            try:
                stop_run(root, grace=grace, on_step=step)
            except (SuperviseError, OSError) as e:
                self.post_message(m.SuperviseStep(run_id, str(e), True))
        if quit_after:
            self.post_message(StopsDone())

    # ------------------------------------------------------------------ restart / resume
    def action_restart_run(self) -> None:
        found = self._supervised("restart")
        if found is None:
            return
        model, info = found
        if info.alive():
            self.notify(f"{model.run_id} is still running: stop it first (k)", severity="warning")
            return
        self._start_again(model, tuple(info.command), info.cwd, "restarted")

    def action_resume_run(self) -> None:
        found = self._supervised("resume")
        if found is None:
            return
        model, info = found
        root = model.spec.root
        if info.alive():
            self.notify(f"{model.run_id} is still running: stop it first (k)", severity="warning")
            return
        command = resume_command(info.command, root)
        if command is None:
            self.notify(f"resume: {model.run_id} is not a run of the bundled trainer, so there is "
                        "no checkpoint to resume from; R restarts it", severity="warning")
            return
        if not has_checkpoint(root):
            self.notify(f"resume: no checkpoint in {root / 'checkpoints'}; R restarts the run "
                        "from step 0", severity="warning")
            return
        self._start_again(model, command, info.cwd, "resumed")

    def _start_again(self, model: RunModel, command: tuple[str, ...], cwd: str, verb: str) -> None:
        self.launched[model.run_id] = model.spec.root
        self._crash_shown.discard(model.run_id)
        self._restart_worker(model.run_id, model.spec.root, command, cwd, verb)

    @work(thread=True, group="supervise", exit_on_error=False)
    def _restart_worker(self, run_id: str, root: Path, command: tuple[str, ...], cwd: str,
                        verb: str = "restarted") -> None:
        from trainwatch.trainer.supervise import SuperviseError, start_run

        try:
            handle = start_run(command, root, cwd=cwd or None)
        except (SuperviseError, OSError) as e:
            self.post_message(m.SuperviseStep(run_id, str(e), True))
            return
        self.post_message(m.SuperviseStep(run_id, f"{verb} {run_id} (pid {handle.pid})"))

    def on_supervise_step(self, msg: m.SuperviseStep) -> None:
        self.notify(msg.text, severity="error" if msg.error else "information", timeout=5)
        if msg.run_id:
            self._status(msg.run_id, msg.text, msg.error)
        self._process_at = float("-inf")  # re-read process.json at the next tick

    # ------------------------------------------------------------------ quitting
    def live_launched(self) -> list[tuple[str, Path]]:
        """Runs started from this app that are still running."""
        from trainwatch.trainer.supervise import read_process

        live = []
        for run_id, root in self.launched_runs().items():
            info = read_process(root)
            if info is not None and info.ours and info.alive():
                live.append((run_id, root))
        return live

    async def action_quit(self) -> None:
        """Quit; while a run started here is training, ask first whether to keep it running
        (the default: its monitor records its end either way)."""
        live = [] if self._quitting else self.live_launched()
        if not live or (self._quit_asked and isinstance(self.screen, ConfirmScreen)):
            self.exit()  # q at the question itself: quit, keeping the runs
            return
        names = ", ".join(rid for rid, _root in live)
        several = len(live) > 1
        grace = self.launch_options.stop_grace

        def answer(keep: bool | None) -> None:
            self._quit_asked = False
            if keep is None:
                return
            if keep:
                self.exit()
                return
            self._quitting = True
            self._stop_worker(tuple(live), grace, True)

        self._quit_asked = True
        self.push_screen(ConfirmScreen(
            f"Run{'s' if several else ''} {names} {'are' if several else 'is'} still training. "
            f"Keep {'them' if several else 'it'} running? [Y/n]",
            "Y or enter: quit and leave it training; its end is still recorded, and "
            "`trainwatch DIR` shows it again. n: stop it first (SIGINT, SIGTERM after "
            f"{grace:g} s, then SIGKILL), then quit. esc: stay.",
            default=True, cancellable=True, title="Quit"), answer)

    def on_stops_done(self, _msg: StopsDone) -> None:
        self.exit()

    # ------------------------------------------------------------------ a crashed run
    def reveal_crash(self) -> None:
        """The first time the current run shows as crashed, make sure its console (the last
        lines of ``console.log``, where the traceback is) is on screen, also where the console
        is on demand (a short terminal)."""
        run_id = self.current
        model = self.current_model()
        if run_id is None or model is None or run_id in self._crash_shown:
            return
        if not self.state_of(run_id).startswith("crashed"):
            return
        screen = self.screen
        # not yet: the lines are still on their way, or the dashboard has not drawn them (the
        # next tick looks again)
        if (not model.console or not isinstance(screen, Dashboard)
                or screen.has_class("-no-console-file")):
            return
        self._crash_shown.add(run_id)
        panes = screen.query(ConsolePane)
        if panes and not panes.first().display:
            screen.toggle_console()
