"""Lightning, live: ``Trainer(logger=TrainwatchLogger("runs/exp1"))`` (or one of ``logger=[...]``).

Lightning's ``CSVLogger`` flushes every 100 steps; this logger writes each ``log_metrics`` call to
``runs/exp1/metrics.jsonl`` when it is made, under the names ``self.log`` gave (``train_loss``, or
``train_loss_step``/``train_loss_epoch`` with ``on_step`` and ``on_epoch``; ``lr-Adam`` from
``LearningRateMonitor``; the ``epoch`` Lightning adds), at Lightning's step. How often Lightning
calls it is the Trainer's ``log_every_n_steps`` (50 by default).

* ``run_start`` when a stage starts: at ``log_hyperparams`` (the hyperparameters are the config,
  as in Lightning's ``hparams.yaml``), else at Lightning's first ``save()`` or ``log_metrics``.
  Hyperparameters logged after that are an ``hparams`` event.
* ``finalize(status)`` is ``run_end``: ``success`` is ``finished``; ``failed`` is ``crashed`` with
  the error's text (Lightning finalizes inside its ``except`` block, where ``sys.exc_info()`` is
  the exception), or ``interrupted`` for Ctrl-C; any other status is written as it is.
* Every stage (``fit``, then ``validate`` or ``test``) is finalized: a later stage appends a new
  run to the same file.
* Rank zero only, as Lightning's own loggers. Checkpoints go to ``runs/exp1/checkpoints`` (the
  logger's ``save_dir`` with an empty name and version).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from trainwatch.integrations.live_run import LiveRun, json_safe

__all__ = ["TrainwatchLogger"]


class TrainwatchLogger(Logger):
    """A Lightning logger that writes ``run_dir/metrics.jsonl`` as training runs."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        super().__init__()
        self.run = LiveRun(run_dir, "lightning")
        """The run this logger writes."""
        self._hparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    @property
    def root_dir(self) -> str:
        return str(self.run.run_dir)

    @property
    def log_dir(self) -> str:
        return str(self.run.run_dir)

    @property
    def save_dir(self) -> str:
        return str(self.run.run_dir)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        with self.run.guard():
            params = json_safe(params) or {}
            self._hparams.update(params)
        if self.run.is_open:
            self.run.event("hparams", params=params)
        else:
            self._start()

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self._start()
        self.run.log(metrics, step=step)

    @rank_zero_only
    def save(self) -> None:
        self._start()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        exc_type, exc, _tb = sys.exc_info()
        if status == "failed" and exc_type is not None:
            self.run.end_with(exc_type, exc)
        elif status == "failed":
            self.run.end("crashed", 1)
        else:
            self.run.end("finished" if status == "success" else status)

    def _start(self) -> None:
        self.run.start(self._hparams)
