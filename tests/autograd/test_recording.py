"""Recording fast paths build the node that the general ``record`` builds: linear with a bias
goes through ``record_ternary`` (See asyncgrad/ops/_record.py)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F
from asyncgrad.ops import _record
from asyncgrad.rules import OPS


def _inputs(which: tuple[bool, bool, bool], x_view: bool) -> tuple[ag.Tensor, ...]:
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 3))
    x = ag.tensor(xs, requires_grad=which[0])
    if x_view:
        x = ag.tensor(np.vstack([xs, xs]), requires_grad=which[0])[2:6]  # a view of a leaf
    elif which[0]:
        x = x * 1.0  # a non-leaf: its edge is its grad_fn's
    w = ag.tensor(rng.standard_normal((2, 3)), requires_grad=which[1])
    b = ag.tensor(rng.standard_normal(2), requires_grad=which[2])
    return x, w, b


def _shape_of(node: Any) -> tuple[Any, ...]:
    return (
        type(node).__name__,
        node._topological_nr,
        node._spos,
        tuple(None if e is None else (type(e[0]).__name__, e[1]) for e in node._next_edges),
        tuple(type(s).__name__ for s in node._saved),
    )


@pytest.mark.parametrize("x_view", [False, True])
@pytest.mark.parametrize("which", list(itertools.product([False, True], repeat=3)))
def test_linear_records_the_node_the_general_path_records(
    which: tuple[bool, bool, bool], x_view: bool
) -> None:
    x, w, b = _inputs(which, x_view)
    fast = F.linear(x, w, b)
    general = ag.tensor(fast.detach().numpy())
    _record.record(OPS["linear"], (general,), (x, w, b), _record.NO_PARAMS)
    if not any(which):
        assert fast.grad_fn is None
        assert general.grad_fn is None
        return
    assert fast.grad_fn is not None
    assert general.grad_fn is not None
    assert _shape_of(fast.grad_fn) == _shape_of(general.grad_fn)
    for e, f in zip(fast.grad_fn._next_edges, general.grad_fn._next_edges, strict=True):
        assert e == f  # the same nodes, not only the same kinds
    # And its gradients are the closed forms.
    inputs = [t for t, r in zip((x, w, b), which, strict=True) if r]
    g = np.arange(8.0).reshape(4, 2)
    got = ag.grad_sync(fast, inputs, grad_outputs=[ag.tensor(g)])
    expected = {
        0: g @ w.detach().numpy(),
        1: g.T @ x.detach().numpy(),
        2: g.sum(0),
    }
    wanted = [expected[i] for i, r in enumerate(which) if r]
    for a, e in zip(got, wanted, strict=True):
        np.testing.assert_allclose(a.numpy(), e, rtol=1e-12)


def test_linear_refuses_to_save_an_inference_tensor_and_leaves_its_inputs_usable() -> None:
    with ag.inference_mode():
        x = ag.ones(4, 3)
    w = ag.ones(2, 3, requires_grad=True)
    b = ag.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        F.linear(x, w, b)  # w's gradient needs x
    F.linear(ag.ones(4, 3), w, b).sum().backward()
    assert w.grad is not None
    assert b.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 4.0))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(2, 4.0))


# ----------------------------------------------------------------------------- shared metadata
def test_nodes_of_one_shape_and_dtype_share_their_input_metadata() -> None:
    x = ag.tensor(np.arange(12.0).reshape(3, 4), dtype=ag.float32, requires_grad=True)
    a, b = x * 2.0, x.exp()
    assert a.grad_fn._input_meta is b.grad_fn._input_meta  # See NOTE [Shared input metadata]
    assert a.grad_fn._input_meta == (((3, 4), np.dtype(np.float32)),)
    # The same shape in another dtype gets its own metadata, and the first keeps its own.
    xd = ag.tensor(np.arange(12.0).reshape(3, 4), dtype=ag.float64, requires_grad=True)
    c = xd * 3.0
    assert c.grad_fn._input_meta == (((3, 4), np.dtype(np.float64)),)
    assert a.grad_fn._input_meta == (((3, 4), np.dtype(np.float32)),)
    # Alternating dtypes at one shape: every gradient keeps its input's dtype and value.
    d = x * 4.0
    assert d.grad_fn._input_meta == (((3, 4), np.dtype(np.float32)),)
    (gx, gxd) = ag.grad_sync((a + b + d).sum() + c.sum().float(), [x, xd])
    assert gx.dtype == ag.float32
    assert gxd.dtype == ag.float64
    np.testing.assert_allclose(gx.numpy(), 6.0 + np.exp(x.detach().numpy()), rtol=1e-6)
    np.testing.assert_array_equal(gxd.numpy(), np.full((3, 4), 3.0))


def test_the_shared_metadata_table_stays_small() -> None:
    from asyncgrad.graph import node as node_module

    # The table's own bound, not a patched one: a compiled module inlines its Final constants.
    cap = node_module.META_SHAPES_MAX
    x = ag.tensor(np.ones(cap + 40), requires_grad=True)
    grads = []
    for n in range(1, cap + 41):  # more shapes than the table holds
        y = x[:n] * float(n)
        assert len(node_module.metas) <= cap
        assert y.grad_fn._input_meta == (((n,), np.dtype(np.float64)),)
        if n % 97 == 0 or n > cap:
            grads.append((n, ag.grad_sync(y.sum(), x)[0].numpy()))
    expected = [np.where(np.arange(cap + 40) < n, float(n), 0.0) for n, _ in grads]
    np.testing.assert_array_equal(np.stack([g for _, g in grads]), np.stack(expected))
