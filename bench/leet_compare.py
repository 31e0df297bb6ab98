"""trainwatch's TUI against W&B LEET (``wandb leet``, a Go terminal UI) on the same data, in one run.

Target (product brief): on a W&B offline run of 20 metrics x 50k steps LEET shows its last step
~4 s after launch, idles at ~1 % of a core and holds ~175 MB; on the same data as JSONL trainwatch
should show everything in half that time, idle at half that CPU and hold less memory.

  1. Generates the data once (seeded, cached in a temp dir): 20 metrics x N steps as trainwatch JSONL
     (``runs/x/metrics.jsonl``), then the same records as a W&B offline run, logged with
     ``wandb.log`` by the scratch venv's python (wandb is never a project dependency).
  2. Launches each tool in a detached tmux session of a fixed size, on a private tmux server.
  3. Measures the time from launch until the last step is on screen (``capture-pane`` every ~20 ms,
     a regex per tool for the form it prints the step in), then, after a settle pause, idle CPU of
     the tool's process tree (utime+stime from /proc, % of one core), tree RSS (sum of VmRSS) and
     the sum of each process's peak RSS (VmHWM).
  4. Prints the matched capture of each tool, a table with trainwatch/LEET ratios, ``--json OUT``.

Setup once: ``python3 -m venv /tmp/leetvenv && /tmp/leetvenv/bin/pip install wandb``; tmux.

    .venv/bin/python bench/leet_compare.py            # 50k steps
    .venv/bin/python bench/leet_compare.py --quick    # 5k steps
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType

import numpy as np

METRICS: tuple[str, ...] = (
    "loss", "val_loss", "lr", "grad_norm", "grad_norm_clipped", "throughput", "step_time",
    "data_time", "memory_gb", "accuracy", "perplexity", "weight_norm", "update_ratio",
    "loss_scale", "tokens_seen", "epoch", "aux_loss", "z_loss", "entropy", "gpu_util",
)
"""The 20 metrics every record carries (plain names, so trainwatch's role detection sees them)."""
RUN_ID = "leetbench"
POLL_S = 0.02
"""Screen poll period while waiting for the last step."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent

WANDB_GENERATOR = '''\
import json, sys, wandb
src, out_dir, run_id = sys.argv[1:4]
settings = wandb.Settings(x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True,
                          console="off", disable_git=True, save_code=False,
                          x_save_requirements=False, silent=True)
run = wandb.init(mode="offline", dir=out_dir, project="leet-bench", id=run_id, name=run_id,
                 settings=settings)
with open(src, "rb") as f:
    for line in f:
        rec = json.loads(line)
        step = rec.pop("step")
        rec.pop("time", None)
        run.log(rec, step=step)
run.finish()
'''
"""Run by the scratch venv's python: replays the JSONL records through ``wandb.log``, so both
tools read the very same values. System stats are off: LEET would otherwise show extra series."""


# ------------------------------------------------------------------------------------------ data
def make_values(steps: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded training-like curves, one value per step for each of :data:`METRICS`."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1, dtype=np.float64)
    x = s / steps
    warm = max(1, steps // 50)
    lr = np.where(s < warm, 3e-4 * s / warm, 3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + np.cos(np.pi * x)))
    loss = (0.35 + 2.6 * np.exp(-6 * x)) * np.exp(rng.normal(0, 0.03, steps))
    grad = (0.4 + 1.2 * np.exp(-3 * x)) * np.exp(rng.standard_t(4, steps) * 0.1)
    tput = 12_000 * (1 + rng.normal(0, 0.02, steps))
    data_time = np.abs(rng.normal(0.004, 0.001, steps)) + (rng.random(steps) < 0.002) * 0.5
    weight = 80 + 15 * np.sqrt(x)
    scale = 2.0 ** (16 - np.minimum(4, np.cumsum(rng.random(steps) < 2e-4)))
    return {
        "loss": loss,
        "val_loss": 0.4 + 2.6 * np.exp(-5.5 * x) + rng.normal(0, 0.005, steps),
        "lr": lr,
        "grad_norm": grad,
        "grad_norm_clipped": np.minimum(grad, 1.0),
        "throughput": tput,
        "step_time": 4096 / tput + data_time,
        "data_time": data_time,
        "memory_gb": 9.0 + 3.0 * (1 - np.exp(-s / 50)) + rng.normal(0, 0.01, steps),
        "accuracy": np.clip(1 - loss / 3.2 + rng.normal(0, 0.01, steps), 0, 1),
        "perplexity": np.exp(loss),
        "weight_norm": weight,
        "update_ratio": lr * grad / weight * 1e3,
        "loss_scale": scale,
        "tokens_seen": s * 4096,
        "epoch": s / max(1, steps // 10),
        "aux_loss": 0.05 * np.exp(-2 * x) * np.exp(rng.normal(0, 0.05, steps)),
        "z_loss": 1e-4 * (1 + 0.2 * np.sin(s / 500)) + rng.normal(0, 1e-6, steps),
        "entropy": 2.0 + 4.0 * np.exp(-4 * x) + rng.normal(0, 0.02, steps),
        "gpu_util": np.clip(0.93 + rng.normal(0, 0.02, steps), 0, 1),
    }


def write_jsonl(path: Path, steps: int, seed: int) -> None:
    """One record per step, ``{"step": i, "time": ..., <20 metrics>}``, steps 1..N."""
    values = make_values(steps, seed)
    cols = [np.round(values[k], 8).tolist() for k in METRICS]
    t0 = 1.7e9
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for i in range(steps):
            rec: dict[str, float | int] = {"step": i + 1, "time": round(t0 + i * 0.35, 3)}
            rec.update(zip(METRICS, (c[i] for c in cols)))
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    tmp.rename(path)  # a half-written file from an interrupted run is never taken for data


@dataclass(frozen=True)
class Dataset:
    jsonl_run: Path
    """Run directory holding ``metrics.jsonl`` (what ``trainwatch PATH`` gets)."""
    wandb_run: Path
    """W&B offline run directory holding ``run-<id>.wandb`` (what ``wandb leet PATH`` gets)."""
    steps: int


def ensure_data(cache: Path, steps: int, seed: int, wandb_python: Path,
                env: dict[str, str]) -> Dataset:
    """Generate both copies of the data into ``cache`` unless a previous run already did."""
    base = cache / f"s{steps}-seed{seed}"
    jsonl_run = base / "runs" / "x"
    jsonl_run.mkdir(parents=True, exist_ok=True)
    jsonl = jsonl_run / "metrics.jsonl"
    if not jsonl.exists():
        t = time.perf_counter()
        write_jsonl(jsonl, steps, seed)
        print(f"wrote {jsonl} ({jsonl.stat().st_size / 1e6:.1f} MB) in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    done = base / "wandb.done"
    if not done.exists():
        shutil.rmtree(base / "wandb", ignore_errors=True)
        gen = base / "gen_wandb.py"
        gen.write_text(WANDB_GENERATOR)
        t = time.perf_counter()
        print(f"logging {steps} steps with wandb.log (offline) ...", flush=True)
        subprocess.run([str(wandb_python), str(gen), str(jsonl), str(base), RUN_ID],
                       env=env, check=True)
        done.write_text("ok\n")
        print(f"  done in {time.perf_counter() - t:.1f} s", flush=True)
    found = sorted((base / "wandb").glob(f"offline-run-*-{RUN_ID}/run-{RUN_ID}.wandb"))
    if len(found) != 1:
        raise SystemExit(f"leet_compare: expected one run-{RUN_ID}.wandb under {base}/wandb, "
                         f"found {len(found)}: delete {base} and run again")
    return Dataset(jsonl_run=jsonl_run, wandb_run=found[0].parent, steps=steps)


# ----------------------------------------------------------------------------- process tree
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


# ------------------------------------------------------------------------------------ measuring
@dataclass(frozen=True)
class Tool:
    name: str
    argv: list[str]
    env: dict[str, str]
    last_step: re.Pattern[str]
    """What the tool prints once it shows the last step."""
    loading: re.Pattern[str] | None = None
    """What the tool prints while older history is still loading (None: it reads in order, so
    the last step on screen means everything is)."""


@dataclass
class Result:
    tool: str
    ok: bool
    error: str = ""
    last_step_s: float | None = None
    """Launch until the last step is first on screen."""
    all_s: float | None = None
    """Launch until the last step is on screen and nothing is still loading."""
    load_cpu_s: float | None = None
    """CPU the tree spent from launch until the last step was on screen."""
    idle_cpu_pct: float | None = None
    rss_mb: float | None = None
    peak_rss_mb: float | None = None
    """Sum of each process's VmHWM: an upper bound of the tree's peak."""
    processes: str = ""
    inet_sockets: int = 0
    """Most TCP/UDP sockets the tree held at the match or after the idle window."""
    runs: int = 1
    times_s: tuple[float, ...] = ()
    """Every run's ``all_s`` (the other columns are medians over the runs)."""
    changed_after_match: tuple[str, ...] = ()
    """Screen lines that changed between the match and the end of the settle pause (a clock
    ticking is harmless; charts still filling in would mean the match came early)."""
    capture: str = ""


def measure(tmux: Tmux, tool: Tool, args: argparse.Namespace) -> Result:
    t0 = time.monotonic()
    root = tmux.start(tool.name, tool.argv, tool.env, args.width, args.height)
    deadline = t0 + args.timeout
    screen = ""
    seen: float | None = None
    while True:
        screen = tmux.capture(tool.name)
        if tool.last_step.search(screen):
            now = time.monotonic() - t0
            seen = now if seen is None else seen
            if tool.loading is None or not tool.loading.search(screen):
                elapsed = now
                break
        status = tmux.dead(tool.name)
        if status is not None:
            return Result(tool.name, False, f"exited ({status}) before showing the last "
                          f"step", capture=tmux.capture(tool.name))
        if time.monotonic() > deadline:
            what = "still loading" if seen is not None else "last step not on screen"
            return Result(tool.name, False, f"{what} after {args.timeout:.0f} s (patterns "
                          f"{tool.last_step.pattern!r}, {tool.loading})", capture=screen)
        time.sleep(POLL_S)
    loaded = sample_tree(root)
    sockets = inet_sockets(list(loaded))
    load_cpu = sum(p.cpu_ticks for p in loaded.values()) / CLK_TCK
    time.sleep(args.settle)
    after_settle = tmux.capture(tool.name)
    a = sample_tree(root)
    t_a = time.monotonic()
    time.sleep(args.idle)
    b = sample_tree(root)
    idle_pct = 100.0 * cpu_between(a, b) / CLK_TCK / (time.monotonic() - t_a)
    procs = ", ".join(f"{p.name}[{p.pid}] {p.rss_kb / 1024:.0f} MB" for p in b.values())
    return Result(
        tool.name, True,
        last_step_s=seen,
        all_s=elapsed,
        load_cpu_s=load_cpu,
        idle_cpu_pct=idle_pct,
        rss_mb=sum(p.rss_kb for p in b.values()) / 1024,
        peak_rss_mb=sum(p.hwm_kb for p in b.values()) / 1024,
        processes=procs,
        inet_sockets=max(sockets, inet_sockets(list(b))),
        times_s=(elapsed,),
        changed_after_match=changed_lines(screen, after_settle),
        capture=screen,
    )


def changed_lines(before: str, after: str) -> tuple[str, ...]:
    """``after``'s lines that differ from ``before``'s at the same row."""
    a, b = before.splitlines(), after.splitlines()
    a += [""] * (len(b) - len(a))
    return tuple(new.rstrip() for old, new in zip(a, b) if old != new)


def combine(runs: list[Result]) -> Result:
    """One row from repeated runs: the first failure if any, else per-column medians."""
    failed = [r for r in runs if not r.ok]
    if failed:
        return failed[0]

    def med(name: str) -> float:
        return statistics.median(getattr(r, name) for r in runs)

    return replace(
        runs[0],
        last_step_s=med("last_step_s"), all_s=med("all_s"), load_cpu_s=med("load_cpu_s"),
        idle_cpu_pct=med("idle_cpu_pct"), rss_mb=med("rss_mb"), peak_rss_mb=med("peak_rss_mb"),
        inet_sockets=max(r.inet_sockets for r in runs),
        changed_after_match=max((r.changed_after_match for r in runs), key=len),
        runs=len(runs), times_s=tuple(t for r in runs for t in r.times_s),
    )


def step_forms(n: int) -> str:
    """Regex alternatives for ``n`` as a screen may show it: 50000, 50,000."""
    return "|".join(re.escape(f) for f in (f"{n:,}", str(n)))


def wandb_env(cache: Path) -> dict[str, str]:
    """Offline, silent, no telemetry, and every W&B file under ``cache``, not in $HOME."""
    return {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DIR": str(cache),
        "WANDB_CONFIG_DIR": str(cache / "wandb-config"),
        "WANDB_CACHE_DIR": str(cache / "wandb-cache"),
        "WANDB_DATA_DIR": str(cache / "wandb-data"),
    }


# -------------------------------------------------------------------------------------- report
def ratio(tw: float | None, leet: float | None) -> str:
    return f"{tw / leet:.2f}x" if tw is not None and leet else "-"


def machine() -> str:
    model = "?"
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                model = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cpus, {model}, {platform.system()} {platform.release()}"


def report(results: list[Result], args: argparse.Namespace, data: Dataset, versions: str) -> None:
    steps = data.steps
    for r in results:
        print(f"\n--- {r.tool}: screen when the last step matched ---")
        print(re.sub(r"\n{3,}", "\n\n", r.capture.rstrip()))
        if r.ok:
            times = ", ".join(f"{t:.2f}" for t in r.times_s)
            print(f"--- processes: {r.processes}; TCP/UDP sockets: {r.inet_sockets}; "
                  f"all shown per run: {times} s")
            changed = r.changed_after_match
            print(f"--- lines changed in the {args.settle:g} s after the match: {len(changed)}")
            for line in changed[:6]:
                print(f"    {line}")
        else:
            print(f"--- {r.tool} FAILED: {r.error}")
    when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    sizes = (f"{sum(f.stat().st_size for f in d.glob(g)) / 1e6:.1f} MB"
             for d, g in ((data.jsonl_run, "*.jsonl"), (data.wandb_run, "*.wandb")))
    print(f"\n{len(METRICS)} metrics x {steps} steps (JSONL {next(sizes)}, .wandb {next(sizes)}), "
          f"{args.width}x{args.height} tmux, idle window {args.idle:g} s after a {args.settle:g} s "
          f"settle, {args.repeat} run(s) per tool")
    print(f"machine: {machine()}; {when}; {versions}")
    cols = (("last step s", "last_step_s"), ("all shown s", "all_s"),
            ("load CPU s", "load_cpu_s"), ("idle CPU %", "idle_cpu_pct"), ("RSS MB", "rss_mb"),
            ("peak MB", "peak_rss_mb"))
    header = f"{'tool':<12}" + "".join(f" {title:>11}" for title, _ in cols)
    print(header)
    print("-" * len(header))
    for r in results:
        vals = (getattr(r, key) for _, key in cols)
        print(f"{r.tool:<12}" + "".join(f" {v:11.2f}" if v is not None else f" {'-':>11}"
                                        for v in vals))
    by = {r.tool: r for r in results}
    tw, lt = by.get("trainwatch"), by.get("leet")
    if tw and lt and tw.ok and lt.ok:
        print(f"{'tw / leet':<12}" + "".join(f" {ratio(getattr(tw, k), getattr(lt, k)):>11}"
                                             for _, k in cols))
        print("target (brief): all shown <= 0.5x, idle CPU <= 0.5x, RSS < 1x")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "steps": steps, "metrics": len(METRICS), "size": [args.width, args.height],
            "idle_s": args.idle, "settle_s": args.settle, "machine": machine(), "date": when,
            "versions": versions, "results": [asdict(r) for r in results],
        }, indent=2) + "\n")
        print(f"wrote {args.json}")


def versions(wandb_python: Path) -> str:
    out = subprocess.run([str(wandb_python), "-c", "import wandb; print(wandb.__version__)"],
                         check=False, capture_output=True, text=True)
    tmux = subprocess.run(["tmux", "-V"], check=False, capture_output=True,
                          text=True).stdout.strip()
    return f"wandb {out.stdout.strip() or '?'}, {tmux}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="5k steps instead of 50k")
    p.add_argument("--steps", type=int, help="override the number of steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tools", default="leet,trainwatch", help="comma list: leet,trainwatch")
    p.add_argument("--venv", type=Path, default=Path("/tmp/leetvenv"),
                   help="scratch venv with wandb installed (default /tmp/leetvenv)")
    p.add_argument("--trainwatch", type=Path, default=ROOT / ".venv" / "bin" / "trainwatch")
    p.add_argument("--cache", type=Path,
                   default=Path(tempfile.gettempdir()) / "trainwatch-leet-bench")
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=40)
    p.add_argument("--idle", type=float, default=10.0, help="idle CPU window, s")
    p.add_argument("--settle", type=float, default=2.0, help="pause after the match, s")
    p.add_argument("--timeout", type=float, default=60.0, help="give up on a tool after, s")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per tool, interleaved; the table shows medians")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = p.parse_args(argv)
    steps = args.steps or (5_000 if args.quick else 50_000)
    if steps < 1 or args.repeat < 1 or args.idle <= 0 or args.settle < 0:
        p.error("--steps and --repeat must be >= 1, --idle > 0 and --settle >= 0")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    wandb_python, wandb_cli = args.venv / "bin" / "python", args.venv / "bin" / "wandb"
    if shutil.which("tmux") is None:
        print("leet_compare: tmux not found: apt-get install -y tmux", file=sys.stderr)
        return 2
    if not wandb_cli.exists():
        print(f"leet_compare: {wandb_cli} not found: python3 -m venv {args.venv} && "
              f"{args.venv}/bin/pip install wandb (or pass --venv)", file=sys.stderr)
        return 2
    if "trainwatch" in tools and not args.trainwatch.exists():
        print(f"leet_compare: {args.trainwatch} not found: pip install -e . in the project venv "
              f"(or pass --trainwatch)", file=sys.stderr)
        return 2
    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C

    signal.signal(signal.SIGTERM, on_term)
    # a shell starts background jobs with SIGINT ignored; Ctrl-C must still clean up
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.cache.mkdir(parents=True, exist_ok=True)
    env = wandb_env(args.cache)
    try:
        data = ensure_data(args.cache, steps, args.seed, wandb_python, {**os.environ, **env})
    except subprocess.CalledProcessError as e:
        print(f"leet_compare: the wandb generator failed (exit {e.returncode}, its output is "
              f"above): check {wandb_python} has wandb installed", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    specs = {
        # LEET's run overview lists the summary, "_step    50000", which follows the history as
        # LEET reads the .wandb file from the top (charts and summary grow together).
        "leet": Tool("leet", [str(wandb_cli), "leet", str(data.wandb_run)], env,
                     re.compile(rf"\b_step\s+(?:{step_forms(steps)})\b")),
        # trainwatch's header: "step 50,000" (exact with separators below 100k). It reads the file's
        # tail first, then the history behind a "loading history ... 45%" line in the header.
        "trainwatch": Tool("trainwatch", [str(args.trainwatch), str(data.jsonl_run)], {},
                           re.compile(rf"\bstep\s+(?:{step_forms(steps)})\b"),
                           re.compile(r"loading history")),
    }
    unknown = [t for t in tools if t not in specs]
    if unknown:
        print(f"leet_compare: unknown tool(s) {unknown}: use leet,trainwatch", file=sys.stderr)
        return 2
    tmux = Tmux(args.cache)
    runs: dict[str, list[Result]] = {name: [] for name in tools}
    try:
        for i in range(args.repeat):
            for name in tools:
                if runs[name] and not runs[name][-1].ok:
                    continue  # failed once: the table shows that failure
                print(f"measuring {name} ({i + 1}/{args.repeat}) ...", flush=True)
                session = f"{name}-{i}"
                runs[name].append(measure(tmux, replace(specs[name], name=session), args))
                runs[name][-1].tool = name
                kill_tree(tmux.roots[-1])  # one tool at a time on the machine
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as e:
        print(f"leet_compare: {' '.join(map(str, e.cmd[:6]))} ... failed: "
              f"{(e.stderr or '').strip() or f'exit {e.returncode}'}", file=sys.stderr)
        return 2
    finally:
        tmux.close()
    results = [combine(r) for r in runs.values()]
    report(results, args, data, versions(wandb_python))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
