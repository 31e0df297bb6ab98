"""Which charts to show and what goes in them: from run models and the view to chart specs.

No Textual here: widgets only draw the :class:`~trainwatch.tui.chart_render.ChartSpec` built here.
Each chart queries the store for about two points per pixel column (min/max downsampled by the
store, so spikes and NaNs survive), which keeps a frame's cost independent of run length.
"""

from __future__ import annotations

import itertools
import math
import re
import time as _time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from trainwatch.families import DEFAULT_FAMILIES
from trainwatch.humanize import fmt_count, fmt_duration, fmt_num
from trainwatch.roles import DEFAULT_ROLES, SYSTEM_PREFIX
from trainwatch.store import Points
from trainwatch.tui.chart_render import ChartSpec, Mark, Trace
from trainwatch.tui.run_model import AlertEntry, RunModel
from trainwatch.tui.smoothing import debiased_ema
from trainwatch.tui.view_state import LOG_BY_DEFAULT, ViewState

ROLE_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss", ("loss", "val_loss")),
    ("grad_norm", ("grad_norm",)),
    ("lr", ("lr",)),
    ("throughput", ("throughput",)),
    ("step_time", ("step_time",)),
)
"""Dashboard charts in order of preference: the first four present are shown."""
ROLE_COLORS = {
    "loss": "#5fd7ff", "val_loss": "#ffd75f", "grad_norm": "#87d75f", "lr": "#d787ff",
    "throughput": "#5f87ff", "step_time": "#5f87ff",
}
VAL_COLORS = ("#ffd75f", "#ff875f", "#d7afff", "#87ffaf", "#ff5fd7", "#afd7ff", "#d7d787")
"""Val loss lines, in the order of their names (the first is the ``val_loss`` role's colour)."""
_SEP = re.compile(r"([/_\-. ])")
MAX_VAL_LINES = 5
"""Val losses drawn on the loss chart; of more, the worst by their last value to their best."""
OTHER_COLORS = ("#5fd7ff", "#ffaf5f", "#87d75f", "#d787ff", "#ff5f87", "#ffd75f", "#5fffaf")
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}
MAX_MARKS = 64


@dataclass(frozen=True)
class Line:
    """One series of one run on a chart."""

    run_id: str
    name: str
    color: str
    label: str


@dataclass(frozen=True)
class PanelDef:
    key: str
    """Stable identity for per-chart settings (the role, or ``series:NAME``)."""
    title: str
    lines: tuple[Line, ...]
    log_default: bool


def choose_panels(
    model: RunModel, overlays: Iterable[RunModel], view: ViewState, n: int = 4
) -> list[PanelDef]:
    """The dashboard's charts: the training roles, or the first series the filter matches."""
    names = model.view.names()
    overlays = [o for o in overlays if o.run_id != model.run_id]
    if view.filtering:
        picked = [nm for nm in names if view.matches(nm)][:n]
        return [_single(model, overlays, nm, i) for i, nm in enumerate(picked)]
    roles = DEFAULT_ROLES.resolve(names)
    panels: list[PanelDef] = []
    used: set[str] = set()
    for key, members in ROLE_PANELS:
        if len(panels) >= n:
            break
        if key == "step_time" and "throughput" in roles:
            continue
        present = [r for r in members if r in roles]
        if key == "loss":
            lines = loss_lines(model, names, roles)
            present = ["loss"] if "loss" in roles else []
            used.update(line.name for line in lines)
        else:
            lines = [Line(model.run_id, roles[r], ROLE_COLORS[r], roles[r]) for r in present]
        if not lines:
            continue
        for i, o in enumerate(overlays):
            other = DEFAULT_ROLES.resolve(o.view.names()).get(members[0])
            if other is not None:
                lines.append(Line(o.run_id, other, OTHER_COLORS[(i + 1) % len(OTHER_COLORS)],
                                  f"{o.run_id}:{other}"))
        used.update(roles[r] for r in present)
        panels.append(PanelDef(key, roles.get(members[0], lines[0].name),
                               tuple(lines), key in LOG_BY_DEFAULT))
    # the run's own series before the machine's (W&B's system/cpu, system/gpu.0.gpu...)
    for nm in sorted(names, key=lambda nm: nm.startswith(SYSTEM_PREFIX)):
        if len(panels) >= n:
            break
        if nm not in used and DEFAULT_ROLES.role_of(nm) not in ("epoch",):
            panels.append(_single(model, overlays, nm, len(panels)))
    return panels


def loss_lines(model: RunModel, names: list[str], roles: Mapping[str, str]) -> list[Line]:
    """The loss chart's lines: the train loss, then every val/eval loss series (by family: all
    six of HF's ``eval_g0_loss`` .. ``eval_g5_loss``), at most :data:`MAX_VAL_LINES` of them.

    The train loss is the ``loss`` role, else the series the val losses pair with. Val lines
    keep their colour while the choice of the worst changes (by their place among all)."""
    fams = DEFAULT_FAMILIES.classify_run(names)
    first = roles.get("val_loss")
    vals = sorted((n for n, f in fams.items() if f.family == "val_loss"),
                  key=lambda n: (n != first, _natural(n)))
    train = roles.get("loss") or next((fams[n].pair for n in vals if fams[n].pair), None)
    shown = set(vals)
    if len(vals) > MAX_VAL_LINES:
        shown = set(sorted(vals, key=lambda n: _worse_first(model, n))[:MAX_VAL_LINES])
    labels = distinct_labels(vals)
    lines = [Line(model.run_id, train, ROLE_COLORS["loss"], train)] if train else []
    lines += [Line(model.run_id, n, VAL_COLORS[i % len(VAL_COLORS)], labels[n])
              for i, n in enumerate(vals) if n in shown]
    return lines


def distinct_labels(names: list[str]) -> dict[str, str]:
    """Each name less what all of them share at the start and the end, cut where a word
    ends (``eval_g0_loss``, ``eval_g1_loss`` -> ``g0``, ``g1``): a title has room for a
    handful of short labels, and the shared part is what the middle-cut would keep."""
    if len(names) < 2:
        return {n: n for n in names}
    head = _SEP.split(names[0])
    tail = list(head)
    for n in names[1:]:
        words = _SEP.split(n)
        head = [a for a, _ in itertools.takewhile(lambda p: p[0] == p[1], zip(head, words))]
        tail = [a for a, _ in itertools.takewhile(lambda p: p[0] == p[1],
                                                  zip(reversed(tail), reversed(words)))][::-1]
    out = {}
    for n in names:
        words = _SEP.split(n)
        # words and separators alternate: drop whole words, and the separator next to them
        body = words[len(head) + len(head) % 2: len(words) - len(tail) - len(tail) % 2]
        out[n] = "".join(body) or n
    return out


def _natural(name: str) -> tuple:
    """``eval_g2_loss`` before ``eval_g10_loss``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _worse_first(model: RunModel, name: str) -> tuple[float, str]:
    """Sort key: the highest last value relative to the series' best first (a NaN first)."""
    s = model.view.get(name)
    if s is None or s.last is None:
        return (math.inf, name)
    if not math.isfinite(s.last):
        return (-math.inf, name)
    if s.min is None:
        return (math.inf, name)
    ratio = s.last / s.min if s.min > 0 else s.last - s.min
    return (-ratio, name)


def _single(model: RunModel, overlays: list[RunModel], name: str, i: int) -> PanelDef:
    lines = [Line(model.run_id, name, OTHER_COLORS[i % len(OTHER_COLORS)], name)]
    for j, o in enumerate(overlays):
        if name in o.view:
            lines.append(Line(o.run_id, name, OTHER_COLORS[(i + j + 1) % len(OTHER_COLORS)],
                              f"{o.run_id}:{name}"))
    role = DEFAULT_ROLES.role_of(name)
    return PanelDef(f"series:{name}", name, tuple(lines), role in LOG_BY_DEFAULT)


def series_panel(model: RunModel, name: str) -> PanelDef:
    """A chart of one series (enter on a metrics row)."""
    return _single(model, [], name, 0)


def panel_key(panel: PanelDef, models: Mapping[str, RunModel], extra: object) -> tuple:
    """Changes whenever the panel's drawing would: data versions, alerts, view, size."""
    versions = []
    for line in panel.lines:
        m = models.get(line.run_id)
        s = m.view.get(line.name) if m else None
        versions.append((line.run_id, line.name, s.version if s else -1,
                         (id(m.view), m.resets, m.alerts[-1].seq if m.alerts else -1)
                         if m else None))
    return (panel, tuple(versions), extra)


def build_spec(
    panel: PanelDef, models: Mapping[str, RunModel], view: ViewState, px_w: int
) -> ChartSpec:
    """The chart of ``panel`` for a plot ``px_w`` braille pixels wide."""
    traces: list[Trace] = []
    marks: list[Mark] = []
    queried: list[tuple[Line, RunModel, Points]] = []
    for line in panel.lines:
        m = models.get(line.run_id)
        s = m.view.get(line.name) if m else None
        if m is None or s is None or s.last_step is None:
            continue
        start = s.last_step - view.zoom + 1 if view.zoom is not None else None
        # ~4 points per pixel column: the rasteriser is exact for any count, and bucket edges
        # that move as data grows then move points by less than a pixel (a calm live chart)
        queried.append((line, m, s.query(start=start, max_points=max(px_w * 4, 16))))
    t0 = _start_time(panel, models, queried)
    for line, m, pts in queried:
        xs = _xs(pts.steps, pts.times, view, t0)
        ys = pts.values
        if view.x_mode != "step" and xs.size > 1 and np.any(np.diff(xs) < 0):
            order = np.argsort(xs, kind="stable")
            xs, ys = xs[order], ys[order]
        if view.smoothing > 0:
            traces.append(Trace(xs, ys, f"dim {line.color}"))
            traces.append(Trace(xs, debiased_ema(ys, view.smoothing), f"bold {line.color}"))
        else:
            traces.append(Trace(xs, ys, line.color))
        lo = float(pts.steps[0]) if pts.steps.size else None
        marks.extend(_marks(m.alerts, line.name, view, t0, lo))
    x_range = None
    return ChartSpec(
        tuple(traces),
        tuple(marks[-MAX_MARKS:]),
        log_y=view.log_y(panel.key, panel.log_default),
        robust=view.robust,
        x_range=x_range,
        fmt_x=x_formatter(view, t0),
        fmt_y=fmt_num,
    )


def _start_time(
    panel: PanelDef, models: Mapping[str, RunModel], queried: list[tuple[Line, RunModel, Points]]
) -> float:
    """Time zero of the relative x-axis: the run's start, else (while the history loads and
    only the file's end is known) the first point drawn."""
    m = models.get(panel.lines[0].run_id) if panel.lines else None
    if m is not None and m.start_time is not None:
        return m.start_time
    for _line, _m, pts in queried:
        finite = pts.times[np.isfinite(pts.times)]
        if finite.size:
            return float(finite[0])
    return 0.0


def _xs(steps: np.ndarray, times: np.ndarray, view: ViewState, t0: float) -> np.ndarray:
    if view.x_mode == "step":
        return steps.astype(np.float64)
    if view.x_mode == "relative":
        return times - t0
    return times.astype(np.float64)


def _marks(
    alerts: list[AlertEntry], name: str, view: ViewState, t0: float, first_step: float | None
) -> list[Mark]:
    out = []
    for e in alerts[-MAX_MARKS * 4 :]:
        a = e.alert
        if a.metric != name or (first_step is not None and a.step < first_step):
            continue
        x = float(a.step) if view.x_mode == "step" else (
            a.time - t0 if view.x_mode == "relative" else a.time)
        out.append(Mark(x, SEVERITY_STYLE.get(a.severity, "bold")))
    return out


def x_formatter(view: ViewState, t0: float) -> Callable[[float], str]:
    if view.x_mode == "step":
        return lambda v: fmt_count(round(v))
    if view.x_mode == "relative":
        return lambda v: fmt_duration(v)
    return _wall


def _wall(v: float) -> str:
    try:
        return _time.strftime("%H:%M:%S", _time.localtime(v))
    except (OverflowError, OSError, ValueError):
        return "?"


def last_value_text(panel: PanelDef, models: Mapping[str, RunModel]) -> list[tuple[str, str, str]]:
    """(label, colour, last value) per line, for the chart's title."""
    out = []
    for line in panel.lines:
        m = models.get(line.run_id)
        s = m.view.get(line.name) if m else None
        out.append((line.label, line.color, fmt_num(s.last) if s is not None else "-"))
    return out
