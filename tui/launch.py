"""Starting a run from the TUI: the configs to pick from, the command a filled-in form stands
for, where a new run goes, and how a stopped trainer run resumes. No Textual here: pure
functions plus small reads of config files, so all of it is tested without an app.

The form's text is turned into a :class:`LaunchPlan` by :func:`plan_launch`, which checks
everything that can be checked before a process starts (numbers, the config and its overrides,
that the command exists) and says what is wrong in one line.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from trainwatch.tui.target import RunSpec, WatchTarget

TRAINER_MODULE = "trainwatch.trainer"
LOCAL_CONFIG_DIR = "configs"
"""``./configs/*.yaml`` in the working directory are offered beside the packaged configs."""
RUNS_DIR = "runs"
CKPT_GLOB = "checkpoints/ckpt-*.pt"
"""The trainer's checkpoints (``trainwatch.trainer.checkpoint``; not imported: it needs torch)."""


class LaunchError(ValueError):
    """The form cannot be started as it is; the message is one line saying what to change."""


@dataclass(frozen=True)
class LaunchOptions:
    """How the app launches runs (the factory fills it from the environment; tests inject it)."""

    cwd: Path
    """Where commands run, ``./configs`` is looked for and a relative run directory starts."""
    recent_file: Path | None
    """The recently-used list (JSON); None keeps none."""
    python: str = sys.executable
    """The interpreter that runs the bundled trainer."""
    stop_grace: float = 10.0
    """Seconds between SIGINT and SIGTERM (and SIGTERM and SIGKILL) when stopping a run."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> LaunchOptions:
        """``$XDG_STATE_HOME/trainwatch/recent.json`` (``~/.local/state`` without it)."""
        env = os.environ if environ is None else environ
        state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return cls(cwd=(cwd or Path.cwd()).absolute(),
                   recent_file=Path(state) / "trainwatch" / "recent.json")


@dataclass(frozen=True)
class ConfigChoice:
    """A config the trainer can be given."""

    ref: str
    """What the trainer's CONFIG argument gets: a packaged name or an absolute path."""
    label: str
    about: str
    """The file's first comment line (what it does)."""
    local: bool = False
    """From ``./configs`` rather than the package."""


@dataclass(frozen=True)
class FaultChoice:
    """A packaged fault config, offered as overrides on top of any config."""

    ref: str
    """``faults/NAME``."""
    sets: tuple[str, ...]
    """Its ``fault:`` section as ``--set`` overrides (``fault.kind=nan``, ``fault.step=120``)."""
    about: str


@dataclass(frozen=True)
class LaunchForm:
    """The new-run screen's fields, as typed (the recently-used list stores these)."""

    config: str = ""
    lr: str = ""
    steps: str = ""
    fault: str = ""
    """A :attr:`FaultChoice.ref`; empty: the config's own fault (none for most)."""
    more: str = ""
    """Other overrides, ``KEY=VALUE`` separated by spaces."""
    command: str = ""
    """An external command line; when given, the trainer fields are not used."""
    run_dir: str = ""
    """Empty: :func:`default_run_dir`."""


@dataclass(frozen=True)
class LaunchPlan:
    """A run ready to start through the supervisor."""

    name: str
    command: tuple[str, ...]
    run_dir: Path
    """Absolute."""
    cwd: Path
    trainer: bool
    """The bundled trainer (it can resume from a checkpoint) rather than an external script."""
    form: LaunchForm


# ---------------------------------------------------------------------------- choices


def _about(path: Path) -> str:
    """The first comment line of a YAML file (its description), else ''."""
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                s = line.strip()
                if s.startswith("#"):
                    return s.lstrip("#").strip()
                if s:
                    break
    except OSError:
        pass
    return ""


def packaged_choices() -> list[ConfigChoice]:
    """The packaged trainer configs (``faults/*`` included), as ``--list`` prints them."""
    from trainwatch.trainer.configfile import list_packaged, packaged_configs

    root = packaged_configs()
    return [ConfigChoice(name, name, _about(root / f"{name}.yaml")) for name in list_packaged()]


def local_choices(cwd: Path) -> list[ConfigChoice]:
    """``./configs/*.yaml`` in ``cwd``, by name."""
    folder = cwd / LOCAL_CONFIG_DIR
    try:
        files = sorted(p for p in folder.glob("*.yaml") if p.is_file())
    except OSError:
        return []
    return [ConfigChoice(str(p.absolute()), f"./{LOCAL_CONFIG_DIR}/{p.name}", _about(p), True)
            for p in files]


def _set_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def fault_choices() -> list[FaultChoice]:
    """The packaged fault configs, each as the ``fault.*`` (and ``dist.*``) overrides it makes."""
    import yaml

    from trainwatch.trainer.configfile import list_packaged, packaged_configs

    root = packaged_configs()
    out = []
    for name in list_packaged():
        if not name.startswith("faults/"):
            continue
        path = root / f"{name}.yaml"
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue  # a broken packaged file is the trainer's test suite's business
        fault = data.get("fault") if isinstance(data, dict) else None
        if not isinstance(fault, dict) or "kind" not in fault:
            continue
        # with the processes it needs (slow_rank: dist.nproc 2, launched through torchrun)
        dist = data.get("dist") if isinstance(data.get("dist"), dict) else {}
        sets = (tuple(f"fault.{k}={_set_value(v)}" for k, v in fault.items())
                + tuple(f"dist.{k}={_set_value(v)}" for k, v in dist.items()))
        out.append(FaultChoice(name, sets, _about(path)))
    return out


# ---------------------------------------------------------------------------- where runs go


def runs_base(target: WatchTarget | None, cwd: Path) -> Path:
    """The folder new runs go in: the watched folder of runs, the folder beside the watched run,
    or ``./runs`` (also when watching a tracker's store)."""
    if target is not None and not any(r.stored for r in target.runs):
        # (a tracker's store, a database or mlruns/, is no place for trainwatch's run folders)
        if target.kind == "sweep" or (target.kind == "waiting" and target.path.is_dir()):
            return target.path
        if target.kind == "run":
            return target.path.absolute().parent
    return cwd / RUNS_DIR


def default_run_dir(base: Path, name: str, now: float | None = None) -> Path:
    """``BASE/NAME-YYYYmmdd-HHMMSS`` (``-2``, ``-3``... when taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name.replace("/", "-")) or "run"
    d = base / f"{safe}-{stamp}"
    n = 1
    while d.exists():
        n += 1
        d = base / f"{safe}-{stamp}-{n}"
    return d


def shown_path(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when inside it (shorter on screen), else absolute."""
    try:
        return str(path.absolute().relative_to(cwd))
    except ValueError:
        return str(path.absolute())


def spec_for(root: Path, target: WatchTarget | None, taken: Mapping[str, RunSpec]) -> RunSpec:
    """The run spec that follows a new run in ``root``: named, and its path written, as
    :func:`~trainwatch.tui.target.discover` would (so a rescan recognises the run instead of
    following its files twice)."""
    run_id = root.name or str(root)
    path = root.absolute()
    if target is not None and target.kind in ("sweep", "waiting"):
        try:
            rel = path.relative_to(target.path.absolute())
        except ValueError:
            rel = None
        if rel is not None and rel.parts:
            run_id, path = str(rel), target.path / rel
    base, n = run_id, 1
    while run_id in taken and taken[run_id].root.absolute() != path.absolute():
        n += 1
        run_id = f"{base} ({n})"
    if run_id in taken:
        return taken[run_id]
    return RunSpec(run_id, path, (path / "metrics.jsonl",), path / "console.log")


# ---------------------------------------------------------------------------- planning


def script_name(argv: Sequence[str]) -> str:
    """A short name for an external command: its script (``train.py`` -> ``train``)."""
    for a in argv[1:]:
        if a.endswith((".py", ".sh")) and not a.startswith("-"):
            return Path(a).stem
    return Path(argv[0]).name or "run"


def _positive_float(text: str, what: str) -> str:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise LaunchError(f"{what}: expected a positive number like 3e-4, got {text!r}")
    return text


def _positive_int(text: str, what: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        v = 0
    if v <= 0:
        raise LaunchError(f"{what}: expected a whole number of steps like 500, got {text!r}")
    return v


def trainer_sets(form: LaunchForm, faults: Sequence[FaultChoice] = ()) -> list[str]:
    """The form's fields as ``--set`` overrides (the fault first, so typed values win)."""
    sets: list[str] = []
    if form.fault:
        fault = next((f for f in faults if f.ref == form.fault), None)
        if fault is None:
            raise LaunchError(f"fault: unknown fault config {form.fault!r}")
        sets += fault.sets
    if form.lr.strip():
        sets.append(f"train.lr={_positive_float(form.lr.strip(), 'learning rate')}")
    if form.steps.strip():
        sets.append(f"train.steps={_positive_int(form.steps.strip(), 'steps')}")
    try:
        more = shlex.split(form.more)
    except ValueError as e:
        raise LaunchError(f"more overrides: {e} (check the quotes)") from e
    for s in more:
        key, eq, _v = s.partition("=")
        if not eq or not key:
            raise LaunchError(f"more overrides: expected KEY=VALUE like eval.every=50, got {s!r}")
    return sets + more


def _find_program(prog: str, cwd: Path) -> bool:
    if os.sep in prog:
        p = Path(prog) if Path(prog).is_absolute() else cwd / prog
        return p.is_file()
    return shutil.which(prog) is not None


def plan_launch(form: LaunchForm, options: LaunchOptions, base: Path,
                faults: Sequence[FaultChoice] = ()) -> LaunchPlan:
    """What ``form`` starts, or a :class:`LaunchError` saying what to fix."""
    cwd = options.cwd
    if form.command.strip():
        try:
            argv = shlex.split(form.command)
        except ValueError as e:
            raise LaunchError(f"command line: {e} (check the quotes)") from e
        if not _find_program(argv[0], cwd):
            raise LaunchError(f"command line: {argv[0]!r} is not a program on PATH or a file "
                              f"in {cwd}")
        name = script_name(argv)
        run_dir = _run_dir(form, base, name, cwd)
        return LaunchPlan(name, tuple(argv), run_dir, cwd, False, form)
    if not form.config:
        raise LaunchError("pick a config from the list, or type a command line")
    sets = trainer_sets(form, faults)
    from trainwatch.trainer.config import ConfigError
    from trainwatch.trainer.configfile import load_config

    try:
        cfg = load_config(form.config, sets)
    except ConfigError as e:
        raise LaunchError(str(e).splitlines()[0]) from e
    run_dir = _run_dir(form, base, cfg.name, cwd)
    command = [options.python, "-m", TRAINER_MODULE, form.config, "--run-dir", str(run_dir)]
    if sets:
        command += ["--set", *sets]
    return LaunchPlan(cfg.name, tuple(command), run_dir, cwd, True, form)


def _run_dir(form: LaunchForm, base: Path, name: str, cwd: Path) -> Path:
    text = form.run_dir.strip()
    if not text:
        return default_run_dir(base, name).absolute()
    p = Path(text).expanduser()
    return (p if p.is_absolute() else cwd / p).absolute()


# ---------------------------------------------------------------------------- resuming


def is_trainer_command(command: Sequence[str]) -> bool:
    """``python -m trainwatch.trainer ...`` or ``trainwatch train ...``."""
    argv = list(command)
    if any(a == "-m" and b == TRAINER_MODULE for a, b in pairwise(argv)):
        return True
    return len(argv) > 1 and Path(argv[0]).name == "trainwatch" and argv[1] == "train"


def resume_command(command: Sequence[str], run_dir: Path) -> tuple[str, ...] | None:
    """The trainer's own command with ``--resume`` (same config, overrides and run directory);
    None for a command that is not the bundled trainer."""
    if not is_trainer_command(command):
        return None
    argv = [a for a in command if a != "--resume"]
    if "--run-dir" not in argv and not any(a.startswith("--run-dir=") for a in argv):
        argv += ["--run-dir", str(run_dir.absolute())]
    return (*argv, "--resume")


def has_checkpoint(run_dir: Path) -> bool:
    try:
        return any(run_dir.glob(CKPT_GLOB))
    except OSError:
        return False

