"""``trainwatch inspect``: what a file or run directory holds, as JSON or a readable table."""

from __future__ import annotations

import json
import math
from typing import Any

from trainwatch.humanize import fmt_count, fmt_num
from trainwatch.load import LoadedRun
from trainwatch.roles import DEFAULT_ROLES, RoleTable
from trainwatch.safe_text import clean
from trainwatch.store import SeriesStore

MAX_LISTED_MALFORMED = 10


def summarize(run: LoadedRun, roles: RoleTable = DEFAULT_ROLES) -> dict[str, Any]:
    """The documented JSON of ``inspect`` (docs/format.md)."""
    store = SeriesStore()
    malformed: list[int] = []
    first_malformed: str | None = None
    n_malformed = 0
    segments = 1
    records = 0
    events: dict[str, int] = {}
    for b in run.main:
        store.ingest(b)  # a reset batch resets the store itself
        records += b.n_records
        n_malformed += len(b.malformed)
        if b.malformed and first_malformed is None:
            m = b.malformed[0]  # (a binary format has no lines: 0, its reason names the byte)
            first_malformed = f"{b.source}:{m.line}: {m.reason}" if m.line else f"{b.source}: {m.reason}"
        malformed.extend(m.line for m in b.malformed[: MAX_LISTED_MALFORMED - len(malformed)])
        segments += len(b.rewinds)
        for e in b.events:
            events[e.name] = events.get(e.name, 0) + 1
    metrics: dict[str, Any] = {}
    for name in store.names():
        s = store.get(name)
        assert s is not None
        metrics[name] = {
            "role": roles.role_of(name),
            "count": s.count,
            "nonfinite": s.nonfinite,
            "first_step": s.first_step,
            "last_step": s.last_step,
            "last": _finite(s.last),
            "last_nonfinite": _nonfinite_name(s.last),
            "min": _finite(s.min),
            "max": _finite(s.max),
        }
    out: dict[str, Any] = {
        "path": str(run.path),
        "format": run.format,
        "records": records,
        "malformed": n_malformed,
        "malformed_lines": malformed,
        "first_malformed": first_malformed,
        "segments": segments,
        "metrics": metrics,
        "events": events,
        "ranks": sorted(run.ranks),
        "files": [str(f) for f in run.files],
        "run": None if run.run_id is None else {"id": run.run_id, "name": run.run_name},
    }
    return out


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _nonfinite_name(x: float | None) -> str | None:
    """What a non-finite last value was (``last`` is null in strict JSON): "nan", "inf",
    "-inf"; None for a finite or absent one."""
    if x is None or math.isfinite(x):
        return None
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _malformed_where(summary: dict[str, Any]) -> str:
    """`` (lines 3, 17)``; for a binary format, whose entries have no line, the first one's
    reason (it names the byte offset)."""
    if not summary["malformed"]:
        return ""
    listed = summary["malformed_lines"]
    if not any(listed):
        return f" (first: {clean(summary['first_malformed'] or '')})"
    more = ", ..." if summary["malformed"] > len(listed) else ""
    return f" (lines {', '.join(map(str, listed))}{more})"


def format_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False)


def format_text(summary: dict[str, Any]) -> str:
    run = summary.get("run")
    lines = [
        f"{clean(summary['path'])}  ({summary['format']})"
        + (f"  run {clean(str(run['name']))} ({clean(run['id'])})" if run else ""),
        f"records {fmt_count(summary['records'])}   segments {summary['segments']}   "
        f"malformed {summary['malformed']}" + _malformed_where(summary),
    ]
    if summary["events"]:
        lines.append("events   " + "  ".join(f"{k} x{v}" for k, v in summary["events"].items()))
    if summary["ranks"]:
        lines.append("ranks    " + ", ".join(map(str, summary["ranks"])))
    metrics = summary["metrics"]
    if not metrics:
        lines.append("no metrics")
        return "\n".join(lines)
    width = min(40, max(len(clean(n)) for n in metrics))
    head = f"{'metric':<{width}}  {'role':<10} {'points':>8} {'non-fin':>7} {'steps':>17}  " \
           f"{'last':>9} {'min':>9} {'max':>9}"
    lines += ["", head, "-" * len(head)]
    for name, m in metrics.items():
        steps = f"{m['first_step']}..{m['last_step']}" if m["count"] else "-"
        lines.append(
            f"{clean(name)[:width]:<{width}}  {m['role'] or '':<10} {fmt_count(m['count']):>8} "
            f"{m['nonfinite']:>7} {steps:>17}  {_cell(m['last'], m.get('last_nonfinite'))} "
            f"{_cell(m['min'])} {_cell(m['max'])}"
        )
    return "\n".join(lines)


def _cell(x: float | None, nonfinite: str | None = None) -> str:
    return f"{fmt_num(x) if x is not None else (nonfinite or '-'):>9}"
