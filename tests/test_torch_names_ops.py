"""torch's names that ported code reaches for: Variable, view_as, var_mean/std_mean,
get_gradient_edge, the random ``*_like`` factories, ``Tensor.new_*``, ``Tensor.type()``,
``diagonal`` (a view), ``split_with_sizes``, ``data_ptr``, the constants, ``clip``, ``unique``,
the default dtype and the threads and warnings settings. Each against torch where installed,
and against finite differences or closed forms otherwise."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

RNG = np.random.default_rng(7)


def _torch() -> Any:
    return pytest.importorskip("torch", reason="compares with torch (pip install torch)")


def _t(a: Any, requires_grad: bool = True) -> ag.Tensor:
    return ag.tensor(a, dtype=ag.float64, requires_grad=requires_grad)


# ----- Variable -----
def test_variable_returns_a_tensor_sharing_data() -> None:
    x = ag.ones(2)
    v = ag.autograd.Variable(x, requires_grad=True)
    assert type(v) is ag.Tensor
    assert v is not x
    assert v.requires_grad
    assert v.is_leaf
    assert isinstance(x, ag.autograd.Variable)
    v.data.mul_(3.0)
    assert x.tolist() == [3.0, 3.0]
    assert ag.autograd.Variable().shape == (0,)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        ag.autograd.Variable([1.0])
    with pytest.warns(UserWarning, match="volatile was removed"):
        ag.autograd.Variable(x, volatile=True)


# ----- view_as, split_with_sizes, data_ptr -----
def test_view_as_and_split_with_sizes() -> None:
    x = _t(RNG.standard_normal((2, 6)))
    y = x.view_as(ag.zeros(3, 4))
    assert y.shape == (3, 4)
    assert y._base is x
    a, b = x.split_with_sizes([2, 4], 1)
    assert (a.shape, b.shape) == ((2, 2), (2, 4))
    (g,) = ag.grad_sync((a * 2).sum() + b.sum(), [x])
    assert g.tolist() == [[2.0, 2.0, 1.0, 1.0, 1.0, 1.0]] * 2
    assert [t.shape for t in ag.split_with_sizes(x, (1, 1))] == [(1, 6), (1, 6)]
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly"):
        x.split_with_sizes([2, 3], 1)
    with pytest.raises(TypeError, match="must be tuple of ints, but found int"):
        ag.split_with_sizes(x, 2)  # type: ignore[arg-type]


def test_data_ptr_is_the_first_elements_address() -> None:
    x = ag.zeros(3, 4)
    assert x.data_ptr() == x[0].data_ptr() == x.detach().data_ptr()
    assert x[1].data_ptr() - x.data_ptr() == 4 * x.element_size()
    assert x.clone().data_ptr() != x.data_ptr()


def test_constants() -> None:
    assert (ag.inf, ag.pi, ag.e) == (math.inf, math.pi, math.e)
    assert math.isnan(ag.nan)


# ----- var_mean, std_mean -----
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"dim": 1},
        {"dim": (0, 1), "keepdim": True},
        {"dim": 0, "correction": 0},
        {"keepdim": True},
    ],
    ids=str,
)
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_std_mean_are_the_pair(name: str, kwargs: dict[str, Any]) -> None:
    a = RNG.standard_normal((3, 4))
    x = _t(a)
    s, m = getattr(ag, name)(x, **kwargs)
    axis = kwargs.get("dim")
    keep = kwargs.get("keepdim", False)
    ddof = kwargs.get("correction", 1)
    want_s = (np.var if name == "var_mean" else np.std)(a, axis=axis, ddof=ddof, keepdims=keep)
    np.testing.assert_allclose(s.detach().numpy(), want_s)
    np.testing.assert_allclose(m.detach().numpy(), np.mean(a, axis=axis, keepdims=keep))
    assert gradcheck(lambda t: getattr(ag, name)(t, **kwargs), (x,))


def test_var_mean_matches_torch() -> None:
    torch = _torch()
    a = RNG.standard_normal((3, 4))
    for name in ("var_mean", "std_mean"):
        for kwargs in ({}, {"dim": 1, "keepdim": True}, {"dim": None, "keepdim": True}):
            ours = getattr(ag, name)(_t(a, False), **kwargs)
            theirs = getattr(torch, name)(torch.tensor(a), **kwargs)
            for o, t in zip(ours, theirs, strict=True):
                assert o.shape == tuple(t.shape)
                np.testing.assert_allclose(o.numpy(), t.numpy())
    ours = ag.var_mean(_t(a, False), True)  # var_mean(input, unbiased)
    assert ours[0].item() == pytest.approx(torch.var_mean(torch.tensor(a), True)[0].item())


# ----- get_gradient_edge -----
def test_get_gradient_edge() -> None:
    leaf = ag.ones(2, requires_grad=True)
    e = ag.autograd.graph.get_gradient_edge(leaf)
    assert isinstance(e, ag.autograd.graph.GradientEdge)
    assert type(e.node).__name__ == "AccumulateGrad"
    assert e.output_nr == 0
    y = leaf * 2
    _a, b = y.split(1)
    eb = ag.autograd.graph.get_gradient_edge(b)
    assert eb.node is b.grad_fn
    assert eb.output_nr == 1
    assert eb == (b.grad_fn, 1)
    with pytest.raises(RuntimeError, match="not possible to get the gradient edge for a Tensor"):
        ag.autograd.graph.get_gradient_edge(ag.ones(2))


# ----- rand_like, randn_like, randint_like -----
def test_random_like_factories() -> None:
    x = ag.zeros(3, 4, dtype=ag.float64)
    ag.manual_seed(0)
    r = ag.rand_like(x)
    assert r.shape == (3, 4)
    assert r.dtype == ag.float64
    assert 0 <= r.min().item() < 1
    assert ag.randn_like(x, dtype=ag.float32).dtype == ag.float32
    assert ag.randn_like(x, requires_grad=True).requires_grad
    i = ag.randint_like(x, 5)
    assert i.dtype == ag.float64
    assert i.min().item() >= 0
    assert i.max().item() < 5
    j = ag.randint_like(ag.zeros(100, dtype=ag.int64), 3, 5)
    assert j.dtype == ag.int64
    assert set(j.tolist()) <= {3, 4}
    with pytest.raises(TypeError, match="argument 'high' must be int, not float"):
        ag.randint_like(x, 5.5)  # type: ignore[arg-type]
    ag.manual_seed(1)
    a = ag.randn_like(x)
    ag.manual_seed(1)
    assert ag.randn(3, 4, dtype=ag.float64).tolist() == a.tolist()


# ----- Tensor.new_*, Tensor.type() -----
def test_new_factories_take_the_tensors_dtype_and_device() -> None:
    x = ag.zeros(2, dtype=ag.float64)
    for t, shape in [
        (x.new_zeros(2, 3), (2, 3)),
        (x.new_zeros((2, 3)), (2, 3)),
        (x.new_ones(4), (4,)),
        (x.new_empty((0,)), (0,)),
        (x.new_full((2,), 7), (2,)),
        (x.new_tensor([1, 2, 3]), (3,)),
        (x.new(2, 3), (2, 3)),
        (x.new(), (0,)),
        (x.new([1, 2]), (2,)),
    ]:
        assert t.shape == shape
        assert t.dtype == ag.float64
        assert t.device == x.device
    assert x.new_ones(2).tolist() == [1.0, 1.0]
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0]
    assert x.new_zeros(2, dtype=ag.int64).dtype == ag.int64
    assert x.new_ones(2, requires_grad=True).requires_grad
    src = ag.ones(2, requires_grad=True)
    c = x.new_tensor(src)
    assert not c.requires_grad
    assert c.dtype == ag.float64


def test_new_factories_match_torch() -> None:
    torch = _torch()
    calls = [
        ("new_zeros", (2, 3)),
        ("new_ones", ((4,),)),
        ("new_full", ((2,), 3)),
        ("new_tensor", ([1, 2],)),
    ]
    for name, args in calls:
        ours = getattr(ag.zeros(2, dtype=ag.float64), name)(*args)
        theirs = getattr(torch.zeros(2, dtype=torch.float64), name)(*args)
        assert ours.shape == tuple(theirs.shape)
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
        assert ours.tolist() == theirs.tolist()


def test_type_strings_are_torchs_and_convert() -> None:
    names = {
        ag.float32: "torch.FloatTensor",
        ag.float64: "torch.DoubleTensor",
        ag.float16: "torch.HalfTensor",
        ag.int64: "torch.LongTensor",
        ag.int32: "torch.IntTensor",
        ag.bool: "torch.BoolTensor",
    }
    for dt, name in names.items():
        assert ag.zeros(1, dtype=dt).type() == name
    x = ag.zeros(2)
    assert x.type(ag.float64).dtype == ag.float64
    assert x.type("torch.DoubleTensor").dtype == ag.float64
    assert x.type("asyncgrad.LongTensor").dtype == ag.int64
    assert x.type(ag.float32) is x
    with pytest.raises(ValueError, match=r"invalid type: 'torch\.FooTensor'"):
        x.type("torch.FooTensor")


def test_type_strings_match_torch() -> None:
    torch = _torch()
    for dt in ("float32", "float64", "float16", "int64", "int32", "bool"):
        assert ag.zeros(1, dtype=dt).type() == torch.zeros(1, dtype=getattr(torch, dt)).type()


# ----- diagonal -----
@pytest.mark.parametrize(
    ("shape", "offset", "dim1", "dim2"),
    [((3, 3), 0, 0, 1), ((3, 4), 1, 0, 1), ((4, 3), -2, 0, 1), ((2, 3, 4), 1, 0, 2),
     ((2, 3, 4), -1, 2, 1), ((2, 3, 4), 0, -1, -2), ((2, 3), 5, 0, 1)],
)  # fmt: skip
def test_diagonal_values_and_gradients(
    shape: tuple[int, ...], offset: int, dim1: int, dim2: int
) -> None:
    a = RNG.standard_normal(shape)
    x = _t(a)
    d = ag.diagonal(x, offset, dim1, dim2)
    np.testing.assert_array_equal(d.detach().numpy(), np.diagonal(a, offset, dim1, dim2))
    assert d._base is x
    assert gradcheck(lambda t: t.diagonal(offset, dim1, dim2) * 2.0, (x,))
    assert gradgradcheck(lambda t: t.diagonal(offset, dim1, dim2) ** 2, (x,))


def test_diagonal_matches_torch() -> None:
    torch = _torch()
    a = RNG.standard_normal((2, 3, 4))
    x, t = _t(a), torch.tensor(a, requires_grad=True)
    w = RNG.standard_normal((3, 2))
    ours = (ag.diagonal(x, 1, 0, 2) * ag.tensor(w)).sum()
    theirs = (torch.diagonal(t, 1, 0, 2) * torch.tensor(w)).sum()
    (g,) = ag.grad_sync(ours, [x])
    (h,) = torch.autograd.grad(theirs, [t])
    np.testing.assert_allclose(g.numpy(), h.numpy())


def test_diagonal_is_a_view_that_writes_through() -> None:
    a = ag.zeros(3, 3)
    d = a.diagonal()
    d += 1.0
    assert a.tolist() == np.eye(3).tolist()
    assert d._version == a._version == 1
    base = ag.ones(3)
    b = base.expand(3, 3).diagonal()  # of a broadcast view: each element once, as in torch
    b.add_(1.0)
    assert base.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        base.expand(3, 3).add_(1.0)


def test_in_place_on_a_diagonal_view_has_torchs_gradient() -> None:
    # torch: x = leaf * 1; x.diagonal().mul_(2) -> d x.sum() / d leaf = 2 on the diagonal
    leaf = ag.ones(3, 3, requires_grad=True)
    x = leaf * 1.0
    x.diagonal().mul_(2.0)
    (g,) = ag.grad_sync(x.sum(), [leaf])
    assert g.tolist() == (np.ones((3, 3)) + np.eye(3)).tolist()
    # and the view's graph follows an in-place change of its base
    x = leaf * 1.0
    d = x.diagonal()
    x.mul_(3.0)
    (g,) = ag.grad_sync(d.sum(), [leaf])
    assert g.tolist() == (3 * np.eye(3)).tolist()


def test_diagonal_errors() -> None:
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, -1"):
        ag.zeros(2, 2).diagonal(0, 1, -1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        ag.zeros(2, 2).diagonal(0, 0, 2)


# ----- clip, clip_ -----
def test_clip_is_clamp() -> None:
    x = _t([-2.0, 0.5, 3.0])
    assert ag.clip(x, -1, 1).tolist() == [-1.0, 0.5, 1.0]
    (g,) = ag.grad_sync(ag.clip(x, -1, 1).sum(), [x])
    assert g.tolist() == [0.0, 1.0, 0.0]
    y = x.detach().clone()
    assert y.clip_(max=0.0) is y
    assert y.tolist() == [-2.0, 0.0, 0.0]
    z = x.detach().clone()
    assert ag.clip_(z, min=0.0).tolist() == [0.0, 0.5, 3.0]


# ----- unique -----
def test_unique() -> None:
    u = ag.tensor([3, 1, 2, 3, 1])
    assert ag.unique(u).tolist() == [1, 2, 3]
    vals, inv, counts = u.unique(return_inverse=True, return_counts=True)
    assert (vals.tolist(), inv.tolist(), counts.tolist()) == ([1, 2, 3], [2, 0, 1, 2, 0], [2, 1, 2])
    assert inv.dtype == counts.dtype == ag.int64
    m = ag.tensor([[1.0, 2.0], [1.0, 2.0]])
    vals, inv = ag.unique(m, return_inverse=True)
    assert inv.shape == (2, 2)
    assert inv.tolist() == [[0, 1], [0, 1]]
    rows = ag.tensor([[1, 2], [1, 2], [0, 1]])
    vals, inv, counts = ag.unique(rows, dim=0, return_inverse=True, return_counts=True)
    assert vals.tolist() == [[0, 1], [1, 2]]
    assert inv.tolist() == [1, 1, 0]
    assert counts.tolist() == [1, 2]


def test_unique_matches_torch() -> None:
    torch = _torch()
    a = RNG.integers(0, 4, (3, 5))
    for kwargs in ({}, {"return_inverse": True, "return_counts": True}, {"dim": 1}):
        ours = ag.unique(ag.tensor(a), **kwargs)
        theirs = torch.unique(torch.tensor(a), **kwargs)
        ours = ours if isinstance(ours, tuple) else (ours,)
        theirs = theirs if isinstance(theirs, tuple) else (theirs,)
        for o, t in zip(ours, theirs, strict=True):
            assert o.tolist() == t.tolist()


# ----- set_default_dtype, get_default_dtype -----
@pytest.fixture
def restore_default_dtype() -> Iterator[None]:
    before = ag.get_default_dtype()
    yield
    ag.set_default_dtype(before)


@pytest.mark.usefixtures("restore_default_dtype")
def test_default_dtype_is_followed_by_floats_and_factories() -> None:
    assert ag.get_default_dtype() == ag.float32
    ag.set_default_dtype(ag.float64)
    assert ag.get_default_dtype() == ag.float64
    made = [
        ag.tensor(1.5),
        ag.tensor([1.0, 2.0]),
        ag.zeros(2),
        ag.ones(2),
        ag.empty(2),
        ag.rand(2),
        ag.randn(2),
        ag.full((2,), 1.5),
        ag.arange(0.0, 2.0),
        ag.linspace(0, 1, 3),
        ag.eye(2),
        ag.tensor([1]) * 1.5,
    ]
    assert [t.dtype for t in made] == [ag.float64] * len(made)
    assert ag.tensor([1]).dtype == ag.int64
    assert ag.zeros(2, dtype=ag.float32).dtype == ag.float32
    ag.set_default_dtype(ag.float32)
    assert ag.tensor(1.5).dtype == ag.zeros(2).dtype == (ag.tensor([1]) * 1.5).dtype == ag.float32
    with pytest.raises(TypeError, match="only floating-point types are supported as the default"):
        ag.set_default_dtype(ag.int64)


@pytest.mark.usefixtures("restore_default_dtype")
def test_default_dtype_matches_torch() -> None:
    torch = _torch()
    before = torch.get_default_dtype()
    try:
        for ours, theirs in ((ag.float64, torch.float64), (ag.float32, torch.float32)):
            ag.set_default_dtype(ours)
            torch.set_default_dtype(theirs)
            for call in ("tensor(1.5)", "zeros(2)", "arange(0.0, 2.0)", "tensor([1]) * 1.5"):
                a, t = eval(f"ag.{call}"), eval(f"torch.{call}")
                assert str(a.dtype) == str(t.dtype)[6:], call
    finally:
        torch.set_default_dtype(before)


# ----- set_num_threads, set_warn_always -----
def test_num_threads_are_the_engines_compute_threads() -> None:
    before = ag.get_num_threads()
    try:
        ag.set_num_threads(3)
        assert ag.get_num_threads() == 3 == ag.autograd.engine.compute_threads
    finally:
        ag.set_num_threads(before)
    with pytest.raises(RuntimeError, match="set_num_threads expects a positive integer, got 0"):
        ag.set_num_threads(0)


def test_warn_always_flag() -> None:
    assert ag.is_warn_always_enabled() is False
    try:
        ag.set_warn_always(True)
        assert ag.is_warn_always_enabled() is True
    finally:
        ag.set_warn_always(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ag.set_warn_always(False)  # warns about nothing


# ----- dtype names -----
def test_dtype_prints_as_numpys_and_tensors_as_asyncgrads() -> None:
    # Listed in the README's differences: ag.float64 is NumPy's dtype object.
    assert str(ag.float64) == "float64"
    assert "dtype=asyncgrad.float64" in repr(ag.zeros(1, dtype=ag.float64))


# ----- on a CUDA device -----
@pytest.mark.cuda
def test_names_on_a_cuda_device() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")
    x = ag.tensor([[3.0, 1.0], [3.0, 2.0]], device="cuda")
    vals, inv, counts = ag.unique(x, return_inverse=True, return_counts=True)
    assert vals.device == inv.device == counts.device == x.device
    assert (vals.tolist(), inv.tolist(), counts.tolist()) == (
        [1.0, 2.0, 3.0],
        [[2, 0], [2, 1]],
        [1, 1, 2],
    )
    assert x[1].data_ptr() - x.data_ptr() == 2 * x.element_size()
    assert x.type() == "torch.cuda.FloatTensor"
    assert x.type("torch.DoubleTensor").device.type == "cpu"
    assert x.new_zeros(2).device == ag.randn_like(x).device == x.device
    x.diagonal().add_(10.0)
    assert x.tolist() == [[13.0, 1.0], [3.0, 12.0]]
    leaf = ag.ones(3, 3, device="cuda", requires_grad=True)
    y = leaf * 1.0
    y.diagonal(1).mul_(3.0)
    (g,) = ag.grad_sync(y.sum(), [leaf])
    assert g.tolist() == (np.ones((3, 3)) + 2 * np.eye(3, k=1)).tolist()


def test_python_types_name_torchs_dtypes() -> None:
    # torch reads dtype=float as float64 (not the default dtype), int as int64, bool as bool.
    assert ag.zeros(1, dtype=float).dtype == ag.float64
    assert ag.ones(2).to(float).dtype == ag.float64
    assert ag.zeros(1, dtype=int).dtype == ag.int64
    assert ag.zeros(1, dtype=bool).dtype == ag.bool_
