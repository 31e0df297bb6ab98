"""``run_crashed``: the run's own end says it did not finish well.

Every writer that promises an end writes a ``run_end`` event: the bundled trainer and
``RunWriter`` with ``status``, ``exit_code`` and the ``error`` text (``Type: message``), W&B's
exit record with its exit code, MLflow with ``FAILED`` or ``KILLED``. A ``run_end`` whose status
is not a clean finish, whose exit code is not 0, or that carries an error text is an alert:

* an error text ``console_error`` knows (out of memory, tensors on two devices, NCCL, a
  device-side assert, a second backward through one graph...) gets that rule's diagnosis and
  fixes (:func:`~trainwatch.rules.builtin.console_error.diagnose`: one table, read by both);
* another error text is told as it is; an exit code that is a signal is read as one (SIGKILL is
  most often the host's OOM killer, SIGSEGV a native crash);
* a run stopped on purpose (status ``interrupted`` or one of ``stopped_statuses``, or SIGINT /
  SIGTERM: Ctrl-C, a scheduler's time limit, a preemption) is ``stopped_severity`` (a warning by
  default): it did not finish, but nothing in it broke;
* a status that says nothing (``unknown``: a writer closed at exit, no exit code, no error) is an
  info.

One cause is told once: an error the console also shows is told by whichever of this rule and
``console_error`` reads it first (``Context.errors_told``); ``check`` reads the main stream
before the console, so there it is this rule, at error severity, with the run's exit code.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainwatch.rules.builtin.console_error import (
    EXCEPTION,
    MAX_TEXT,
    diagnose,
    exception_key,
    told_by,
)
from trainwatch.rules.config.schema import RuleBase, names, severity
from trainwatch.rules.engine.base import Context, Frame, Hit, Rule, rank_causes


@dataclass(frozen=True)
class CrashConfig(RuleBase):
    finished_statuses: tuple[str, ...] = names()
    """Statuses of a clean finish (compared in lower case); a ``run_end`` without a status is
    one too, unless its exit code or error text says otherwise."""
    stopped_statuses: tuple[str, ...] = names()
    """Statuses of a run stopped on purpose (Ctrl-C, a scheduler, a user's kill)."""
    stopped_severity: str = severity()
    """Severity of a run stopped on purpose (a signal to stop, no error)."""


STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
"""Signals that ask a process to stop: its run was stopped, it did not crash."""
DETACH_KINDS = frozenset({"backward_twice"})
"""Errors of a recurrent state never detached: ``state_detach``'s to tell when it already has
(it runs before this rule in a frame)."""
UNCLEAR_STATUSES = frozenset({"unknown"})
"""Statuses that say nothing of how the run went (``RunWriter``'s for a writer closed at exit):
without an exit code or an error text, an info."""
_EXIT_SIGNAL_BASE = 128
"""A shell reports a process killed by signal N as exit code 128 + N (Python's subprocess as
-N)."""

_SIGNAL_DIAGNOSES: Mapping[int, tuple[str, tuple[tuple[str, float], ...], tuple[str, ...]]] = {
    signal.SIGKILL: (
        "killed by SIGKILL",
        (("the host ran out of memory and the kernel's OOM killer stopped the process", 0.6),
         ("a scheduler or a person killed it (kill -9, a job's hard memory or time limit)", 0.4)),
        ("Look for 'Killed process' in the kernel log (dmesg -T | grep -i kill)",
         "Lower the host memory the run needs: fewer data-loader workers, a memory-mapped dataset",
         "Resume from the last checkpoint"),
    ),
    signal.SIGSEGV: (
        "a segmentation fault (SIGSEGV)",
        (("a native crash in a C++/CUDA extension or a library built for other versions", 0.6),
         ("data-loader workers and a library that is not fork-safe", 0.3)),
        ("Rerun with python -X faulthandler to get the Python stack of the crash",
         "Check that torch, CUDA and the extensions were built for each other"),
    ),
    signal.SIGBUS: (
        "a bus error (SIGBUS)",
        (("shared memory (/dev/shm) too small for the data loader's batches", 0.6),
         ("a memory-mapped file that was truncated or is on a failing disk", 0.3)),
        ("In Docker, raise --shm-size or use --ipc=host", "Lower num_workers"),
    ),
    signal.SIGABRT: (
        "an abort (SIGABRT)",
        (("a native library stopped the process on a failed check (CUDA, NCCL, a C++ assert)",
          0.7),),
        ("Read the last lines of the console: the aborting library says why",
         "Rerun with python -X faulthandler"),
    ),
}
_ERROR_CAUSES = rank_causes([
    ("the script raised an exception it did not catch", 0.8),
    ("the error was raised on purpose (a check or an assert in the training code)", 0.2)])
_ERROR_FIXES = (("Read the traceback at the end of the console log: its last frame in your code "
                "is where it failed"),
                "Reproduce it on the failing step under a debugger: python -m pdb -c continue SCRIPT")
_UNSAID_CAUSES = rank_causes([
    ("an exception or a signal the writer did not record: the console's last lines say which",
     0.7),
    ("the training script exited with an error code of its own (sys.exit(1))", 0.3)])
_UNSAID_FIXES = ("Read the end of the console log (console.log, or the job's output)",
                 "Resume from the last checkpoint once the cause is fixed")
_STOPPED_CAUSES = rank_causes([
    ("stopped by hand (Ctrl-C, kill)", 0.5),
    ("a scheduler's time limit or a preemption (SIGTERM)", 0.5)])
_STOPPED_FIXES = (("Resume from the last checkpoint (trainwatch train --resume for the bundled "
                  "trainer)"),
                  "On a preemptible machine, checkpoint often enough to lose little")


def exit_signal(code: int | None) -> int | None:
    """The signal an exit code says killed the process (137 -> 9, -9 -> 9), if it says one."""
    if code is None:
        return None
    n = -code if code < 0 else code - _EXIT_SIGNAL_BASE if code > _EXIT_SIGNAL_BASE else 0
    return n if 0 < n < 64 else None


def _exit_code(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


@dataclass(frozen=True)
class RunEnd:
    """What a ``run_end`` event says of how the run ended."""

    status: str | None
    exit_code: int | None
    error: str | None

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> RunEnd:
        status = fields.get("status")
        error = fields.get("error")
        return cls(str(status).strip().lower() if status not in (None, "") else None,
                   _exit_code(fields.get("exit_code")),
                   str(error).strip()[:MAX_TEXT] if error not in (None, "") else None)

    def how(self) -> str:
        """``status crashed, exit code 137: SIGKILL``: what the event said, for a message."""
        parts = [f"status {self.status}"] if self.status else []
        if self.exit_code is not None:
            sig = exit_signal(self.exit_code)
            parts.append(f"exit code {self.exit_code}"
                         + (f": {_signal_name(sig)}" if sig is not None else ""))
        return ", ".join(parts)


class RunCrashedRule(Rule):
    id = "run_crashed"

    def __init__(self, cfg: CrashConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.finished = frozenset(s.lower() for s in cfg.finished_statuses)
        self.stopped = frozenset(s.lower() for s in cfg.stopped_statuses)
        self.pending: list[_Pending] = []
        """Ends without an error text, told once the console has been read (:meth:`finish`,
        live :meth:`tick`)."""

    def update(self, frame: Frame) -> list[Hit]:
        if not frame.events:
            return []
        hits: list[Hit] = []
        # (events and the frame's event records are in the same order)
        for ev, pos in zip(frame.events, frame.rec_pos[frame.rec_is_event].tolist()):
            if ev.name == "run_end":
                hit = self._judge(RunEnd.of(ev.fields), pos, ev.step, ev.time)
                if hit is not None:
                    hits.append(hit)
        return hits

    def _judge(self, end: RunEnd, pos: int, step: int, time: float) -> Hit | None:
        sig = exit_signal(end.exit_code)
        clean_status = end.status is None or end.status in self.finished
        if clean_status and end.exit_code in (0, None) and end.error is None:
            return None
        known = diagnose(end.error) if end.error else None
        how = end.how()
        evidence: dict[str, Any] = {"status": end.status, "exit_code": end.exit_code,
                                    "error": end.error}
        if known is None and (end.status in self.stopped or sig in STOP_SIGNALS):
            evidence["kind"] = "stopped"
            return self.alert(pos=pos, severity=self.cfg.stopped_severity, step=step, time=time,
                              metric=None, evidence=evidence, causes=_STOPPED_CAUSES,
                              fixes=_STOPPED_FIXES,
                              message=f"The run was stopped before its end ({how}).")
        if known is not None:
            if told_by(self.ctx, known.kind) == "console_error":
                return None  # the console told this error already: one cause, told once
            if known.kind in DETACH_KINDS and self.ctx.log("state_detach").last(pos) is not None:
                return None  # state_detach told it (its probe): the crash is its symptom
            self.ctx.errors_told[known.kind] = self.id
            evidence["kind"] = known.kind
            return self.alert(pos=pos, severity=self.cfg.severity, step=step, time=time,
                              metric=None, evidence=evidence, causes=known.causes,
                              fixes=known.fixes,
                              message=f"The run crashed ({how}): {known.message}")
        if end.error is not None:
            self.ctx.errors_told[exception_key(end.error)] = self.id
            evidence["kind"] = "error"
            return self.alert(pos=pos, severity=self.cfg.severity, step=step, time=time,
                              metric=None, evidence=evidence, causes=_ERROR_CAUSES,
                              fixes=_ERROR_FIXES,
                              message=f"The run crashed ({how}): {end.error}")
        if sig in _SIGNAL_DIAGNOSES:
            what, causes, fixes = _SIGNAL_DIAGNOSES[sig]
            evidence["kind"] = f"signal_{_signal_name(sig).lower()}"
            return self.alert(pos=pos, severity=self.cfg.severity, step=step, time=time,
                              metric=None, evidence=evidence, causes=causes, fixes=fixes,
                              message=f"The run was ended by {what} ({how}).")
        # No error text: the console, if the run has one, may say what this end does not. It is
        # read after the main stream (check) or alongside it (live): the alert waits for the end
        # of the backfill, or the clock's next tick
        unclear = end.status in UNCLEAR_STATUSES and end.exit_code is None
        evidence["kind"] = "unclear" if unclear else "unsaid"
        self.pending.append(_Pending(pos, step, time, how, evidence, unclear))
        return None

    def tick(self, now: float) -> list[Hit]:
        return self._release()

    def finish(self, now: float) -> list[Hit]:
        return self._release()

    def _release(self) -> list[Hit]:
        """The ends without an error text, told now that the console has been read: not at all
        when the console told a known error (that is the cause), with the console's last
        uncaught exception when it printed one."""
        if not self.pending:
            return []
        by_console = [k for k, rule in self.ctx.errors_told.items() if rule == "console_error"]
        known = [k for k in by_console if not k.startswith(EXCEPTION)]
        exceptions = [k.removeprefix(EXCEPTION) for k in by_console if k.startswith(EXCEPTION)]
        hits: list[Hit] = []
        for p in self.pending:
            if known:
                continue  # the console told the error, with its diagnosis: one cause, once
            if exceptions:
                hits.append(self.alert(
                    pos=p.pos, severity=self.cfg.severity, step=p.step, time=p.time, metric=None,
                    evidence={**p.evidence, "kind": "console_exception",
                              "error": exceptions[-1]},
                    causes=_ERROR_CAUSES, fixes=_ERROR_FIXES,
                    message=f"The run crashed ({p.how}): the console's last exception was "
                            f"{exceptions[-1]}"))
            elif p.unclear:
                hits.append(self.alert(
                    pos=p.pos, severity="info", step=p.step, time=p.time, metric=None,
                    evidence=p.evidence, causes=_UNSAID_CAUSES, fixes=_UNSAID_FIXES,
                    message=f"The run ended without saying how ({p.how}): its writer was "
                            "closed at exit, not by the script."))
            else:
                hits.append(self.alert(
                    pos=p.pos, severity=self.cfg.severity, step=p.step, time=p.time, metric=None,
                    evidence=p.evidence, causes=_UNSAID_CAUSES, fixes=_UNSAID_FIXES,
                    message=f"The run ended in failure ({p.how}), with no error text."))
        self.pending.clear()
        return hits


@dataclass(frozen=True)
class _Pending:
    """A ``run_end`` without an error text, waiting for the console to be read."""

    pos: int
    step: int
    time: float
    how: str
    evidence: Mapping[str, Any]
    unclear: bool
    """Its status says nothing (``unknown``, no exit code): an info, not an error."""
