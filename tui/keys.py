"""Every key and action of the app in one table: the bindings, the help screen and the command
palette are all built from it, so the three can never disagree."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    keys: str
    """Textual key names, comma-separated."""
    shown: str
    """How the help screen writes the key."""
    action: str
    title: str
    """Short name (footer, palette)."""
    help: str
    """One sentence for the help screen and the palette."""
    footer: bool = True
    scope: str = "app"
    """``app``: everywhere; ``charts``: screens with charts; ``dashboard``: the dashboard only."""


KEYS: tuple[Key, ...] = (
    Key("question_mark", "?", "help", "Help", "Show every key and what it does"),
    Key("slash", "/", "filter", "Filter", "Filter metrics and charts by a regex (esc clears)",
        scope="dashboard"),
    Key("y", "y", "toggle_log", "Log y", "Log / linear y-axis of the focused chart",
        scope="charts"),
    Key("s", "s", "smoothing(1)", "Smooth", "More smoothing (debiased EMA; 0 = off)",
        scope="charts"),
    Key("S", "S", "smoothing(-1)", "Less smooth", "Less smoothing", footer=False, scope="charts"),
    Key("x", "x", "x_mode", "X axis", "X axis: step, time since start, wall clock",
        scope="charts"),
    Key("z", "z", "zoom", "Zoom", "Show the last N steps / everything", scope="charts"),
    Key("plus,equals_sign", "+", "zoom_scale(0.5)", "Zoom in", "Zoom in (fewer steps)",
        footer=False, scope="charts"),
    Key("minus", "-", "zoom_scale(2)", "Zoom out", "Zoom out (more steps)", footer=False,
        scope="charts"),
    Key("o", "o", "outliers", "Outliers", "Fit y-ranges to the bulk of the data (clip outliers)",
        scope="charts"),
    Key("m", "m", "mute", "Mute", "Mute the selected alert's rule for this session",
        scope="dashboard"),
    Key("c", "c", "toggle_console", "Console", "Show / hide the console pane",
        scope="dashboard"),
    Key("r", "r", "runs", "Runs", "List the runs under PATH (enter opens, space overlays)"),
    Key("n", "n", "new_run", "New run", "Start a run: pick a config, change lr / steps / fault, "
        "or type a command line; the TUI follows it", footer=False),
    Key("k", "k", "stop_run", "Stop run", "Stop a run trainwatch started (SIGINT, SIGTERM after "
        "a grace period, then SIGKILL)", footer=False, scope="dashboard"),
    Key("R", "R", "restart_run", "Restart run", "Start a stopped supervised run again (same "
        "command, same run directory)", footer=False, scope="dashboard"),
    Key("u", "u", "resume_run", "Resume run", "Resume a stopped trainer run from its newest "
        "checkpoint (--resume)", footer=False, scope="dashboard"),
    Key("b", "b", "toggle_bell", "Bell", "Bell and desktop notifications on error alerts on/off",
        footer=False),
    Key("q", "q", "quit", "Quit", "Quit; a run started here may keep running (it asks)"),
)


def bindings(*scopes: str) -> list[Binding]:
    """Bindings of the keys in ``scopes``; non-app keys call the app's actions (``app.``)."""
    return [
        Binding(k.keys, k.action if k.scope == "app" else f"app.{k.action}", k.title,
                show=k.footer, key_display=k.shown)
        for k in KEYS if k.scope in scopes
    ]


BINDINGS = bindings("app")

OTHER_KEYS: tuple[tuple[str, str], ...] = (
    ("tab / shift+tab", "Move between charts, metrics, alerts and console"),
    ("enter", "Metrics: open the series as a chart · Alerts: evidence, causes, fixes"),
    ("space", "Runs list: mark a run to overlay on the charts"),
    ("esc", "Close a screen, clear the filter"),
    ("ctrl+s", "New run dialog: start the run (tab moves between fields)"),
    ("ctrl+p", "Command palette: every action by name"),
)
