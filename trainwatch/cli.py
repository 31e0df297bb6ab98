"""The ``trainwatch`` command line.

``trainwatch PATH`` opens the live TUI; the subcommands are headless. Heavy imports (Textual, the
rules, torch) happen inside each command, so ``trainwatch inspect`` starts fast on a machine
without torch and never loads Textual.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from trainwatch import __version__
from trainwatch.safe_text import clean

if TYPE_CHECKING:
    from trainwatch.load import LoadedRun
    from trainwatch.rules import RulesConfig

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2

COMMANDS = ("inspect", "check", "report", "train", "demo", "watch")

TOP_HELP = """\
trainwatch: watch neural-network training live in the terminal.

usage:
  trainwatch PATH [--run NAME_OR_ID] [--poll S] [--rules FILE] [--once]
                                                        watch a run (the TUI)
  trainwatch demo [--run-dir DIR]                       train a small LSTM with a fault, and watch it
  trainwatch inspect PATH [--run NAME_OR_ID] [--format text|json]
                                                        what a metrics file or run directory holds
  trainwatch check PATH [--run NAME_OR_ID] [--rules FILE] [--fail-on error|warning|info|never]
                  [--format text|json]                  run the diagnosis rules headless (CI, scripts)
  trainwatch report PATH [--run NAME_OR_ID] [--rules FILE] [--format markdown|json]
                                                        end-of-run summary with recommendations
  trainwatch train CONFIG [--run-dir DIR] [--set k=v]   run the bundled PyTorch trainer

examples:
  trainwatch runs/exp1/
  trainwatch check runs/exp1/ --fail-on warning && echo healthy
  trainwatch inspect output/checkpoint-500/trainer_state.json --format json
  trainwatch check mlflow.db --run baseline             one run of a store (MLflow, trackio...)

'trainwatch COMMAND --help' shows each command's options. Docs: docs/format.md.
"""


class _Parser(argparse.ArgumentParser):
    """argparse that prints one line for a usage error (what's wrong, and where to look)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parser(prog: str, description: str, example: str) -> _Parser:
    return _Parser(
        prog=prog,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _fail(message: str) -> int:
    # the message may quote a path or a line from someone else's file: one printable line
    print(f"trainwatch: error: {clean(message)}", file=sys.stderr)
    return EXIT_USAGE


class _InputError(Exception):
    """Bad input a command cannot go on with; :func:`main` prints it as one line, exit 2."""


def _emit(text: str, end: str = "\n") -> None:
    """Print a command's output, or :class:`_InputError` when it cannot be written (a full disk
    under ``> REPORT.md``): one line and exit 2, where a traceback exited 1, which ``check``'s
    callers read as "an alert fired"."""
    try:
        sys.stdout.write(text + end)
        sys.stdout.flush()  # a short output to a file is buffered: its error shows here or never
    except BrokenPipeError:
        raise  # `| head`: main handles it
    except OSError as e:
        # the unwritten buffer would fail again at exit, with a traceback: send it nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise _InputError(f"cannot write the output: {e.strerror or e}") from None


def _load_rules(rules_file: Path | None) -> RulesConfig:
    """The rules config (packaged defaults under ``--rules``), or :class:`_InputError`."""
    from trainwatch.rules import ConfigError, load_rules_config

    if rules_file is not None and rules_file.exists() and not (rules_file.is_file() or rules_file.is_dir()):
        # a FIFO would block the loader's read for ever (a directory it reports itself)
        raise _InputError(f"{rules_file}: not a regular file (give a YAML rules file)")
    try:
        return load_rules_config(rules_file)
    except ConfigError as e:
        raise _InputError(str(e)) from None


def _warn_unwatched(
    cfg: RulesConfig, run: LoadedRun, names: Iterable[str], rules_file: Path | None
) -> None:
    """One stderr line per custom rule whose metric is neither a series of the run (``names``,
    counted as the rules read it) nor a role it resolves: a typo there watches nothing, and
    nothing else would say so."""
    from trainwatch.roles import DEFAULT_ROLES

    names = set(names)
    roles = (getattr(cfg, "roles", None) or DEFAULT_ROLES).resolve(names)
    for c in cfg.custom:
        if c.enabled and c.metric not in names and c.metric not in roles:
            seen = ", ".join(sorted(names)[:8]) + (", ..." if len(names) > 8 else "")
            print(
                f"trainwatch: warning: {clean(str(rules_file))}: custom rule {c.id!r} watches "
                f"{clean(repr(c.metric))}, which {clean(str(run.path))} does not log "
                f"(it logs: {clean(seen) or 'nothing'})",
                file=sys.stderr,
            )


RUN_HELP = ("which run of a store holding several (an MLflow or trackio database, mlruns/, a "
            "folder of runs): its name or id; without it, the only run (else they are listed)")


def _list_runs(runs: Sequence[object]) -> None:
    """The runs a ``--run`` picks from, as a table on stderr (stdout may be JSON)."""
    from trainwatch.run_stores import format_runs

    if runs:
        print(format_runs(runs), file=sys.stderr)  # type: ignore[arg-type]


def _load_run(path: Path, run: str | None = None) -> LoadedRun:
    """Everything the run at ``path`` holds, or :class:`_InputError`."""
    from trainwatch.load import LoadError, RunChoiceError, load_run

    try:
        return load_run(path, run)
    except RunChoiceError as e:
        _list_runs(e.runs)
        raise _InputError(str(e)) from None
    except LoadError as e:
        raise _InputError(str(e)) from None


@contextmanager
def _reading() -> Iterator[None]:
    """A run's streams are read as a command walks them: a failed read is :class:`_InputError`
    (the one line :class:`~trainwatch.load.LoadError` says) wherever it shows."""
    from trainwatch.load import LoadError

    try:
        yield
    except LoadError as e:
        raise _InputError(str(e)) from None


def _check_run_choice(path: Path, run: str | None) -> None:
    """For the TUI: a ``--run`` that picks nothing is refused before the app starts (a store
    without ``--run`` opens as a folder of runs)."""
    from trainwatch.run_stores import SelectError, open_store, select_run

    try:
        store = open_store(path) if path.exists() else None
    except Exception:  # noqa: BLE001 - unreadable now: the app says so, and retries
        return
    if run is None:
        return
    if store is None:
        raise _InputError(f"{path}: holds one run, not several; --run picks a run of a store "
                          "(an MLflow or trackio database, mlruns/, a folder of runs)")
    try:
        select_run(store, run)
    except SelectError as e:
        _list_runs(e.runs)
        raise _InputError(str(e)) from None


# ---------------------------------------------------------------------- inspect
def cmd_inspect(argv: Sequence[str]) -> int:
    p = _parser(
        "trainwatch inspect",
        "Summarise a metrics file or run directory: format, records, malformed lines, segments,\n"
        "and per metric its role, point count, non-finite count, step range, last/min/max.",
        "trainwatch inspect runs/exp1/ --format json\n"
        "  trainwatch inspect mlflow.db --run baseline   # one run of an MLflow store",
    )
    p.add_argument("path", type=Path, help="a metrics file of any supported format, a run "
                   "directory, or a store of runs")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--run", metavar="NAME_OR_ID", help=RUN_HELP)
    a = p.parse_args(argv)
    from trainwatch.inspect import format_json, format_text, summarize

    run = _load_run(a.path, a.run)
    with _reading():
        summary = summarize(run)
    _emit(format_json(summary) if a.format == "json" else format_text(summary))
    return EXIT_OK


# ---------------------------------------------------------------------- check
def cmd_check(argv: Sequence[str]) -> int:
    p = _parser(
        "trainwatch check",
        "Run every diagnosis rule over a whole run, headless.\n"
        "Exit 0 when no alert reaches --fail-on, 1 when one does, 2 for bad input or usage.",
        "trainwatch check runs/exp1/ --fail-on warning --format json > alerts.json\n"
        "  trainwatch check mlruns/ --run 3f2a9c1e   # one run of an MLflow file store, by id",
    )
    p.add_argument("path", type=Path, help="a metrics file, run directory, or store of runs")
    p.add_argument("--rules", type=Path, help="YAML file overriding rule settings (see configs/rules.yaml)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--fail-on", choices=("error", "warning", "info", "never"), default="error")
    p.add_argument("--run", metavar="NAME_OR_ID", help=RUN_HELP)
    a = p.parse_args(argv)
    from trainwatch.commands.check import (
        exit_code,
        format_check_json,
        format_check_text,
        run_check,
    )

    cfg = _load_rules(a.rules)  # first: a bad --rules is reported before a long load
    run = _load_run(a.path, a.run)
    with _reading():
        result = run_check(run, cfg)
    _warn_unwatched(cfg, run, result.tally.series, a.rules)
    _emit(format_check_json(result) if a.format == "json" else format_check_text(result))
    return exit_code(result, a.fail_on)


# ---------------------------------------------------------------------- report
def cmd_report(argv: Sequence[str]) -> int:
    p = _parser(
        "trainwatch report",
        "The end-of-run summary a person reads: steps, duration, throughput, best losses, LR\n"
        "schedule, every alert with its diagnosis, and concrete recommendations.",
        "trainwatch report runs/exp1/ > REPORT.md\n"
        "  trainwatch report ~/.cache/huggingface/trackio/myproject.db --run baseline",
    )
    p.add_argument("path", type=Path, help="a metrics file, run directory, or store of runs")
    p.add_argument("--rules", type=Path, help="YAML file overriding rule settings")
    p.add_argument("--format", choices=("markdown", "json"), default="markdown")
    p.add_argument("--run", metavar="NAME_OR_ID", help=RUN_HELP)
    a = p.parse_args(argv)
    from trainwatch.commands.check import run_check
    from trainwatch.commands.report import (
        build_report,
        format_report_json,
        format_report_markdown,
    )

    cfg = _load_rules(a.rules)
    run = _load_run(a.path, a.run)
    with _reading():
        checked = run_check(run, cfg)
        _warn_unwatched(cfg, run, checked.tally.series, a.rules)
        report = build_report(run, cfg, checked)
    _emit(format_report_json(report) if a.format == "json" else format_report_markdown(report))
    return EXIT_OK


# ---------------------------------------------------------------------- train / demo
def cmd_train(argv: Sequence[str]) -> int:
    # the trainer's own entry point checks for torch and explains how to install it
    from trainwatch.trainer.__main__ import main as train_main

    return int(train_main(list(argv), prog="trainwatch train") or 0)


def cmd_demo(argv: Sequence[str]) -> int:
    p = _parser(
        "trainwatch demo",
        "Train a small LSTM with a fault switched on (through the supervisor, so it survives\n"
        "the TUI quitting) and watch it live: progress within seconds, an alert within a minute.",
        "trainwatch demo --run-dir runs/demo",
    )
    p.add_argument("--run-dir", type=Path, help="where the run writes (default: a new runs/demo-* folder)")
    p.add_argument("--no-tui", action="store_true", help="start the run and print its directory only")
    a = p.parse_args(argv)
    from trainwatch.trainer.demo import DemoError, launch_demo

    try:
        run_dir = launch_demo(a.run_dir)
    except DemoError as e:
        return _fail(str(e))
    print(f"demo run started in {run_dir}")
    if a.no_tui:
        return EXIT_OK
    # the TUI treats the demo as a run it started: quitting asks whether to keep it training
    return cmd_watch([str(run_dir)], adopt=run_dir)


# ---------------------------------------------------------------------- watch (TUI)
def cmd_watch(argv: Sequence[str], adopt: Path | None = None) -> int:
    p = _parser(
        "trainwatch",
        "Watch a run live: charts, metrics, alerts with evidence and fixes, console output.\n"
        "PATH is a run directory, a metrics file of any supported format, a folder of runs,\n"
        "a store of runs (mlflow.db, mlruns/, a trackio database, a DVCLive folder: several\n"
        "runs open as a folder of runs), or a directory that does not exist yet (trainwatch\n"
        "waits for it).",
        "trainwatch runs/exp1/ --poll 2   # poll every 2 s (network file systems)\n"
        "  trainwatch mlflow.db --run baseline   # one run of an MLflow store",
    )
    p.add_argument("path", type=Path, help="run directory, metrics file, folder or store of runs")
    p.add_argument("--poll", type=float, metavar="SECONDS",
                   help="poll instead of file events (NFS and other network file systems)")
    p.add_argument("--rules", type=Path, help="YAML file overriding rule settings")
    p.add_argument("--once", action="store_true", help="render one screen to stdout and exit")
    p.add_argument("--width", type=int, default=120, help="--once: screen width (default 120)")
    p.add_argument("--height", type=int, default=40, help="--once: screen height (default 40)")
    p.add_argument("--no-bell", action="store_true", help="no terminal bell on error alerts")
    p.add_argument("--no-notify", action="store_true", help="no desktop notification escapes")
    p.add_argument("--run", metavar="NAME_OR_ID", help=RUN_HELP + "; without it, all of them")
    a = p.parse_args(argv)
    if a.poll is not None and not a.poll > 0:
        return _fail(f"--poll {a.poll}: expected a number of seconds > 0")
    rules = _load_rules(a.rules)
    _check_run_choice(a.path, a.run)
    from trainwatch.tui.app import AppConfig, make_app

    config = AppConfig(
        path=a.path,
        run=a.run,
        rules=rules,
        poll_interval=a.poll,
        bell=not a.no_bell,
        notify=not a.no_notify,
    )
    if a.once:
        from trainwatch.tui.once import render_once

        _emit(render_once(config, width=a.width, height=a.height), end="")
        return EXIT_OK
    app = make_app(config)
    if adopt is not None:
        app.adopt_run(adopt)
    app.run()
    return int(app.return_code or 0)


HANDLERS: dict[str, Callable[[Sequence[str]], int]] = {
    "inspect": cmd_inspect,
    "check": cmd_check,
    "report": cmd_report,
    "train": cmd_train,
    "demo": cmd_demo,
    "watch": cmd_watch,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 and args[0] == "help" and args[1] in HANDLERS:  # `trainwatch help check`
        args = [args[1], "--help"]
    if not args or args[0] in ("-h", "--help", "help"):
        print(TOP_HELP, end="")
        return EXIT_OK if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        print(f"trainwatch {__version__}")
        return EXIT_OK
    handler = HANDLERS.get(args[0])
    if handler is not None:
        args = args[1:]
    else:
        handler = cmd_watch
    try:
        return handler(args)
    except _InputError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `trainwatch inspect x | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
