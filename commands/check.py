"""``trainwatch check``: run every rule over a finished (or in-progress) run, once, headless.

The command's logic lives here, apart from argument parsing: :func:`run_check` feeds a loaded
run through a :class:`RuleEngine`, :func:`exit_code` turns the alerts into the process status for
CI (``--fail-on``), and the two formatters print the result as documented JSON or as a table a
person reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwatch.batch import RecordBatch, concat_batches, joinable
from trainwatch.commands.tally import RunTally, StepSet
from trainwatch.humanize import fmt_count, fmt_duration, fmt_num
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.rules.engine.alert import SEVERITY_RANK, Alert
from trainwatch.safe_text import clean

if TYPE_CHECKING:
    from trainwatch.load import LoadedRun

MEDIAN_ROLES = ("throughput", "step_time")
"""Roles whose series ``report`` gives the median of (the tally samples them for it)."""
FAIL_ON = ("error", "warning", "info", "never")
"""Values of ``--fail-on``: the lowest severity that makes ``check`` exit 1."""


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` found in one run."""

    path: Path
    alerts: tuple[Alert, ...]
    """Every alert, in step order (ties keep the engine's order)."""
    summary: Mapping[str, Any] = field(default_factory=dict)
    """``{"records": n, "steps": n, "by_severity": {"info": n, "warning": n, "error": n}}``."""
    malformed: int = 0
    """Lines of the main stream skipped as malformed (the rules saw the rest)."""
    first_malformed: str | None = None
    """The first of them as ``FILE:LINE: reason``, for the one line that tells a person."""
    tally: RunTally = field(default_factory=RunTally, compare=False, repr=False)
    """What was counted of the main stream as it was fed (``report`` goes on from it)."""


def run_check(run: LoadedRun, cfg: Any, now: float | None = None) -> CheckResult:
    """Feed the main stream, the rank streams and the console through the rules, then finish.

    ``cfg`` is what :func:`trainwatch.rules.load_rules_config` returned; ``now`` is the clock
    ``stalled_stream`` judges a run without ``run_end`` by (default: the wall clock).
    """
    from trainwatch.rules import RuleEngine  # the engine pulls in every rule: import on use

    engine = RuleEngine(cfg, live=False)
    roles = getattr(cfg, "roles", None) or DEFAULT_ROLES
    tally = RunTally(sampled=lambda name: roles.role_of(name) in MEDIAN_ROLES)
    feed_run(engine, run, now, tally=tally)
    alerts = sorted(engine.alerts, key=lambda a: a.step)  # sorted() is stable
    first_bad = None
    if tally.first_malformed is not None:
        src, m = tally.first_malformed
        where = f"{src}:{m.line}" if m.line > 0 else src  # (binary formats give no line: 0)
        first_bad = f"{where}: {m.reason.removesuffix('; line skipped')}"
    return CheckResult(
        path=Path(run.path), alerts=tuple(alerts), summary=summarize(tally, alerts),
        malformed=tally.malformed, first_malformed=first_bad, tally=tally,
    )


def feed_run(
    engine: Any, run: LoadedRun, now: float | None = None, tally: RunTally | None = None
) -> None:
    """Everything a loaded run holds, in the order a live watch would have seen it as far as
    the files allow: the main stream (its read chunks joined, see :func:`backfill_batches`),
    then the rank streams batch by batch in turn (not one whole rank after another), then the
    console, then the end of the backfill. Each stream is walked once; ``tally`` counts the
    main stream's batches on the way."""
    main: Iterable[RecordBatch] = run.main
    if tally is not None:
        main = _counted(main, tally)
    for batch in backfill_batches(main):
        engine.feed(batch)
    queues = [(r, iter(run.ranks[r])) for r in sorted(run.ranks)]
    while queues:
        for rank, q in list(queues):
            batch = next(q, None)
            if batch is None:
                queues.remove((rank, q))
            else:
                engine.feed_rank(rank, batch)
    if run.console:
        engine.feed_console(run.console, getattr(run, "console_first_line", 1))
    engine.finish(now)


def _counted(batches: Iterable[RecordBatch], tally: RunTally) -> Iterator[RecordBatch]:
    for b in batches:
        tally.add(b)
        yield b


BACKFILL_JOIN = 1 << 14
"""Most records in one joined batch of a backfill. The bound caps the engine's temporaries while
it frames one batch (~50 MB at 64k records of 7 series: a long run's ``check`` peaked there, #15)
and the joined copy held next to its chunks. The price: the engine's fixed cost per batch, ~90 ms
of 7 series (measured for #15), is paid 4x as often as at 64k (+2.6 s on 714k records)."""


def backfill_batches(batches: Iterable[RecordBatch]) -> Iterator[RecordBatch]:
    """The main stream's batches joined (as :func:`~trainwatch.batch.iter_joined` joins them),
    one group at a time, so the engine pays its fixed cost per frame once per backlog rather
    than once per read chunk; the alerts are the same, as the engine's are however a stream is
    batched. A group is yielded as soon as it is complete: the stream is never held.

    A batch that brings a metric name not seen before starts a new joined batch: the engine
    resolves roles from the names seen so far, and must do so at the same records as it would
    fed the batches one by one."""
    seen: set[str] = set()
    group: list[RecordBatch] = []
    n = 0
    for b in batches:
        if group and (not seen.issuperset(b.series) or not joinable(group[-1], b)
                      or n + b.n_records > BACKFILL_JOIN):
            yield concat_batches(group)
            group, n = [], 0
        seen.update(b.series)
        group.append(b)
        n += b.n_records
    if group:
        yield concat_batches(group)


def summarize(tally: RunTally, alerts: Iterable[Alert]) -> dict[str, Any]:
    """Records and distinct metric steps of the main stream, and alerts counted by severity."""
    by_severity = {s: 0 for s in SEVERITY_RANK}
    for a in alerts:
        by_severity[a.severity] = by_severity.get(a.severity, 0) + 1
    return {"records": tally.records, "steps": len(tally.steps), "by_severity": by_severity}


def count_steps(batches: Iterable[Any]) -> int:
    """Distinct steps that carry at least one metric value (events and resumed overlaps once)."""
    steps = StepSet()
    for b in batches:
        for c in b.series.values():
            steps.add(c.steps)
    return len(steps)


def exit_code(result: CheckResult, fail_on: str = "error") -> int:
    """0 when no alert reaches ``fail_on`` (error|warning|info|never), 1 when one does."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"--fail-on: unknown level {fail_on!r} (expected one of {', '.join(FAIL_ON)})")
    if fail_on == "never":
        return 0
    floor = SEVERITY_RANK[fail_on]
    return int(any(SEVERITY_RANK.get(a.severity, 0) >= floor for a in result.alerts))


# --------------------------------------------------------------------------------- formatting


def format_check_json(result: CheckResult) -> str:
    """The documented JSON document (strict JSON: non-finite numbers are null)."""
    summary = result.summary
    by = summary.get("by_severity", {})
    doc = {
        "path": str(result.path),
        "alerts": [a.to_dict() for a in result.alerts],
        "summary": {
            "records": int(summary.get("records", 0)),
            "steps": int(summary.get("steps", 0)),
            "by_severity": {s: int(by.get(s, 0)) for s in SEVERITY_RANK},
            # (added: a script gating on check sees what the rules did not read)
            "malformed": result.malformed,
            "first_malformed": result.first_malformed,
        },
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def format_check_text(result: CheckResult) -> str:
    """A table of alerts (severity, step, rule, message), then each alert's diagnosis."""
    s = result.summary
    by = s.get("by_severity", {})
    head = (
        f"{clean(str(result.path))}: {fmt_count(s.get('records', 0))} records, "
        f"{fmt_count(s.get('steps', 0))} steps"
    )
    n_bad = result.malformed
    if n_bad:  # what was not read is said, with where to look (the alerts only saw the rest)
        head += (
            f"\n{n_bad} malformed line{'s' if n_bad != 1 else ''} skipped; the first, "
            f"{clean(str(result.first_malformed))} ('trainwatch inspect' lists them)"
        )
    if not result.alerts:
        if not s.get("records", 0):
            return f"{head}\nNo metric records: nothing to check (is it the run's metrics file? see docs/format.md)."
        return f"{head}\nNo problems found."
    counts = ", ".join(
        f"{by.get(sev, 0)} {sev}" for sev in sorted(SEVERITY_RANK, key=SEVERITY_RANK.get, reverse=True)
    )
    n = len(result.alerts)
    lines = [head, f"{n} alert{'s' if n != 1 else ''}: {counts}", ""]
    rows = [("SEVERITY", "STEP", "RULE", "MESSAGE")] + [
        (a.severity, f"{a.step:,}", a.rule, clean(a.message)) for a in result.alerts
    ]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append(f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:<{w[2]}}  {r[3]}".rstrip())
    for i, a in enumerate(result.alerts, 1):
        lines.append("")
        lines.extend(describe_alert(a, i))
    return "\n".join(lines)


def describe_alert(a: Alert, index: int | None = None) -> list[str]:
    """An alert's header line, then its evidence, causes and fixes, indented (no trailing blank).

    Each entry is one printable line: names and console text from the run's files lose their
    escape sequences and newlines (:func:`~trainwatch.safe_text.clean`)."""
    where = f" · {a.metric}" if a.metric else ""
    num = f"[{index}] " if index is not None else ""
    out = [f"{num}{a.severity} · {a.rule} · step {a.step:,}{where}", f"    {a.message}"]
    if a.evidence:
        out.append("    evidence: " + ", ".join(
            f"{k}={fmt_value(k, v)}" for k, v in a.evidence.items()
        ))
    if a.causes:
        out.append("    likely causes:")
        out.extend(f"      {c.confidence * 100:3.0f}%  {c.cause}" for c in a.causes)
    if a.fixes:
        out.append("    try:")
        out.extend(f"      - {f}" for f in a.fixes)
    return [clean(line) for line in out]


_DURATION_SUFFIXES = ("_s", "_sec", "_secs", "_seconds", "seconds")


def fmt_value(key: str, v: Any) -> str:
    """An evidence value for people: numbers shortened, durations in units, lists abridged."""
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "-"
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 0) == 0:
        v = v.item()  # numpy scalar
    if isinstance(v, int):
        return f"{v:,}" if "step" in key.lower() else fmt_count(v)
    if isinstance(v, float):
        k = key.lower()
        if "time" in k and v > 1e8:  # a unix timestamp (a duration is never 3 years long)
            return datetime.fromtimestamp(v, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        if k.endswith(_DURATION_SUFFIXES) or k.endswith("_time"):
            return fmt_duration(v)
        return fmt_num(v)
    if isinstance(v, (list, tuple)) or (hasattr(v, "tolist") and callable(v.tolist)):
        items = list(v.tolist() if hasattr(v, "tolist") else v)
        shown = ", ".join(fmt_value(key, x) for x in items[:5])
        return f"[{shown}{', ...' if len(items) > 5 else ''}]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}={fmt_value(str(k), x)}" for k, x in v.items()) + "}"
    return str(v)
