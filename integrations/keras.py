"""Keras 3, live: ``model.fit(..., callbacks=[TrainwatchCallback("runs/exp1")])``.

Keras' ``CSVLogger`` writes once per epoch; this callback writes one record per training batch and
one per epoch to ``runs/exp1/metrics.jsonl``, each when Keras hands it over:

* **Per batch** (``on_train_batch_end``): the batch logs under Keras' names (``loss`` and the
  compiled metrics: Keras gives their running mean over the epoch so far), the optimizer's
  ``learning_rate`` when the logs lack it, and ``epoch``, at a global ``step`` (batches done
  since ``fit`` began, across epochs).
* **Per epoch** (``on_epoch_end``): what the epoch adds to the batch logs (``val_loss`` and the
  other ``val_*``, what other callbacks put there), at the step of its last batch.
* ``run_start`` and ``config.yaml`` at ``on_train_begin`` (``max_steps``, the fit parameters, the
  optimizer's config, the model's name and size); ``run_end`` (``finished``) at ``on_train_end``.
* An exception in ``fit`` never reaches ``on_train_end``: the run is ended as ``crashed`` with the
  error's text when the exception kills the script or the thread running ``fit``
  (:mod:`~trainwatch.integrations.crash_hooks`), or by ``with callback: model.fit(...)`` when
  the caller catches it.

Any backend; trainwatch's tests run it on ``KERAS_BACKEND=torch``. Set the backend before this
module is imported: it imports Keras.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import Any

import keras

from trainwatch.integrations.live_run import EndsOnException, LiveRun

__all__ = ["TrainwatchCallback"]


class TrainwatchCallback(EndsOnException, keras.callbacks.Callback):
    """Writes Keras' batch and epoch logs to ``run_dir/metrics.jsonl`` as ``fit`` runs."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        super().__init__()
        self.run = LiveRun(run_dir, "keras")
        """The run this callback writes."""
        self._step = 0  # batches done since fit began
        self._epoch_start = 0  # self._step when the current epoch began
        self._epoch = 0
        self._batch_keys: frozenset[str] = frozenset()  # the names in the last batch's logs

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._step = self._epoch_start = 0
        self.run.start(self._config)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        self._epoch_start = self._step

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # ``batch`` is the batch's index in the epoch (the last of a group with
        # steps_per_execution > 1): the global step counts from the epoch's start
        self._step = self._epoch_start + batch + 1
        if not self.run.is_open:
            return
        record = dict(logs or {})
        self._batch_keys = frozenset(record)
        if "learning_rate" not in record:
            lr = self._learning_rate()
            if lr is not None:
                record["learning_rate"] = lr
        record["epoch"] = self._epoch
        self.run.log(record, step=self._step)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        record = {k: v for k, v in (logs or {}).items() if k not in self._batch_keys}
        if record:
            record["epoch"] = epoch
            self.run.log(record, step=self._step)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.run.end("finished")

    def _learning_rate(self) -> float | None:
        """The optimizer's current learning rate (a schedule's value at this step), if any."""
        optimizer = getattr(self.model, "optimizer", None)
        with suppress(Exception):  # no optimizer, a custom one, a rate that is not a number
            # a Variable (before Keras 3.1 without __float__: its .value is the backend's
            # tensor), or a schedule's tensor; float() of a tensor works on every backend, while
            # ops.convert_to_numpy costs a DeprecationWarning per call on torch with numpy 2
            lr = optimizer.learning_rate
            return float(getattr(lr, "value", lr))
        return None

    def _config(self) -> dict[str, Any]:
        params = dict(self.params or {})
        steps, epochs = params.get("steps"), params.get("epochs")
        model = self.model
        optimizer = getattr(model, "optimizer", None)
        return {
            "framework": "keras",
            "keras_version": keras.__version__,
            "backend": keras.backend.backend(),
            "max_steps": steps * epochs if isinstance(steps, int) and isinstance(epochs, int)
            else None,
            "fit": params,
            "model": getattr(model, "name", None),
            "model_params": model.count_params() if getattr(model, "built", False) else None,
            "optimizer": optimizer.get_config() if hasattr(optimizer, "get_config") else None,
        }
