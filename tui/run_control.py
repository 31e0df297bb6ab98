"""Stopping and restarting a run trainwatch started (the supervisor's process record).

A mixin of :class:`~trainwatch.tui.app.TrainwatchApp`. Only runs whose ``process.json`` says
trainwatch started them are ever signalled; the blocking parts run in a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work

from trainwatch.tui import messages as m
from trainwatch.tui.confirm import ConfirmScreen
from trainwatch.tui.run_model import RunModel

if TYPE_CHECKING:
    from trainwatch.tui.app import TrainwatchApp

    _Base = TrainwatchApp
else:
    _Base = object


class RunControl(_Base):
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
            self.notify(f"{verb}: this run was not started by trainwatch, so it is read-only",
                        severity="warning")
            return None
        return model, info

    def action_stop_run(self) -> None:
        found = self._supervised("stop")
        if found is None:
            return
        model, info = found
        if not info.alive():
            self.notify(f"{model.run_id} is not running ({info.status()})")
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._stop_worker(model.run_id, model.spec.root)

        self.push_screen(ConfirmScreen(
            f"Stop run {model.run_id} (pid {info.pid})?",
            "Sends SIGINT (like Ctrl-C, so it can save a checkpoint), SIGTERM after 10 s, "
            "then SIGKILL."), answer)

    @work(thread=True, exclusive=True, group="supervise", exit_on_error=False)
    def _stop_worker(self, run_id: str, root: Any) -> None:
        from trainwatch.trainer.supervise import SuperviseError, stop_run

        try:
            stop_run(root, grace=10.0, on_step=lambda st: self.post_message(
                m.SuperviseStep(run_id, st.message, st.action == "gave_up")))
        except (SuperviseError, OSError) as e:
            self.post_message(m.SuperviseStep(run_id, str(e), True))

    def action_restart_run(self) -> None:
        found = self._supervised("restart")
        if found is None:
            return
        model, info = found
        if info.alive():
            self.notify(f"{model.run_id} is still running: stop it first (k)", severity="warning")
            return
        self._restart_worker(model.run_id, model.spec.root, tuple(info.command), info.cwd)

    @work(thread=True, exclusive=True, group="supervise", exit_on_error=False)
    def _restart_worker(self, run_id: str, root: Any, command: tuple[str, ...], cwd: str) -> None:
        from trainwatch.trainer.supervise import SuperviseError, start_run

        try:
            handle = start_run(command, root, cwd=cwd or None)
        except (SuperviseError, OSError) as e:
            self.post_message(m.SuperviseStep(run_id, str(e), True))
            return
        self.post_message(m.SuperviseStep(run_id, f"restarted {run_id} (pid {handle.pid})"))

    def on_supervise_step(self, msg: m.SuperviseStep) -> None:
        self.notify(msg.text, severity="error" if msg.error else "information", timeout=5)
        self._process_at = float("-inf")  # re-read process.json at the next tick

