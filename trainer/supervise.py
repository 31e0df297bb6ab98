"""Start, watch and stop training runs so they outlive the terminal that started them. Stdlib only.

``start_run`` launches a small *monitor* (``python -m trainwatch.trainer.supervise --monitor``) in
a session of its own. The monitor forks once more (so nobody has to reap it: it is reparented to
init), starts the command in yet another new session with stdin from ``/dev/null`` and
stdout+stderr appended to ``RUN_DIR/console.log``, records it in ``RUN_DIR/process.json``, waits
for it and records how it ended. Neither process has a controlling terminal, so closing the
terminal or an SSH hang-up (SIGHUP) reaches neither; the launcher (a TUI, a shell) may quit at
any time and the end of the run is still recorded.

``stop_run`` signals only runs whose ``process.json`` says trainwatch started them, and only after
checking that the pid still belongs to the same process (its start time, read from ``/proc`` or
``ps``), so a recycled pid is never signalled. It sends SIGINT to the run's process group (what
Ctrl-C does), then SIGTERM after a grace period, then SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainwatch.trainer.process import (
    CONSOLE_FILE,
    MARK,
    PROCESS_FILE,
    RUN_DIR_ENV,
    STATE_EXITED,
    STATE_FAILED,
    STATE_KILLED,
    STATE_LOST,
    STATE_RUNNING,
    ProcessInfo,
    is_alive,
    proc_start_token,
    read_process,
    replace_info,
    wait_ended,
    write_process,
)

__all__ = [
    "CONSOLE_FILE", "MARK", "PROCESS_FILE", "RUN_DIR_ENV", "STATE_EXITED", "STATE_FAILED",
    "STATE_KILLED", "STATE_LOST", "STATE_RUNNING", "ProcessInfo", "RunHandle", "StopStep",
    "SuperviseError", "is_alive", "main", "proc_start_token", "read_process", "start_run",
    "stop_run", "wait_ended",
]


@dataclass(frozen=True)
class RunHandle:
    run_dir: Path
    pid: int
    """The command's pid (also its process-group and session id)."""
    monitor_pid: int
    console: Path
    process_file: Path

    def info(self) -> ProcessInfo | None:
        return read_process(self.run_dir)

    def wait(self, timeout: float | None = None, poll: float = 0.05) -> ProcessInfo | None:
        """Wait until the monitor records the end (None when ``timeout`` passes first)."""
        return wait_ended(self.run_dir, timeout, poll)


class SuperviseError(RuntimeError):
    """Starting or stopping a run failed; the message is one line."""


# ---------------------------------------------------------------------------- starting


def start_run(
    cmd: Sequence[str],
    run_dir: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 15.0,
) -> RunHandle:
    """Start ``cmd`` detached, supervised, logging to ``run_dir/console.log``.

    ``env`` replaces the environment (default: this process's); ``TRAINWATCH_RUN_DIR`` is always
    set to ``run_dir`` and ``PYTHONUNBUFFERED=1`` added unless given, so Python output reaches the
    console log line by line. Returns once the command has been started.
    """
    if not cmd:
        raise SuperviseError("start_run: empty command")
    run_dir = Path(run_dir).absolute()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SuperviseError(f"{run_dir}: cannot create the run directory ({e.strerror})") from e
    info = read_process(run_dir)
    if info is not None and info.alive():
        raise SuperviseError(f"{run_dir}: a run is already active there (pid {info.pid})")
    child_env = dict(os.environ if env is None else env)
    child_env[RUN_DIR_ENV] = str(run_dir)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    work_dir = str(Path(cwd).absolute()) if cwd is not None else os.getcwd()
    r, w = os.pipe()
    spec = json.dumps({"cmd": list(cmd), "run_dir": str(run_dir), "cwd": work_dir,
                       "env": child_env, "fd": w})
    try:
        # the monitor's own errors (a broken install) land in the console log too
        with open(run_dir / CONSOLE_FILE, "ab") as console:
            launcher = subprocess.Popen(
                [sys.executable, "-m", "trainwatch.trainer.supervise", "--monitor"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=console,
                start_new_session=True, pass_fds=(w,), cwd=work_dir, env=child_env,
            )
    except OSError as e:
        os.close(r)
        os.close(w)
        raise SuperviseError(f"cannot start the monitor ({e})") from e
    os.close(w)
    assert launcher.stdin is not None
    launcher.stdin.write(spec.encode())
    launcher.stdin.close()
    launcher.wait()  # the first monitor process exits as soon as it has forked
    msg = _read_pipe(r, timeout)
    os.close(r)
    try:
        reply = json.loads(msg) if msg else {}
    except ValueError:
        reply = {}
    if "pid" not in reply:
        why = reply.get("error") or f"no reply from the monitor (see {run_dir / CONSOLE_FILE})"
        raise SuperviseError(f"cannot start {cmd[0]}: {why}")
    return RunHandle(run_dir, int(reply["pid"]), int(reply["monitor_pid"]),
                     run_dir / CONSOLE_FILE, run_dir / PROCESS_FILE)


def _read_pipe(fd: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        b = os.read(fd, 4096)
        if not b:
            break
        chunks.append(b)
        if b.endswith(b"\n"):
            break
    return b"".join(chunks).decode("utf-8", "replace")


def _monitor_main() -> int:
    """The detached monitor: fork away from the launcher, start the command, record its end."""
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    if os.fork() > 0:
        os._exit(0)  # the launcher reaps this one; the grandchild is reparented to init
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN):
        signal.signal(sig, signal.SIG_IGN)  # not ours to die from: only the run is signalled
    fd = int(spec["fd"])
    run_dir = Path(spec["run_dir"])
    cmd = [str(c) for c in spec["cmd"]]
    console = open(run_dir / CONSOLE_FILE, "ab", buffering=0)  # noqa: SIM115
    try:
        child = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=console, cwd=spec["cwd"],
            env=spec["env"], start_new_session=True,
            # the command gets default signal dispositions, not the monitor's ignores (the
            # monitor runs no threads, so preexec_fn is safe here)
            preexec_fn=_restore_signals,  # noqa: PLW1509
        )
    except OSError as e:
        now = time.time()
        err = f"{e.strerror or e}: {cmd[0]}"
        console.write(f"trainwatch: cannot start {cmd!r}: {err}\n".encode())
        write_process(run_dir, ProcessInfo(
            pid=None, command=tuple(cmd), cwd=spec["cwd"], start_time=now, state=STATE_FAILED,
            started_by=MARK, monitor_pid=os.getpid(), end_time=now, error=err, exit_code=127,
            host=_host()))
        _reply(fd, {"error": err})
        return 1
    info = ProcessInfo(
        pid=child.pid, command=tuple(cmd), cwd=spec["cwd"], start_time=time.time(),
        state=STATE_RUNNING, started_by=MARK, pgid=child.pid, monitor_pid=os.getpid(),
        proc_start=proc_start_token(child.pid), monitor_start=proc_start_token(os.getpid()),
        host=_host(),
    )
    write_process(run_dir, info)
    _reply(fd, {"pid": child.pid, "monitor_pid": os.getpid()})
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, belt and braces
            continue
    end: dict[str, Any] = {"end_time": time.time()}
    if rc < 0:
        end.update(state=STATE_KILLED, signal=-rc, signal_name=_signame(-rc))
    else:
        end.update(state=STATE_EXITED, exit_code=rc)
    write_process(run_dir, replace_info(info, **end))
    return 0


def _restore_signals() -> None:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN):
        signal.signal(sig, signal.SIG_DFL)


def _reply(fd: int, msg: Mapping[str, Any]) -> None:
    try:
        os.write(fd, (json.dumps(msg) + "\n").encode())
    except OSError:
        pass  # the launcher gave up waiting; the run goes on regardless
    finally:
        os.close(fd)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def _host() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # pragma: no cover - Windows
        return ""


# ---------------------------------------------------------------------------- stopping


@dataclass(frozen=True)
class StopStep:
    """One step of stopping a run, reported through ``stop_run``'s callback."""

    action: str
    """``signal`` (sent ``signal_name``), ``exited``, ``not_running`` or ``gave_up``."""
    signal_name: str | None = None
    elapsed: float = 0.0
    message: str = ""


@dataclass
class _Stopper:
    run_dir: Path
    grace: float
    on_step: Callable[[StopStep], None]
    t0: float = field(default_factory=time.monotonic)

    def say(self, action: str, message: str, sig: str | None = None) -> None:
        self.on_step(StopStep(action, sig, time.monotonic() - self.t0, message))


def stop_run(
    run_dir: str | os.PathLike[str],
    grace: float = 10.0,
    on_step: Callable[[StopStep], None] | None = None,
) -> ProcessInfo | None:
    """Stop a run trainwatch started: SIGINT, SIGTERM after ``grace`` s, SIGKILL after another.

    Each step is reported through ``on_step``. Returns the final ``ProcessInfo`` (with the end
    the monitor recorded), or None when there is no ``process.json``. Raises SuperviseError for
    a run trainwatch did not start.
    """
    run_dir = Path(run_dir)
    st = _Stopper(run_dir, grace, on_step or (lambda _s: None))
    info = read_process(run_dir)
    if info is None:
        st.say("not_running", f"{run_dir / PROCESS_FILE}: no process record; nothing to stop")
        return None
    if not info.ours:
        raise SuperviseError(
            f"{run_dir}: this run was not started by trainwatch; it is read-only (stop it yourself)"
        )
    if not info.alive():
        st.say("not_running", f"run is not running ({info.status()})")
        return info
    assert info.pid is not None
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if not _signal_run(info, sig):
            break  # it is gone (or the pid was reused: never signal a stranger)
        st.say("signal", f"sent {sig.name} to pid {info.pid} (process group)", sig.name)
        wait_s = grace if sig != signal.SIGKILL else max(grace, 5.0)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and info.alive():
            time.sleep(0.05)  # polling another process's exit, bounded by the grace period
        if not info.alive():
            break
    if info.alive():
        st.say("gave_up", f"pid {info.pid} survived SIGKILL; it may be stuck in the kernel")
        return read_process(run_dir)
    final = wait_ended(run_dir, timeout=5.0) or read_process(run_dir)
    how = "?"
    if final is not None and final.state == STATE_EXITED:
        how = f"exit code {final.exit_code}"
    elif final is not None and final.state == STATE_KILLED:
        how = f"signal {final.signal_name}"
    st.say("exited", f"run ended ({how})")
    return final


def _signal_run(info: ProcessInfo, sig: signal.Signals) -> bool:
    """Signal the run's process group, only when its leader is still the recorded process."""
    if info.pid is None or not info.alive():
        return False
    try:
        if info.pgid is not None and info.pgid == info.pid:
            os.killpg(info.pgid, sig)
        else:
            os.kill(info.pid, sig)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--monitor"]:
        return _monitor_main()
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(
        prog="python -m trainwatch.trainer.supervise",
        description="Start a command detached from the terminal, logging to RUN_DIR/console.log "
        "and recording it in RUN_DIR/process.json; or stop / show such a run.",
        epilog="example: python -m trainwatch.trainer.supervise --run-dir runs/a -- "
        "python -m trainwatch.trainer mlp",
    )
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--stop", action="store_true", help="stop the run (SIGINT, SIGTERM, SIGKILL)")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between stop signals")
    p.add_argument("--status", action="store_true", help="print the run's process.json state")
    p.add_argument("--wait", action="store_true", help="after starting, wait for the end")
    a = p.parse_args(argv)
    try:
        if a.stop:
            final = stop_run(a.run_dir, a.grace, lambda s: print(f"[{s.elapsed:5.1f}s] {s.message}"))
            return 0 if final is not None else 1
        if a.status:
            info = read_process(a.run_dir)
            if info is None:
                print(f"{a.run_dir / PROCESS_FILE}: no process record", file=sys.stderr)
                return 1
            print(json.dumps({**asdict(info), "status": info.status()}, indent=2))
            return 0
        if not cmd:
            p.error("give the command after --, e.g. -- python train.py")
        h = start_run(cmd, a.run_dir)
    except SuperviseError as e:
        print(f"trainwatch: {e}", file=sys.stderr)
        return 2
    print(f"started pid {h.pid} in {h.run_dir} (console: {h.console})")
    if a.wait:
        info = h.wait()
        if info is None:
            return 1
        return info.exit_code if info.exit_code is not None else 128 + (info.signal or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
