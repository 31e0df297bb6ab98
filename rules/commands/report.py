"""``trainwatch report``: the end-of-run summary a person reads.

Steps, duration, speed, train and validation loss (final, best and where), the learning-rate
schedule that was actually used, every alert with its diagnosis, a verdict (unstable, overfitting,
underfitting, converged...) and concrete next steps. :func:`build_report` does the analysis; the
formatters only print. The maths on series live in :mod:`trainwatch.rules.commands.run_summary` and the
judgement in :mod:`trainwatch.rules.commands.verdict` (their public names are re-exported here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainwatch.humanize import fmt_count, fmt_duration, fmt_num
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.rules.commands.check import count_steps, describe_alert, run_check
from trainwatch.rules.commands.run_summary import (
    LrSchedule,
    MetricSummary,
    RoleMove,
    Series,
    classify_lr,
    collect_series,
    moving_average,
    role_moves,
    summarize_metric,
)
from trainwatch.rules.commands.verdict import (
    FLAT,
    STUCK_RULES,
    TAIL,
    UNSTABLE_RULES,
    Trend,
    Verdict,
    judge,
    tail_trend,
)
from trainwatch.rules.detectors.stats import distinct, median
from trainwatch.rules.engine.alert import SEVERITY_RANK, Alert, json_safe
from trainwatch.safe_text import clean

if TYPE_CHECKING:
    from trainwatch.load import LoadedRun

__all__ = [
    "BARS", "FLAT", "SPARK_WIDTH", "STUCK_RULES", "TAIL", "UNSTABLE_RULES", "LrSchedule",
    "MetricSummary", "Report", "RoleMove", "Series", "Trend", "Verdict", "build_report",
    "classify_lr", "collect_series", "format_report_json", "format_report_markdown", "judge", "moving_average",
    "role_moves", "sparkline", "summarize_metric", "tail_trend",
]

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 48


@dataclass(frozen=True)
class Report:
    path: str
    format: str
    records: int
    steps: int
    first_step: int | None
    last_step: int | None
    duration_s: float | None
    throughput: float | None
    """Median of the throughput metric, else steps per second."""
    throughput_unit: str
    step_time_s: float | None
    loss: MetricSummary | None
    val_loss: MetricSummary | None
    lr: LrSchedule | None
    ended: bool
    """A ``run_end`` event was seen."""
    alerts: tuple[Alert, ...]
    verdict: Verdict
    sparklines: Mapping[str, str] = field(default_factory=dict)
    role_moves: tuple[RoleMove, ...] = ()
    """Roles that moved to another series mid-run, in order. The figures of a role are those of
    the series the run ended on (a best across two series at different scales means nothing);
    these say which earlier series they leave out."""
    malformed: int = 0
    """Lines of the main stream skipped as malformed: the figures are of the rest."""
    first_malformed: str | None = None
    """The first of them as ``FILE:LINE: reason``."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("alerts", "verdict")}
        d["alerts"] = [a.to_dict() for a in self.alerts]
        d["verdict"] = {"verdict": self.verdict.verdict, "reason": self.verdict.reason,
                        "recommendations": list(self.verdict.recommendations)}
        return json_safe(d)


# ------------------------------------------------------------------------------------ building


def build_report(run: LoadedRun, cfg: Any) -> Report:
    """Analyse a loaded run: run every rule (as ``check`` does), then summarize and judge."""
    result = run_check(run, cfg)
    roles_table = getattr(cfg, "roles", None) or DEFAULT_ROLES
    series = collect_series(run.main)
    roles = roles_table.resolve(series)
    moves = role_moves(run.main, roles_table)
    loss = series.get(roles["loss"]) if "loss" in roles else None
    val = series.get(roles["val_loss"]) if "val_loss" in roles else None
    lr = series.get(roles["lr"]) if "lr" in roles else None

    times = [b.times for b in run.main if b.n_records]
    all_t = np.concatenate(times) if times else np.empty(0)
    all_t = all_t[np.isfinite(all_t)]
    duration = float(all_t.max() - all_t.min()) if all_t.size > 1 else None
    if not duration:  # formats without timestamps: every record got the same read time
        duration = None
    steps_all = [c.steps for b in run.main for c in b.series.values() if len(c)]
    st = np.concatenate(steps_all) if steps_all else np.empty(0, dtype=np.int64)
    first_step = int(st.min()) if st.size else None
    last_step = int(st.max()) if st.size else None

    tp_unit = " steps/s"
    throughput = None
    if "throughput" in roles:
        throughput = _finite_median(series[roles["throughput"]].values)
        tp_unit = f"/s (median of {roles['throughput']})"
    elif duration and st.size:
        throughput = float(distinct(st).shape[0] / duration)
        tp_unit = " steps/s"
    step_time = _finite_median(series[roles["step_time"]].values) if "step_time" in roles else None

    loss_sum = summarize_metric(roles["loss"], loss) if loss is not None else None
    val_sum = summarize_metric(roles["val_loss"], val, smooth=False) if val is not None else None
    lr_sched = classify_lr(lr.steps, lr.values) if lr is not None and len(lr.values) else None
    ended = any(e.name == "run_end" for b in run.main for e in b.events)
    verdict = judge(
        loss=None if loss is None else (loss.steps, loss.values),
        val=None if val is None else (val.steps, val.values),
        alerts=result.alerts,
        lr_peak=None if lr_sched is None else lr_sched.peak,
        lr_final=None if lr_sched is None else lr_sched.final,
        warmup_steps=None if lr_sched is None else lr_sched.warmup_steps,
        last_step=last_step,
    )
    sparks = {}
    for role, s in (("loss", loss), ("val_loss", val), ("lr", lr)):
        if s is not None and len(s.values) > 1:
            sparks[roles[role]] = sparkline(s.values, SPARK_WIDTH)
    return Report(
        path=str(run.path), format=run.format, records=int(sum(b.n_records for b in run.main)),
        steps=count_steps(run.main), first_step=first_step, last_step=last_step,
        duration_s=duration, throughput=throughput, throughput_unit=tp_unit,
        step_time_s=step_time, loss=loss_sum, val_loss=val_sum, lr=lr_sched, ended=ended,
        alerts=result.alerts, verdict=verdict, sparklines=sparks, role_moves=moves,
        malformed=result.malformed, first_malformed=result.first_malformed,
    )


def _finite_median(v: np.ndarray) -> float | None:
    f = v[np.isfinite(v)]
    return median(f) if f.size else None


# ------------------------------------------------------------------------------------ printing


def sparkline(values: np.ndarray, width: int = SPARK_WIDTH) -> str:
    """Bucket means as block characters; a bucket holding NaN/inf shows ``×``."""
    v = np.asarray(values, dtype=np.float64)
    n = min(width, v.size)
    if n == 0:
        return ""
    edges = np.linspace(0, v.size, n + 1).astype(np.int64)
    means, bad = np.empty(n), np.zeros(n, dtype=bool)
    for i in range(n):
        b = v[edges[i]:edges[i + 1]]
        f = b[np.isfinite(b)]
        bad[i] = f.size < b.size
        means[i] = f.mean() if f.size else math.nan
    ok = np.isfinite(means)
    if not ok.any():
        return "×" * n
    lo, hi = float(means[ok].min()), float(means[ok].max())
    scale = (len(BARS) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(
        "×" if bad[i] or not ok[i] else BARS[round((means[i] - lo) * scale) if scale else 3]
        for i in range(n)
    )


def format_report_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=False)


def format_report_markdown(report: Report) -> str:
    r = report
    out = [f"# Training report: {r.path}", ""]
    out += [f"**Verdict: {r.verdict.verdict}.** {r.verdict.reason}", ""]
    out += ["## Summary", "", "| | |", "|---|---|"]
    steps = f"{fmt_count(r.steps)} steps ({fmt_count(r.records)} records)"
    if r.first_step is not None and r.last_step is not None:
        steps += f", step {r.first_step:,} to {r.last_step:,}"
    out.append(f"| steps | {steps} |")
    if r.malformed:  # the figures below are of the rest: a person must know what was left out
        out.append(f"| malformed lines | {fmt_count(r.malformed)} skipped; the first, "
                   f"{_cell(str(r.first_malformed))} ('trainwatch inspect' lists them) |")
    if r.ended:
        out.append("| status | finished (run_end seen) |")
    elif r.format == "jsonl":  # other formats have no end marker to miss
        out.append("| status | no run_end: still running, or it died |")
    if r.duration_s is not None:
        out.append(f"| duration | {fmt_duration(r.duration_s)} |")
    if r.throughput is not None:
        out.append(f"| throughput | {fmt_num(r.throughput)}{r.throughput_unit} |")
        out += _moved_rows(r, "throughput")  # (none where it is counted in steps/s: no role)
    if r.step_time_s is not None:
        out.append(f"| step time | {fmt_duration(r.step_time_s)} (median) |")
        out += _moved_rows(r, "step_time")
    if r.loss is not None:
        out.append(f"| train loss ({_cell(r.loss.name)}) | {_metric_line(r.loss)} |")
        out += _moved_rows(r, "loss")
    if r.val_loss is not None:
        out.append(f"| val loss ({_cell(r.val_loss.name)}) | {_metric_line(r.val_loss)} |")
        out += _moved_rows(r, "val_loss")
    if r.lr is not None:
        lr = r.lr
        warm = f", {fmt_count(lr.warmup_steps)} warmup steps" if lr.warmup_steps else ""
        out.append(
            f"| learning rate | {lr.kind}{warm}: start {fmt_num(lr.start)}, peak {fmt_num(lr.peak)}"
            f" (step {lr.peak_step:,}), final {fmt_num(lr.final)} |"
        )
        out += _moved_rows(r, "lr")
    if r.sparklines:
        out += ["", "## Curves", "", "```"]
        w = max(len(k) for k in r.sparklines)
        out += [f"{k:<{w}}  {line}" for k, line in r.sparklines.items()]
        out.append("```")
    out += ["", f"## Alerts ({len(r.alerts)})", ""]
    if not r.alerts:
        out.append("No rule fired.")
    else:
        by = {s: sum(a.severity == s for a in r.alerts) for s in SEVERITY_RANK}
        out.append(", ".join(f"{by[s]} {s}" for s in ("error", "warning", "info")) + ".")
        for i, a in enumerate(r.alerts, 1):
            out += ["", "```", *describe_alert(a, i), "```"]
    out += ["", "## Recommendations", ""]
    out += [f"{i}. {rec}" for i, rec in enumerate(r.verdict.recommendations, 1)]
    # names, paths and console text come from the run's files: no escape reaches the terminal
    return "\n".join(clean(line) for line in out)


_MOVED_LABEL = {"loss": "train loss", "val_loss": "val loss", "lr": "learning rate",
                "throughput": "throughput", "step_time": "step time"}
_MOVED_FIGURES = {"loss": "final, best and first are", "val_loss": "final, best and first are",
                  "lr": "the schedule is", "throughput": "the median is",
                  "step_time": "the median is"}


def _moved_rows(r: Report, role: str) -> list[str]:
    """A row under a role's figures when the role moved to another series mid-run: the figures
    are of the last series alone, and the reader must know the earlier one is left out (a best
    across both would compare values at different scales)."""
    moves = [m for m in r.role_moves if m.role == role]
    if not moves:
        return []
    path = f"moved from {moves[0].from_series} to {moves[0].to_series} at step {moves[0].step:,}"
    path += "".join(f", then to {m.to_series} at step {m.step:,}" for m in moves[1:])
    last = moves[-1].to_series
    return [(f"| {_MOVED_LABEL[role]} series | {path}: {_MOVED_FIGURES[role]} of {last} alone"
             " (the series may differ in scale) |")]


def _cell(name: str) -> str:
    """A metric name inside a Markdown table cell: a ``|`` in it would end the cell."""
    return name.replace("|", "\\|")


def _metric_line(m: MetricSummary) -> str:
    if not math.isfinite(m.best):
        return f"no finite value in {fmt_count(m.points)} points"
    smooth = f" (mean of last {m.window})" if m.window > 1 else ""
    best = f"best {fmt_num(m.best)} at step {m.best_step:,}"
    if m.window > 1:
        best += f" ({m.window}-step average)"
    nf = f"; {fmt_count(m.nonfinite)} NaN/inf" if m.nonfinite else ""
    final = f"final {fmt_num(m.final)}{smooth}"
    if not math.isfinite(m.last):
        final = f"ended {fmt_num(m.last)} (last finite: {fmt_num(m.final)}{smooth})"
    return f"{final}, {best}, first {fmt_num(m.first)}{nf}"
