"""mmengine's ``vis_data/scalars.json`` (``LocalVisBackend``: one JSON object per line).

What the writer does, and the choices made here:

* Training rows carry ``step`` (the global iteration, ``runner.iter + 1``), ``iter``,
  usually ``epoch``, ``lr``/``base_lr``, ``loss*``, ``grad_norm``, ``memory``, ``data_time``
  and ``time``. ``step`` is the step; ``iter`` is consumed (it repeats the step or counts
  within an epoch); ``epoch`` stays a series.
* ``time`` is seconds per iteration: it becomes ``time_per_iter`` (``_lines.rename_time``).
* **Validation/test rows** (``LoggerHook.after_val_epoch``) have no ``iter`` and, with the
  default ``log_metric_by_epoch=True``, their ``step`` is the *epoch* (0 in iteration-based
  loops). Taken literally that jumps back from step 1500 to step 0 in the middle of a run. A
  row without ``iter`` whose step is below the last training step is therefore placed at the
  last training step (where the evaluation ran), and is not a rewind. Its keys that are also
  training series (``data_time``, ``time_per_iter``, ``loss``...) become ``val/<name>``;
  ``coco/bbox_mAP`` and the like keep their names.
* **Appended runs.** Several runs writing to the same file (a re-launch in the same
  ``work_dir`` timestamp, or files concatenated) make training steps go back: those are genuine
  rewinds and start new segments.
* The file has no clock: record times are the moment we read them.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._lines import JsonLinesReader, rename_time

_PER_ITER_KEYS = frozenset({"time_per_iter", "data_time", "memory", "loss"})
"""Names a validation row shares with training rows even before any training row was seen."""


class MmengineScalarsReader(JsonLinesReader):
    """Reads mmengine ``scalars.json`` lines."""

    format = "mmengine"

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        super().__init__(source, clock=clock)
        self._last_train_step: int | None = None
        self._train_keys: set[str] = set()

    def reset(self) -> None:
        super().reset()
        self._last_train_step = None
        self._train_keys = set()

    def _handle(self, obj: dict[str, Any], line_no: int, builder: BatchBuilder) -> None:
        rec = rename_time(obj)
        if "iter" in rec:
            rec.pop("iter")
            step = rec.get("step")
            if type(step) is int:
                self._last_train_step = step
            self._train_keys.update(k for k in rec if k not in ("step", "epoch"))
            builder.add_record(rec, line_no)
            return
        step = rec.get("step")
        last = self._last_train_step
        if last is not None and (type(step) is not int or step < last):
            rec["step"] = last
        out: dict[str, Any] = {}
        for k, v in rec.items():
            if k != "step" and (k in self._train_keys or k in _PER_ITER_KEYS):
                out[f"val/{k}"] = v
            else:
                out[k] = v
        builder.add_record(out, line_no)
