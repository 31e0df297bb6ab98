"""The header: run, state, progress, time, speed, freshness; a second line only when needed."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from trainwatch.humanize import fmt_ago, fmt_count, fmt_duration, fmt_num
from trainwatch.roles import DEFAULT_ROLES
from trainwatch.tui.run_model import RunModel
from trainwatch.tui.run_state import STATE_STYLE
from trainwatch.tui.sanitize import clean


@dataclass(frozen=True)
class HeaderInfo:
    """Everything the header shows, computed by :func:`header_info` (pure)."""

    run: str
    state: str
    step: int | None
    total: int | None
    elapsed: float | None
    eta: float | None
    speed: str | None
    age: float | None
    read_only: bool
    loading: float | None
    """History still loading: the fraction read; None when done."""
    notices: tuple[str, ...]
    runs: int = 1
    """Runs shown (the current one plus overlays)."""


def header_info(
    model: RunModel, state: str, now: float, read_only: bool, notices: tuple[str, ...] = (),
    runs: int = 1,
) -> HeaderInfo:
    rate = model.rate()
    ended = state in ("finished", "crashed", "stopped", "ended", "idle")
    start = model.start_time
    end_t = model.last_time if ended or model.last_time is None else now
    elapsed = (end_t - start) if (start is not None and end_t is not None) else None
    eta = None
    if not ended and rate and model.total_steps and model.last_step is not None:
        left = model.total_steps - model.last_step
        eta = left / rate if left > 0 else None
    speed = _speed(model, rate)
    ref = model.last_arrival if model.last_arrival is not None else model.last_time
    return HeaderInfo(
        run=model.run_id, state=state, step=model.last_step, total=model.total_steps,
        elapsed=elapsed, eta=eta, speed=speed, age=(now - ref) if ref is not None else None,
        read_only=read_only, loading=None if model.loaded else model.progress,
        notices=notices, runs=runs,
    )


def _speed(model: RunModel, rate: float | None) -> str | None:
    store = model.view
    name = DEFAULT_ROLES.resolve(store.names()).get("throughput")
    s = store.get(name) if name else None
    if s is not None and s.last is not None:
        return f"{fmt_num(s.last)} {clean(name or '', 20).rsplit('/', 1)[-1]}"
    if rate:
        return f"{fmt_num(rate)} steps/s" if rate >= 1 else f"{fmt_duration(1 / rate)}/step"
    return None


def _parts(info: HeaderInfo) -> list[tuple[int, list[tuple[str, str]]]]:
    """(priority, pieces) in display order; lower priority numbers are kept first."""
    parts: list[tuple[int, list[tuple[str, str]]]] = []
    run = clean(info.run, 40) + (f" +{info.runs - 1}" if info.runs > 1 else "")
    parts.append((0, [(run, "bold")]))
    parts.append((0, [(f" {info.state} ", STATE_STYLE.get(info.state, "bold"))]))
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
    if info.loading is None and not info.notices:
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
