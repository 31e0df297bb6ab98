"""What the framework integrations' tests check on a run directory, whatever the framework."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwatch.integrations.live_run import TrainwatchWarning
from trainwatch.roles import DEFAULT_ROLES


def records(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of ``run_dir/metrics.jsonl`` so far (the last line may be torn: it is not
    read until it ends)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(ln) for ln in text[: text.rfind("\n") + 1].splitlines() if ln.strip()]


def metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in records(run_dir) if "event" not in r]


@dataclass
class LiveProbe:
    """Called from a framework hook that runs after the integration's: what the file held then."""

    run_dir: Path
    seen: list[tuple[int, int, dict[str, Any] | None]] = field(default_factory=list)
    """(the framework's step, metric rows in the file, the last row) at each look."""

    def look(self, step: int) -> None:
        rows = metric_rows(self.run_dir)
        self.seen.append((step, len(rows), rows[-1] if rows else None))

    def assert_live(self, final_step: int, lag: int = 0) -> None:
        """At every look before the end the file already held the row of that step (or of the
        step ``lag`` before it, for a framework that logs after the hooks of its step), and
        the rows grew look after look: they arrived while training ran."""
        mid = [s for s in self.seen if 0 < s[0] < final_step]
        assert len(mid) >= 3, f"the probe looked only at {self.seen}"
        for step, n, last in mid:
            assert last is not None and step - lag <= last["step"] <= step, (step, n, last)
        counts = [n for _step, n, _last in mid]
        assert counts == sorted(counts) and counts[0] < counts[-1], counts


def run_end(run_dir: Path) -> dict[str, Any]:
    last = records(run_dir)[-1]
    assert last.get("event") == "run_end", last
    return last


def assert_crashed(run_dir: Path, error: str) -> None:
    """The run ended ``crashed``, exit code 1, with the error's ``Type: message``."""
    end = run_end(run_dir)
    assert (end["status"], end["exit_code"], end["error"]) == ("crashed", 1, error), end


def roles_of(run_dir: Path) -> dict[str, str]:
    names = {k for r in metric_rows(run_dir) for k in r if k not in ("step", "time")}
    return DEFAULT_ROLES.resolve(names)


def check_reads(run_dir: Path) -> dict[str, Any]:
    """``trainwatch check`` as a person runs it: it reads the whole directory, no bad line."""
    out = subprocess.run(
        [sys.executable, "-m", "trainwatch", "check", str(run_dir), "--format", "json",
         "--fail-on", "never"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["summary"]["records"] == len(records(run_dir)), report["summary"]
    assert report["summary"]["malformed"] == 0, report["summary"]
    return report


def our_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, TrainwatchWarning)]


DISK_FAULTS = ("disk fills up mid-run", "run directory unwritable")
"""What the disk tests parametrize over (the first fills the ``disk`` fixture's disk)."""


def run_dir_for(tmp_path: Path, fault: str) -> Path:
    """The run directory of a disk test: one below a regular file can never be created (not
    even by root, whom permissions do not stop)."""
    if fault == "run directory unwritable":
        (tmp_path / "file").write_text("")
        return tmp_path / "file" / "run"
    return tmp_path / "run"


def assert_one_warning_for(
    fault: str, run_dir: Path, caught: list[warnings.WarningMessage], last_step: int
) -> None:
    """One warning said what failed; the rows before the disk filled are there, none after."""
    warned = our_warnings(caught)
    assert len(warned) == 1, warned
    if fault == "disk fills up mid-run":
        assert "No space left on device" in warned[0]
        assert max(r["step"] for r in metric_rows(run_dir)) == last_step
    else:
        assert not run_dir.exists()
