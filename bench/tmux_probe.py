"""Process trees and a private tmux server for ``bench/leet_compare.py``: start a tool in a
detached tmux session, read its screen, and measure its process tree from /proc (CPU ticks, RSS,
peak RSS, inet sockets); Linux only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.02
"""Screen poll period while waiting for the last step."""
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    """One /proc reading of a process."""

    pid: int
    name: str
    cpu_ticks: int
    """utime + stime, all threads."""
    rss_kb: int
    hwm_kb: int
    """Peak RSS of this process."""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (children, grandchildren, ...)."""
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def sample(pid: int) -> ProcSample | None:
    """utime+stime and RSS of one process, or None if it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    head, rest = stat.rsplit(")", 1)
    fields = rest.split()
    kb = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in status.splitlines()
                                             if ln.startswith(("VmRSS", "VmHWM")))}
    if "VmRSS" not in kb:
        return None  # zombie: no memory, nothing to count
    return ProcSample(pid, head.split("(", 1)[1], int(fields[11]) + int(fields[12]),
                      kb["VmRSS"], kb.get("VmHWM", 0))


def sample_tree(root: int) -> dict[int, ProcSample]:
    return {p.pid: p for p in (sample(pid) for pid in tree_pids(root)) if p is not None}


def cpu_between(a: dict[int, ProcSample], b: dict[int, ProcSample]) -> int:
    """CPU ticks the tree spent between two samples (a process born in between counts whole)."""
    return sum(p.cpu_ticks - (a[pid].cpu_ticks if pid in a else 0) for pid, p in b.items())


def inet_sockets(pids: list[int]) -> int:
    """TCP/UDP sockets (IPv4 or 6) the processes hold: proof that W&B stayed offline."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(os.scandir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd.path)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        count += sum(1 for row in rows if row.split()[9] in inodes)
    return count


def kill_tree(root: int, grace_s: float = 2.0) -> None:
    """SIGTERM the whole tree, wait for it, SIGKILL what is left."""
    pids = tree_pids(root)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(sample(p) for p in pids):
            time.sleep(0.05)
        pids = [p for p in pids if sample(p) is not None]
        if not pids:
            return


# ------------------------------------------------------------------------------------------ tmux
class Tmux:
    """A private tmux server (own socket, no user config): status bar off, dead panes kept so a
    crashed tool's last words can be captured."""

    def __init__(self, workdir: Path) -> None:
        self.socket = workdir / f"tmux-{os.getpid()}.sock"
        conf = workdir / "tmux.conf"
        conf.write_text("set -g status off\nset -g remain-on-exit on\n"
                        "set -g default-terminal tmux-256color\n")
        self.base = ["tmux", "-S", str(self.socket), "-f", str(conf)]
        self.roots: list[int] = []

    def _run(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True,
                              check=True).stdout

    def start(self, name: str, argv: list[str], env: dict[str, str], width: int,
              height: int) -> int:
        """Start ``argv`` (exec'd directly, no shell) in a new session; return its pid."""
        flags = [f"-e{k}={v}" for k, v in env.items()]
        self._run("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
                  *flags, "--", *argv)
        pid = int(self._run("display-message", "-p", "-t", name, "#{pane_pid}"))
        self.roots.append(pid)
        return pid

    def capture(self, name: str) -> str:
        return self._run("capture-pane", "-p", "-t", name)

    def dead(self, name: str) -> str | None:
        """None while the pane's process runs, else how it ended ("status 1", "signal 9")."""
        fmt = "#{pane_dead}|#{pane_dead_status}|#{pane_dead_signal}"
        deadline = time.monotonic() + 1.0
        while True:
            flag, status, sig = self._run("display-message", "-p", "-t", name, fmt).strip().split("|")
            if flag != "1":
                return None
            if status or sig or time.monotonic() > deadline:
                return f"signal {sig}" if sig else f"status {status or '?'}"
            time.sleep(POLL_S)  # tmux fills these in a moment after the pane dies

    def close(self) -> None:
        for pid in self.roots:
            kill_tree(pid)
        subprocess.run([*self.base, "kill-server"], check=False, capture_output=True)
        self.socket.unlink(missing_ok=True)  # tmux 3.3 leaves it behind
