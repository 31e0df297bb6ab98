"""mmcv's ``TextLoggerHook`` JSON log (``work_dirs/<exp>/<timestamp>.log.json``).

What the writer does, and the choices made here:

* **Run meta.** A line without ``mode`` (``env_info``, ``config``, ``seed``, ``exp_name``...)
  is the run's meta, not a record: it goes to the batch's ``meta``. Another meta line further
  down (a second run appended to the same file) updates it.
* **Global step.** ``iter`` restarts at every epoch (``Epoch [3][50/6207]``), so it is not a
  step. The step is cumulative: each epoch starts where the previous one ended, an epoch's
  length being the largest training ``iter`` logged in it (the last logged window, a few
  iterations short of the true length at most). The per-epoch restart is therefore never a
  rewind. Epoch offsets are remembered, so a run resumed in the same file that goes back to an
  epoch already seen (or to ``iter`` lower than logged before in the same epoch) lands on its
  real global step and is reported as a genuine rewind.
* **A file that starts after epoch 1** (a resumed run writes a new file) counts iterations from
  its first epoch: the lengths of epochs before it are unknown. ``meta["first_epoch"]`` says
  which epoch step 0 is; the ``epoch`` series carries the true epoch everywhere.
* **Validation rows** (``mode`` ``val``) are keyed by epoch: they are placed at the global step
  of the end of that epoch as logged so far. Their metrics keep their names (``mAP``,
  ``bbox_mAP``) unless the name is also a training series (``loss``, ``time_per_iter``,
  ``data_time``, ``memory``...): then it becomes ``val/<name>``, so a validation loss never
  lands in the training loss series. The ``lr`` a validation row repeats is dropped: it is the
  training schedule's value, already a series. Other modes are prefixed the same way.
* ``time`` is seconds per iteration: it becomes ``time_per_iter`` (see ``_lines.rename_time``).
  ``iter`` and ``mode`` are consumed (they are the step and the row kind); ``epoch`` stays a
  series. The file has no clock: record times are the moment we read them.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._lines import JsonLinesReader, rename_time

_PER_ITER_KEYS = frozenset({"time_per_iter", "data_time", "memory", "loss"})
"""Names a non-train row shares with training rows even before any training row was seen."""


class MmcvLogReader(JsonLinesReader):
    """Reads mmcv ``*.log.json`` lines, turning (epoch, iter) into a global step."""

    format = "mmcv"

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        super().__init__(source, clock=clock)
        self._init_epochs()

    def _init_epochs(self) -> None:
        self._offset: dict[int, int] = {}
        """Global step at which each epoch seen so far starts."""
        self._length: dict[int, int] = {}
        """Largest training ``iter`` logged in each epoch."""
        self._last_epoch: int | None = None
        """Highest epoch seen (offsets of new epochs are extended from it)."""
        self._train_keys: set[str] = set()

    def reset(self) -> None:
        super().reset()
        self._init_epochs()

    # ------------------------------------------------------------------ steps
    def _epoch_offset(self, epoch: int) -> int:
        off = self._offset.get(epoch)
        if off is not None:
            return off
        last = self._last_epoch
        if last is None:
            off = 0
            self._add_meta({"first_epoch": epoch})
        elif epoch > last:
            # epochs skipped in between (nothing logged in them) count as long as the last one
            off = self._offset[last] + self._length.get(last, 0) * (epoch - last)
        else:
            # an epoch before the first one seen: only reachable by a rewind; keep it >= 0
            first = min(self._offset)
            off = max(0, self._offset[first] - self._length.get(first, 0) * (first - epoch))
        self._offset[epoch] = off
        if last is None or epoch > last:
            self._last_epoch = epoch
        return off

    def _handle(self, obj: dict[str, Any], line_no: int, builder: BatchBuilder) -> None:
        mode = obj.get("mode")
        if mode is None:
            self._add_meta(obj)
            return
        rec = rename_time(obj)
        rec.pop("mode", None)
        it = rec.pop("iter", None)
        epoch = rec.get("epoch")
        it_i = it if type(it) is int else None
        ep_i = epoch if type(epoch) is int else None
        if mode == "train":
            if ep_i is not None and it_i is not None:
                off = self._epoch_offset(ep_i)
                self._length[ep_i] = max(self._length.get(ep_i, 0), it_i)
                rec["step"] = off + it_i
            elif it_i is not None:
                rec["step"] = it_i  # iteration-based runner without an epoch: iter is global
            self._train_keys.update(k for k in rec if k != "epoch")
            builder.add_record(rec, line_no)
            return
        if ep_i is not None:
            rec["step"] = self._epoch_offset(ep_i) + self._length.get(ep_i, 0)
        elif it_i is not None:
            rec["step"] = it_i
        rec.pop("lr", None)
        prefix = f"{mode}/"
        out: dict[str, Any] = {}
        for k, v in rec.items():
            if k in ("step", "epoch") or (k not in self._train_keys and k not in _PER_ITER_KEYS):
                out[k] = v
            else:
                out[prefix + k] = v
        builder.add_record(out, line_no)
