"""The headless core and the rules never pull in the UI or torch; the writer stays stdlib-only.

Each check runs in a fresh interpreter, because this test process has imported everything.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

UI_AND_TORCH = ("textual", "rich", "plotext", "textual_plotext", "torch")
CORE_MODULES = [
    "trainwatch",
    "trainwatch.batch",
    "trainwatch.builder",
    "trainwatch.formats.jsonl",
    "trainwatch.formats.detect",
    "trainwatch.store",
    "trainwatch.tailer",
    "trainwatch.follower",
    "trainwatch.load",
    "trainwatch.inspect",
    "trainwatch.cli",
    "trainwatch.rules",
    "trainwatch.trainer.supervise",
]


def _loaded_after(stmt: str) -> set[str]:
    code = f"import sys\n{stmt}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_modules_do_not_import_ui_or_torch(module):
    loaded = _loaded_after(f"import {module}")
    bad = sorted(m for m in loaded if m.split(".")[0] in UI_AND_TORCH)
    assert not bad, f"importing {module} loaded {bad}"


def test_writer_is_stdlib_only():
    loaded = _loaded_after("from trainwatch import RunWriter")
    bad = sorted(m for m in loaded if m.split(".")[0] in (*UI_AND_TORCH, "numpy", "yaml", "msgspec"))
    assert not bad, f"from trainwatch import RunWriter loaded {bad}"
