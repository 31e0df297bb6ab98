"""The recently-used new-run forms: a small JSON list, newest first. No Textual here.

A damaged file never stops a launch: it is read as empty with a one-line note, and moved aside
(``recent.json.bad``) rather than overwritten, so nothing in it is lost.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, fields, replace
from pathlib import Path

from trainwatch.tui.launch import LaunchForm

RECENT_MAX = 10
_FIELDS = tuple(f.name for f in fields(LaunchForm))


def _key(form: LaunchForm) -> LaunchForm:
    """Two forms are the same entry whatever run directory they went to."""
    return replace(form, run_dir="")


def load_recent(path: Path | None) -> tuple[list[LaunchForm], str | None]:
    """The entries (newest first) and a one-line problem, if the file could not be used."""
    if path is None:
        return [], None
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], None
    except OSError as e:
        return [], f"{path}: cannot read the recent runs ({e.strerror}); none shown"
    try:
        data = json.loads(raw)
    except ValueError as e:
        return [], (f"{path}:{getattr(e, 'lineno', 1)}: not valid JSON; it will be moved to "
                    f"{path.name}.bad when the next run starts")
    if not isinstance(data, list):
        return [], f"{path}:1: expected a JSON list of runs; it will be moved aside"
    out: list[LaunchForm] = []
    for item in data:
        if not isinstance(item, dict):
            continue  # one odd entry costs only itself
        vals = {k: item[k] for k in _FIELDS if isinstance(item.get(k), str)}
        form = LaunchForm(**vals)
        if form.config or form.command.strip():
            out.append(form)
    return out[:RECENT_MAX], None


def save_recent(path: Path | None, form: LaunchForm, keep: int = RECENT_MAX) -> str | None:
    """Put ``form`` first (dropping an equal older entry); returns a one-line problem or None."""
    if path is None:
        return None
    entries, problem = load_recent(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if problem is not None and path.exists():
            os.replace(path, path.with_name(path.name + ".bad"))
        key = _key(form)
        kept = [e for e in entries if _key(e) != key]
        data = [{**asdict(form), "time": time.time()}] + [asdict(e) for e in kept]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data[:keep], indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # readers see the old list or the new one, whole
    except OSError as e:
        return f"{path}: cannot save the recent runs ({e.strerror}); the run started anyway"
    return None


def recent_label(form: LaunchForm) -> str:
    """One line for the list: ``mlp  lr=3e-4 steps=500 fault=nan`` or ``$ python train.py``."""
    if form.command.strip():
        return f"$ {form.command.strip()}"
    config = Path(form.config)
    parts = [f"./{config.parent.name}/{config.name}" if config.is_absolute() else form.config]
    if form.lr.strip():
        parts.append(f"lr={form.lr.strip()}")
    if form.steps.strip():
        parts.append(f"steps={form.steps.strip()}")
    if form.fault:
        parts.append(f"fault={form.fault.removeprefix('faults/')}")
    if form.more.strip():
        parts.append(form.more.strip())
    return "  ".join(parts)
