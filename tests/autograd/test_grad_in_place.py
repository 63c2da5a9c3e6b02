"""A rule that overwrites its gradient does so only where nobody else can see it (NOTE [Gradients
overwritten in place] in asyncgrad/rules/registry.py): relu's backward writes its mask into the
gradient it gets when the engine holds the only reference, and allocates otherwise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import backend
from asyncgrad.rules.registry import FunctionNode

X = np.array([-1.0, 2.0, 0.0, 3.0, -0.5])
W = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
MASK = (X > 0).astype(float)


def _relu_node() -> tuple[FunctionNode, ag.Tensor]:
    x = ag.tensor(X, requires_grad=True)
    h = (x * 1.0).relu()
    node = h.grad_fn
    assert isinstance(node, FunctionNode)
    return node, h


def test_the_gradient_is_overwritten_when_the_list_holds_it_alone() -> None:
    node, _ = _relu_node()
    out = node.apply([np.array(W)], None, False)
    assert backend.sole_in([np.array(W)], 0)
    np.testing.assert_array_equal(out[0], W * MASK)
    grads = [np.array(W)]
    array = grads[0]  # another reference: the rule allocates
    out = node.apply(grads, None, False)
    assert out[0] is not array
    np.testing.assert_array_equal(array, W)
    np.testing.assert_array_equal(out[0], W * MASK)


def test_the_in_place_path_is_taken() -> None:
    node, _ = _relu_node()
    grads = [np.array(W)]
    address = grads[0].__array_interface__["data"][0]
    out = node.apply(grads, None, False)
    assert out[0].__array_interface__["data"][0] == address


@pytest.mark.parametrize(
    "array",
    [
        np.broadcast_to(np.array(W), (5,)),  # a view
        np.array(W)[::1].reshape(5),  # a view of another array
        np.frombuffer(np.array(W).tobytes()),  # read-only
    ],
    ids=["broadcast", "view", "read-only"],
)
def test_no_overwrite_of_memory_the_gradient_does_not_own(array: Any) -> None:
    assert not backend.sole_in([array], 0)


def test_a_retained_gradient_is_not_overwritten() -> None:
    x = ag.tensor(X, requires_grad=True)
    h = (x * 1.0).relu()
    h.retain_grad()
    (h * ag.tensor(W)).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), W)
    np.testing.assert_array_equal(x.grad.numpy(), W * MASK)


def test_a_hook_keeps_what_it_saw() -> None:
    seen: list[Any] = []
    x = ag.tensor(X, requires_grad=True)
    h = (x * 1.0).relu()
    h.register_hook(lambda g: seen.append(g))
    (h * ag.tensor(W)).sum().backward()
    np.testing.assert_array_equal(seen[0].numpy(), W)
    np.testing.assert_array_equal(x.grad.numpy(), W * MASK)


def test_the_callers_gradient_is_not_overwritten() -> None:
    x = ag.tensor(X, requires_grad=True)
    h = (x * 1.0).relu()
    g = ag.tensor(W)
    h.backward(g)
    np.testing.assert_array_equal(g.numpy(), W)
    np.testing.assert_array_equal(x.grad.numpy(), W * MASK)


def test_one_gradient_sent_along_two_edges() -> None:
    """add's rule sends the same array to both of its inputs: each relu must see it unmasked."""
    x = ag.tensor(X, requires_grad=True)
    r1 = (x * 1.0).relu()
    r2 = (x * -1.0).relu()
    (r1 + r2).backward(ag.tensor(W))
    np.testing.assert_array_equal(x.grad.numpy(), W * MASK - W * (X < 0))


def test_a_captured_gradient_is_not_overwritten() -> None:
    x = ag.tensor(X, requires_grad=True)
    h = (x * 1.0).relu()
    gh, gx = ag.autograd.grad((h * ag.tensor(W)).sum(), [h, x])
    np.testing.assert_array_equal(gh.numpy(), W)
    np.testing.assert_array_equal(gx.numpy(), W * MASK)


def test_under_create_graph_the_rule_records() -> None:
    x = ag.tensor(X, requires_grad=True)
    h = (x * x).relu()
    (g,) = ag.autograd.grad(h.sum(), x, create_graph=True)
    g.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2.0 * (X != 0))
