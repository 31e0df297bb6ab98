"""``trainwatch check`` on real training logs, scored against a person's verdict on each file.

Runs the real command, as a user does (``python -m trainwatch check FILE --format json
--fail-on never``, a subprocess per file), on every file that ``EXPECTED.tsv`` in the corpus
folder lists, and scores its alerts against that table. ``EXPECTED.tsv`` is the only source of
expectations; its columns are ``file``, ``verdict`` (``fault`` or ``healthy``), ``rules`` (the
``|``-separated rule ids that are right for a fault; empty for a healthy file) and what a person
sees in the numbers.

The scoring, one file at a time ("serious" = an alert of severity warning or error; infos never
count, for or against):

* a **fault** file is a HIT when a serious alert comes from one of its listed rules, else a MISS;
* a **healthy** file is OK when no serious alert comes, else a FALSE-ALARM. Where the person's
  note says that warnings are fair or right on it (``warnings are fair``), a warning is accepted
  there and only an error is a false alarm;
* on any file, an **error** from a rule the row does not list is WRONG (``"spike warnings are
  right and a divergence error is not"``: the error of an unlisted rule tells a person something
  that is not there). A healthy file lists no rule, so every error on it is wrong, and a false
  alarm;
* a file whose check fails (exit 2, no JSON) is FAILED: a MISS for a fault, wrong either way.

A file's verdict is right when it is a HIT or OK with no WRONG error.

    python bench/real_logs.py                   # the corpus at ../shared/corpus
    python bench/real_logs.py --corpus DIR      # another corpus folder with its EXPECTED.tsv
    python bench/real_logs.py --json OUT        # also write the results as JSON

Exit status: 0 when it ran (whatever the score), 2 when the corpus or its table is missing or
unreadable.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus"
"""``../shared/corpus`` relative to the repository root."""
SEVERITY = {"info": 0, "warning": 1, "error": 2}
WARNINGS_FAIR = re.compile(r"\bwarnings?\s+(?:are|is)\s+(?:fair|right|fine)", re.IGNORECASE)
"""A person's note saying warnings are acceptable on the file (``warnings are fair``)."""
CHECK_TIMEOUT_S = 300


class CorpusError(Exception):
    """The corpus folder or its table cannot be used; the message is the one line to print."""


@dataclass(frozen=True)
class Expected:
    """One row of ``EXPECTED.tsv``."""

    file: str
    verdict: str
    """``fault`` or ``healthy``."""
    rules: tuple[str, ...]
    """Rule ids that are right for a fault (empty for a healthy file)."""
    note: str
    """What a person sees in the numbers."""

    @property
    def warnings_fair(self) -> bool:
        return bool(WARNINGS_FAIR.search(self.note))


@dataclass(frozen=True)
class Got:
    """One alert of ``check``'s JSON, as the scorer reads it."""

    rule: str
    severity: str
    step: int | None

    @property
    def serious(self) -> bool:
        return SEVERITY.get(self.severity, 0) >= SEVERITY["warning"]

    def __str__(self) -> str:
        return f"{self.rule}/{self.severity}@{self.step}"


@dataclass
class FileScore:
    """The outcome on one file."""

    file: str
    verdict: str
    outcome: str
    """HIT, MISS, OK, FALSE-ALARM or FAILED."""
    wrong: list[str] = field(default_factory=list)
    """Errors from rules the row does not list, as ``rule/error@step``."""
    alerts: list[str] = field(default_factory=list)
    failure: str | None = None
    seconds: float = 0.0

    @property
    def right(self) -> bool:
        return self.outcome in ("HIT", "OK") and not self.wrong


def read_expected(corpus: Path) -> list[Expected]:
    """The rows of ``corpus/EXPECTED.tsv``; :class:`CorpusError` when it is absent or malformed."""
    table = corpus / "EXPECTED.tsv"
    if not corpus.is_dir():
        raise CorpusError(f"corpus folder not found: {corpus} (pass --corpus DIR)")
    if not table.is_file():
        raise CorpusError(f"{table} not found: the corpus needs its table of expected verdicts")
    rows: list[Expected] = []
    with table.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if not header or [h.strip() for h in header[:3]] != ["file", "verdict", "rules"]:
            raise CorpusError(f"{table}:1: expected the columns file, verdict, rules, note")
        for n, row in enumerate(reader, start=2):
            if not row or not row[0].strip():
                continue
            cells = [c.strip() for c in row] + ["", "", ""]
            verdict = cells[1]
            if verdict not in ("fault", "healthy"):
                raise CorpusError(f"{table}:{n}: verdict {verdict!r} is not fault or healthy")
            rules = tuple(r.strip() for r in cells[2].split("|") if r.strip())
            if verdict == "fault" and not rules:
                raise CorpusError(f"{table}:{n}: a fault row needs its rules")
            rows.append(Expected(cells[0], verdict, rules, cells[3]))
    return rows


def score(exp: Expected, alerts: list[Got]) -> FileScore:
    """Score one file's alerts against its row (the rules of the module docstring)."""
    listed = set(exp.rules)
    wrong = [str(a) for a in alerts if a.severity == "error" and a.rule not in listed]
    if exp.verdict == "fault":
        caught = any(a.serious and a.rule in listed for a in alerts)
        outcome = "HIT" if caught else "MISS"
    else:
        floor = SEVERITY["error"] if exp.warnings_fair else SEVERITY["warning"]
        noisy = any(SEVERITY.get(a.severity, 0) >= floor for a in alerts)
        outcome = "FALSE-ALARM" if noisy else "OK"
    return FileScore(exp.file, exp.verdict, outcome, wrong, [str(a) for a in alerts])


def run_check(path: Path) -> tuple[list[Got] | None, str | None]:
    """``trainwatch check PATH`` as a subprocess: (alerts, None), or (None, why it failed)."""
    cmd = [sys.executable, "-m", "trainwatch", "check", str(path), "--format", "json",
           "--fail-on", "never"]
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, f"check ran past {CHECK_TIMEOUT_S} s"
    if proc.returncode not in (0, 1):
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return None, f"exit {proc.returncode}: {last}"
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        return None, f"check's output is not JSON ({e})"
    return [Got(str(a.get("rule")), str(a.get("severity")), a.get("step"))
            for a in doc.get("alerts", [])], None


def check_file(corpus: Path, exp: Expected) -> FileScore:
    path = corpus / exp.file
    t0 = time.perf_counter()
    if not path.exists():
        alerts, failure = None, f"{path} not found"
    else:
        alerts, failure = run_check(path)
    if alerts is None:
        sc = FileScore(exp.file, exp.verdict, "FAILED", failure=failure)
    else:
        sc = score(exp, alerts)
    sc.seconds = time.perf_counter() - t0
    return sc


def totals(scores: list[FileScore]) -> dict[str, Any]:
    faults = [s for s in scores if s.verdict == "fault"]
    healthy = [s for s in scores if s.verdict == "healthy"]
    return {
        "files": len(scores),
        "faults": len(faults),
        "faults_caught": sum(s.outcome == "HIT" for s in faults),
        "healthy": len(healthy),
        "healthy_false_alarms": sum(s.outcome == "FALSE-ALARM" for s in healthy),
        "wrong_errors": sum(len(s.wrong) for s in scores),
        "files_with_wrong_errors": sum(bool(s.wrong) for s in scores),
        "failed": sum(s.outcome == "FAILED" for s in scores),
        "verdicts_right": sum(s.right for s in scores),
    }


def print_report(scores: list[FileScore], corpus: Path) -> None:
    print(f"trainwatch check on {len(scores)} real logs of {corpus} against EXPECTED.tsv\n")
    for s in scores:
        print(f"{s.outcome:<11} {s.verdict:<7} {s.file}  ({s.seconds:.1f} s)")
        if s.wrong:
            print(f"    WRONG: {', '.join(s.wrong)} (an error from a rule the row does not list)")
        if s.failure:
            print(f"    check failed: {s.failure}")
        shown = ", ".join(s.alerts[:12]) + (f", ... {len(s.alerts) - 12} more"
                                            if len(s.alerts) > 12 else "")
        print(f"    alerts: {shown or 'none'}")
    t = totals(scores)
    print(f"\nfaults caught: {t['faults_caught']} of {t['faults']}; healthy files with a false "
          f"alarm: {t['healthy_false_alarms']} of {t['healthy']}; wrong errors (unlisted rule): "
          f"{t['wrong_errors']} on {t['files_with_wrong_errors']} files; check failed: "
          f"{t['failed']}")
    print(f"verdicts right: {t['verdicts_right']} of {t['files']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                    help=f"folder with the logs and EXPECTED.tsv (default {DEFAULT_CORPUS})")
    ap.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    args = ap.parse_args(argv)
    corpus = args.corpus.resolve()
    try:
        rows = read_expected(corpus)
    except (CorpusError, OSError, UnicodeDecodeError) as e:
        print(f"real_logs: {e}", file=sys.stderr)
        return 2
    scores = [check_file(corpus, exp) for exp in rows]
    print_report(scores, corpus)
    if args.json:
        doc = {"corpus": str(corpus), "totals": totals(scores),
               "files": [asdict(s) | {"right": s.right} for s in scores]}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
