"""Tensor basics: factories and dtypes, repr, conversions, views and versions, operators with
Python scalars and NumPy arrays, dtype promotion, and the errors users see."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag


def leaf(values: Any, dtype: Any = ag.float64) -> ag.Tensor:
    return ag.tensor(values, dtype=dtype, requires_grad=True)


# =====================================================================================
# Factories and dtypes
# =====================================================================================
@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        pytest.param(1.5, ag.float32, id="py_float"),
        pytest.param([1.0, 2.0], ag.float32, id="py_float_list"),
        pytest.param([[1, 2], [3, 4]], ag.int64, id="py_int_nested"),
        pytest.param(3, ag.int64, id="py_int"),
        pytest.param([True, False], ag.bool, id="py_bool"),
        pytest.param([1, 2.5], ag.float32, id="py_mixed"),
        pytest.param(np.array([1.0, 2.0]), ag.float64, id="np_float64_kept"),
        pytest.param(np.array([1, 2], dtype=np.int32), ag.int32, id="np_int32_kept"),
        pytest.param(np.float64(2.0), ag.float64, id="np_scalar_kept"),
    ],
)
def test_tensor_default_dtypes(data: Any, dtype: Any) -> None:
    assert ag.tensor(data).dtype == dtype


def test_tensor_dtype_argument_and_names() -> None:
    assert ag.tensor([1, 2], dtype=ag.float64).dtype == ag.float64
    assert ag.tensor([1.7], dtype=ag.int64).tolist() == [1]
    assert ag.tensor([1.0], dtype="float16").dtype == ag.float16
    assert ag.float == ag.float32
    assert ag.double == ag.float64
    assert ag.long == ag.int64


def test_tensor_copies_numpy_and_tensor_data() -> None:
    a = np.array([1.0, 2.0])
    t = ag.tensor(a)
    a[0] = 9.0
    assert t.tolist() == [1.0, 2.0]
    u = ag.tensor(t)
    t.array[1] = 5.0
    assert u.tolist() == [1.0, 2.0]


def test_from_numpy_shares_memory() -> None:
    a = np.array([1.0, 2.0, 3.0])
    t = ag.from_numpy(a)
    assert t.dtype == ag.float64
    a[0] = 7.0
    assert t.tolist() == [7.0, 2.0, 3.0]
    t.mul_(2)
    assert a.tolist() == [14.0, 4.0, 6.0]
    with pytest.raises(TypeError, match=r"expected np\.ndarray"):
        ag.from_numpy([1.0, 2.0])  # type: ignore[arg-type]


def test_as_tensor_shares_when_it_can() -> None:
    a = np.array([1.0, 2.0])
    t = ag.as_tensor(a)
    a[1] = 4.0
    assert t.tolist() == [1.0, 4.0]
    assert ag.as_tensor(t) is t
    converted = ag.as_tensor(a, dtype=ag.float32)
    assert converted.dtype == ag.float32
    a[0] = -1.0
    assert converted.tolist() == [1.0, 4.0]  # a converted copy
    assert ag.as_tensor([1, 2]).dtype == ag.int64
    assert ag.as_tensor(t, dtype=ag.float32).dtype == ag.float32


def test_shape_factories() -> None:
    assert ag.zeros(2, 3).shape == (2, 3)
    assert ag.zeros((2, 3)).dtype == ag.float32
    assert ag.ones(4).tolist() == [1.0] * 4
    assert ag.empty(0, 3).shape == (0, 3)
    assert ag.full((2,), 3).dtype == ag.int64
    assert ag.full((2,), 3.0).tolist() == [3.0, 3.0]
    assert ag.full((2,), True).dtype == ag.bool
    assert ag.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert ag.arange(3).dtype == ag.int64
    assert ag.arange(0.0, 1.0, 0.5).tolist() == [0.0, 0.5]
    assert ag.linspace(0, 1, 3).tolist() == [0.0, 0.5, 1.0]
    z = ag.zeros(2, dtype=ag.float64, requires_grad=True)
    assert z.requires_grad
    assert z.is_leaf


def test_like_factories_keep_dtype_and_shape() -> None:
    t = ag.tensor([[1, 2, 3]])
    assert ag.zeros_like(t).dtype == ag.int64
    assert ag.ones_like(t, dtype=ag.float64).dtype == ag.float64
    f = ag.full_like(t, 7)
    assert f.shape == (1, 3)
    assert f.tolist() == [[7, 7, 7]]


def test_random_factories_are_seeded() -> None:
    ag.manual_seed(3)
    a = ag.randn(4)
    ag.manual_seed(3)
    b = ag.randn(4)
    assert a.tolist() == b.tolist()
    assert a.dtype == ag.float32
    assert ag.rand(2, dtype=ag.float64).dtype == ag.float64
    r = ag.randint(0, 5, (100,))
    assert r.dtype == ag.int64
    assert r.array.min() >= 0
    assert r.array.max() < 5
    g = ag.Generator().manual_seed(1)
    h = ag.Generator().manual_seed(1)
    assert ag.rand(3, generator=g).tolist() == ag.rand(3, generator=h).tolist()


# =====================================================================================
# repr and conversions
# =====================================================================================
def test_repr() -> None:
    assert repr(ag.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(ag.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(ag.tensor(1.5)).startswith("tensor(1.5")
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    assert repr(x * 1) == "tensor([1., 2.], grad_fn=<MulBackward0>)"
    assert repr(x.sum()) == "tensor(3., grad_fn=<SumBackward0>)"
    d = ag.tensor([1.0, 2.0], dtype=ag.float64)
    assert repr(d) == "tensor([1., 2.], dtype=asyncgrad.float64)"
    assert (
        repr(d.requires_grad_()) == "tensor([1., 2.], dtype=asyncgrad.float64, requires_grad=True)"
    )
    assert "dtype=asyncgrad.int32" in repr(ag.tensor([1], dtype=ag.int32))
    assert "size=(0, 2)" in repr(ag.zeros(0, 2))


def test_repr_of_zero_dim_grad() -> None:
    # Regression: a 0-d leaf's .grad held a NumPy scalar, whose repr failed.
    x = ag.tensor(1.5, requires_grad=True)
    (x * 3).backward()
    assert type(x.grad.array) is np.ndarray
    assert repr(x.grad) == "tensor(3.)"


def test_numpy_raises_for_requires_grad() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"requires grad.*detach\(\)\.numpy\(\)"):
        x.numpy()
    with pytest.raises(RuntimeError, match="requires grad"):
        (x * 2).numpy()
    n = x.detach().numpy()
    assert isinstance(n, np.ndarray)
    assert np.shares_memory(n, x.array)


def test_item_and_tolist() -> None:
    assert ag.tensor(3.5).item() == 3.5
    assert type(ag.tensor(3).item()) is int
    assert type(ag.tensor(True).item()) is bool
    assert ag.tensor([[2.0]]).item() == 2.0
    assert leaf(1.25).item() == 1.25  # item() works on a tensor that requires grad
    with pytest.raises(RuntimeError, match="2 elements cannot be converted to Scalar"):
        ag.tensor([1.0, 2.0]).item()
    assert ag.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert ag.tensor(2.0).tolist() == 2.0
    assert float(ag.tensor([4.0])) == 4.0
    assert int(ag.tensor(7)) == 7


def test_dunder_array() -> None:
    t = ag.tensor([1.0, 2.0])
    a = np.asarray(t)
    assert a.dtype == np.float32
    assert np.shares_memory(a, t.array)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t).tolist() == [1.0, 2.0]
    assert np.array(t, copy=True) is not t.array


def test_dlpack_round_trip() -> None:
    t = ag.tensor([1.0, 2.0, 3.0])
    n = np.from_dlpack(t)
    assert np.shares_memory(n, t.array)
    n[0] = 10.0
    assert t.tolist() == [10.0, 2.0, 3.0]
    back = ag.from_dlpack(n)
    assert isinstance(back, ag.Tensor)
    assert np.shares_memory(back.array, n)
    assert ag.from_dlpack(t) is t
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU
    with pytest.raises(RuntimeError, match="requires grad"):
        np.from_dlpack(leaf([1.0]))


def test_attributes() -> None:
    t = ag.zeros(2, 3, 4)
    assert t.ndim == t.dim() == 3
    assert t.size() == (2, 3, 4)
    assert t.size(-1) == 4
    assert t.numel() == 24
    assert t.T.shape == (4, 3, 2)
    assert t.mT.shape == (2, 4, 3)
    assert str(t.device) == "cpu"
    assert len(t) == 2
    assert t.array is t.array


# =====================================================================================
# Views, versions, detach
# =====================================================================================
def test_views_share_version_counter_and_set_base() -> None:
    t = ag.tensor([1.0, 2.0, 3.0, 4.0])
    views = [t[1:3], t.view(2, 2), t.view(2, 2).t(), t.reshape(4, 1), t.unsqueeze(0), t[None]]
    for v in views:
        assert v._base is t
        assert v._is_view()
    assert not t._is_view()
    assert t._base is None
    assert t._version == 0
    views[0].add_(1)
    assert t.tolist() == [1.0, 3.0, 4.0, 4.0]
    assert {v._version for v in views} == {t._version} == {1}


def test_view_of_view_has_the_root_base() -> None:
    t = ag.tensor([[1.0, 2.0], [3.0, 4.0]])
    vv = t[0][1:]
    assert vv._base is t
    vv.mul_(10)
    assert t.tolist() == [[1.0, 20.0], [3.0, 4.0]]


def test_copies_are_not_views() -> None:
    t = ag.tensor([1.0, 2.0, 3.0])
    for c in [t.clone(), t[ag.tensor([0, 1])], t[[True, False, True]], t * 1]:
        assert c._base is None
        assert not np.shares_memory(c.array, t.array)


def test_detach_shares_storage_and_version_counter() -> None:
    x = leaf([1.0, 2.0])
    d = x.detach()
    assert not d.requires_grad
    assert d.grad_fn is None
    assert np.shares_memory(d.array, x.array)
    d.mul_(2)
    assert x._version == d._version == 1
    assert x.tolist() == [2.0, 4.0]


def test_detach_makes_saved_tensor_check_fire() -> None:
    x = leaf([1.0, 2.0])
    y = x * 1
    z = y * y
    y.detach().add_(1)  # same storage and version counter: the saved y is stale
    with pytest.raises(RuntimeError, match=r"MulBackward0.*version 1; expected version 0"):
        z.sum().backward()


def test_inplace_ops_bump_version() -> None:
    t = ag.tensor([1.0, 2.0])
    ops = [
        lambda: t.add_(1),
        lambda: t.sub_(1),
        lambda: t.mul_(2),
        lambda: t.div_(2),
        lambda: t.pow_(1),
        lambda: t.clamp_(-5, 5),
        lambda: t.relu_(),
        lambda: t.fill_(1.0),
        lambda: t.zero_(),
        lambda: t.copy_(ag.tensor([3.0, 4.0])),
        lambda: t.masked_fill_(ag.tensor([True, False]), 0.0),
        lambda: t.__setitem__(0, 5.0),
    ]
    for i, op in enumerate(ops, start=1):
        op()
        assert t._version == i
    t += 1
    t -= 1
    t *= 2
    t /= 2
    assert t._version == len(ops) + 4


def test_requires_grad_flags() -> None:
    x = ag.tensor([1.0, 2.0])
    assert not x.requires_grad
    assert x.requires_grad_() is x
    assert x.requires_grad
    assert x.is_leaf
    y = x * 2
    assert y.requires_grad
    assert not y.is_leaf
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad_(False)
    with ag.no_grad():
        z = x * 2
    assert not z.requires_grad


# =====================================================================================
# Operators: comparisons, Python scalars and NumPy arrays on either side
# =====================================================================================
def test_comparisons_give_bool_without_grad() -> None:
    x = leaf([1.0, 2.0, 3.0])
    for c in [x == 2, x != 2, x < 2, x <= 2, x > 2, x >= 2, ag.isnan(x), ag.isfinite(x)]:
        assert c.dtype == ag.bool
        assert not c.requires_grad
        assert c.grad_fn is None
    assert (x > 1.5).tolist() == [False, True, True]
    assert (2 < x).tolist() == [False, False, True]
    assert (x == x * 1).tolist() == [True, True, True]
    assert ag.isnan(ag.tensor([1.0, float("nan")])).tolist() == [False, True]
    assert ag.isfinite(ag.tensor([float("inf"), 0.0])).tolist() == [False, True]


@pytest.mark.parametrize(
    ("expr", "expected", "grad"),
    [
        pytest.param(lambda t: 2 - t, [1.0, 0.0], [-1.0, -1.0], id="rsub"),
        pytest.param(lambda t: 2 + t, [3.0, 4.0], [1.0, 1.0], id="radd"),
        pytest.param(lambda t: 3 * t, [3.0, 6.0], [3.0, 3.0], id="rmul"),
        pytest.param(lambda t: 2 / t, [2.0, 1.0], [-2.0, -0.5], id="rtruediv"),
        pytest.param(lambda t: 2**t, [2.0, 4.0], [2 * np.log(2), 4 * np.log(2)], id="rpow"),
        pytest.param(lambda t: t**2, [1.0, 4.0], [2.0, 4.0], id="pow"),
        pytest.param(lambda t: -t, [-1.0, -2.0], [-1.0, -1.0], id="neg"),
        pytest.param(lambda t: abs(-t), [1.0, 2.0], [1.0, 1.0], id="abs"),
        pytest.param(lambda t: t - 0.5, [0.5, 1.5], [1.0, 1.0], id="sub_scalar"),
        pytest.param(lambda t: t / 2, [0.5, 1.0], [0.5, 0.5], id="truediv_scalar"),
        pytest.param(
            lambda t: np.array([1.0, 3.0]) * t, [1.0, 6.0], [1.0, 3.0], id="np_array_rmul"
        ),
        pytest.param(
            lambda t: np.array([1.0, 3.0]) - t, [0.0, 1.0], [-1.0, -1.0], id="np_array_rsub"
        ),
        pytest.param(lambda t: t * np.array([1.0, 3.0]), [1.0, 6.0], [1.0, 3.0], id="np_array_mul"),
        pytest.param(
            lambda t: np.array([[1.0, 0.0], [1.0, 1.0]]) @ t,
            [1.0, 3.0],
            [2.0, 1.0],
            id="np_rmatmul",
        ),
        pytest.param(lambda t: np.exp(t), np.exp([1.0, 2.0]), np.exp([1.0, 2.0]), id="np_ufunc"),
    ],
)
def test_operators_with_scalars_and_arrays(expr: Any, expected: Any, grad: Any) -> None:
    t = leaf([1.0, 2.0])
    out = expr(t)
    assert isinstance(out, ag.Tensor)
    assert out.requires_grad
    np.testing.assert_allclose(out.array, expected)
    out.sum().backward()
    np.testing.assert_allclose(t.grad.array, grad)


def test_floor_divide_and_remainder_operators() -> None:
    t = ag.tensor([7, -7])
    assert (t // 2).tolist() == [3, -4]
    assert (t % 3).tolist() == [1, 2]
    assert (10 // ag.tensor([3, 4])).tolist() == [3, 2]
    assert (10 % ag.tensor([3, 4])).tolist() == [1, 2]


def test_inplace_operators_keep_identity() -> None:
    t = ag.tensor([1.0, 2.0])
    before = t
    t += 1
    t *= ag.tensor([2.0, 3.0])
    assert t is before
    assert t.tolist() == [4.0, 9.0]


@pytest.mark.parametrize(
    ("a", "b", "dtype"),
    [
        pytest.param(ag.tensor([1, 2]), 2.5, ag.float32, id="int_tensor_py_float"),
        pytest.param(ag.tensor([True, False]), 2.5, ag.float32, id="bool_tensor_py_float"),
        pytest.param(ag.tensor([1, 2]), 3, ag.int64, id="int_tensor_py_int"),
        pytest.param(ag.tensor([1.0, 2.0]), 3, ag.float32, id="float_tensor_py_int"),
        pytest.param(ag.tensor([1.0], dtype=ag.float64), 2.5, ag.float64, id="f64_py_float"),
        pytest.param(ag.tensor([1.0], dtype=ag.float16), 2.5, ag.float16, id="f16_py_float"),
        pytest.param(ag.tensor([1, 2]), ag.tensor([1.0, 2.0]), ag.float32, id="int64_float32"),
        pytest.param(
            ag.tensor([1], dtype=ag.int32), ag.tensor([1], dtype=ag.int64), ag.int64, id="i32_i64"
        ),
        pytest.param(
            ag.tensor([1.0]), ag.tensor([1.0], dtype=ag.float64), ag.float64, id="f32_f64"
        ),
        pytest.param(
            ag.tensor([1.0], dtype=ag.float16), ag.tensor([1.0]), ag.float32, id="f16_f32"
        ),
        pytest.param(ag.tensor([True]), ag.tensor([2]), ag.int64, id="bool_int64"),
        pytest.param(
            ag.tensor([1, 2]), ag.tensor(1.5, dtype=ag.float64), ag.float64, id="int_f64_0d"
        ),
        pytest.param(
            ag.tensor([1.0, 2.0]),
            ag.tensor(1.5, dtype=ag.float64),
            ag.float32,
            id="f32_f64_0d",
        ),
        pytest.param(ag.tensor([1, 2], dtype=ag.int32), ag.tensor(3), ag.int32, id="i32_i64_0d"),
        pytest.param(
            ag.tensor(2.0, dtype=ag.float64), ag.tensor([1.0, 2.0]), ag.float32, id="f64_0d_left"
        ),
    ],
)
def test_dtype_promotion(a: Any, b: Any, dtype: Any) -> None:
    # Regression for the Python-float cases: `np.dtype(None) == float64` made every Python
    # scalar look like a float64 operand, so int tensors times floats gave float64.
    assert (a + b).dtype == dtype
    assert (b * a).dtype == dtype


def test_true_division_of_ints_is_float32() -> None:
    assert (ag.tensor([1, 2]) / 2).dtype == ag.float32
    assert (ag.tensor([1, 2], dtype=ag.int32) / ag.tensor([2, 4])).dtype == ag.float32


def test_grad_of_mixed_dtype_op_has_each_inputs_dtype() -> None:
    a = leaf([1.0, 2.0], dtype=ag.float32)
    b = leaf([3.0, 4.0], dtype=ag.float64)
    (a * b).sum().backward()
    assert a.grad.dtype == ag.float32
    assert b.grad.dtype == ag.float64
    np.testing.assert_allclose(a.grad.array, [3.0, 4.0])


# =====================================================================================
# Errors
# =====================================================================================
def test_inplace_on_leaf_that_requires_grad() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x[0] = 3.0
    assert x._version == 0
    assert x.tolist() == [1.0, 2.0]
    with ag.no_grad():
        x.add_(1)  # allowed outside grad mode, as in torch
    assert x.tolist() == [2.0, 3.0]


def test_inplace_on_view_of_leaf() -> None:
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[1:].mul_(2)
    assert x.tolist() == [1.0, 2.0, 3.0]


def test_saved_tensor_modified_in_place_names_node_and_versions() -> None:
    x = leaf([1.0, 2.0])
    a = x * 1
    b = a.exp()  # saves its output b
    c = b * 2
    b.add_(1)
    with pytest.raises(
        RuntimeError,
        match=r"modified by an inplace operation.*output of ExpBackward0, is at version 1; "
        r"expected version 0",
    ):
        c.sum().backward()
    y = x * 1
    z = y * y  # saves its input y
    y.mul_(3)
    y.mul_(3)
    with pytest.raises(
        RuntimeError, match=r"input of MulBackward0, is at version 2; expected version 0"
    ):
        z.sum().backward()


def test_backward_a_second_time() -> None:
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(
        RuntimeError, match=r"backward through the graph a second time.*MulBackward0"
    ):
        y.backward()
    y2 = (x * x).sum()
    y2.backward(retain_graph=True)
    y2.backward()
    np.testing.assert_allclose(x.grad.array, [2.0 + 2 * 2, 4.0 + 2 * 4])


def test_backward_of_nonscalar_without_gradient() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(
        RuntimeError, match="grad can be implicitly created only for scalar outputs"
    ):
        (x * 2).backward()


def test_gradient_of_wrong_shape() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"Mismatch in shape.*\(3,\).*\(2,\)"):
        (x * 2).backward(ag.ones(3))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        ag.grad_sync(x * 2, x, ag.ones(2, 1))
    assert x.grad is None


def test_gradient_of_other_float_dtype_is_cast() -> None:
    x = leaf([1.0, 2.0])
    (x * 2).backward(ag.ones(2, dtype=ag.float32))
    assert x.grad.dtype == ag.float64
    with pytest.raises(RuntimeError, match="expected a floating dtype"):
        (x * 2).backward(ag.ones(2, dtype=ag.int64))


def test_backward_of_tensor_that_does_not_require_grad() -> None:
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        ag.tensor([1.0, 2.0]).sum().backward()
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match=r"inputs\[1\].*does not require grad"):
        ag.grad_sync((x * 2).sum(), [x, ag.ones(1)])


def test_grad_of_unused_input() -> None:
    x, unused = leaf([1.0, 2.0]), leaf([3.0])
    out = (x * 2).sum()
    with pytest.raises(RuntimeError, match=r"inputs\[1\].*not have been used in the graph"):
        ag.grad_sync(out, [x, unused], retain_graph=True)
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        ag.grad_sync(out, [x, unused], retain_graph=True, allow_unused=False)
    gx, gu = ag.grad_sync(out, [x, unused], retain_graph=True, allow_unused=True)
    assert gu is None
    np.testing.assert_allclose(gx.array, [2.0, 2.0])
    _, gz = ag.grad_sync(out, [x, unused], materialize_grads=True)
    assert gz.tolist() == [0.0]


def test_requires_grad_on_int_tensor() -> None:
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require"):
        ag.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        ag.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        ag.zeros(2, dtype=ag.int64, requires_grad=True)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        pytest.param(
            lambda: ag.ones(2, 3) @ ag.ones(2, 3),
            r"cannot be multiplied \(2x3 and 2x3\)",
            id="matmul",
        ),
        pytest.param(lambda: ag.ones(3) @ ag.ones(4), "cannot be multiplied", id="matmul_1d"),
        pytest.param(lambda: ag.matmul(ag.ones(()), ag.ones(2)), "at least 1D", id="matmul_0d"),
        pytest.param(lambda: ag.mm(ag.ones(2), ag.ones(2, 2)), "2-D", id="mm_1d"),
        pytest.param(
            lambda: ag.cat([ag.ones(2, 3), ag.ones(2, 2)]),
            "Sizes of tensors must match except in dimension 0",
            id="cat",
        ),
        pytest.param(lambda: ag.stack([ag.ones(2), ag.ones(3)]), "equal size", id="stack"),
        pytest.param(
            lambda: ag.ones(2, 3).view(4),
            r"shape '\[4\]' is invalid for input of size 6",
            id="view",
        ),
        pytest.param(
            lambda: ag.ones(2, 3).t().view(6), "view size is not compatible", id="view_strides"
        ),
        pytest.param(
            lambda: ag.ones(6).reshape(-1, -1), "only one dimension", id="reshape_two_inferred"
        ),
        pytest.param(
            lambda: ag.ones(3) + ag.ones(2),
            r"size of tensor a \(3\) must match the size of tensor b \(2\) at non-singleton "
            "dimension 0",
            id="broadcast",
        ),
        pytest.param(lambda: ag.ones(2).expand(3), "expanded size", id="expand"),
        pytest.param(lambda: ag.ones(4).split([1, 2]), "sum exactly to 4", id="split_sizes"),
    ],
)
def test_shape_errors(fn: Any, match: str) -> None:
    with pytest.raises(RuntimeError, match=match):
        fn()


def test_cat_of_no_tensors_is_a_value_error() -> None:
    # torch 2.13 raises ValueError here (the other shape errors are RuntimeErrors)
    with pytest.raises(ValueError, match="expected a non-empty list of Tensors"):
        ag.cat([])


def test_broadcast_error_in_backward_graph_leaves_no_grad() -> None:
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="must match the size"):
        x * ag.ones(2, dtype=ag.float64)
    assert x.grad is None


def test_zero_dim_leaf_used_three_times() -> None:
    # Regression: NumPy arithmetic on 0-d arrays gives scalars; summing a third gradient into
    # such a scalar with out= failed, and .grad held a scalar.
    x = ag.tensor(1.5, dtype=ag.float64, requires_grad=True)
    (x * 2 + x * 3 + x * 4).backward()
    assert type(x.grad.array) is np.ndarray
    assert x.grad.item() == 9.0


def test_dim_out_of_range_is_index_error() -> None:
    with pytest.raises(IndexError, match="Dimension out of range"):
        ag.ones(2).sum(2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        ag.ones(2, 3).transpose(0, 3)


def test_numpy_scalars_act_like_python_numbers() -> None:
    x = ag.ones(2, requires_grad=True)
    y = x * np.float64(3.0)
    assert y.dtype == ag.float32
    assert (np.float64(2.0) - x).dtype == ag.float32
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
