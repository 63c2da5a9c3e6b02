"""``ag.autograd.graph.get_gradient_edge`` in gradient calls, as torch's: a GradientEdge may stand
for a tensor in ``inputs`` and ``outputs`` (closed forms here, and torch's values where it is
installed)."""

from __future__ import annotations

import importlib.util
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd.graph import get_gradient_edge

HAVE_TORCH: Final = importlib.util.find_spec("torch") is not None


def graph(m: Any) -> tuple[Any, Any, Any]:
    """x, h = 3x, y = sum(h^2), in library ``m`` (asyncgrad or torch)."""
    x = m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True)
    h = x * 3
    return x, h, (h * h).sum()


def test_an_edge_as_input_gives_the_gradient_its_tensor_would() -> None:
    x, h, y = graph(ag)
    (gh,) = ag.grad(y, get_gradient_edge(h), retain_graph=True)
    np.testing.assert_allclose(gh.numpy(), [6.0, 12.0])  # 2h
    gx, gx_edge = ag.grad(y, [x, get_gradient_edge(x)], retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), [18.0, 36.0])  # 18x
    np.testing.assert_allclose(gx_edge.numpy(), gx.numpy())
    assert x.grad is None  # grad() fills no .grad, through an edge either


def test_an_edge_as_output_roots_the_pass_at_its_node() -> None:
    x, h, y = graph(ag)
    (g,) = ag.grad(get_gradient_edge(h), x, ag.ones(2, dtype=ag.float64), retain_graph=True)
    np.testing.assert_allclose(g.numpy(), [3.0, 3.0])
    (g,) = ag.grad(get_gradient_edge(y), x)  # one element: its gradient may be implied
    np.testing.assert_allclose(g.numpy(), [18.0, 36.0])


def test_edge_errors_are_torchs() -> None:
    x, h, y = graph(ag)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        ag.grad(get_gradient_edge(h), x)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_outputs\[0\]"):
        ag.grad(get_gradient_edge(h), x, ag.ones(3, dtype=ag.float64))
    z = ag.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="materialize_grads cannot be used when the given input"):
        ag.grad(y, [get_gradient_edge(z)], materialize_grads=True)
    with pytest.raises(RuntimeError, match=r"inputs\[0\], shape \(1,\)\) appears to not have been"):
        ag.grad(y, [get_gradient_edge(z)], retain_graph=True)
    (none,) = ag.grad(y, [get_gradient_edge(z)], allow_unused=True)
    assert none is None


def test_backward_with_edge_inputs_accumulates_only_into_leaves() -> None:
    x, h, y = graph(ag)
    ag.backward(y, inputs=[get_gradient_edge(h), get_gradient_edge(x)])
    np.testing.assert_allclose(x.grad.numpy(), [18.0, 36.0])
    assert not h.retains_grad  # an edge names no tensor to retain a grad on


async def test_awaited_with_edges() -> None:
    _, h, y = graph(ag)
    (gh,) = await ag.grad(y, get_gradient_edge(h))
    np.testing.assert_allclose(gh.numpy(), [6.0, 12.0])


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed: it is the reference here")
def test_edges_give_torchs_values() -> None:
    import torch
    from torch.autograd.graph import get_gradient_edge as torch_edge

    for m, edge in ((ag, get_gradient_edge), (torch, torch_edge)):
        x, h, y = graph(m)
        got = [
            m.autograd.grad(y, edge(h), retain_graph=True)[0],
            m.autograd.grad(y, [x, edge(x)], retain_graph=True)[1],
            m.autograd.grad(edge(h), x, m.ones(2, dtype=m.float64), retain_graph=True)[0],
            m.autograd.grad(edge(y), x)[0],
        ]
        if m is ag:
            ours = [g.numpy() for g in got]
        else:
            for a, b in zip(ours, got, strict=True):
                np.testing.assert_allclose(a, b.detach().numpy())
