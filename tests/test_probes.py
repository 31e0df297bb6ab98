"""Autograd-state probes: duck-typed fakes always; a real LSTM when torch is installed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from trainwatch.probes import graph_size, state_attached


class Node:
    """A fake autograd node: ``next_functions`` is a tuple of (node or None, input index)."""

    def __init__(self, *children: Node | None) -> None:
        self.next_functions = tuple((c, 0) for c in children)


class FakeTensor:
    def __init__(self, grad_fn: Node | None = None) -> None:
        self.grad_fn = grad_fn


# ---------------------------------------------------------------------------- duck-typed
def test_state_attached_on_tensors_and_nested_containers() -> None:
    attached, detached = FakeTensor(Node()), FakeTensor(None)
    assert state_attached(attached)
    assert not state_attached(detached)
    assert not state_attached(None)
    assert not state_attached((detached, detached))
    assert state_attached((detached, attached))  # LSTM (h, c): either one leaks
    assert state_attached([(detached, detached), (detached, attached)])  # a stack of layers
    assert state_attached({"h": detached, "c": attached})
    assert not state_attached([])
    assert not state_attached(3.0)  # not a tensor at all


def test_graph_size_counts_each_shared_node_once() -> None:
    leaf_a, leaf_b = Node(), Node()
    mid = Node(leaf_a, leaf_b, None)
    top = Node(mid, mid, leaf_a)  # a diamond: mid and leaf_a reached twice
    assert graph_size(FakeTensor(top)) == 4
    assert graph_size(FakeTensor(None)) == 0
    assert graph_size(object()) == 0
    assert graph_size((FakeTensor(top), FakeTensor(Node(leaf_b)))) == 5  # joint graph


def test_graph_size_is_bounded_and_iterative() -> None:
    node = Node()
    for _ in range(50_000):  # far deeper than Python's recursion limit
        node = Node(node)
    t = FakeTensor(node)
    assert graph_size(t, limit=1_000) == 1_000
    assert graph_size(t, limit=10**6) == 50_001
    assert graph_size(t, limit=0) == 0


# ---------------------------------------------------------------------------- real torch
def lstm_steps(detach: bool, steps: int = 4) -> tuple[list[bool], list[int]]:
    """Run a tiny LSTM for ``steps`` steps carrying its state; per step, before the forward:
    is the incoming state attached, and how big is the graph behind it."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(input_size=3, hidden_size=5)
    x = torch.randn(2, 1, 3)
    state: Any = None
    attached, sizes = [], []
    for _ in range(steps):
        attached.append(state_attached(state))
        sizes.append(graph_size(state) if state is not None else 0)
        out, state = lstm(x, state)
        out.sum().backward(retain_graph=not detach)
        if detach:
            state = tuple(s.detach() for s in state)
    return attached, sizes


def test_lstm_state_carried_without_detach_is_attached_and_grows() -> None:
    attached, sizes = lstm_steps(detach=False)
    assert attached == [False, True, True, True]
    growth = [b - a for a, b in itertools.pairwise(sizes[1:])]
    assert sizes[1] > 0 and all(g > 0 for g in growth)
    assert len(set(growth)) == 1  # the same nodes added each step: a linear leak


def test_lstm_state_detached_each_step_is_not_attached() -> None:
    attached, sizes = lstm_steps(detach=True)
    assert attached == [False, False, False, False]
    assert sizes == [0, 0, 0, 0]


def test_graph_size_of_one_real_step_is_stable() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(input_size=3, hidden_size=5)
    x = torch.randn(2, 1, 3)
    sizes = []
    state = None
    for _ in range(3):
        out, (h, c) = lstm(x, state)
        sizes.append(graph_size(out))
        state = (h.detach(), c.detach())
    assert sizes[0] > 0 and len(set(sizes)) == 1
    assert graph_size(out, limit=3) == 3
    assert graph_size(x) == 0  # a leaf without grad_fn
