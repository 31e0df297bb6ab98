"""Global gradient norm and clipping, cheaply. Imports torch.

``torch.nn.utils.clip_grad_norm_`` spends ~70 us per call on a small model grouping tensors by
device and dtype before any maths; for the small models trained here that is more than the whole
logging budget of a step. The same maths on a flat list of same-device float tensors costs a
few microseconds: concatenate and take one norm for small models (a copy of under 1M values is
cheaper than a launch per tensor), one fused per-tensor norm for large ones. Neither syncs the
device: clipping multiplies by a clamped on-device factor, as ``clip_grad_norm_`` does.
"""

from __future__ import annotations

import torch

CAT_LIMIT = 1 << 20
"""Up to this many gradient values, one concatenation beats per-tensor norms."""


def grads_of(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.grad for p in params if p.grad is not None]


def uniform(params: list[torch.nn.Parameter]) -> bool:
    """All parameters on one device with one dtype (checked once: the fast paths need it)."""
    return len({(p.device, p.dtype) for p in params}) <= 1


def total_norm(grads: list[torch.Tensor], numel: int, same: bool = True) -> torch.Tensor:
    """The L2 norm of all gradients together, as a 0-d tensor on their device.

    ``same``: every gradient shares one device and dtype (see :func:`uniform`).
    """
    if not grads:
        return torch.zeros(())
    if same and numel <= CAT_LIMIT:
        return torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads]))
    if same and hasattr(torch, "_foreach_norm"):
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    return torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads]))


def clip_(grads: list[torch.Tensor], max_norm: float, norm: torch.Tensor, same: bool = True
          ) -> None:
    """Scale ``grads`` in place so their global norm is at most ``max_norm``."""
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    if hasattr(torch, "_foreach_mul_") and same:
        torch._foreach_mul_(grads, coef.to(grads[0].dtype))
    else:
        for g in grads:
            g.mul_(coef.to(g.dtype))
