"""Atomic checkpoints: model, optimizer, schedule, RNG and task state at a step. Imports torch.

A checkpoint is written to a temporary file in the same directory, flushed to disk and renamed
into place, so a crash or a kill mid-save leaves the previous checkpoint intact and never a
half-written one under a checkpoint's name.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import torch

CKPT_DIR = "checkpoints"
_NAME = re.compile(r"ckpt-(\d+)\.pt\Z")


def ckpt_dir(run_dir: Path) -> Path:
    return run_dir / CKPT_DIR


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint, oldest first."""
    d = ckpt_dir(run_dir)
    if not d.is_dir():
        return []
    found = []
    for p in d.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as the checkpoint of ``step`` atomically; keep the ``keep`` newest."""
    d = ckpt_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    target = d / f"ckpt-{step:08d}.pt"
    tmp = d / f".ckpt-{step:08d}.pt.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save({"step": step, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    for _step, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return target


def load(path: Path) -> dict[str, Any]:
    """Load onto the CPU (RNG states must stay there; ``load_state_dict`` moves the rest).
    ``weights_only``: a checkpoint is data, and loading one never runs pickled code."""
    return torch.load(path, map_location="cpu", weights_only=True)
