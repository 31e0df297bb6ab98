"""Hugging Face ``Trainer``, live: ``Trainer(..., callbacks=[TrainwatchCallback("runs/exp1")])``.

The Trainer writes ``trainer_state.json`` only at checkpoints; this callback writes each of its
logs to ``runs/exp1/metrics.jsonl`` the moment ``on_log`` is called, under the names the Trainer
gives them (``loss``, ``grad_norm``, ``learning_rate``, ``epoch``, ``eval_loss`` and the other
``eval_*``, the closing ``train_runtime``/``train_loss`` row), at ``step = state.global_step``:
the names trainwatch's roles already know from ``trainer_state.json``.

* ``run_start`` and ``config.yaml`` at ``on_train_begin``: the ``TrainingArguments``, the model's
  config and the run's ``max_steps``; ``run_end`` (``finished``) at ``on_train_end``.
* An exception in training never reaches ``on_train_end`` (there is no exception hook): the run is
  ended as ``crashed`` with the error's text when the exception kills the script
  (:mod:`~trainwatch.integrations.crash_hooks`), or by ``with callback: trainer.train()`` when
  the caller catches it.
* Only the world's process zero writes (the Trainer logs the same values on every rank).
* Logs outside ``train()`` (a ``trainer.evaluate()`` after it) belong to no run: not written.
"""

from __future__ import annotations

import os
from typing import Any

import transformers
from transformers import TrainerCallback

from trainwatch.integrations.live_run import EndsOnException, LiveRun

__all__ = ["TrainwatchCallback"]


class TrainwatchCallback(EndsOnException, TrainerCallback):
    """Writes the Trainer's logs to ``run_dir/metrics.jsonl`` as training runs."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run = LiveRun(run_dir, "transformers")
        """The run this callback writes."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.run.start(lambda: _config(args, state, kwargs.get("model")))

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs:
            self.run.log(logs, step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.run.end("finished")


def _config(args: Any, state: Any, model: Any) -> dict[str, Any]:
    """The run's config: ``max_steps`` first (the real one: the arguments' is -1 when the run is
    given in epochs), then the arguments and the model's config as HF serialises them."""
    model_config = getattr(model, "config", None)
    return {
        "framework": "transformers",
        "transformers_version": transformers.__version__,
        "max_steps": state.max_steps,
        "num_train_epochs": getattr(state, "num_train_epochs", None),
        "training_args": args.to_dict(),
        "model": type(model).__name__ if model is not None else None,
        "model_config": model_config.to_dict() if hasattr(model_config, "to_dict") else None,
    }
