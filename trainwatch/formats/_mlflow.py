"""What MLflow's two stores (``mlflow.db`` and ``mlruns/``) mean alike: a run's status, its
params, and the events trainwatch makes of them.

* A run starts with a ``run_start`` event at its ``start_time``, whose ``config`` is the run's
  params (MLflow keeps them as strings: a number-looking one becomes that number, so
  ``max_steps`` gives the run's length) and which names the run and its id. MLflow promises an
  end status, so a run left ``RUNNING`` whose records stopped long ago is a stalled run for
  ``check``, as a ``RunWriter`` run without ``run_end`` is.
* ``FINISHED``, ``FAILED`` and ``KILLED`` end it: a ``run_end`` event (status ``finished``,
  ``crashed``, ``interrupted``) at its ``end_time``, after every record read with that status. A
  run seen ``RUNNING`` again (resumed by ``start_run(run_id=...)``) gets a new ``run_start``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch.builder import BatchBuilder
from trainwatch.formats._points import Point, StepMerger

END_STATUS = {"FINISHED": "finished", "FAILED": "crashed", "KILLED": "interrupted"}
FILE_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
"""The file store's ``meta.yaml`` keeps the status as a number (MLflow's ``RunStatus``)."""
MAX_FLOAT = 1.7976931348623157e308
"""The SQL store keeps +-inf as +-the largest double (SQL has no infinity)."""


def param_value(text: str) -> Any:
    """``"300"`` -> 300, ``"3e-4"`` -> 0.0003, anything else stays text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def status_name(status: Any) -> str:
    """``FINISHED`` from either store's status (a name, or the file store's number)."""
    if isinstance(status, int):
        return FILE_STATUS.get(status, "RUNNING")
    return str(status or "RUNNING").upper()


class MlflowEvents:
    """The events of one run and its points joined into records, as polls go by."""

    def __init__(self, run_id: str, name: str) -> None:
        self.run_id = run_id
        self.name = name
        self.merger = StepMerger()
        self.started = False
        self.ended = False

    def reset(self) -> None:
        self.merger.reset()
        self.started = self.ended = False

    def add(self, builder: BatchBuilder, points: list[Point], status: str,
            start_ms: int | None, end_ms: int | None, params: Mapping[str, str] | None, *,
            final: bool) -> None:
        """Records of ``points``, with ``run_start`` before the first and ``run_end`` once the
        run has ended. ``status`` was read with (or after) the points: an ended run has no more."""
        ended = status in END_STATUS
        if not self.started or (self.ended and not ended):
            start: dict[str, Any] = {"event": "run_start", "run_id": self.run_id,
                                     "run_name": self.name,
                                     "config": {k: param_value(v) for k, v in (params or {}).items()}}
            if start_ms is not None and not self.started:
                start["time"] = start_ms / 1000
            builder.add_record(start)
            self.started, self.ended = True, False
        self.merger.push(points, final=final or ended).add_to(builder)
        if ended and not self.ended:
            end: dict[str, Any] = {"event": "run_end", "status": END_STATUS[status],
                                   "mlflow_status": status}
            if end_ms is not None:
                end["time"] = end_ms / 1000
            builder.add_record(end)
            self.ended = True
