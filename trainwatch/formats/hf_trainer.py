"""Hugging Face Trainer's ``trainer_state.json`` (a ``snapshot``: rewritten whole each save).

What the Trainer writes, and the choices made here:

* ``log_history`` is the list of records, each with its own ``step``. Training rows carry
  ``loss``, ``grad_norm``, ``learning_rate``, ``epoch``; evaluation rows ``eval_loss`` and
  ``eval_*`` (several eval sets give ``eval_<name>_loss``...); the final row ``train_loss``,
  ``train_runtime``, ``total_flos``... Every numeric key is a series under its own name;
  ``epoch`` is a series like any other.
* Everything else at the top level (``max_steps``, ``num_train_epochs``, ``global_step``,
  ``logging_steps``, ``eval_steps``, ``best_metric``, ``best_model_checkpoint``...) goes to the
  batch's ``meta``, refreshed with every snapshot.
* A file that is empty or not valid JSON is half-written: :meth:`parse_snapshot` returns None
  and the caller retries. Valid JSON without a ``log_history`` list is not a trainer state:
  one malformed entry says so.
* Each snapshot returns only the records not returned before. If the history returned earlier
  changed (a shorter or different ``log_history``: the run restarted without resuming, or the
  caller moved to another run's file), the whole history comes back as a ``reset`` batch. A
  JSON document is complete or invalid, so unlike a CSV a shorter valid history is a change,
  not a torn write.
* The file has no clock: record times are the moment we first read them.
* A state written when training was done is a finished run: its history ends with the summary
  ``train()`` logs when it returns (``train_runtime``, ``train_loss``...), or it was saved as
  training stopped (``global_step`` reached ``max_steps``, or ``TrainerControl`` says
  ``should_training_stop``: the final checkpoint, whose history may end with evaluations). A
  ``run_end`` event (status ``finished``) follows the last entry, once, so the rules
  (``stalled_stream``) and the TUI know it ended.

During training the file exists only in ``checkpoint-<step>/`` folders (the output folder
gets its own copy when training ends): :func:`newest_trainer_state` picks the one to follow.
Feeding successive checkpoints' files to the *same* reader returns only what each adds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from trainwatch.batch import RecordBatch
from trainwatch.builder import BatchBuilder
from trainwatch.formats._snapshot import SnapshotReaderBase

_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")
_decoder = msgspec.json.Decoder()
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _decode(data: bytes) -> Any:
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError:
        pass
    return json.loads(data.decode("utf-8"))  # bare NaN/Infinity from json.dump


class HfTrainerStateReader(SnapshotReaderBase):
    """Reads successive snapshots of one ``trainer_state.json``."""

    format = "hf_trainer"
    _ended = False
    """A ``run_end`` was made for the history returned so far."""

    def reset(self) -> None:
        super().reset()
        self._ended = False

    def parse_snapshot(self, data: bytes) -> RecordBatch | None:
        """Parse the whole file; None when it is half-written (empty or not valid JSON)."""
        if not data.strip():
            return None
        try:
            doc = _decode(data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        history = doc.get("log_history") if type(doc) is dict else None
        if type(history) is not list:
            builder = BatchBuilder(self.source, self.state, self.format, self.clock)
            builder.add_malformed(
                0, "no 'log_history' list: not a Hugging Face trainer_state.json"
            )
            return builder.build()
        meta = {k: v for k, v in doc.items() if k != "log_history"}
        prints = [_encode_sorted(e) for e in history]
        diff = self._history.diff(prints, shorter_is_partial=False)
        reset = diff.verdict == "reset" and len(self._history) > 0
        if reset:
            self.state.reset()
        builder = BatchBuilder(self.source, self.state, self.format, self.clock)
        for i in range(diff.start, len(history)):
            entry = history[i]
            if type(entry) is not dict:
                builder.add_malformed(
                    0, f"log_history[{i}]: expected a JSON object, got {type(entry).__name__}"
                )
                continue
            builder.add_record(entry, 0)
        if reset or diff.start < len(history):
            self._ended = False  # new records: whether the run has ended is asked again
        if not self._ended and _finished(doc, history):
            step = history[-1].get("step") if history and type(history[-1]) is dict else None
            builder.add_record({"event": "run_end", "status": "finished", "step": step}, 0)
            self._ended = True
        self._history.commit(prints)
        return builder.build(reset=reset, meta=meta)


def _finished(doc: dict[str, Any], history: list[Any]) -> bool:
    """Whether the Trainer was done when it wrote this state: its history ends with the summary
    ``train()`` logs when it returns (``train_runtime``), or the state was saved as training
    stopped (``global_step`` reached ``max_steps``, or ``TrainerControl``'s
    ``should_training_stop``: the last checkpoint, evaluations after the last loss included)."""
    if history and type(history[-1]) is dict and "train_runtime" in history[-1]:
        return True
    steps, top = doc.get("global_step"), doc.get("max_steps")
    if type(steps) is int and type(top) is int and 0 < top <= steps:
        return True
    control = (doc.get("stateful_callbacks") or {}).get("TrainerControl") if type(
        doc.get("stateful_callbacks")) is dict else None
    args = control.get("args") if type(control) is dict else None
    return type(args) is dict and args.get("should_training_stop") is True


def newest_trainer_state(output_dir: Path) -> Path | None:
    """The ``trainer_state.json`` to follow in a Trainer output folder, or None.

    The newest ``checkpoint-<N>/trainer_state.json`` by *step number* (``checkpoint-1000`` is
    newer than ``checkpoint-500``, whatever the names' sort order or the copies' mtimes say);
    the output folder's own ``trainer_state.json`` (written when training ends) wins when it is
    at least as recent as that checkpoint's.
    """
    best: tuple[int, Path] | None = None
    try:
        children = list(output_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return None
    for child in children:
        m = _CHECKPOINT_DIR.fullmatch(child.name)
        if m is None:
            continue
        state = child / "trainer_state.json"
        if state.is_file() and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), state)
    top = output_dir / "trainer_state.json"
    if not top.is_file():
        return best[1] if best else None
    if best is None:
        return top
    try:
        return top if top.stat().st_mtime >= best[1].stat().st_mtime else best[1]
    except FileNotFoundError:  # a checkpoint rotated away by save_total_limit meanwhile
        return top
