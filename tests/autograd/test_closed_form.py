"""Gradients compared with formulas written out by hand, not with finite differences.

Also the points where finite differences cannot decide (ties of max/min, clamp at its bounds,
relu and abs at 0), where asyncgrad follows torch's conventions, and the in-place ops on views
(CopySlices) and the regeneration of a view's grad_fn after its base changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F


def arr(t: Any) -> np.ndarray[Any, Any]:
    return np.asarray(t.array if isinstance(t, ag.Tensor) else t)


def assert_close(actual: Any, expected: Any, rtol: float = 1e-7, atol: float = 1e-10) -> None:
    assert actual is not None, "expected a gradient, got None"
    np.testing.assert_allclose(arr(actual), arr(expected), rtol=rtol, atol=atol)


def leaf(values: Any) -> ag.Tensor:
    return ag.tensor(values, dtype=ag.float64, requires_grad=True)


def jacobian(fn: Any, x: ag.Tensor) -> np.ndarray[Any, Any]:
    """d fn(x) / d x as a (out.numel(), x.numel()) matrix, one backward pass per row."""
    out = fn(x)
    rows = []
    for k in range(out.numel()):
        go = np.zeros(out.numel())
        go[k] = 1.0
        (g,) = ag.grad_sync(out, x, ag.tensor(go.reshape(out.shape)), retain_graph=True)
        rows.append(arr(g).reshape(-1))
    return np.stack(rows)


def softmax_np(a: np.ndarray[Any, Any], axis: int) -> np.ndarray[Any, Any]:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# =====================================================================================
# Elementwise, reductions, linear algebra
# =====================================================================================
def test_sum_tanh_grad_is_one_minus_tanh_squared() -> None:
    x = leaf(np.linspace(-2.0, 2.0, 7))
    x.tanh().sum().backward()
    assert_close(x.grad, 1.0 - np.tanh(arr(x)) ** 2)


def test_sigmoid_and_exp_and_log_grads() -> None:
    x = leaf([0.3, 1.2, 2.5])
    (gs, ge, gl) = (ag.grad_sync(f(x).sum(), x)[0] for f in (ag.sigmoid, ag.exp, ag.log))
    s = 1.0 / (1.0 + np.exp(-arr(x)))
    assert_close(gs, s * (1.0 - s))
    assert_close(ge, np.exp(arr(x)))
    assert_close(gl, 1.0 / arr(x))


def test_second_derivative_of_cube() -> None:
    x = leaf([-1.0, 0.5, 2.0])
    (g,) = ag.grad_sync((x**3).sum(), x, create_graph=True)
    assert_close(g, 3.0 * arr(x) ** 2)
    (h,) = ag.grad_sync(g.sum(), x)
    assert_close(h, 6.0 * arr(x))


def test_mean_grad_is_one_over_n() -> None:
    x = leaf(np.arange(12.0).reshape(3, 4))
    x.mean().backward()
    assert_close(x.grad, np.full((3, 4), 1.0 / 12))
    x.grad = None
    x.mean(dim=1).sum().backward()
    assert_close(x.grad, np.full((3, 4), 1.0 / 4))
    x.grad = None
    x.mean(dim=(0, -1), keepdim=True).sum().backward()
    assert_close(x.grad, np.full((3, 4), 1.0 / 12))


def test_sum_with_dim_broadcasts_grad_back() -> None:
    x = leaf(np.ones((2, 3)))
    x.sum(0).backward(ag.tensor([1.0, 2.0, 3.0], dtype=ag.float64))
    assert_close(x.grad, [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])


def test_broadcast_add_sums_grad_over_expanded_axes() -> None:
    x, y = leaf(np.zeros((3, 1))), leaf(np.zeros(4))
    (x + y).sum().backward()
    assert_close(x.grad, np.full((3, 1), 4.0))
    assert_close(y.grad, np.full(4, 3.0))


def test_matmul_2d_grads() -> None:
    rng = np.random.default_rng(1)
    x, y = leaf(rng.standard_normal((2, 3))), leaf(rng.standard_normal((3, 4)))
    g = rng.standard_normal((2, 4))
    (x @ y).backward(ag.tensor(g, dtype=ag.float64))
    assert_close(x.grad, g @ arr(y).T)
    assert_close(y.grad, arr(x).T @ g)


@pytest.mark.parametrize(
    ("xs", "ys"),
    [
        pytest.param((3,), (3,), id="1d_1d"),
        pytest.param((3,), (3, 2), id="1d_2d"),
        pytest.param((2, 3), (3,), id="2d_1d"),
        pytest.param((2, 1, 2, 3), (3, 3, 2), id="batch_broadcast"),
        pytest.param((4, 2, 3), (3,), id="3d_1d"),
    ],
)
def test_matmul_grads_match_the_2d_formula(xs: tuple[int, ...], ys: tuple[int, ...]) -> None:
    # Promote 1-D operands to matrices as matmul does, apply G Y^T and X^T G, then undo.
    rng = np.random.default_rng(2)
    xa, ya = rng.standard_normal(xs), rng.standard_normal(ys)
    x, y = leaf(xa), leaf(ya)
    out = x @ y
    g = rng.standard_normal(out.shape)
    out.backward(ag.tensor(g, dtype=ag.float64))
    x2 = xa[None, :] if xa.ndim == 1 else xa
    y2 = ya[:, None] if ya.ndim == 1 else ya
    g2 = g.reshape(np.matmul(x2, y2).shape)
    gx = reduce_to(np.matmul(g2, np.swapaxes(y2, -1, -2)), x2.shape)
    gy = reduce_to(np.matmul(np.swapaxes(x2, -1, -2), g2), y2.shape)
    assert_close(x.grad, gx.reshape(xs))
    assert_close(y.grad, gy.reshape(ys))


def reduce_to(g: np.ndarray[Any, Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """Sum ``g`` over the axes that broadcasting added to ``shape``."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, s in enumerate(shape) if s == 1), keepdims=True)


def test_linear_grads() -> None:
    rng = np.random.default_rng(3)
    x, w, b = (leaf(rng.standard_normal(s)) for s in [(2, 2, 3), (4, 3), (4,)])
    out = F.linear(x, w, b)
    g = rng.standard_normal(out.shape)
    out.backward(ag.tensor(g, dtype=ag.float64))
    assert_close(x.grad, g @ arr(w))
    assert_close(w.grad, np.einsum("bno,bni->oi", g, arr(x)))
    assert_close(b.grad, g.sum((0, 1)))


def test_softmax_jacobian_is_diag_minus_outer() -> None:
    x = leaf([0.5, -1.0, 2.0, 0.1])
    s = softmax_np(arr(x), 0)
    assert_close(jacobian(lambda t: F.softmax(t, 0), x), np.diag(s) - np.outer(s, s))
    assert_close(jacobian(lambda t: F.log_softmax(t, 0), x), np.eye(4) - np.tile(s, (4, 1)))


def test_softmax_over_rows_is_blockwise() -> None:
    x = leaf([[0.5, -1.0, 2.0], [0.0, 0.3, -0.2]])
    jac = jacobian(lambda t: F.softmax(t, -1), x)
    s = softmax_np(arr(x), -1)
    expected = np.zeros((6, 6))
    for i in range(2):
        expected[3 * i : 3 * i + 3, 3 * i : 3 * i + 3] = np.diag(s[i]) - np.outer(s[i], s[i])
    assert_close(jac, expected)


def test_logsumexp_grad_is_softmax() -> None:
    x = leaf([[0.5, -1.0, 2.0], [0.0, 0.3, -0.2]])
    ag.logsumexp(x, 1).sum().backward()
    assert_close(x.grad, softmax_np(arr(x), 1))


# =====================================================================================
# Losses
# =====================================================================================
LOGITS = np.array([[1.0, -0.5, 0.3], [0.2, 0.1, -1.0], [-0.3, 2.0, 0.0], [0.5, 0.5, 1.5]])
TARGET = np.array([0, 2, 1, 2])


def onehot(t: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    return np.eye(n)[t]


def test_cross_entropy_grad_is_softmax_minus_onehot_over_n() -> None:
    x = leaf(LOGITS)
    F.cross_entropy(x, ag.tensor(TARGET)).backward()
    assert_close(x.grad, (softmax_np(LOGITS, 1) - onehot(TARGET, 3)) / 4)


def test_cross_entropy_sum_and_none() -> None:
    x = leaf(LOGITS)
    F.cross_entropy(x, ag.tensor(TARGET), reduction="sum").backward()
    assert_close(x.grad, softmax_np(LOGITS, 1) - onehot(TARGET, 3))
    x.grad = None
    per = F.cross_entropy(x, ag.tensor(TARGET), reduction="none")
    assert per.shape == (4,)
    assert_close(per, -np.log(softmax_np(LOGITS, 1)[np.arange(4), TARGET]))
    per.backward(ag.tensor([1.0, 0.0, 2.0, 0.0], dtype=ag.float64))
    expected = (softmax_np(LOGITS, 1) - onehot(TARGET, 3)) * np.array([[1.0], [0.0], [2.0], [0.0]])
    assert_close(x.grad, expected)


def test_cross_entropy_weight_and_ignore_index() -> None:
    w = np.array([0.5, 2.0, 1.5])
    t = np.array([0, -100, 1, 2])
    x = leaf(LOGITS)
    loss = F.cross_entropy(x, ag.tensor(t), weight=ag.tensor(w, dtype=ag.float64))
    loss.backward()
    keep = t != -100
    safe = np.where(keep, t, 0)
    coef = np.where(keep, w[safe], 0.0)
    p = softmax_np(LOGITS, 1)
    assert_close(loss, -(coef * np.log(p[np.arange(4), safe])).sum() / coef.sum())
    assert_close(x.grad, (p - onehot(safe, 3)) * coef[:, None] / coef.sum())


def test_cross_entropy_label_smoothing() -> None:
    eps = 0.2
    x = leaf(LOGITS)
    loss = F.cross_entropy(x, ag.tensor(TARGET), label_smoothing=eps)
    loss.backward()
    q = (1 - eps) * onehot(TARGET, 3) + eps / 3
    p = softmax_np(LOGITS, 1)
    assert_close(loss, -(q * np.log(p)).sum() / 4)
    assert_close(x.grad, (p - q) / 4)


def test_nll_loss_all_ignored_mean_is_nan_as_in_torch() -> None:
    x = leaf(np.log(softmax_np(LOGITS, 1)))
    loss = F.nll_loss(x, ag.tensor([-100, -100, -100, -100]))
    assert np.isnan(loss.item())


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({}, id="mean"),
        pytest.param({"reduction": "sum"}, id="sum"),
        pytest.param({"reduction": "none"}, id="none"),
        pytest.param({"label_smoothing": 0.1}, id="smoothing"),
        pytest.param({"ignore_index": 2, "reduction": "sum"}, id="ignore_index"),
        pytest.param(
            {"weight": [0.5, 2.0, 1.5], "ignore_index": 1, "label_smoothing": 0.3},
            id="weight_ignore_smoothing",
        ),
        pytest.param(
            {"weight": [0.5, 2.0, 1.5], "reduction": "none", "label_smoothing": 0.3},
            id="weight_none_smoothing",
        ),
    ],
)
def test_cross_entropy_matches_torch(kwargs: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    x = leaf(LOGITS)
    tx = torch.tensor(LOGITS, requires_grad=True)
    agkw = dict(kwargs)
    tkw = dict(kwargs)
    if "weight" in kwargs:
        agkw["weight"] = ag.tensor(kwargs["weight"], dtype=ag.float64)
        tkw["weight"] = torch.tensor(kwargs["weight"], dtype=torch.float64)
    loss = F.cross_entropy(x, ag.tensor(TARGET), **agkw)
    tloss = torch.nn.functional.cross_entropy(tx, torch.tensor(TARGET), **tkw)
    assert_close(loss, tloss.detach().numpy())
    g = np.linspace(0.5, 1.5, loss.numel()).reshape(loss.shape)
    loss.backward(ag.tensor(g, dtype=ag.float64))
    tloss.backward(torch.tensor(g))
    assert_close(x.grad, tx.grad.numpy())


def test_mse_loss_grad() -> None:
    x, y = leaf([1.0, 2.0, 4.0]), leaf([0.0, 2.5, 1.0])
    F.mse_loss(x, y).backward()
    assert_close(x.grad, 2 * (arr(x) - arr(y)) / 3)
    assert_close(y.grad, -2 * (arr(x) - arr(y)) / 3)


# =====================================================================================
# Non-differentiable points: torch's conventions
# =====================================================================================
def test_amax_ties_split_evenly() -> None:
    x = leaf([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    x.amax().backward()
    assert_close(x.grad, [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])
    x.grad = None
    x.amax(dim=1).sum().backward()
    assert_close(x.grad, [[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    x.grad = None
    x.amin(dim=-1, keepdim=True).sum().backward()
    assert_close(x.grad, [[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    x.grad = None
    x.max().backward()  # max() with no dim is amax over everything
    assert_close(x.grad, [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])


def test_max_with_dim_routes_grad_to_returned_index() -> None:
    x = leaf([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    values, indices = x.max(dim=1)
    assert indices.tolist() == [1, 0]
    assert indices.dtype == ag.int64
    assert not indices.requires_grad
    values.sum().backward()
    assert_close(x.grad, [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    x.grad = None
    res = x.min(dim=0, keepdim=True)
    assert res.values.shape == (1, 3)
    res.values.sum().backward()
    assert_close(x.grad, [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])


def test_maximum_and_minimum_ties_give_half_each() -> None:
    x, y = leaf([1.0, 2.0, 3.0]), leaf([1.0, 5.0, 3.0])
    ag.maximum(x, y).sum().backward()
    assert_close(x.grad, [0.5, 0.0, 0.5])
    assert_close(y.grad, [0.5, 1.0, 0.5])
    x.grad = y.grad = None
    ag.minimum(x, y).sum().backward()
    assert_close(x.grad, [0.5, 1.0, 0.5])
    assert_close(y.grad, [0.5, 0.0, 0.5])


def test_clamp_at_bounds_passes_grad() -> None:
    x = leaf([-2.0, -1.0, 0.0, 1.0, 2.0])
    x.clamp(-1.0, 1.0).sum().backward()
    assert_close(x.grad, [0.0, 1.0, 1.0, 1.0, 0.0])
    x.grad = None
    x.clamp(min=0.0).sum().backward()
    assert_close(x.grad, [0.0, 0.0, 1.0, 1.0, 1.0])
    x.grad = None
    x.clamp(max=0.0).sum().backward()
    assert_close(x.grad, [1.0, 1.0, 1.0, 0.0, 0.0])


def test_relu_abs_sign_at_zero() -> None:
    x = leaf([-1.0, 0.0, 2.0])
    (g_relu,) = ag.grad_sync(x.relu().sum(), x)
    (g_abs,) = ag.grad_sync(x.abs().sum(), x)
    (g_sign,) = ag.grad_sync(x.sign().sum(), x)
    assert_close(g_relu, [0.0, 0.0, 1.0])
    assert_close(g_abs, [-1.0, 0.0, 1.0])
    assert_close(g_sign, [0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    "name",
    ["maximum", "minimum", "amax", "amin", "max_dim", "clamp", "relu", "abs", "pow"],
)
def test_kink_conventions_match_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    xa = np.array([[0.0, 1.0, 1.0], [-1.0, 0.0, 0.0]])
    ya = np.array([[0.0, 1.0, 2.0], [-1.0, 0.0, 1.0]])
    fns = {
        "maximum": lambda m, x, y: m.maximum(x, y),
        "minimum": lambda m, x, y: m.minimum(x, y),
        "amax": lambda m, x, y: x.amax(1) * 2 + y.amax(),
        "amin": lambda m, x, y: x.amin(0) + y.amin(),
        "max_dim": lambda m, x, y: x.max(1).values + y.min(0).values.sum(),
        "clamp": lambda m, x, y: x.clamp(0.0, 1.0) + y.clamp(min=1.0),
        "relu": lambda m, x, y: x.relu() + y,
        "abs": lambda m, x, y: x.abs() * y,
        "pow": lambda m, x, y: x**0 * y + m.pow(x * x, y * y + 1.0),
    }
    fn = fns[name]
    x, y = leaf(xa), leaf(ya)
    tx, ty = (torch.tensor(a, requires_grad=True) for a in (xa, ya))
    fn(ag, x, y).sum().backward()
    fn(torch, tx, ty).sum().backward()
    assert_close(x.grad, tx.grad.numpy())
    assert_close(y.grad, ty.grad.numpy())


# =====================================================================================
# In place on views (CopySlices) and view grad_fn regeneration
# =====================================================================================
def test_inplace_mul_on_slice_of_nonleaf() -> None:
    w = leaf(np.ones(5))
    c = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    x = w * 1
    x[1:3].mul_(10)
    assert x.grad_fn.name() == "CopySlices"
    (x * ag.tensor(c, dtype=ag.float64)).sum().backward()
    assert_close(w.grad, c * np.array([1.0, 10.0, 10.0, 1.0, 1.0]))


def test_setitem_into_zeros_routes_grad_to_value() -> None:
    y = leaf([3.0, 4.0])
    b = ag.zeros(4, dtype=ag.float64)
    b[1:3] = y * 2
    assert b.requires_grad
    assert b.grad_fn is not None
    assert_close(b, [0.0, 6.0, 8.0, 0.0])
    (b * ag.tensor([1.0, 1.0, 1.0, 1.0], dtype=ag.float64)).sum().backward()
    assert_close(y.grad, [2.0, 2.0])


def test_setitem_advanced_index_routes_grad() -> None:
    w, v = leaf(np.arange(1.0, 5.0)), leaf([10.0, 20.0])
    x = w * 2
    x[ag.tensor([3, 0])] = v
    assert_close(x, [20.0, 4.0, 6.0, 10.0])
    (x * ag.tensor([1.0, 2.0, 3.0, 4.0], dtype=ag.float64)).sum().backward()
    assert_close(w.grad, [0.0, 4.0, 6.0, 0.0])
    assert_close(v.grad, [4.0, 1.0])


def test_inplace_on_view_with_another_input() -> None:
    w = leaf([[1.0, 2.0], [3.0, 4.0]])
    x = w * w
    row = x[0]
    row.mul_(w[1])  # the node of mul_ takes both the view's old value and w
    assert row._version == x._version == 1
    x.sum().backward()
    wa = arr(w)
    assert_close(w.grad, [2 * wa[0] * wa[1], wa[0] ** 2 + 2 * wa[1]])


def test_inplace_on_base_regenerates_view_grad_fn() -> None:
    w = leaf([1.0, 2.0, 3.0])
    x = w * 1
    v = x[:2]
    before = v.grad_fn
    assert before is not None
    x.mul_(ag.tensor([2.0, 3.0, 4.0], dtype=ag.float64))
    after = v.grad_fn
    assert after is not before
    assert after.name() == before.name()
    assert_close(v, [2.0, 6.0])
    v.sum().backward()
    assert_close(w.grad, [2.0, 3.0, 0.0])


def test_inplace_on_one_view_is_seen_by_another() -> None:
    w = leaf([1.0, 2.0, 3.0, 4.0])
    x = w * 1
    a, b = x[:2], x[1:]
    a.mul_(5)
    assert_close(b, [10.0, 3.0, 4.0])
    b.sum().backward()
    assert_close(w.grad, [0.0, 5.0, 1.0, 1.0])


def test_chained_views_with_inplace() -> None:
    w = leaf(np.arange(6.0).reshape(2, 3))
    x = w * 1
    x.t()[1].add_(ag.tensor([100.0, 200.0], dtype=ag.float64) * w[0, 0])
    (x * x).sum().backward()
    xv = arr(x)
    expected = 2 * xv
    expected[0, 0] += 2 * (xv[0, 1] * 100.0 + xv[1, 1] * 200.0)
    assert_close(w.grad, expected)


def test_unbind_and_split_outputs_are_views_of_input() -> None:
    x = leaf(np.arange(6.0).reshape(3, 2)) * 1
    rows = x.unbind()
    parts = x.split(2)
    assert all(r._base is x for r in rows)
    assert all(p._base is x for p in parts)
    assert [p.shape for p in parts] == [(2, 2), (1, 2)]


def test_grad_of_some_outputs_of_split() -> None:
    w = leaf(np.arange(5.0))
    *_, c = w.split([2, 1, 2])
    (c * 3).sum().backward()
    assert_close(w.grad, [0.0, 0.0, 0.0, 3.0, 3.0])


def test_getitem_repeated_indices_accumulate() -> None:
    w = leaf([1.0, 2.0, 3.0])
    w[ag.tensor([0, 2, 0, 0])].sum().backward()
    assert_close(w.grad, [3.0, 0.0, 1.0])
    w.grad = None
    w[[True, False, True]].sum().backward()
    assert_close(w.grad, [1.0, 0.0, 1.0])


def test_cast_round_trip_keeps_grad_dtype() -> None:
    w = leaf([1.0, 2.0])
    y = w.to(ag.float32)
    assert y.dtype == ag.float32
    assert y.grad_fn.name() == "CastBackward0"
    (y * 3).sum().backward()
    assert w.grad.dtype == ag.float64
    assert_close(w.grad, [3.0, 3.0])


def test_cast_to_int_leaves_the_graph() -> None:
    # Regression: .to(int64) used to record a CastBackward0 on an integer output.
    w = leaf([1.5, -2.5])
    i = w.to(ag.int64)
    assert i.dtype == ag.int64
    assert not i.requires_grad
    assert i.grad_fn is None
    assert not w.long().requires_grad
    assert not w.bool().requires_grad


def test_create_graph_through_cast() -> None:
    # Regression: the dtype fix-up of a rule's result called .astype on a Tensor.
    w = leaf([1.0, 2.0])
    (g,) = ag.grad_sync((w.float() ** 2).sum(), w, create_graph=True)
    assert g.dtype == ag.float64
    assert g.requires_grad
    (h,) = ag.grad_sync(g.sum(), w)
    assert_close(h, [2.0, 2.0])


def test_create_graph_through_pow_with_scalar_base() -> None:
    # Regression: the exponent's rule hands ops.where a Python bool condition.
    y = leaf([0.5, 1.0])
    (g,) = ag.grad_sync((2.0**y).sum(), y, create_graph=True)
    assert_close(g, 2.0 ** arr(y) * np.log(2.0))
    (h,) = ag.grad_sync(g.sum(), y)
    assert_close(h, 2.0 ** arr(y) * np.log(2.0) ** 2)


def test_silu_grad_at_large_magnitude_does_not_overflow() -> None:
    # Regression: the rule computed exp(-x), which overflows (a warning, an error here) for
    # x << 0; the limits are 0 and 1.
    x = ag.tensor([-1000.0, -100.0, 100.0, 1000.0], dtype=ag.float64, requires_grad=True)
    ag.silu(x).sum().backward()
    assert_close(x.grad, [0.0, 0.0, 1.0, 1.0], atol=1e-30)
    y = ag.tensor([-100.0, 100.0], requires_grad=True)  # float32 overflows sooner
    ag.silu(y).sum().backward()
    assert_close(y.grad, [0.0, 1.0], atol=1e-30)


def test_silu_grad_closed_form() -> None:
    x = leaf([-2.0, -0.5, 0.0, 0.7, 3.0])
    ag.silu(x).sum().backward()
    s = 1.0 / (1.0 + np.exp(-arr(x)))
    assert_close(x.grad, s * (1.0 + arr(x) * (1.0 - s)), rtol=1e-12)
