"""Distributed data parallel under torchrun: process-group setup and per-rank facts.

``torchrun --nproc_per_node=N -m trainwatch.trainer CONFIG`` sets ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``; without them the trainer runs as a single process and none of this is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_env() -> DistInfo:
    """The rank layout torchrun gave this process (a single process when it gave none)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return DistInfo()
    return DistInfo(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))


def init(info: DistInfo, device: torch.device, backend: str, timeout_s: float) -> None:
    if not info.enabled or dist.is_initialized():
        return
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    kw: dict[str, Any] = {}
    if device.type == "cuda":
        kw["device_id"] = device
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **kw)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_str(info: DistInfo, value: str) -> str:
    """Rank 0's ``value`` on every rank (the run directory when none was given)."""
    if not info.enabled:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])
