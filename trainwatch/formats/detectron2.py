"""detectron2's ``metrics.json`` (written by ``JSONWriter``: one JSON object per line).

What the writer puts in a line, and what we make of it:

* ``iteration`` is the step (it is the 0-based iteration the window ended on).
* ``time`` is the median *seconds per iteration* over the window, not a timestamp: it becomes
  the series ``time_per_iter``; the record's time is the moment we read it (the file has no
  clock). ``data_time``, ``eta_seconds``, ``lr``, ``total_loss``, ``loss_*`` and everything
  else numeric are series under their own names (``fast_rcnn/cls_accuracy`` keeps its slash).
* Evaluation results (``bbox/AP``, ``segm/AP50``...) arrive in lines of their own at the
  iteration the evaluator ran; they are ordinary series.
* The writer appends (``open(..., "a")``), so a run resumed in the same output directory
  continues the file: an iteration lower than the previous one is a genuine rewind and
  starts a new segment. Two lines with the *same* iteration (seen in real files) are not.
* A line without ``iteration`` keeps the record-index fallback of the JSONL rules.
"""

from __future__ import annotations

from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._lines import JsonLinesReader, rename_time


class Detectron2Reader(JsonLinesReader):
    """Reads detectron2 ``metrics.json`` lines."""

    format = "detectron2"

    def _handle(self, obj: dict[str, Any], line_no: int, builder: BatchBuilder) -> None:
        obj = rename_time(obj)
        if "iteration" in obj:
            obj["step"] = obj.pop("iteration")
        builder.add_record(obj, line_no)
