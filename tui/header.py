"""The header: run, state, progress, time, speed, freshness; a second line only when needed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

from trainwatch.humanize import fmt_ago, fmt_count, fmt_duration, fmt_num
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.tui.run_model import RunModel
from trainwatch.tui.run_state import LIVE_STATES, state_label, state_style
from trainwatch.tui.sanitize import clean

_PER_SECOND = re.compile(r"^(?:train_)?(?P<what>.*?)[_\-/ ]?(?:per_?s(?:ec(?:ond)?)?|/s)$",
                         re.IGNORECASE)
"""``tokens_per_second``, ``samples_per_sec``, ``tok/s``: a rate whose unit is in its name."""


@dataclass(frozen=True)
class HeaderInfo:
    """Everything the header shows, computed by :func:`header_info` (pure)."""

    run: str
    state: str
    """The state as shown (``"crashed (exit 1)"``): :func:`~trainwatch.tui.run_state.state_label`."""
    step: int | None
    total: int | None
    elapsed: float | None
    """From the first record to the newest one, plus the silence since then while the run is
    live (so it ticks while a run runs, and stops when it ends)."""
    eta: float | None
    speed: str | None
    age: float | None
    """Seconds since the newest record arrived; for a record that was already in the file when
    we opened it, since its own timestamp."""
    read_only: bool
    loading: float | None
    """History still loading: the fraction read; None when done."""
    notices: tuple[str, ...]
    runs: int = 1
    """Runs shown (the current one plus overlays)."""
    status: str | None = None
    """The newest start/stop step of a run started here ("started pid N in DIR"): information,
    shown apart from the notices, which each ask for attention (a failed step is a notice)."""


def header_info(
    model: RunModel, state: str, now: float, read_only: bool, notices: tuple[str, ...] = (),
    runs: int = 1, process: Any = None, status: str | None = None,
) -> HeaderInfo:
    """What the header shows for ``model`` in ``state`` (from :func:`run_state`) at ``now``.

    ``process`` is the run's supervisor record, when it has one (for "crashed (SIGKILL)").
    """
    rate = model.rate()
    live = state in LIVE_STATES
    # one reference for "last" however the record reached us: its arrival on our clock when we
    # saw it arrive, else its own timestamp (a backlog record arrived before we looked)
    ref = model.last_arrival if model.last_arrival is not None else model.last_time
    age = (now - ref) if ref is not None else None
    elapsed = None
    if model.start_time is not None and model.last_time is not None:
        # the span on the writer's clock (immune to skew between its clock and ours), then
        # our own clock for the silence since, only while the run is live
        elapsed = max(0.0, model.last_time - model.start_time)
        if live and age is not None:
            elapsed += max(0.0, age)
    eta = None
    if state == "running" and rate and model.total_steps and model.last_step is not None:
        left = model.total_steps - model.last_step
        eta = left / rate if left > 0 else None
    label = state_label(model, state, process)
    error = model.end.get("error") if model.end is not None else None
    if isinstance(error, str) and error and label.startswith("crashed"):
        notices = (f"crashed: {error}", *notices)
    return HeaderInfo(
        run=model.run_id, state=label, step=model.last_step, total=model.total_steps,
        elapsed=elapsed, eta=eta, speed=_speed(model, rate), age=age,
        read_only=read_only, loading=None if model.loaded else model.progress,
        notices=notices, runs=runs, status=status,
    )


def speed_text(name: str, value: float | None) -> str:
    """A throughput series' last value with its unit: ``"20.7k/s"``, ``"11.4k tokens/s"``."""
    v = fmt_num(value)
    base = name if name.lower().endswith("/s") else name.rsplit("/", 1)[-1]
    low = base.lower()
    if low in ("throughput", "tps"):
        return f"{v}/s" if low == "throughput" else f"{v} tok/s"
    m = _PER_SECOND.match(base)
    if m is not None and m.group("what"):
        return f"{v} {clean(m.group('what'), 12)}/s"
    return f"{v} {clean(base, 16)}"


def _speed(model: RunModel, rate: float | None) -> str | None:
    store = model.view
    name = DEFAULT_ROLES.resolve(store.names()).get("throughput")
    s = store.get(name) if name else None
    if name and s is not None and s.last is not None:
        return speed_text(name, s.last)
    if rate:
        return f"{fmt_num(rate)} steps/s" if rate >= 1 else f"{fmt_duration(1 / rate)}/step"
    return None


def _parts(info: HeaderInfo) -> list[tuple[int, list[tuple[str, str]]]]:
    """(priority, pieces) in display order; lower priority numbers are kept first."""
    parts: list[tuple[int, list[tuple[str, str]]]] = []
    run = clean(info.run, 40) + (f" +{info.runs - 1}" if info.runs > 1 else "")
    parts.append((0, [(run, "bold")]))
    parts.append((0, [(f" {info.state} ", state_style(info.state))]))
    if info.step is not None:
        step = [("step ", "dim"), (fmt_count(info.step), "bold")]
        if info.total:
            pct = min(100.0, 100.0 * info.step / info.total)
            step.append((f"/{fmt_count(info.total)} {pct:.0f}%", "dim"))
        parts.append((1, step))
    if info.age is not None:
        stale = info.state == "stalled"
        parts.append((2, [("last ", "dim"), (fmt_ago(info.age), "bold yellow" if stale else "")]))
    if info.eta is not None:
        parts.append((3, [("ETA ", "dim"), (fmt_duration(info.eta), "")]))
    if info.speed:
        parts.append((4, [(info.speed, "")]))
    if info.elapsed is not None:
        parts.append((5, [(fmt_duration(info.elapsed), ""), (" elapsed", "dim")]))
    if info.read_only:
        parts.append((1, [("read-only", "bold magenta")]))
    return parts


def header_text(info: HeaderInfo, width: int = 200) -> Text:
    """One line; when it does not fit, the least useful parts (elapsed, speed...) go first."""
    parts = _parts(info)
    brand = " trainwatch "
    sep = "  │  " if width >= 100 else " │ "
    sizes = [sum(len(t) for t, _s in pieces) for _p, pieces in parts]
    keep = set(range(len(parts)))
    total = len(brand) + 1 + sum(sizes) + len(sep) * (len(parts) - 1)
    # drop one part at a time: least useful first, the rightmost of equals first
    for i in sorted(range(len(parts)), key=lambda j: (-parts[j][0], -j)):
        if total <= width or parts[i][0] == 0:
            break
        keep.discard(i)
        total -= sizes[i] + len(sep)
    t = Text(no_wrap=True, overflow="ellipsis", end="")
    t.append(brand, style="bold reverse")
    t.append(" ")
    first = True
    for i, (_p, pieces) in enumerate(parts):
        if i not in keep:
            continue
        if not first:
            t.append(sep, style="dim")
        first = False
        for text, style in pieces:
            t.append(text, style=style)
    return t


def notice_text(info: HeaderInfo, width: int = 40) -> Text | None:
    """The second line: history loading progress and file notices; None when there is none."""
    if info.loading is None and not info.notices and not info.status:
        return None
    t = Text(no_wrap=True, overflow="ellipsis", end="")
    if info.loading is not None:
        filled = round(info.loading * 20)
        t.append(" loading history ", style="cyan")
        t.append("█" * filled + "░" * (20 - filled), style="cyan")
        t.append(f" {info.loading:.0%}  newest data shown first", style="dim")
    for n in info.notices:
        t.append("  ⚠ ", style="yellow")
        t.append(clean(n, 200), style="yellow")
    if info.status:
        t.append("  ▸ ", style="cyan")
        t.append(clean(info.status, 200), style="dim")
    return t


class HeaderBar(Widget):
    """Two lines at most; the second only while loading or when a file needs attention.

    Redraws only when the text it shows changes, and asks for a new layout only when the
    second line comes or goes (a layout pass costs far more than repainting one line).
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.info: HeaderInfo | None = None
        self._lines: tuple[Text, Text | None] = (Text(""), None)

    def on_resize(self) -> None:
        if self.info is not None:
            self.show(self.info, force=True)

    def show(self, info: HeaderInfo, *, force: bool = False) -> None:
        width = self.size.width or 120
        if info == self.info and not force:
            return
        self.info = info
        lines = (header_text(info, width), notice_text(info))
        if lines == self._lines:
            return
        two = lines[1] is not None
        relayout = two != (self._lines[1] is not None)
        self._lines = lines
        self.set_class(two, "-two-lines")
        self.refresh(layout=relayout)

    def render(self) -> Text:
        first, second = self._lines
        if second is None:
            return first
        return Text("\n", no_wrap=True, end="").join([first, second])

    @property
    def text(self) -> str:
        """What the header shows, as plain text."""
        return "\n".join(t.plain for t in self._lines if t is not None)
