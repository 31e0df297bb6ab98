"""A tiny model for the HF Trainer tests (imported once transformers is known to be there, and by
the crash test's script): a linear regression with an HF config, so the run's config has a model
part, and a few hundred steps take under a second on a CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import PretrainedConfig, PrinterCallback, Trainer, TrainingArguments


class TinyConfig(PretrainedConfig):
    model_type = "trainwatch-tiny"

    def __init__(self, width: int = 8, **kw: Any) -> None:
        self.width = width
        super().__init__(**kw)


class TinyModel(torch.nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.linear = torch.nn.Linear(config.width, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)}


class Pairs(torch.utils.data.Dataset):
    """``y = sum(x) + noise``, seeded."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x.sum(-1) + 0.1 * torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": self.y[i]}


def make_trainer(out_dir: str | Path, callbacks: list[Any], steps: int) -> Trainer:
    """A Trainer that logs every step and evaluates every 100, on the CPU, saving and printing
    nothing."""
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(out_dir), max_steps=steps, per_device_train_batch_size=8,
        learning_rate=1e-2, logging_steps=1, eval_strategy="steps", eval_steps=100,
        per_device_eval_batch_size=32, save_strategy="no", report_to="none",
        disable_tqdm=True, use_cpu=True, dataloader_num_workers=0, label_names=["y"],
    )
    trainer = Trainer(model=TinyModel(TinyConfig()), args=args, train_dataset=Pairs(512, 1),
                      eval_dataset=Pairs(64, 2), callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # (disable_tqdm puts it there: it prints each log)
    return trainer
