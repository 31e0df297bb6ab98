"""A braille line chart drawn with numpy: axes, several traces, NaN gaps, alert marks.

Why not plotext for every frame: a live dashboard redraws four charts up to ten times a second,
and plotext walks every point in Python. Here each trace is rasterised as per-pixel-column
vertical spans (vectorised), which is exact for x-sorted data however many points there are, and
costs the same for 200 points or 20,000. The result is plain rows of ``(text, style)`` runs, so
the maths is tested without a terminal; :mod:`trainwatch.tui.chart` turns them into strips.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

Run = tuple[str, str]
"""A piece of one screen row: text and a Rich style string ("" = default)."""

AXIS_STYLE = "dim"
NAN_STYLE = "bold red"
NAN_MARK = "×"
ALERT_MARK = "▼"
_DOTS = np.array([[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]], dtype=np.int64)
"""Braille dot bit for (row within cell, column within cell)."""


@dataclass(frozen=True)
class Trace:
    """One line on a chart. ``xs`` ascending; ``ys`` may hold NaN/inf (drawn as gaps + marks)."""

    xs: np.ndarray
    ys: np.ndarray
    style: str
    """Rich colour/style of the line."""


@dataclass(frozen=True)
class Mark:
    """A vertical marker at the top of the plot (an alert's step)."""

    x: float
    style: str
    char: str = ALERT_MARK


@dataclass(frozen=True)
class ChartSpec:
    traces: tuple[Trace, ...]
    marks: tuple[Mark, ...] = ()
    log_y: bool = False
    robust: bool = False
    """Fit the y-range to the 2nd..98th percentiles; outliers are drawn clipped at the edge."""
    x_range: tuple[float, float] | None = None
    fmt_x: Callable[[float], str] = field(default=lambda v: f"{v:g}")
    fmt_y: Callable[[float, int], str] = field(default=lambda v, sig=3: f"{v:.{sig}g}")
    """A y value in ``sig`` significant digits (3 unless labels would repeat)."""


@dataclass(frozen=True)
class Scale:
    """The visible ranges, in plotted units (log10 for a log axis)."""

    x0: float
    x1: float
    y0: float
    y1: float


def transform_y(ys: np.ndarray, log_y: bool) -> np.ndarray:
    """Values as plotted: log10 on a log axis, where zero and negatives sink to -inf (clipped)."""
    if not log_y:
        return ys
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log10(np.where(ys > 0, ys, 0.0))
    return np.where(np.isfinite(ys), out, ys)


def fit_scale(spec: ChartSpec) -> Scale | None:
    """The x and y ranges that show every trace; None when there is nothing finite to show."""
    xs = [t.xs for t in spec.traces if t.xs.size]
    if not xs:
        return None
    if spec.x_range is not None:
        x0, x1 = spec.x_range
    else:
        x0 = min(float(x[0]) for x in xs)
        x1 = max(float(x[-1]) for x in xs)
        if x1 > x0:
            unit = _unit(x1 - x0)
            x0, x1 = math.floor(x0 / unit) * unit, math.ceil(x1 / unit - 1e-9) * unit
    if x1 <= x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    ys = [transform_y(t.ys, spec.log_y) for t in spec.traces]
    finite = np.concatenate([y[np.isfinite(y)] for y in ys]) if ys else np.empty(0)
    if finite.size == 0:
        return Scale(x0, x1, 0.0, 1.0)
    if spec.robust and finite.size >= 10:
        lo, hi = (float(q) for q in np.quantile(finite, [0.02, 0.98]))
    else:
        lo, hi = float(finite.min()), float(finite.max())
    y0, y1 = _y_range(lo, hi, spec.log_y)
    return Scale(x0, x1, y0, y1)


def _y_range(lo: float, hi: float, log_y: bool) -> tuple[float, float]:
    """The y-range shown for data spanning ``lo..hi`` (plotted units): padded, rounded, and
    never across zero when the data is not (on a linear axis; a log axis is positive anyway)."""
    span = hi - lo
    if span <= 0:
        pad = 0.5 if log_y else (abs(lo) * 0.1 or 1.0)
        y0, y1 = lo - pad, hi + pad
    else:
        pad = span * 0.05
        unit = _unit(span)
        y0, y1 = math.floor((lo - pad) / unit) * unit, math.ceil((hi + pad) / unit) * unit
    if not log_y:
        # the padding must not invent values of the other sign: a learning rate that decays
        # to 0 gets an axis from 0, not from -1.2e-4
        if lo >= 0 > y0:
            y0 = 0.0
        elif hi <= 0 < y1:
            y1 = 0.0
    return y0, y1


def _unit(span: float) -> float:
    """A tenth of the span's decade: ranges are rounded to it.

    Why: a live chart whose ranges follow the data exactly rescales with every new point, so
    every row of it changes and must be repainted. Rounded ranges stay put while new points
    fill in, and a frame repaints only the rows those points touch.
    """
    return 10.0 ** (math.floor(math.log10(span)) - 1)


def rasterise(
    xs: np.ndarray, ys: np.ndarray, bad: np.ndarray, scale: Scale, px_w: int, px_h: int
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel grid (px_h x px_w bool, row 0 at the top) of a line through the good points.

    ``bad`` marks the non-finite values of the data: they break the line and their pixel
    columns are returned (for the NaN marks). Anything else out of range (including -inf, a
    non-positive value on a log axis) is clipped to the edge.
    """
    grid = np.zeros((px_h, px_w), dtype=bool)
    if xs.size == 0:
        return grid, np.empty(0, dtype=np.int64)
    fx = (xs - scale.x0) / (scale.x1 - scale.x0) * (px_w - 1)
    fin = ~bad
    in_x = (fx >= -0.5) & (fx <= px_w - 0.5)
    bad_cols = np.round(fx[~fin & in_x]).astype(np.int64)
    yv = np.where(fin, ys, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        fy = (scale.y1 - yv) / (scale.y1 - scale.y0) * (px_h - 1)
    fy = np.clip(np.nan_to_num(fy, nan=0.0, posinf=px_h - 1, neginf=0.0), 0, px_h - 1)
    px = np.round(fx)
    lo = np.full(px_w, px_h, dtype=np.int64)
    hi = np.full(px_w, -1, dtype=np.int64)

    seg = np.flatnonzero(fin[:-1] & fin[1:])
    if seg.size:
        x0, x1 = px[seg], px[seg + 1]
        y0, y1 = fy[seg], fy[seg + 1]
        d = np.maximum(x1 - x0, 0).astype(np.int64)
        n = d + 1
        owner = np.repeat(np.arange(seg.size), n)
        starts = np.cumsum(n) - n
        off = np.arange(int(n.sum())) - np.repeat(starts, n)
        col = x0[owner].astype(np.int64) + off
        dd = np.maximum(d[owner], 1).astype(np.float64)
        dy = (y1 - y0)[owner]
        ya = y0[owner] + dy * np.clip((off - 0.5) / dd, 0.0, 1.0)
        yb = y0[owner] + dy * np.clip((off + 0.5) / dd, 0.0, 1.0)
        single = d[owner] == 0
        ya = np.where(single, y0[owner], ya)
        yb = np.where(single, y1[owner], yb)
        _span(lo, hi, col, np.minimum(ya, yb), np.maximum(ya, yb), px_w)
    # points with no finite neighbour are still drawn (one dot)
    prev_ok = np.concatenate(([False], fin[:-1]))
    next_ok = np.concatenate((fin[1:], [False]))
    alone = np.flatnonzero(fin & ~prev_ok & ~next_ok)
    if alone.size:
        _span(lo, hi, px[alone].astype(np.int64), fy[alone], fy[alone], px_w)
    rows = np.arange(px_h)[:, None]
    grid = (rows >= lo[None, :]) & (rows <= hi[None, :])
    return grid, bad_cols


def _span(
    lo: np.ndarray, hi: np.ndarray, col: np.ndarray, a: np.ndarray, b: np.ndarray, px_w: int
) -> None:
    keep = (col >= 0) & (col < px_w)
    col = col[keep]
    np.minimum.at(lo, col, np.round(a[keep]).astype(np.int64))
    np.maximum.at(hi, col, np.round(b[keep]).astype(np.int64))


def braille(grid: np.ndarray) -> np.ndarray:
    """(4h x 2w) bool pixels -> (h x w) braille dot codes (0 = empty cell)."""
    h, w = grid.shape[0] // 4, grid.shape[1] // 2
    cells = grid[: h * 4, : w * 2].reshape(h, 4, w, 2)
    return np.einsum("rawb,ab->rw", cells.astype(np.int64), _DOTS)


def render(spec: ChartSpec, width: int, height: int) -> list[list[Run]]:
    """The chart as ``height`` rows of styled runs, each row exactly ``width`` cells wide."""
    if width < 12 or height < 3:
        return [[(" " * width, "")] for _ in range(height)]
    scale = fit_scale(spec)
    plot_h = height - 1
    if scale is None:
        rows = [[(" " * width, "")] for _ in range(height)]
        msg = "waiting for data"[:width]
        rows[plot_h // 2] = [(msg.center(width), AXIS_STYLE)]
        return rows
    labels = _y_labels(spec, scale, plot_h)
    gutter = max(len(s) for s in labels.values()) + 1
    plot_w = width - gutter
    px_w, px_h = plot_w * 2, plot_h * 4

    codes = np.zeros((plot_h, plot_w), dtype=np.int64)
    owner = np.full((plot_h, plot_w), -1, dtype=np.int64)
    styles: list[str] = [NAN_STYLE]  # style index 0 is the NaN mark
    nan_cells: set[int] = set()
    for trace in spec.traces:
        ty = transform_y(trace.ys, spec.log_y)
        grid, bad = rasterise(trace.xs, ty, ~np.isfinite(trace.ys), scale, px_w, px_h)
        c = braille(grid)
        styles.append(trace.style)
        owner[c > 0] = len(styles) - 1
        codes |= c
        nan_cells.update((bad // 2).tolist())

    # empty cells are spaces, not U+2800, so copied text and tmux captures read cleanly
    cps = np.where(codes > 0, codes + 0x2800, 0x20)
    chars = cps.astype("<u4").tobytes().decode("utf-32-le")
    grid_chars = [list(chars[r * plot_w : (r + 1) * plot_w]) for r in range(plot_h)]
    for cell in nan_cells:
        if 0 <= cell < plot_w:
            grid_chars[plot_h - 1][cell] = NAN_MARK
            owner[plot_h - 1, cell] = 0
    for mark in spec.marks:
        cell = round((mark.x - scale.x0) / (scale.x1 - scale.x0) * (px_w - 1)) // 2
        if 0 <= cell < plot_w:
            styles.append(mark.style)
            grid_chars[0][cell] = mark.char
            owner[0, cell] = len(styles) - 1

    rows: list[list[Run]] = []
    for r in range(plot_h):
        label = labels.get(r, "")
        row: list[Run] = [(label.rjust(gutter - 1) + "┤" if label else " " * (gutter - 1) + "│",
                           AXIS_STYLE)]
        row.extend(_runs(grid_chars[r], owner[r], styles))
        rows.append(row)
    rows.append([(" " * (gutter - 1) + "└", AXIS_STYLE), (_x_axis(spec, scale, plot_w), AXIS_STYLE)])
    return rows


def _runs(chars: list[str], owner: np.ndarray, styles: list[str]) -> list[Run]:
    """Group a row's cells into runs of one style (empty cells take the default style)."""
    out: list[Run] = []
    cuts = np.flatnonzero(np.diff(owner)) + 1
    bounds = [0, *cuts.tolist(), len(chars)]
    for a, b in pairwise(bounds):
        o = int(owner[a])
        out.append(("".join(chars[a:b]), styles[o] if o >= 0 else ""))
    return out


def _y_labels(spec: ChartSpec, scale: Scale, plot_h: int) -> dict[int, str]:
    """Row -> label: the range's edges on the top and bottom rows, round values between.

    The top row's top pixel is ``y1`` and the bottom row's bottom pixel ``y0`` (both rounded
    by :func:`fit_scale`), so those labels are exact; the ones between are round numbers
    (1, 2, 5 times a power of ten; whole decades on a log axis spanning one) on the row that
    holds them, at least two rows from any other label.
    """

    def show(v: float, sig: int = 3) -> str:
        return spec.fmt_y(10**v if spec.log_y else v, sig)

    if plot_h < 2:
        return {0: show((scale.y0 + scale.y1) / 2)}
    at = {0: scale.y1, plot_h - 1: scale.y0}
    px_h = plot_h * 4
    intervals = max(1, min(plot_h // 4, 5))
    for v in nice_ticks(scale.y0, scale.y1, intervals, spec.log_y):
        px = (scale.y1 - v) / (scale.y1 - scale.y0) * (px_h - 1)
        r = round(px) // 4
        if all(abs(r - k) >= 2 for k in at):
            at[r] = v
    # A narrow range (tokens/s 12.3k..12.7k) needs more than 3 digits, or two rows read "12.6k"
    for sig in range(3, 8):
        out = {r: show(v, sig) for r, v in at.items()}
        if len(set(out.values())) == len(out):
            break
    return out


def nice_ticks(y0: float, y1: float, intervals: int, log_y: bool = False) -> list[float]:
    """Round values strictly inside ``y0..y1`` (plotted units), splitting it in about
    ``intervals``.

    On a log axis (plotted in log10) spanning a decade or more: whole decades; on a narrower
    one: round values of the data, placed at their logarithm.
    """
    if not (math.isfinite(y0) and math.isfinite(y1)) or y1 <= y0:
        return []
    if log_y and y1 - y0 < 1:
        return [math.log10(v) for v in nice_ticks(10**y0, 10**y1, intervals) if v > 0]
    step = _nice_step((y1 - y0) / max(intervals, 1))
    if log_y:
        step = max(step, 1.0)  # whole decades only
    k0, k1 = math.floor(y0 / step) + 1, math.ceil(y1 / step) - 1
    if k1 - k0 > 100:
        return []
    # k * step, rounded, so 3 * 0.1 is 0.3 and labels read as round numbers
    digits = max(0, -math.floor(math.log10(step)) + 1)
    return [round(k * step, digits) for k in range(k0, k1 + 1) if y0 < k * step < y1]


def _nice_step(raw: float) -> float:
    """The one of 1, 2, 2.5, 5 times a power of ten nearest to ``raw`` (by ratio)."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    e = math.floor(math.log10(raw))
    steps = [m * 10.0**k for k in (e - 1, e, e + 1) for m in (1.0, 2.0, 2.5, 5.0)]
    return min(steps, key=lambda c: abs(math.log(c / raw)))


def _x_axis(spec: ChartSpec, scale: Scale, plot_w: int) -> str:
    """The bottom row: x labels at the left, middle and right when they fit."""
    line = [" "] * plot_w

    def put(text: str, start: int) -> bool:
        start = max(0, min(start, plot_w - len(text)))
        if any(c != " " for c in line[max(0, start - 1) : start + len(text) + 1]):
            return False
        line[start : start + len(text)] = list(text)
        return True

    put(spec.fmt_x(scale.x0), 0)
    right = spec.fmt_x(scale.x1)
    put(right, plot_w - len(right))
    mid = spec.fmt_x((scale.x0 + scale.x1) / 2)
    put(mid, plot_w // 2 - len(mid) // 2)
    return "".join(line)


def as_text(rows: list[list[Run]]) -> list[str]:
    """The chart's characters without styles (for tests and ``--once``)."""
    return ["".join(t for t, _s in row) for row in rows]
