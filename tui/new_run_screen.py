"""``n``: start a new run. Pick a config (recently used, packaged, ``./configs``), change the
learning rate, steps, fault or any other key, or type the command line of an external script;
the screen shows the exact command it will run and, live, what is wrong with the form.

Dismissed with the :class:`~trainwatch.tui.launch.LaunchPlan` to start (the app starts it through
the supervisor and follows it), or None.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from trainwatch.tui.launch import (
    ConfigChoice,
    FaultChoice,
    LaunchError,
    LaunchForm,
    LaunchOptions,
    LaunchPlan,
    default_run_dir,
    fault_choices,
    local_choices,
    packaged_choices,
    plan_launch,
    script_name,
    shown_path,
)
from trainwatch.tui.recent import load_recent, recent_label
from trainwatch.tui.sanitize import clean

TALL = 32
"""Below this many rows the fields sit without blank lines between them."""
DEFAULT_CONFIG = "mlp"
"""Highlighted first when nothing was used recently: the fastest bundled task."""
INPUTS = ("lr", "steps", "more", "run-dir", "command")


def _header(text: str) -> Option:
    return Option(Text(text, style="bold dim"), disabled=True)


class NewRunScreen(ModalScreen[LaunchPlan | None]):
    CSS_PATH = "new_run_screen.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        # q closes it like the other dialogs; in a field it is just a letter (fields consume
        # printable keys before bindings see them)
        Binding("q", "cancel", "Cancel", show=False),
        Binding("ctrl+s", "start", "Start", priority=True),
        # like q: the keys' help outside a field; in a field "?" is just a character
        Binding("question_mark", "app.help", "Help", show=False),
    ]

    def __init__(self, options: LaunchOptions, base: Path, last: LaunchForm | None = None) -> None:
        super().__init__()
        self.options = options
        self.base = base
        """The folder a new run directory goes in by default."""
        self.last = last
        """The form as it was when a run was last started in this session."""
        self.recent, self.recent_problem = load_recent(options.recent_file)
        self.configs: list[ConfigChoice] = [*packaged_choices(), *local_choices(options.cwd)]
        self.faults: list[FaultChoice] = fault_choices()
        self.config = ""
        """The config under the list's cursor."""
        self.plan: LaunchPlan | None = None
        self.error: str | None = None
        self._auto_run_dir = ""
        """The run directory the screen filled in (replaced when the config changes, unless
        the user typed their own)."""
        self._filling = False

    # ------------------------------------------------------------------ layout
    def _options(self) -> list[Option]:
        opts: list[Option] = []
        if self.recent:
            opts.append(_header("recently used"))
            opts += [Option(clean(recent_label(f), 80), id=f"recent:{i}")
                     for i, f in enumerate(self.recent)]
        packaged = [c for c in self.configs if not c.local]
        local = [c for c in self.configs if c.local]
        opts.append(_header("packaged configs"))
        opts += [Option(c.label, id=f"config:{c.ref}") for c in packaged]
        if local:
            opts.append(_header(f"./configs in {self.options.cwd.name or self.options.cwd}"))
            opts += [Option(clean(c.label, 60), id=f"config:{c.ref}") for c in local]
        return opts

    def compose(self) -> ComposeResult:
        with Vertical(id="new-run"):
            with Horizontal(id="new-run-body"):
                yield OptionList(*self._options(), id="new-run-configs")
                with Vertical(id="new-run-form"):
                    yield Static(id="new-run-about")
                    yield from self._field("learning rate", Input(
                        placeholder="the config's", id="lr", compact=True))
                    yield from self._field("steps", Input(
                        placeholder="the config's", id="steps", compact=True))
                    yield from self._field("fault", Select(
                        [(f.ref.removeprefix("faults/"), f.ref) for f in self.faults],
                        prompt="none (as the config says)", id="fault", compact=True))
                    yield from self._field("more", Input(
                        placeholder="KEY=VALUE ...  e.g. eval.every=50", id="more",
                        compact=True))
                    yield from self._field("run directory", Input(id="run-dir", compact=True))
                    yield Label("or your own script's command line (it gets "
                                "$TRAINWATCH_RUN_DIR):", classes="new-run-note")
                    yield Input(placeholder="python train.py --epochs 3", id="command",
                                compact=True)
            yield Static(id="new-run-preview")
            with Horizontal(id="new-run-buttons"):
                yield Button("Start", id="new-run-start", variant="primary", compact=True)
                yield Button("Cancel", id="new-run-cancel", compact=True)

    @staticmethod
    def _field(label: str, widget: Input | Select) -> ComposeResult:
        with Horizontal(classes="new-run-field"):
            yield Label(label, classes="new-run-label")
            yield widget

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.height < TALL, "-short")

    def on_mount(self) -> None:
        box = self.query_one("#new-run")
        box.border_title = "New run"
        box.border_subtitle = "↑↓ config · tab next field · enter or ctrl+s start · esc cancel"
        configs = self.query_one(OptionList)
        if self.last is not None:
            self._fill(self.last)
        ids = [configs.get_option_at_index(i).id for i in range(configs.option_count)]
        want = (f"config:{self.last.config}" if self.last is not None and self.last.config
                else "recent:0" if self.recent else f"config:{DEFAULT_CONFIG}")
        index = ids.index(want) if want in ids else next(
            (i for i, x in enumerate(ids) if x is not None), 0)
        configs.highlighted = index
        configs.focus()
        self._update()

    # ------------------------------------------------------------------ the form
    def form(self) -> LaunchForm:
        """What the fields hold now."""
        fault = self.query_one("#fault", Select).value
        return LaunchForm(
            config=self.config,
            lr=self.query_one("#lr", Input).value,
            steps=self.query_one("#steps", Input).value,
            fault=fault if isinstance(fault, str) else "",
            more=self.query_one("#more", Input).value,
            command=self.query_one("#command", Input).value,
            run_dir=self.query_one("#run-dir", Input).value,
        )

    def _fill(self, form: LaunchForm) -> None:
        """Set every field from ``form`` (a recent entry), without each change re-planning."""
        self._filling = True
        try:
            self.config = form.config
            for wid, value in (("lr", form.lr), ("steps", form.steps), ("more", form.more),
                               ("command", form.command)):
                self.query_one(f"#{wid}", Input).value = value
            select = self.query_one("#fault", Select)
            known = {f.ref for f in self.faults}
            if form.fault in known:
                select.value = form.fault
            else:
                select.clear()
            self.query_one("#run-dir", Input).value = ""
            self._auto_run_dir = ""
        finally:
            self._filling = False

    def _update(self) -> None:
        """Re-plan from the fields: refresh the default run directory and the preview."""
        if self._filling or not self.is_mounted:
            return
        form = self.form()
        run_dir = self.query_one("#run-dir", Input)
        if run_dir.value in ("", self._auto_run_dir):
            name = self._name_for(form)
            auto = shown_path(default_run_dir(self.base, name), self.options.cwd)
            if auto != run_dir.value:
                self._auto_run_dir = auto
                run_dir.value = auto  # posts Changed: _update again, a no-op by then
                run_dir.cursor_position = 0  # show where it starts (the folder)
                form = self.form()
        try:
            self.plan, self.error = plan_launch(form, self.options, self.base, self.faults), None
        except LaunchError as e:
            self.plan, self.error = None, str(e)
        self._show()

    def _name_for(self, form: LaunchForm) -> str:
        if form.command.strip():
            try:
                argv = shlex.split(form.command)
            except ValueError:
                argv = []
            return script_name(argv) if argv else "run"
        return Path(form.config).stem if form.config else "run"

    def _show(self) -> None:
        choice = next((c for c in self.configs if c.ref == self.config), None)
        about = choice.about if choice is not None else ""
        label = choice.label if choice is not None else self.config or "no config"
        head = Text(clean(label, 60), style="bold")
        if self.query_one("#command", Input).value.strip():
            head = Text("your command line", style="bold")
            about = f"started as typed, in {self.options.cwd}"
        if about:
            head.append("  " + clean(about, 200), style="dim")
        fault = next((f for f in self.faults if f.ref == self.form().fault), None)
        if fault is not None and not self.query_one("#command", Input).value.strip():
            head.append("\n+ " + fault.ref.removeprefix("faults/"), style="bold")
            head.append("  " + clean(fault.about, 200), style="dim")
        self.query_one("#new-run-about", Static).update(head)
        preview = self.query_one("#new-run-preview", Static)
        if self.error is not None:
            preview.update(Text("✗ " + clean(self.error, 300), style="bold red"))
            return
        assert self.plan is not None
        t = Text("will run ", style="dim")
        t.append(clean(shlex.join(self.plan.command), 400))
        if not self.plan.trainer:
            t.append("\n  with TRAINWATCH_RUN_DIR=", style="dim")
            t.append(clean(shown_path(self.plan.run_dir, self.options.cwd), 200))
        if self.recent_problem:
            t.append("\n  ⚠ " + clean(self.recent_problem, 200), style="yellow")
        preview.update(t)

    # ------------------------------------------------------------------ events
    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        oid = event.option.id or ""
        if oid.startswith("recent:"):
            self._fill(self.recent[int(oid.split(":", 1)[1])])
        elif oid.startswith("config:"):
            self.config = oid.split(":", 1)[1]
        self._update()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        field = "command" if self.query_one("#command", Input).value.strip() else "lr"
        self.query_one(f"#{field}", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._update()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._update()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "new-run-start":
            self.action_start()
        else:
            self.action_cancel()

    def action_start(self) -> None:
        self._update()
        if self.plan is None:
            self.notify(self.error or "nothing to start", severity="error", timeout=6)
            return
        self.dismiss(self.plan)

    def action_cancel(self) -> None:
        self.dismiss(None)
