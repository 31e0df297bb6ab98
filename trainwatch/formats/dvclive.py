"""DVCLive's output folder (``dvclive/`` by default): one run, one TSV per metric.

The layout, as ``dvclive.Live`` writes it::

    dvclive/plots/metrics/<name>.tsv   a header, then one row per step: "step<TAB>value" (3.x), or
                                       "timestamp<TAB>step<TAB>value" (2.x; ms); a name with "/"
                                       is nested folders: train/loss.tsv -> train/loss
    dvclive/metrics.json               the latest values (and "step"), rewritten at each step
    dvclive/params.yaml                the params logged

Recognised by a ``plots/metrics`` folder beside a ``metrics.json``, ``params.yaml`` or
``dvc.yaml`` (a folder that holds ``dvclive/`` opens it). The TSVs are appended text, followed as
such (:mod:`~trainwatch.formats._text_files`); a value ``nan``/``inf`` is a value. The header
names the value's column by the name's last part (``loss``): the series is named by the file.
DVCLive 3.x writes no time: records take the time they are read (docs/format.md). It keeps no
status either, so a run that crashed and one that finished look alike: no ``run_end`` is made.
``params.yaml`` goes to the batch's ``meta`` (``max_steps`` there gives the run's length).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from trainwatch.formats._points import Point
from trainwatch.formats._text_files import TextFilesSource, walk_files
from trainwatch.run_stores import StoredRun

FORMAT = "dvclive"
DEFAULT_DIR = "dvclive"
PLOTS = Path("plots") / "metrics"
_SIDE_FILES = ("metrics.json", "params.yaml", "dvc.yaml")


def is_dvclive_dir(path: Path) -> bool:
    return (path / PLOTS).is_dir() and any((path / n).is_file() for n in _SIDE_FILES)


def runs_in(path: Path) -> tuple[str, list[StoredRun]] | None:
    """The one run of the DVCLive folder ``path`` (or of ``path/dvclive``), else None."""
    if not path.is_dir():
        return None
    folder = path if is_dvclive_dir(path) else path / DEFAULT_DIR
    if not is_dvclive_dir(folder):
        return None
    files = list(walk_files(folder / PLOTS, ".tsv"))
    updated = max((p.stat().st_mtime for _k, p in files if p.exists()), default=None)
    name = folder.absolute().name
    run = StoredRun(store=path, run_id=name, name=name, format=FORMAT,
                    steps=_last_step(folder), updated=updated,
                    source=partial(DvcLiveRun, folder))
    return FORMAT, [run]


def _last_step(folder: Path) -> int | None:
    """``step`` of ``metrics.json`` (the latest step logged), if it says."""
    import json

    try:
        step = json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


class DvcLiveRun(TextFilesSource):
    """A DVCLive folder, polled for new TSV rows."""

    format = FORMAT

    def __init__(self, folder: Path, *, clock: Callable[[], float] = _time.time) -> None:
        super().__init__(folder, "", clock=clock)
        self._columns: dict[str, tuple[int, int | None, int]] = {}
        """Series -> (step column, timestamp column or None, value column) from its header."""

    def restart(self) -> None:
        super().restart()
        self._columns.clear()

    def series_files(self) -> Iterator[tuple[str, Path]]:
        return walk_files(self.root / PLOTS, ".tsv")

    def parse(self, key: str, line: int, text: str) -> Point | None:
        cells = text.rstrip("\r").split("\t")
        if line == 1:
            if "step" not in cells or len(cells) < 2:
                raise ValueError("expected a header with a 'step' column")
            ts = cells.index("timestamp") if "timestamp" in cells else None
            step = cells.index("step")
            value = next(i for i in range(len(cells)) if i not in (step, ts))
            self._columns[key] = (step, ts, value)
            return None
        cols = self._columns.get(key)
        if cols is None:
            raise ValueError("no header line before it")
        step_i, ts_i, value_i = cols
        if len(cells) <= max(step_i, value_i, ts_i or 0):
            raise ValueError(f"expected {len(cells)} tab-separated cells or more")
        t = int(cells[ts_i]) / 1000 if ts_i is not None else float("nan")
        return key, int(cells[step_i]), t, float(cells[value_i])

    def meta(self) -> dict[str, Any] | None:
        try:
            doc = yaml.safe_load((self.root / "params.yaml").read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            return None
        return doc if isinstance(doc, dict) else None
