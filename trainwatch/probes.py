"""Probes of a model's autograd state, for a training script to log (stdlib only).

The classic recurrent-model leak: the hidden state carried from one step to the next is not
``.detach()``-ed, so every step's graph hangs on to all the previous ones; memory and step time
grow until the run dies. :func:`state_attached` says whether that is happening, and
:func:`graph_size` measures it. torch is never imported here: tensors are duck-typed
(``.grad_fn``, ``.next_functions``), so this module costs nothing to import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["graph_size", "state_attached"]

_MAX_NESTING = 32
"""How deep state containers are searched (a stacked LSTM's list of (h, c) is two levels)."""


def state_attached(h: Any) -> bool:
    """True when the incoming hidden state is still part of an earlier step's autograd graph.

    ``h`` is a tensor, or a tuple/list (or dict) of them, nested (LSTM's ``(h, c)``, a stack's
    list of ``(h, c)``). An element is attached when its ``grad_fn`` is not None: it was computed
    by differentiable operations and not detached. ``None`` (no state yet) is not attached.
    """
    stack: list[tuple[Any, int]] = [(h, 0)]
    while stack:
        x, depth = stack.pop()
        if x is None:
            continue
        if isinstance(x, (tuple, list, Mapping)):
            if depth < _MAX_NESTING:
                items = x.values() if isinstance(x, Mapping) else x
                stack.extend((v, depth + 1) for v in items)
            continue
        if getattr(x, "grad_fn", None) is not None:
            return True
    return False


def graph_size(tensor: Any, limit: int = 100_000) -> int:
    """Number of autograd nodes reachable from ``tensor.grad_fn``, counted up to ``limit``.

    An iterative depth-first walk over ``next_functions`` (each node counted once; the
    ``AccumulateGrad`` nodes of leaf parameters count too). A tensor without ``grad_fn`` gives 0.
    A result equal to ``limit`` means "at least ``limit``": the walk stops there, so a leaking
    graph millions of nodes deep costs a bounded time to probe. A tuple/list of tensors (LSTM
    state) counts the nodes of their joint graph.
    """
    if limit <= 0:
        return 0
    roots = tensor if isinstance(tensor, (tuple, list)) else (tensor,)
    stack = [fn for t in roots if (fn := getattr(t, "grad_fn", None)) is not None]
    # ids are only safe as identities while the nodes are alive: `seen` keeps them referenced
    seen: dict[int, Any] = {}
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        if len(seen) >= limit:
            return limit
        for nxt in getattr(fn, "next_functions", ()) or ():
            child = nxt[0] if isinstance(nxt, tuple) else nxt
            if child is not None and id(child) not in seen:
                stack.append(child)
    return len(seen)
