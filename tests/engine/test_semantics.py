"""What a backward pass computes: torch's semantics for every argument of grad() and backward(),
the sync and async forms, and the topology of the recorded graph."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd.graph import AccumulateGrad

from .helpers import TIMEOUT_S, assert_close, leaf, record_calls

X = [0.5, -1.5, 2.0]


# ----------------------------------------------------------------------------- retain_graph
async def test_retain_graph_allows_second_backward() -> None:
    x = leaf(X)
    out = (x * x).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out, retain_graph=True)
        await ag.backward(out)
    assert_close(x.grad, 4 * np.array(X))


@pytest.mark.parametrize("make", [lambda x: x * x, lambda x: x.exp(), lambda x: x.sin()])
async def test_second_backward_without_retain_graph_raises(make: Any) -> None:
    x = leaf(X)
    out = make(x).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out)
        with pytest.raises(RuntimeError, match="second time"):
            await ag.backward(out)


def test_second_sync_backward_without_retain_graph_raises() -> None:
    x = leaf(X)
    out = (x * x).sum()
    out.backward()
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()
    assert_close(x.grad, 2 * np.array(X))  # the failed pass added nothing


async def test_grad_defaults_retain_graph_to_create_graph() -> None:
    x = leaf(X)
    out = (x**3).sum()
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, x, create_graph=True)
        (g_again,) = await ag.grad(out, x)  # create_graph=True kept the graph
        with pytest.raises(RuntimeError, match="second time"):
            await ag.grad(out, x)
    assert_close(g, g_again)


# ----------------------------------------------------------------------------- create_graph
async def test_create_graph_second_derivative_of_cube() -> None:
    x = leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad((x**3).sum(), x, create_graph=True)
        assert g.requires_grad
        assert g.grad_fn is not None
        (gg,) = await ag.grad(g.sum(), x)
    assert_close(g, 3 * np.array(X) ** 2)
    assert_close(gg, 6 * np.array(X))


def test_create_graph_third_derivative_of_sin_sync() -> None:
    x = leaf(X)
    (g1,) = ag.grad_sync(x.sin().sum(), x, create_graph=True)
    (g2,) = ag.grad_sync(g1.sum(), x, create_graph=True)
    (g3,) = ag.grad_sync(g2.sum(), x)
    assert_close(g1, np.cos(X))
    assert_close(g2, -np.sin(X))
    assert_close(g3, -np.cos(X))


async def test_backward_create_graph_makes_differentiable_grad() -> None:
    x = leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward((x**3).sum(), create_graph=True)
        assert x.grad is not None
        assert x.grad.requires_grad
        (gg,) = await ag.grad(x.grad.sum(), x)
    assert_close(gg, 6 * np.array(X))


# ------------------------------------------------------------ allow_unused / materialize_grads
async def test_unused_input_raises_without_allow_unused() -> None:
    x, unused = leaf(X), leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(RuntimeError, match="allow_unused"):
            await ag.grad((x * 2).sum(), [x, unused])


async def test_allow_unused_gives_none() -> None:
    x, unused = leaf(X), leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        gx, gu = await ag.grad((x * 2).sum(), [x, unused], allow_unused=True)
    assert_close(gx, [2.0, 2.0, 2.0])
    assert gu is None


async def test_materialize_grads_gives_zeros() -> None:
    x, unused = leaf(X), leaf([[1.0, 2.0]], dtype=ag.float32)
    async with asyncio.timeout(TIMEOUT_S):
        gx, gu = await ag.grad((x * 2).sum(), [x, unused], materialize_grads=True)
    assert_close(gx, [2.0, 2.0, 2.0])
    assert gu is not None
    assert gu.shape == (1, 2)
    assert gu.dtype == ag.float32
    assert_close(gu, np.zeros((1, 2)))


def test_materialize_grads_with_allow_unused_true_sync() -> None:
    x, unused = leaf(X), leaf(X)
    _, gu = ag.grad_sync((x * 2).sum(), [x, unused], allow_unused=True, materialize_grads=True)
    assert_close(gu, np.zeros(3))


async def test_materialize_grads_rejects_allow_unused_false() -> None:
    x = leaf(X)
    with pytest.raises(ValueError, match="allow_unused"):
        await ag.grad((x * 2).sum(), x, allow_unused=False, materialize_grads=True)
    with pytest.raises(ValueError, match="allow_unused"):
        ag.grad_sync((x * 2).sum(), x, allow_unused=False, materialize_grads=True)


async def test_input_unreachable_because_pruned_by_topology() -> None:
    # `late` was made from x after `out`: no path from `out` leads to it.
    x = leaf(X)
    out = (x * 3).sum()
    late = x * 5
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, late, allow_unused=True)
    assert g is None


# ----------------------------------------------------------------------------- inputs=
async def test_backward_inputs_accumulates_only_listed_leaves() -> None:
    x, y, w = leaf(X), leaf([1.0, 2.0, 3.0]), leaf([4.0, 5.0, 6.0])
    out = (x * y + w).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out, inputs=[x], retain_graph=True)
    assert_close(x.grad, [1.0, 2.0, 3.0])
    assert y.grad is None
    assert w.grad is None
    out.backward(inputs=[w, y])
    assert_close(x.grad, [1.0, 2.0, 3.0])  # untouched by the second pass
    assert_close(y.grad, X)
    assert_close(w.grad, np.ones(3))


async def test_backward_inputs_non_leaf_gets_grad() -> None:
    x = leaf(X)
    h = x * 2
    out = (h * h).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out, inputs=[h])
    assert_close(h.grad, 2 * 2 * np.array(X))
    assert x.grad is None


def test_backward_inputs_non_leaf_and_leaf_sync() -> None:
    x = leaf(X)
    h = x.exp()
    out = (h * 3).sum()
    out.backward(inputs=[h, x])
    assert_close(h.grad, 3 * np.ones(3))
    assert_close(x.grad, 3 * np.exp(X))


async def test_backward_empty_inputs_raises() -> None:
    x = leaf(X)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        await ag.backward((x * 2).sum(), inputs=[])


# ----------------------------------------------------------------------------- grad_outputs
async def test_grad_outputs_is_vector_jacobian_product() -> None:
    x = leaf(X)
    w = ag.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=ag.float64)
    v = ag.tensor([0.5, -2.0], dtype=ag.float64)
    y = w @ x  # J = w
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(y, x, grad_outputs=v)
    assert_close(g, v.numpy() @ w.numpy())


async def test_gradient_of_backward_is_vector_jacobian_product() -> None:
    x = leaf(X)
    v = ag.tensor([1.0, 10.0, 100.0], dtype=ag.float64)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(x.sin(), grad_tensors=v)
    assert_close(x.grad, v.numpy() * np.cos(X))


@pytest.mark.parametrize("grad_dtype", [ag.float64, ag.float16])
async def test_gradient_of_other_float_dtype_is_cast(grad_dtype: Any) -> None:
    x = leaf(X, dtype=ag.float32)
    y = x * 2
    v = ag.tensor([1.0, 2.0, 3.0], dtype=grad_dtype)
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(y, x, grad_outputs=v, retain_graph=True)
        await y.abackward(v)
    assert g.dtype == ag.float32
    assert_close(g, [2.0, 4.0, 6.0])
    assert x.grad is not None
    assert x.grad.dtype == ag.float32
    assert_close(x.grad, [2.0, 4.0, 6.0])


async def test_gradient_wrong_shape_raises() -> None:
    x = leaf(X)
    with pytest.raises(RuntimeError, match="shape"):
        await ag.grad(x * 2, x, grad_outputs=ag.ones(2, dtype=ag.float64))


async def test_non_scalar_without_gradient_raises() -> None:
    x = leaf(X)
    with pytest.raises(RuntimeError, match="scalar"):
        await ag.backward(x * 2)


# ----------------------------------------------------------------------------- multiple roots
async def test_multiple_roots_share_a_subgraph() -> None:
    x = leaf(X)
    h = x * x  # shared by both roots
    a = (h * 2).sum()
    b = (h * 3).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward([a, b])
    assert_close(x.grad, 5 * 2 * np.array(X))


async def test_multiple_roots_with_gradients_and_grad() -> None:
    x = leaf(X)
    h = x.exp()
    a = h * 2
    b = h.sin()
    ga = ag.tensor([1.0, 0.0, 1.0], dtype=ag.float64)
    gb = ag.tensor([0.5, 0.5, 0.5], dtype=ag.float64)
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad([a, b], x, grad_outputs=[ga, gb])
    e = np.exp(X)
    assert_close(g, ga.numpy() * 2 * e + gb.numpy() * np.cos(e) * e)


async def test_same_root_twice_sums() -> None:
    x = leaf(X)
    out = (x * 3).sum()
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad([out, out], x)
    assert_close(g, 6 * np.ones(3))


async def test_grad_outputs_count_mismatch_raises() -> None:
    x = leaf(X)
    with pytest.raises(RuntimeError, match="must match"):
        await ag.grad([(x * 2).sum(), (x * 3).sum()], x, grad_outputs=[None])


# ----------------------------------------------------------------------------- accumulation
async def test_grad_accumulates_across_backward_calls() -> None:
    x = leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward((x * x).sum())
        first = x.grad
        await ag.backward((x * 3).sum())
    assert_close(x.grad, 2 * np.array(X) + 3)
    (x * 1).sum().backward()
    assert_close(x.grad, 2 * np.array(X) + 4)
    assert x.grad is first  # accumulated in place, as torch does outside create_graph


async def test_accumulates_into_assigned_grad() -> None:
    x = leaf(X)
    x.grad = ag.tensor([10.0, 20.0, 30.0], dtype=ag.float64)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward((x * 2).sum())
    assert_close(x.grad, [12.0, 22.0, 32.0])


# ----------------------------------------------------------------------------- graph shapes
async def test_diamond_sums_both_paths() -> None:
    x = leaf(X)
    h = x * 2
    out = (h.sin() + h.cos()).sum()  # h is reached by two paths
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, x)
    h_np = 2 * np.array(X)
    assert_close(g, 2 * (np.cos(h_np) - np.sin(h_np)))


def test_wide_diamond_sync() -> None:
    x = leaf(X)
    h = x.exp()
    out = sum((h * float(k) for k in range(1, 11)), start=ag.zeros(3, dtype=ag.float64)).sum()
    out.backward()
    assert_close(x.grad, 55 * np.exp(X))


async def test_multi_output_node_with_some_outputs_unused() -> None:
    x = leaf([1.0, 2.0, 3.0, 4.0])
    a, b, c = ag.split(x, [1, 2, 1])
    assert a.grad_fn is b.grad_fn
    out = (b * 3).sum()  # a and c unused
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, x, retain_graph=True)
        await ag.backward(out + (c * 5).sum())
    assert_close(g, [0.0, 3.0, 3.0, 0.0])
    assert_close(x.grad, [0.0, 3.0, 3.0, 5.0])


async def test_multi_output_node_all_outputs_used() -> None:
    x = leaf([1.0, 2.0, 3.0, 4.0])
    parts = x.chunk(2)
    out = (parts[0] * 2).sum() + (parts[1] ** 2).sum()
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, x)
    assert_close(g, [2.0, 2.0, 6.0, 8.0])


async def test_grad_does_not_touch_dot_grad() -> None:
    x = leaf(X)
    h = x * 2
    h.retain_grad()
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad((h * h).sum(), x)
    assert x.grad is None
    assert_close(g, 8 * np.array(X))
    x.grad = ag.ones(3, dtype=ag.float64)
    ag.grad_sync((x * 7).sum(), x)
    assert_close(x.grad, np.ones(3))


async def test_grad_wrt_intermediate_prunes_unneeded_branches() -> None:
    x, w = leaf(X), leaf([1.0, 2.0, 3.0])
    h = x * w
    branch = w.sin()  # feeds `out`, but no path from it leads to h
    out = (h.exp() + branch).sum()
    ran: list[str] = []
    assert branch.grad_fn is not None
    assert h.grad_fn is not None
    branch.grad_fn.register_prehook(record_calls(ran, "sin"))
    h.grad_fn.register_hook(record_calls(ran, "mul-post"))  # below the captured input
    x._grad_accumulator().register_prehook(record_calls(ran, "acc-x"))
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, h)
    assert_close(g, np.exp(np.array(X) * [1.0, 2.0, 3.0]))
    assert ran == []
    assert x.grad is None
    assert w.grad is None


async def test_captured_but_unneeded_node_skips_node_prehooks() -> None:
    # As in torch: the node whose input is captured runs tensor hooks, not its own hooks.
    x = leaf(X)
    h = x * 2
    out = (h * h).sum()
    ran: list[str] = []
    assert h.grad_fn is not None
    h.grad_fn.register_prehook(record_calls(ran, "pre"))
    h.register_hook(record_calls(ran, "tensor"))
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, h)
    assert_close(g, 4 * np.array(X))
    assert ran == ["tensor"]


def test_backward_inputs_prunes_other_leaves_sync() -> None:
    x, w = leaf(X), leaf(X)
    out = (x * 2 + w.exp()).sum()
    ran: list[str] = []
    assert out.grad_fn is not None
    exp_node = out.grad_fn.next_functions[0][0].next_functions[1][0]
    assert exp_node.name() == "ExpBackward0"
    exp_node.register_prehook(record_calls(ran, "exp"))
    out.backward(inputs=[x])
    assert ran == []
    assert_close(x.grad, 2 * np.ones(3))
    assert w.grad is None


# ----------------------------------------------------------------------------- aliasing
async def test_grad_never_aliases_other_leaf_or_gradient() -> None:
    x, y = leaf(X), leaf(X)
    g = ag.tensor([1.0, 2.0, 3.0], dtype=ag.float64)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(x + y, grad_tensors=g)
    assert x.grad is not None
    assert y.grad is not None
    x.grad.array[...] += 100.0
    assert_close(y.grad, [1.0, 2.0, 3.0])
    assert_close(g, [1.0, 2.0, 3.0])
    assert not np.shares_memory(x.grad.array, g.array)
    assert not np.shares_memory(y.grad.array, g.array)


def test_grad_never_aliases_gradient_sync_identity() -> None:
    x = leaf(X)
    g = ag.tensor([1.0, 2.0, 3.0], dtype=ag.float64)
    x.backward(g)
    assert x.grad is not None
    x.grad.array[0] = -1.0
    assert_close(g, [1.0, 2.0, 3.0])
    x.grad = None
    (x * 1.0).backward(g)
    assert x.grad is not None
    assert not np.shares_memory(x.grad.array, g.array)


# ----------------------------------------------------------------------------- forms
def _problem() -> tuple[ag.Tensor, ag.Tensor, ag.Tensor]:
    x = leaf(X)
    w = leaf([[1.0, -1.0, 0.5], [2.0, 0.0, 1.0]])
    out = ((w @ x).tanh() * (x.exp() @ w.T)).sum()
    return x, w, out


async def test_sync_and_async_forms_agree() -> None:
    results = []
    async with asyncio.timeout(TIMEOUT_S):
        x, w, out = _problem()
        results.append(await ag.grad(out, [x, w]))
        x, w, out = _problem()
        results.append(ag.grad_sync(out, [x, w]))
        for form in ("backward", "abackward", "t.backward", "backward_sync"):
            x, w, out = _problem()
            if form == "backward":
                await ag.backward(out)
            elif form == "abackward":
                await out.abackward()
            elif form == "t.backward":
                out.backward()
            else:
                ag.backward_sync(out)
            results.append((x.grad, w.grad))
    ref = results[0]
    for res in results[1:]:
        for a, b in zip(res, ref, strict=True):
            np.testing.assert_array_equal(a.array, b.array)


def test_sync_forms_without_event_loop() -> None:
    x, w, out = _problem()
    gx, gw = ag.grad_sync(out, [x, w], retain_graph=True)
    out.backward()
    np.testing.assert_array_equal(x.grad.array, gx.array)
    np.testing.assert_array_equal(w.grad.array, gw.array)


@pytest.mark.parametrize("priority", [-5, 0, 7])
async def test_priority_argument_accepted(priority: int) -> None:
    x = leaf(X)
    out = (x * x).sum()
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(out, x, retain_graph=True, priority=priority)
        await ag.backward(out, retain_graph=True, priority=priority)
    (gs,) = ag.grad_sync(out, x, retain_graph=True, priority=priority)
    ag.backward_sync(out, priority=priority)
    assert_close(g, 2 * np.array(X))
    assert_close(gs, 2 * np.array(X))
    assert_close(x.grad, 4 * np.array(X))


async def test_requires_grad_errors() -> None:
    x = ag.tensor(X, dtype=ag.float64)
    with pytest.raises(RuntimeError, match="does not require grad"):
        await ag.backward(x.sum())
    y = leaf(X)
    with pytest.raises(RuntimeError, match="does not require grad"):
        await ag.grad((y * 2).sum(), [y, x])


# ----------------------------------------------------------------------------- topology
def test_next_functions_and_names() -> None:
    x, y = leaf(X), leaf(X)
    c = ag.tensor(X, dtype=ag.float64)
    p = x * y
    s = (p + c).sum()
    assert s.grad_fn is not None
    assert s.grad_fn.name() == "SumBackward0"
    ((add, add_nr),) = s.grad_fn.next_functions
    assert add.name() == "AddBackward0"
    assert add_nr == 0
    (mul, _), (none, _) = add.next_functions
    assert none is None  # c does not require grad
    assert mul is p.grad_fn
    assert mul.name() == "MulBackward0"
    (acc_x, nx), (acc_y, ny) = mul.next_functions
    assert isinstance(acc_x, AccumulateGrad)
    assert acc_x.name() == "AccumulateGrad"
    assert acc_x.variable is x
    assert acc_y.variable is y
    assert (nx, ny) == (0, 0)
    assert acc_x.next_functions == ()
    # The same leaf gets the same accumulator while it is alive.
    assert (x * 2).grad_fn.next_functions[0][0] is acc_x


def test_sequence_nr_increases_in_creation_order() -> None:
    x = leaf(X)
    a = x * 2
    b = a.exp()
    c = b + a
    d = c.sum()
    nrs = [t.grad_fn.sequence_nr for t in (a, b, c, d)]
    assert nrs == sorted(nrs)
    assert len(set(nrs)) == 4


def test_topological_nr() -> None:
    x, y = leaf(X), leaf(X)
    a = x * 2  # 1
    b = a.exp()  # 2
    c = b * y  # max(2, 0) + 1 = 3
    d = c + a  # max(3, 1) + 1 = 4
    e = d.sum()  # 5
    acc = a.grad_fn.next_functions[0][0]
    assert acc.topological_nr == 0
    assert [t.grad_fn.topological_nr for t in (a, b, c, d, e)] == [1, 2, 3, 4, 5]
    for t in (a, b, c, d, e):
        node = t.grad_fn
        children = [n.topological_nr for n, _ in node.next_functions if n is not None]
        assert node.topological_nr == 1 + max(children)


def test_custom_function_node_name_and_edges() -> None:
    class Twice(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            return g * 2

    x = leaf(X)
    y = Twice.apply(x)
    assert y.grad_fn is not None
    assert y.grad_fn.name() == "TwiceBackward"
    assert y.grad_fn.next_functions[0][0].variable is x
    assert y.grad_fn.topological_nr == 1
