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

``--tools leet,trainwatch,tw-wandb`` adds trainwatch reading LEET's own input, the W&B run folder
(its ``.wandb`` file), rather than the JSONL copy.

The data is made by ``bench/leet_data.py``; the tmux server and the /proc readings of process
trees are ``bench/tmux_probe.py``.

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python bench/leet_compare.py`

from bench.leet_data import METRICS, Dataset, ensure_data, wandb_env
from bench.tmux_probe import (
    CLK_TCK,
    POLL_S,
    Tmux,
    cpu_between,
    inet_sockets,
    kill_tree,
    sample_tree,
)


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
    lt = by.get("leet")
    for name, label in (("trainwatch", "tw / leet"), ("tw-wandb", "tw-wb / leet")):
        tw = by.get(name)
        if tw and lt and tw.ok and lt.ok:
            print(f"{label:<12}" + "".join(f" {ratio(getattr(tw, k), getattr(lt, k)):>11}"
                                           for _, k in cols))
    if lt and lt.ok and any(by.get(n) for n in ("trainwatch", "tw-wandb")):
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
    p.add_argument("--tools", default="leet,trainwatch",
                   help="comma list: leet,trainwatch,tw-wandb (trainwatch on the .wandb file)")
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
        # trainwatch on LEET's very input: the W&B run folder (its .wandb file, read from the top)
        "tw-wandb": Tool("tw-wandb", [str(args.trainwatch), str(data.wandb_run)], {},
                         re.compile(rf"\bstep\s+(?:{step_forms(steps)})\b"),
                         re.compile(r"loading history")),
    }
    unknown = [t for t in tools if t not in specs]
    if unknown:
        print(f"leet_compare: unknown tool(s) {unknown}: use leet,trainwatch,tw-wandb",
              file=sys.stderr)
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
