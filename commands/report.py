"""``trainwatch report``: the end-of-run summary a person reads.

Steps, duration, speed, train and validation loss (final, best and where), the learning-rate
schedule that was actually used, every alert with its diagnosis, a verdict (unstable, overfitting,
underfitting, converged...) and concrete next steps. :func:`build_report` does the analysis; the
formatters only print. The maths on series live in :mod:`trainwatch.commands.run_summary` and the
judgement in :mod:`trainwatch.commands.verdict` (their public names are re-exported here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainwatch.commands.check import CheckResult, describe_alert, run_check
from trainwatch.commands.run_summary import (
    LrSchedule,
    MetricSummary,
    RoleMove,
    Series,
    classify_lr,
    collect_series,
    moves_from,
    moving_average,
    role_moves,
    summarize_metric,
)
from trainwatch.commands.series_walk import (
    ExactMedian,
    LrAcc,
    MetricAcc,
    SparkAcc,
    TailAcc,
    ValTurnAcc,
    walk_series,
)
from trainwatch.commands.tally import RunTally, SeriesTally
from trainwatch.commands.verdict import (
    FLAT,
    STUCK_RULES,
    TAIL,
    UNSTABLE_RULES,
    Trend,
    Verdict,
    judge,
    judge_from,
    tail_trend,
    tail_trend_of,
)
from trainwatch.humanize import fmt_count, fmt_duration, fmt_num
from trainwatch.roles import DEFAULT_ROLES, RoleTable
from trainwatch.rules.builtin.run_crashed import RunEnd
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
    end: Mapping[str, Any] | None = None
    """How the last ``run_end`` said the run ended: ``status``, ``exit_code``, ``error`` (each
    None where it said nothing)."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("alerts", "verdict")}
        d["alerts"] = [a.to_dict() for a in self.alerts]
        d["verdict"] = {"verdict": self.verdict.verdict, "reason": self.verdict.reason,
                        "recommendations": list(self.verdict.recommendations)}
        return json_safe(d)


# ------------------------------------------------------------------------------------ building


def build_report(run: LoadedRun, cfg: Any, checked: CheckResult | None = None) -> Report:
    """Analyse a loaded run: run every rule (as ``check`` does; ``checked`` when done already),
    then summarize and judge.

    The main stream is walked once for the rules and the run's counts (:class:`RunTally`), then
    once more for the series of the roles the report shows, whose figures are summed up as they
    go by (:mod:`~trainwatch.commands.series_walk`); a series whose points a resumed
    segment rewrote is counted again first, and a median of more values than are held takes a
    walk or two more. No series is held whole (#15)."""
    result = checked if checked is not None else run_check(run, cfg)
    tally = result.tally
    roles_table = getattr(cfg, "roles", None) or DEFAULT_ROLES
    roles = roles_table.resolve(tally.series)
    moves = role_moves_of(tally, roles_table)
    shown = {role: roles[role] for role in ("loss", "val_loss", "lr", "throughput", "step_time")
             if role in roles}
    counts = _shown_tallies(run, tally, set(shown.values()))

    accs: dict[str, list[Any]] = {name: [] for name in shown.values()}
    spark_of: dict[str, SparkAcc] = {}
    loss_acc = val_acc = turn_acc = tail_acc = lr_acc = None
    medians: dict[str, ExactMedian] = {}
    for role, name in shown.items():
        t = counts[name]
        if role == "loss":
            loss_acc, tail_acc = MetricAcc(name, t.points, t.finite), TailAcc(t.finite, TAIL)
            accs[name] += [loss_acc, tail_acc]
        elif role == "val_loss":
            val_acc = MetricAcc(name, t.points, t.finite, smooth=False)
            turn_acc = ValTurnAcc(t.finite)
            accs[name] += [val_acc, turn_acc]
        elif role == "lr":
            lr_acc = LrAcc(t)
            accs[name].append(lr_acc)
        else:
            sample = tally.series[name].sample
            medians[role] = ExactMedian(t.finite, t.low, t.peak,
                                        None if sample is None else sample.sorted())
            accs[name].append(medians[role])
        if role in ("loss", "val_loss", "lr") and t.points > 1:
            spark_of[name] = SparkAcc(t.points, SPARK_WIDTH)
            accs[name].append(spark_of[name])
    while any(accs.values()):  # a walk feeds every figure; a few need another
        _walk(run, tally, accs)
        accs = {name: [a for a in lst if not a.walked()] for name, lst in accs.items()}

    duration = None
    if tally.time_range is not None and tally.timed > 1:
        duration = tally.time_range[1] - tally.time_range[0]
    if not duration:  # formats without timestamps: every record got the same read time
        duration = None
    first_step, last_step = tally.step_range or (None, None)
    tp_unit = " steps/s"
    throughput = None
    if "throughput" in roles:
        throughput = medians["throughput"].value
        tp_unit = f"/s (median of {roles['throughput']})"
    elif duration and tally.step_range is not None:
        throughput = float(len(tally.steps) / duration)
        tp_unit = " steps/s"
    step_time = medians["step_time"].value if "step_time" in roles else None

    loss_sum = loss_acc.result() if loss_acc is not None else None
    val_sum = val_acc.result() if val_acc is not None else None
    lr_sched = lr_acc.schedule if lr_acc is not None else None
    trend = tail_trend_of(*tail_acc.tail()) if tail_acc is not None else None
    verdict = judge_from(
        trend=trend,
        turn=turn_acc.result() if turn_acc is not None else None,
        alerts=result.alerts,
        lr_peak=None if lr_sched is None else lr_sched.peak,
        lr_final=None if lr_sched is None else lr_sched.final,
        warmup_steps=None if lr_sched is None else lr_sched.warmup_steps,
        last_step=last_step,
    )
    sparks = {name: spark_text(acc.means, acc.bad) for name, acc in spark_of.items()}
    return Report(
        path=str(run.path), format=run.format, records=tally.records,
        steps=len(tally.steps), first_step=first_step, last_step=last_step,
        duration_s=duration, throughput=throughput, throughput_unit=tp_unit,
        step_time_s=step_time, loss=loss_sum, val_loss=val_sum, lr=lr_sched, ended=tally.ended,
        end=None if tally.end is None else asdict(RunEnd.of(tally.end)),
        alerts=result.alerts, verdict=verdict, sparklines=sparks, role_moves=moves,
        malformed=result.malformed, first_malformed=result.first_malformed,
    )


def _shown_tallies(run: LoadedRun, tally: RunTally, names: set[str]) -> dict[str, SeriesTally]:
    """The tally of each series as the report takes it: a resumed segment's rewrite replaces the
    points it rewrote, which costs a walk to count them again where some were."""
    out = {n: tally.series[n] for n in names}
    rewritten = {n for n in names if tally.series[n].rewritten()}
    if rewritten:
        for n in rewritten:
            out[n] = SeriesTally()
        for b in run.main:
            for n in rewritten:
                for steps, values in walk_series((b,), n, tally.series[n].cutoffs()):
                    out[n].add(steps, values, np.zeros(1, dtype=np.int32))
    return out


def _walk(run: LoadedRun, tally: RunTally, accs: dict[str, list[Any]]) -> None:
    """One walk of the main stream, each role's series fed to its accumulators."""
    wanted = {n: lst for n, lst in accs.items() if lst}
    cutoffs = {n: tally.series[n].cutoffs() for n in wanted}
    for b in run.main:
        for name, lst in wanted.items():
            for steps, values in walk_series((b,), name, cutoffs[name]):
                for acc in lst:
                    acc.feed(steps, values)


def role_moves_of(tally: RunTally, table: RoleTable) -> tuple[RoleMove, ...]:
    """:func:`role_moves` from where the tally saw each series start."""
    return moves_from({n: s.first for n, s in tally.series.items() if s.first is not None},
                      table)


# ------------------------------------------------------------------------------------ printing


def sparkline(values: np.ndarray, width: int = SPARK_WIDTH) -> str:
    """Bucket means as block characters; a bucket holding NaN/inf shows ``×``."""
    v = np.asarray(values, dtype=np.float64)
    acc = SparkAcc(v.size, width)
    acc.feed(None, v)
    return spark_text(acc.means, acc.bad)


def spark_text(means: np.ndarray, bad: np.ndarray) -> str:
    """The sparkline of bucket means (``bad``: the bucket held a NaN/inf)."""
    n = means.shape[0]
    if n == 0:
        return ""
    ok = np.isfinite(means)
    if not ok.any():
        return "×" * n
    lo, hi = float(means[ok].min()), float(means[ok].max())
    scale = (len(BARS) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(
        "×" if bad[i] or not ok[i] else BARS[round((means[i] - lo) * scale) if scale else 3]
        for i in range(n)
    )


def end_status(end: Mapping[str, Any] | None) -> str:
    """The report's status line for a run whose ``run_end`` was seen: ``finished (run_end
    seen)`` for a clean end, else what the end said (``crashed, exit code 1: ValueError: x``)."""
    e = RunEnd(**end) if end is not None else RunEnd(None, None, None)
    if e.exit_code in (0, None) and e.error is None and e.status in (None, "finished"):
        return "finished (run_end seen)"
    parts = [e.status or "ended"]
    how = RunEnd(None, e.exit_code, None).how()  # (the exit code, and the signal it means)
    if how:
        parts.append(how)
    text = ", ".join(parts)
    return f"{text}: {e.error}" if e.error else text


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
        out.append(f"| status | {_cell(end_status(r.end))} |")
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
