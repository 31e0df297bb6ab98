"""The names the framework integrations write (as each framework logs them) find their roles."""

from __future__ import annotations

import pytest

from trainwatch.roles import DEFAULT_ROLES

HF_TRAIN_ROW = ("loss", "grad_norm", "learning_rate", "epoch", "num_input_tokens_seen",
                "train_runtime", "train_tokens_per_second")
HF_EVAL_ROW = ("eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
HF_CLOSING_ROW = ("train_runtime", "train_samples_per_second", "train_steps_per_second",
                  "total_flos", "train_loss")


@pytest.mark.parametrize(
    ("names", "roles"),
    [
        # the closing row's samples rate, once, must not take the role from the step rows' rate
        (HF_TRAIN_ROW + HF_EVAL_ROW + HF_CLOSING_ROW,
         {"loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate", "epoch": "epoch",
          "val_loss": "eval_loss", "throughput": "train_tokens_per_second"}),
        (("loss", "mae", "learning_rate", "epoch", "val_loss", "val_mae"),
         {"loss": "loss", "lr": "learning_rate", "epoch": "epoch", "val_loss": "val_loss"}),
        (("train_loss_step", "train_loss_epoch", "val_loss", "lr-Adam", "epoch"),
         {"loss": "train_loss_step", "lr": "lr-Adam", "epoch": "epoch", "val_loss": "val_loss"}),
    ],
    ids=["transformers", "keras", "lightning"],
)
def test_framework_names_resolve_to_their_roles(names: tuple[str, ...], roles: dict) -> None:
    assert DEFAULT_ROLES.resolve(names) == roles

