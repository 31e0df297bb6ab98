"""The headless core and the rules never pull in the UI or torch; the writer stays stdlib-only;
the framework integrations import their framework only when their own module is imported.

Each check runs in a fresh interpreter, because this test process has imported everything.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

UI_AND_TORCH = ("textual", "rich", "plotext", "textual_plotext", "torch")
FRAMEWORKS = ("torch", "transformers", "accelerate", "lightning", "pytorch_lightning", "keras",
              "tensorflow", "jax")
CORE_MODULES = [
    "trainwatch",
    "trainwatch.batch",
    "trainwatch.builder",
    "trainwatch.formats.jsonl",
    "trainwatch.formats.detect",
    "trainwatch.store",
    "trainwatch.tailer",
    "trainwatch.follower",
    "trainwatch.run_stores",
    "trainwatch.run_folders",
    "trainwatch.source_tailer",
    "trainwatch.formats.mlflow_db",
    "trainwatch.formats.mlflow_files",
    "trainwatch.formats.trackio",
    "trainwatch.formats.dvclive",
    "trainwatch.load",
    "trainwatch.families",
    "trainwatch.cadence",
    "trainwatch.precision",
    "trainwatch.inspect",
    "trainwatch.cli",
    "trainwatch.rules",
    "trainwatch.commands.check",
    "trainwatch.commands.report",
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


@pytest.mark.parametrize(
    "stmt",
    [
        "import trainwatch",
        "import trainwatch.integrations",
        "from trainwatch.integrations.live_run import LiveRun; LiveRun('unused', 'x')",
        "import trainwatch.integrations.crash_hooks",
    ],
)
def test_the_integrations_package_imports_no_framework(stmt):
    loaded = _loaded_after(stmt)
    bad = sorted(m for m in loaded if m.split(".")[0] in (*FRAMEWORKS, *UI_AND_TORCH))
    assert not bad, f"{stmt} loaded {bad}"


def test_check_and_report_do_not_import_numpy_ma(tmp_path):
    """np.median and np.unique import numpy.ma on their first call (7-10 ms of every ``check``
    and ``report``); the rules' own median and distinct do not."""
    run = tmp_path / "metrics.jsonl"
    run.write_text("".join(f'{{"step": {i}, "loss": {1.0 / (i + 1)}, "val_loss": {2.0 / (i + 1)}, '
                           f'"lr": 0.001, "time": {1700000000 + i}}}\n' for i in range(300)))
    stmt = ("from trainwatch.commands.report import build_report\n"
            "from trainwatch.commands.check import run_check\n"
            "from trainwatch.load import load_run\n"
            "from trainwatch.rules import load_rules_config\n"
            f"run = load_run({str(run)!r})\n"
            "cfg = load_rules_config()\n"
            "run_check(run, cfg)\nbuild_report(run, cfg)")
    loaded = _loaded_after(stmt)
    assert "numpy.ma" not in loaded
