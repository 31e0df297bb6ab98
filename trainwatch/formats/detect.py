"""Which reader a file needs, from its name *and* its first bytes; and a reader for it.

Content wins over names where it is clear (the corpus keeps real files under other names), names
decide where the content cannot yet (an empty file just created by a starting run):

=================  ======================================================================
format             recognised by
=================  ======================================================================
``tfevents``       ``events.out.tfevents.*``, or a first TFRecord frame header whose CRC holds
``wandb``          ``*.wandb`` (W&B's ``run-<id>.wandb``), or a file starting with ``:W&B``
``hf_trainer``     ``trainer_state.json``, or JSON starting ``{`` with ``"log_history": [``
``mmcv``           ``*.log.json``, or JSON lines starting with ``{"env_info"`` or carrying
                   ``mode`` with ``epoch``/``iter``
``detectron2``     JSON lines with ``iteration``
``mmengine``       ``scalars.json``, or JSON lines with ``step``, ``iter`` and ``lr``/``data_time``
``jsonl``          ``*.jsonl``/``*.ndjson`` always; any other file whose first line is a JSON object
``lightning_csv``  a CSV header with a ``step`` column (or a ``.csv`` without ``epoch``)
``keras_csv``      a CSV header whose first column is ``epoch`` and has no ``step``
``textlog``        lines like ``s:N trl:X``, ``step:N/T k:v``, ``iter N: loss X`` in the first
                   64 KiB, or an unrecognised ``.log``/``.txt``/``.out`` text file
=================  ======================================================================

Any other pretty-printed JSON document (first line ``{``) is not a metrics file.
"""

from __future__ import annotations

import os
import re
import time as _time
from collections.abc import Callable
from pathlib import Path

from trainwatch.formats._csv import is_header, sniff_delimiter, split_row
from trainwatch.formats._decode import decode_json
from trainwatch.formats.base import Reader
from trainwatch.formats.detectron2 import Detectron2Reader
from trainwatch.formats.hf_trainer import HfTrainerStateReader
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.formats.keras_csv import KerasCsvReader
from trainwatch.formats.lightning_csv import LightningCsvReader
from trainwatch.formats.mmcv import MmcvLogReader
from trainwatch.formats.mmengine import MmengineScalarsReader
from trainwatch.formats.read import read_file, read_with
from trainwatch.formats.textlog import TextLogReader, parse_metric_line
from trainwatch.formats.tfevents import HEADER, TfEventsReader, _header_ok
from trainwatch.formats.wandb import WandbReader, is_wandb_head

FORMATS: tuple[str, ...] = (
    "jsonl", "hf_trainer", "lightning_csv", "keras_csv", "detectron2", "mmcv", "mmengine",
    "tfevents", "wandb", "textlog",
)
"""Every format name :func:`detect_format` can return."""
__all__ = [
    "FORMATS", "detect_format", "find_metric_files", "make_reader", "read_file", "read_with",
    "reader_for",
]
HEAD_BYTES = 64 << 10
"""How much of a file detection reads."""

_READERS = {
    "hf_trainer": HfTrainerStateReader,
    "lightning_csv": LightningCsvReader,
    "keras_csv": KerasCsvReader,
    "detectron2": Detectron2Reader,
    "mmcv": MmcvLogReader,
    "mmengine": MmengineScalarsReader,
    "tfevents": TfEventsReader,
    "wandb": WandbReader,
    "textlog": TextLogReader,
}
_HF_KEY = re.compile(r'"log_history"\s*:\s*\[')
_RANK = re.compile(r"\.rank(\d+)\.jsonl$")
_TEXT_SUFFIXES = (".log", ".txt", ".out")
_MAX_HEAD_LINES = 200


def rank_of(path: Path) -> int | None:
    """``metrics.rank3.jsonl`` -> 3."""
    m = _RANK.search(path.name)
    return int(m.group(1)) if m else None


def detect_format(path: Path, head: bytes) -> str:
    """The format name (one of :data:`FORMATS`) of ``path`` whose first bytes are ``head``.

    Raises ``ValueError`` naming the file and the supported formats when neither the name nor
    the content says.
    """
    fmt = _detect(path, head, strict=False)
    if fmt is None:
        preview = head[:40].decode("utf-8", errors="replace").split("\n")[0]
        raise ValueError(
            f"{path}: unknown metrics format (starts with {preview!r}); supported: "
            f"{', '.join(FORMATS)} (JSON lines, trainer_state.json, metrics.csv, Keras CSV, "
            "detectron2 metrics.json, mmcv *.log.json, mmengine scalars.json, "
            "events.out.tfevents.*, W&B run-*.wandb, llm.c/nanoGPT text logs)"
        )
    return fmt


def _detect(path: Path, head: bytes, *, strict: bool) -> str | None:
    """``strict``: only positive evidence in the content (no guess from the name alone)."""
    low = path.name.lower()
    if low.endswith(".wandb") or is_wandb_head(head):
        return "wandb"
    if low.startswith("events.out.tfevents") or _looks_like_tfrecord(head):
        return "tfevents"
    if low.endswith((".jsonl", ".ndjson")):
        return "jsonl" if head.strip() or not strict else None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    if not text.strip():
        return None if strict else _by_name(low)
    stripped = text.lstrip()
    lines = text.split("\n", _MAX_HEAD_LINES)[:_MAX_HEAD_LINES]
    first = lines[0].strip()
    if stripped.startswith("{"):
        if low == "trainer_state.json" or _HF_KEY.search(text):
            return "hf_trainer"
        if first == "{":
            return None  # a pretty-printed JSON document that is not a trainer state
        return _json_lines_format(low, stripped, lines)
    fmt = _csv_format(low, first)
    if fmt is not None:
        return fmt
    if any(parse_metric_line(ln.strip()) is not None for ln in lines):
        return "textlog"
    if not strict and low.endswith(_TEXT_SUFFIXES):
        return "textlog"
    return None


def _by_name(low: str) -> str | None:
    """What an empty file will be, judging by its name only."""
    if low == "trainer_state.json":
        return "hf_trainer"
    if low.endswith(".log.json"):
        return "mmcv"
    if low == "scalars.json":
        return "mmengine"
    if low == "metrics.json":
        return "detectron2"
    if low.endswith(".csv"):
        return "lightning_csv"
    if low.endswith(_TEXT_SUFFIXES):
        return "textlog"
    return None


def _looks_like_tfrecord(head: bytes) -> bool:
    return len(head) >= HEADER and _header_ok(head, 0)


def _json_lines_format(low: str, stripped: str, lines: list[str]) -> str:
    if re.match(r'\{\s*"env_info"\s*:', stripped) or low.endswith(".log.json"):
        return "mmcv"
    keys: set[str] = set()
    for ln in lines[:20]:
        if not ln.strip():
            continue
        try:
            obj = decode_json(ln.strip().encode())
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue  # a line cut by the end of the head, or a bad line
        if type(obj) is dict:
            keys.update(obj)
            break
    if "mode" in keys and ("iter" in keys or "epoch" in keys):
        return "mmcv"
    if "iteration" in keys and "step" not in keys:
        return "detectron2"
    if low == "scalars.json" or (
        "step" in keys and "iter" in keys and ({"lr", "base_lr", "data_time"} & keys)
    ):
        return "mmengine"
    return "jsonl"


def _csv_format(low: str, first: str) -> str | None:
    delimiter = sniff_delimiter(first)
    if delimiter not in first:
        return None
    cells = [c.strip() for c in split_row(first, delimiter)]
    if len(cells) < 2 or not is_header(cells):
        return None
    if any(" " in c for c in cells) and not low.endswith(".csv"):
        return None  # prose with commas, not a header
    if "step" in cells:
        return "lightning_csv"
    if cells[0] == "epoch":
        return "keras_csv"
    return "lightning_csv" if low.endswith(".csv") else None


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes (FileNotFoundError / PermissionError propagate with the path)."""
    with path.open("rb") as f:
        return f.read(n)


def reader_for(
    fmt: str, source: str, *, rank: int | None = None, clock: Callable[[], float] = _time.time
) -> Reader:
    """A fresh reader of format ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "jsonl":
        return JsonlParser(source, rank=rank, clock=clock)
    cls = _READERS.get(fmt)
    if cls is None:
        raise ValueError(f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}")
    return cls(source, clock=clock)


def make_reader(
    path: Path,
    source: str | None = None,
    *,
    fmt: str | None = None,
    clock: Callable[[], float] = _time.time,
) -> Reader:
    """The reader for ``path``, its format detected from name and first bytes unless given.

    ``source`` names the stream in batches (default: the path). Raises FileNotFoundError or
    PermissionError for a file that cannot be opened, ValueError for an unknown format.
    """
    path = Path(path)
    if fmt is None:
        fmt = detect_format(path, read_head(path))
    return reader_for(fmt, source or str(path), rank=rank_of(path), clock=clock)


# ---------------------------------------------------------------------- run folders
_VERSION_DIR = re.compile(r"version_(\d+)")
_SKIP_DIRS = frozenset({"wandb", "__pycache__", "node_modules", ".git"})
_KERAS_EVENT_DIRS = frozenset({"train", "validation"})


def find_metric_files(run_dir: Path) -> list[Path]:
    """What to read in a run folder, in this order:

    1. ``metrics.jsonl``, then ``metrics.rank{N}.jsonl`` by N (trainwatch's own writer);
       else, in a W&B run folder (``wandb/run-*``, ``wandb/offline-run-*``), its
       ``run-<id>.wandb`` alone (see :func:`wandb_log_of`);
    2. framework files, sorted by path: the newest ``trainer_state.json`` (``checkpoint-*``
       by step, see :func:`newest_trainer_state`), ``metrics.csv`` here or in the newest
       ``lightning_logs/version_N``, mmengine's ``vis_data/*.json`` (here or in the newest
       timestamp folder), the newest mmcv ``*.log.json``, detectron2's ``metrics.json``,
       ``events.out.tfevents.*`` here and, beside them, one folder down; without them here,
       one folder down only when those folders are Keras' ``train/`` and ``validation/``
       (other sub-folders with event files are the runs of a TensorBoard log directory: see
       :mod:`trainwatch.run_folders`), and in the newest ``version_N``; and ``.log``/``.txt``/``.out``/``.csv``
       files here whose content is a Keras or Lightning CSV;
    3. only when none of the above exists: ``.log``/``.txt``/``.out`` files here with metric
       lines (llm.c, nanoGPT...). Next to structured metrics a text log is the run's console
       output, which repeats them.

    Other ``.jsonl`` files (an alerts file, a dataset) are not metrics and are left out.
    Raises FileNotFoundError / NotADirectoryError for a missing or non-folder ``run_dir``.
    """
    from trainwatch.formats.hf_trainer import newest_trainer_state

    run_dir = Path(run_dir)
    children = _children(run_dir, must_exist=True)
    files = {p.name: p for p in children if p.is_file()}
    dirs = {p.name: p for p in children if p.is_dir() and p.name not in _SKIP_DIRS}

    first: list[Path] = []
    if "metrics.jsonl" in files:
        first.append(files["metrics.jsonl"])
    ranked = [(r, p) for p in files.values() if (r := rank_of(p)) is not None
              and p.name.startswith("metrics.")]
    first += [p for _r, p in sorted(ranked)]
    if not first:
        wandb_log = wandb_log_of(run_dir, files)
        if wandb_log is not None:
            return [wandb_log]

    found: set[Path] = set()
    hf = newest_trainer_state(run_dir)
    if hf is not None:
        found.add(hf)
    if "metrics.csv" in files:
        found.add(files["metrics.csv"])
    version_dirs = [run_dir] + ([dirs["lightning_logs"]] if "lightning_logs" in dirs else [])
    newest_version: Path | None = None
    for vd in version_dirs:
        v = _newest(_children(vd), _VERSION_DIR)
        if v is not None:
            newest_version = v
            if (v / "metrics.csv").is_file():
                found.add(v / "metrics.csv")
    vis = [run_dir / "vis_data"]
    stamped = sorted((d for d in dirs.values() if (d / "vis_data").is_dir()), key=lambda d: d.name)
    if stamped:
        vis.append(stamped[-1] / "vis_data")
    for vd in vis:
        for p in sorted(_children(vd)):
            if p.suffix == ".json" and p.is_file() and _detect_file(p) == "mmengine":
                found.add(p)
    if "scalars.json" in files:
        found.add(files["scalars.json"])
    mmcv_logs = sorted(p for n, p in files.items() if n.endswith(".log.json"))
    if mmcv_logs:
        found.add(mmcv_logs[-1])
    if "metrics.json" in files and _detect_file(files["metrics.json"]) == "detectron2":
        found.add(files["metrics.json"])
    event_dirs = [d for d in dirs.values() if not _VERSION_DIR.fullmatch(d.name)]
    if not any(n.startswith("events.out.tfevents") for n in files):
        # no event file here: sub-folders with event files are the runs of a TensorBoard log
        # directory (trainwatch.run_folders), unless they are only Keras' train/ and
        # validation/ of one run
        with_events = [d for d in event_dirs if any(
            p.name.startswith("events.out.tfevents") for p in _children(d))]
        if not all(d.name in _KERAS_EVENT_DIRS for d in with_events):
            event_dirs = []
    event_dirs.append(run_dir)
    if newest_version is not None:
        event_dirs.append(newest_version)
    for d in event_dirs:
        found.update(p for p in _children(d)
                     if p.name.startswith("events.out.tfevents") and p.is_file())
    text_logs: list[Path] = []
    for name, p in files.items():
        if name.lower().endswith((*_TEXT_SUFFIXES, ".csv")) and p not in found:
            fmt = _detect_file(p)
            if fmt in ("keras_csv", "lightning_csv"):
                found.add(p)
            elif fmt == "textlog":
                text_logs.append(p)
    if not first and not found:
        found.update(text_logs)
    return first + sorted(found - set(first))


def wandb_log_of(run_dir: Path, files: dict[str, Path]) -> Path | None:
    """The ``run-<id>.wandb`` among a folder's ``files`` (the last by name if several), or None.

    Reached through a link to a run folder (W&B's ``wandb/latest-run``), the path goes through
    the link's target instead: W&B points the link at the next run when one starts, and the run
    being read must not change under the reader (nor its file seem deleted)."""
    logs = sorted(p for name, p in files.items() if name.endswith(".wandb"))
    if not logs:
        return None
    if run_dir.is_symlink():
        try:
            return run_dir.parent / os.readlink(run_dir) / logs[-1].name
        except OSError:
            pass
    return logs[-1]


def _children(d: Path, *, must_exist: bool = False) -> list[Path]:
    try:
        return list(d.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        if must_exist:
            raise
        return []


def _newest(paths: list[Path], pattern: re.Pattern[str]) -> Path | None:
    best: tuple[int, Path] | None = None
    for p in paths:
        m = pattern.fullmatch(p.name)
        if m and p.is_dir() and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    return best[1] if best else None


def _detect_file(path: Path) -> str | None:
    """Strict detection (content only) of a candidate file; unreadable files are skipped."""
    try:
        return _detect(path, read_head(path), strict=True)
    except OSError:
        return None
