"""Tensor behaviour as torch's: dtype checks of the matmul family, ``Size``, repr, pickling."""

from __future__ import annotations

import copy
import multiprocessing
import multiprocessing.pool
import operator
import pickle
import re
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

TORCH_REASON = "compares with torch (pip install '.[bench]')"


def _torch() -> Any:
    return pytest.importorskip("torch", reason=TORCH_REASON)


def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")


# ============================================================================= matmul dtypes

# (name, shape of x, dtype of x, shape of y, dtype of y): every kernel torch dispatches
# matmul to (dot, addmv, mm, bmm), with operands of two dtypes.
F32, F64, F16, I64, I32, B = "float32", "float64", "float16", "int64", "int32", "bool"
MATMUL_CASES = [
    ("mm_long_float", (2, 3), I64, (3, 2), F32),
    ("mm_float_long", (2, 3), F32, (3, 2), I64),
    ("mm_bool_float", (2, 3), B, (3, 2), F32),
    ("mm_half_double", (2, 3), F16, (3, 2), F64),
    ("mm_int_long", (2, 3), I32, (3, 2), I64),
    ("vec_mat", (3,), I64, (3, 2), F32),
    ("mat_vec", (2, 3), F32, (3,), I64),
    ("batch_vec", (2, 2, 3), F32, (3,), F64),
    ("dot", (3,), F32, (3,), F64),
    ("batch_mat", (2, 2, 3), F32, (3, 2), F64),
    ("batch_batch", (2, 2, 3), F32, (2, 3, 2), F64),
    ("mat_batch", (2, 3), F32, (2, 3, 2), F64),
    ("vec_batch", (3,), F32, (2, 3, 2), F64),
    ("4d", (2, 2, 2, 3), F64, (2, 2, 3, 2), F32),
]
MATMUL_MESSAGES = {
    "mm_long_float": "expected m1 and m2 to have the same dtype, but got: long int != float",
    "mm_float_long": "expected m1 and m2 to have the same dtype, but got: float != long int",
    "mm_bool_float": "expected m1 and m2 to have the same dtype, but got: bool != float",
    "mm_half_double": "expected m1 and m2 to have the same dtype, but got: c10::Half != double",
    "mm_int_long": "expected m1 and m2 to have the same dtype, but got: int != long int",
    "vec_mat": "expected m1 and m2 to have the same dtype, but got: long int != float",
    "mat_vec": "addmv input tensors must have the same dtype, but got Long, Float, and Long",
    "batch_vec": "addmv input tensors must have the same dtype, but got Double, Float, and Double",
    "dot": "dot : expected both vectors to have same dtype, but found Float and Double",
    "batch_mat": "expected m1 and m2 to have the same dtype, but got: float != double",
    "batch_batch": "expected scalar type Float but found Double",
    "mat_batch": "expected scalar type Float but found Double",
    "vec_batch": "expected scalar type Float but found Double",
    "4d": "expected scalar type Double but found Float",
}


def _ones(m: Any, shape: tuple[int, ...], dtype: str) -> Any:
    return m.ones(*shape, dtype=getattr(m, dtype))


@pytest.mark.parametrize(("name", "xs", "xd", "ys", "yd"), MATMUL_CASES, ids=lambda c: str(c))
def test_matmul_of_two_dtypes_raises_as_torch(
    name: str, xs: tuple[int, ...], xd: str, ys: tuple[int, ...], yd: str
) -> None:
    x, y = _ones(ag, xs, xd), _ones(ag, ys, yd)
    message = MATMUL_MESSAGES[name]
    for f in (operator.matmul, ag.matmul, ag.Tensor.matmul):
        with pytest.raises(RuntimeError, match=re.escape(message)):
            f(x, y)


@pytest.mark.parametrize(("name", "xs", "xd", "ys", "yd"), MATMUL_CASES, ids=lambda c: str(c))
def test_matmul_messages_are_torchs(
    name: str, xs: tuple[int, ...], xd: str, ys: tuple[int, ...], yd: str
) -> None:
    torch = _torch()
    with pytest.raises(RuntimeError) as info:
        _ones(torch, xs, xd) @ _ones(torch, ys, yd)
    assert str(info.value) == MATMUL_MESSAGES[name]


def test_mm_bmm_and_linear_of_two_dtypes_raise_as_torch() -> None:
    f32, f64 = ag.ones(2, 3), ag.ones(2, 3, dtype=ag.float64)
    expected = {
        "mm": (
            lambda: ag.mm(f64, f32.t()),
            "expected m1 and m2 to have the same dtype, but got: double != float",
        ),
        "bmm": (
            lambda: ag.bmm(f64[None], f32.t()[None]),
            "expected scalar type Double but found Float",
        ),
        "linear_no_bias": (
            lambda: F.linear(f64, f32),
            "expected m1 and m2 to have the same dtype, but got: double != float",
        ),
        "linear": (
            lambda: F.linear(f64, f32, ag.ones(2)),
            "mat1 and mat2 must have the same dtype, but got Double and Float",
        ),
        "linear_int": (
            lambda: F.linear(ag.ones(2, 3, dtype=ag.int64), f32, ag.ones(2)),
            "mat1 and mat2 must have the same dtype, but got Long and Float",
        ),
        "linear_bias": (
            lambda: F.linear(f32, f32, ag.ones(2, dtype=ag.float64)),
            "self and mat2 must have the same dtype, but got Double and Float",
        ),
        "linear_weight": (
            lambda: F.linear(f32, f64, ag.ones(2)),
            "self and mat2 must have the same dtype, but got Float and Double",
        ),
        "linear_1d": (
            lambda: F.linear(ag.ones(3, dtype=ag.float64), f32, ag.ones(2)),
            "mat1 and mat2 must have the same dtype, but got Double and Float",
        ),
        "linear_3d": (
            lambda: F.linear(ag.ones(4, 2, 3, dtype=ag.float64), f32),
            "expected m1 and m2 to have the same dtype, but got: double != float",
        ),
    }
    for name, (f, message) in expected.items():
        with pytest.raises(RuntimeError, match=re.escape(message)):
            f()
        assert name


def test_float64_batch_into_a_float32_linear_raises_and_changes_nothing() -> None:
    lin = nn.Linear(3, 2)
    before = [p.detach().clone() for p in lin.parameters()]
    x = ag.ones(4, 3, dtype=ag.float64, requires_grad=True)
    with pytest.raises(
        RuntimeError, match=re.escape("mat1 and mat2 must have the same dtype, but got Double")
    ):
        lin(x)
    with pytest.raises(RuntimeError, match="m1 and m2"):
        nn.Linear(3, 2, bias=False)(x)
    assert all(ag.equal(p, q) for p, q in zip(lin.parameters(), before, strict=True))
    assert lin(x.float()).dtype == ag.float32


def test_linear_messages_are_torchs() -> None:
    torch = _torch()
    tf = torch.nn.functional
    f32, f64 = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64)
    cases = [
        ((f64, f32, torch.ones(2)), "mat1 and mat2 must have the same dtype, but got Double"),
        ((f32, f32, torch.ones(2, dtype=torch.float64)), "self and mat2 must have the same"),
        ((f32, f64, torch.ones(2)), "self and mat2 must have the same dtype, but got Float"),
        ((f64, f32), "expected m1 and m2 to have the same dtype, but got: double != float"),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=re.escape(message)):
            tf.linear(*args)
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        torch.bmm(f64[None], f32.t()[None])


def test_same_dtypes_and_elementwise_ops_still_work() -> None:
    a, b = ag.ones(2, 3, dtype=ag.int64), ag.ones(3, 2, dtype=ag.int64)
    assert (a @ b).dtype == ag.int64
    assert (a @ b).tolist() == [[3, 3], [3, 3]]
    # Elementwise ops promote, as torch's.
    assert (a + ag.ones(2, 3)).dtype == ag.float32
    assert (ag.ones(2, dtype=ag.float64) * ag.ones(2)).dtype == ag.float64
    x = ag.ones(2, 3, dtype=ag.float64, requires_grad=True)
    (x @ ag.ones(3, 2, dtype=ag.float64)).sum().backward()
    assert x.grad is not None
    assert x.grad.dtype == ag.float64


# ============================================================================= Size


def test_shape_and_size_are_a_size() -> None:
    t = ag.zeros(2, 3)
    s = t.shape
    assert type(s) is ag.Size
    assert type(t.size()) is ag.Size
    assert isinstance(s, tuple)
    assert s == (2, 3)
    assert (2, 3) == s
    assert s == t.size()
    assert s != (3, 2)
    assert hash(s) == hash((2, 3))
    assert {s: 1}[(2, 3)] == 1
    assert repr(s) == str(s) == "asyncgrad.Size([2, 3])"
    assert repr(ag.tensor(1.0).shape) == "asyncgrad.Size([])"
    assert s.numel() == 6
    assert ag.tensor(1.0).shape.numel() == 1
    assert ag.zeros(0, 3).shape.numel() == 0
    assert s[0] == 2
    assert s[-1] == 3
    assert type(s[0]) is int
    assert type(s[1:]) is ag.Size
    assert s[1:] == (3,)
    assert s[::-1] == (3, 2)
    # Concatenation keeps the Size, on either side (written as calls: `s + (4,)`).
    assert type(operator.add(s, (4,))) is ag.Size
    assert operator.add(s, (4,)) == (2, 3, 4)
    assert type(operator.add((1,), s)) is ag.Size
    assert operator.add((1,), s) == (1, 2, 3)
    assert type(s * 2) is ag.Size
    assert s * 2 == (2, 3, 2, 3)
    assert list(s) == [2, 3]
    assert len(s) == 2
    assert t.size(1) == 3
    assert t.size(-2) == 2
    assert pickle.loads(pickle.dumps(s)) == s
    assert type(pickle.loads(pickle.dumps(s))) is ag.Size
    assert ag.zeros(*s).shape == s
    assert ag.zeros(s).shape == s
    assert t.reshape(s[::-1]).shape == (3, 2)
    assert np.zeros(s).shape == (2, 3)


def test_size_prints_as_torchs() -> None:
    torch = _torch()
    for shape in [(2, 3), (), (0,), (1, 0, 4)]:
        ours, theirs = ag.zeros(shape).shape, torch.zeros(shape).shape
        assert repr(ours) == repr(theirs).replace("torch.", "asyncgrad.")
        assert ours[1:] == theirs[1:]
        assert ours.numel() == theirs.numel()


# ============================================================================= repr

# Each case builds the same tensor in asyncgrad (m=ag) and torch (m=torch).
REPR_CASES: dict[str, Callable[[Any], Any]] = {
    "float_ints": lambda m: m.tensor([1.0, 2.0, -3.0]),
    "floats": lambda m: m.tensor([1.5, -0.25, 3.14159]),
    "zeros": lambda m: m.zeros(2, 3),
    "scalar": lambda m: m.tensor(1.5),
    "scalar_int_valued": lambda m: m.tensor(3.0),
    "scalar_int": lambda m: m.tensor(7),
    "ints": lambda m: m.tensor([1, -20, 300]),
    "bools": lambda m: m.tensor([True, False, True]),
    "int32": lambda m: m.tensor([1, 2], dtype=m.int32),
    "float64": lambda m: m.tensor([1.5, 2.0], dtype=m.float64),
    "float16": lambda m: m.tensor([0.1, 2.0], dtype=m.float16),
    "sci_small": lambda m: m.tensor([1e-5, 1.0]),
    "sci_large": lambda m: m.tensor([1e10, 1.0]),
    "sci_ratio": lambda m: m.tensor([0.001, 2.5]),
    "int_ratio": lambda m: m.tensor([1.0, 5000.0]),
    "huge_ints": lambda m: m.tensor([1e9, 2e9]),
    "no_sci": lambda m: m.tensor([0.0001, 0.1]),
    "nonfinite": lambda m: m.tensor([float("nan"), 1.0, float("inf"), -float("inf")]),
    "nonfinite_frac": lambda m: m.tensor([float("nan"), 1.5, float("-inf")]),
    "only_nan": lambda m: m.tensor([float("nan")]),
    "negative_zero": lambda m: m.tensor([-0.0, 0.0]),
    "matrix": lambda m: m.tensor([[1.25, -2.0], [300.5, 4.0]]),
    "3d": lambda m: m.arange(24, dtype=m.float32).reshape(2, 3, 4) / 7,
    "4d_ints": lambda m: m.arange(16).reshape(2, 2, 2, 2),
    "wrap": lambda m: m.arange(40, dtype=m.float32) / 3,
    "wrap_ints": lambda m: m.arange(100) * 1000,
    "wrap_rows": lambda m: m.arange(60, dtype=m.float64).reshape(3, 20) * 1.5,
    "long_1d": lambda m: m.arange(2000, dtype=m.float32) / 9,
    "long_2d": lambda m: m.arange(40 * 50, dtype=m.float32).reshape(40, 50),
    "long_3d": lambda m: m.arange(10 * 11 * 12).reshape(10, 11, 12),
    "long_narrow": lambda m: m.arange(1100, dtype=m.float32).reshape(1100, 1),
    "long_bools": lambda m: m.arange(1500).reshape(30, 50) % 3 == 0,
    "empty": lambda m: m.zeros(0),
    "empty_2d": lambda m: m.zeros(0, 3),
    "empty_int": lambda m: m.zeros(0, dtype=m.int64),
    "empty_2d_float64": lambda m: m.zeros(2, 0, dtype=m.float64),
    "requires_grad": lambda m: m.tensor([1.0, 2.0], requires_grad=True),
    "requires_grad_float64": lambda m: m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True),
    "grad_fn": lambda m: m.tensor([1.0, 2.0], requires_grad=True) * 2,
    "grad_fn_scalar": lambda m: (m.tensor([1.0, 2.0], requires_grad=True) + 1).sum(),
    "grad_fn_wraps": lambda m: (m.arange(20, dtype=m.float64) / 7).requires_grad_() * 3,
    "empty_requires_grad": lambda m: m.zeros(0, 2, requires_grad=True),
}


@pytest.mark.parametrize("name", REPR_CASES)
def test_repr_is_torchs(name: str) -> None:
    torch = _torch()
    build = REPR_CASES[name]
    ours, theirs = build(ag), build(torch)
    assert repr(ours) == repr(theirs).replace("torch.", "asyncgrad.")
    assert str(ours) == repr(ours)


def test_repr_without_torch() -> None:
    x = ag.tensor([1.0, 2.5], requires_grad=True)
    assert repr(x) == "tensor([1.0000, 2.5000], requires_grad=True)"
    assert repr(x * 2) == "tensor([2., 5.], grad_fn=<MulBackward0>)"
    assert repr(ag.tensor([1e-5, 1.0])) == "tensor([1.0000e-05, 1.0000e+00])"
    assert repr(ag.tensor([True, False])) == "tensor([ True, False])"
    assert repr(ag.tensor([1, 2], dtype=ag.int32)) == "tensor([1, 2], dtype=asyncgrad.int32)"
    assert repr(ag.zeros(0, 2, dtype=ag.int64)) == (
        "tensor([], size=(0, 2), dtype=asyncgrad.int64)"
    )
    assert repr(ag.arange(2000)) == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"
    assert repr(nn.Parameter(ag.ones(2))) == (
        "Parameter containing:\ntensor([1., 1.], requires_grad=True)"
    )


@pytest.mark.cuda
def test_repr_names_the_device() -> None:
    _needs_cuda()
    x = ag.tensor([1.0, 2.0], device="cuda")
    assert repr(x) == "tensor([1., 2.], device='cuda:0')"
    assert repr(x.requires_grad_() * 2) == (
        "tensor([2., 4.], device='cuda:0', grad_fn=<MulBackward0>)"
    )
    with ag.device("cuda:0"):
        assert repr(ag.tensor([1.0])) == "tensor([1.])"
        assert repr(ag.tensor([1.0], device="cpu")) == "tensor([1.], device='cpu')"
    if ag.cuda.device_count() > 1:
        assert "device='cuda:1'" in repr(ag.zeros(2, device="cuda:1", dtype=ag.float64))


# ============================================================================= pickling


def _roundtrip(x: Any) -> Any:
    return pickle.loads(pickle.dumps(x))


@pytest.mark.parametrize(
    "build",
    [
        lambda: ag.tensor([1.5, -2.0]),
        lambda: ag.tensor(3.25, dtype=ag.float64),
        lambda: ag.zeros(0, 3, dtype=ag.int32),
        lambda: ag.tensor([[True, False]]),
        lambda: ag.arange(12).reshape(3, 4).t(),
        lambda: ag.randn(4, 5, dtype=ag.float16)[1:3, ::2],
    ],
)
def test_pickle_keeps_data_dtype_and_shape(build: Callable[[], ag.Tensor]) -> None:
    x = build()
    y = _roundtrip(x)
    assert type(y) is ag.Tensor
    assert y is not x
    assert y.dtype == x.dtype
    assert y.shape == x.shape
    assert y.device == x.device
    assert np.array_equal(y.numpy(), x.numpy())
    assert not y.requires_grad
    assert y.grad is None
    assert y.is_leaf


def test_pickle_keeps_requires_grad_but_no_graph_or_grad() -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    y = _roundtrip(x)
    assert y.requires_grad
    assert y.is_leaf
    assert y.grad is None
    # A non-leaf comes back as a leaf that requires grad, as with torch's pickle.
    z = _roundtrip(x * 3)
    assert z.requires_grad
    assert z.is_leaf
    assert z.grad_fn is None
    assert z.tolist() == [3.0, 6.0]
    z.sum().backward()
    assert z.grad is not None
    assert z.grad.tolist() == [1.0, 1.0]
    # The copy's storage is its own.
    y.detach()[0] = 5.0
    assert x.tolist() == [1.0, 2.0]


def test_pickled_parameters_stay_parameters() -> None:
    p = nn.Parameter(ag.ones(2, 2))
    q = _roundtrip(p)
    assert type(q) is nn.Parameter
    assert q.requires_grad
    assert q.is_leaf
    frozen = _roundtrip(nn.Parameter(ag.ones(2), requires_grad=False))
    assert type(frozen) is nn.Parameter
    assert not frozen.requires_grad
    lin = nn.Linear(3, 2)
    lin2 = _roundtrip(lin)
    assert all(type(p) is nn.Parameter for p in lin2.parameters())
    assert all(ag.equal(a, b) for a, b in zip(lin.parameters(), lin2.parameters(), strict=True))


def test_pickle_keeps_one_object_per_tensor_and_deepcopy_still_works() -> None:
    x = ag.ones(3)
    a, b = _roundtrip([x, x])
    assert a is b
    c = copy.deepcopy(ag.ones(2, requires_grad=True))
    assert c.requires_grad
    assert c.is_leaf
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(ag.ones(2, requires_grad=True) * 2)


def test_a_tensor_unpickled_over_read_only_buffers_is_writable() -> None:
    # Protocol 5's out-of-band buffers, as Ray hands them out of its object store: read-only.
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(ag.arange(4.0), protocol=5, buffer_callback=buffers.append)
    assert buffers
    shared = [memoryview(b.raw()).toreadonly() for b in buffers]
    t = pickle.loads(data, buffers=shared)
    t.add_(1.0)  # a copy of its own: no "more than one element ... refers to" error
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert bytes(shared[0]) == ag.arange(4.0).numpy().tobytes()  # the shared buffer is as it was


@pytest.mark.cuda
def test_pickle_keeps_the_device() -> None:
    _needs_cuda()
    x = ag.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    y = _roundtrip(x)
    assert y.device == ag.device("cuda:0")
    assert y.requires_grad
    assert y.cpu().tolist() == [1.0, 2.0]
    if ag.cuda.device_count() > 1:
        assert _roundtrip(ag.ones(2, device="cuda:1")).device == ag.device("cuda:1")


def test_multiprocessing_refuses_a_non_leaf_that_requires_grad() -> None:
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(x * 2)
    for ok in (x, (x * 2).detach(), nn.Parameter(ag.ones(2))):
        back = pickle.loads(ForkingPickler.dumps(ok))
        assert type(back) is type(ok)
        assert back.requires_grad == ok.requires_grad


def test_tensors_round_trip_through_a_spawned_pool() -> None:
    xs = [ag.tensor([1.0, -2.0]), ag.arange(6).reshape(2, 3)]
    p = nn.Parameter(ag.ones(2))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        out = pool.map(operator.neg, xs, chunksize=len(xs))
        (q,) = pool.map(copy.copy, [p])
        with pytest.raises(multiprocessing.pool.MaybeEncodingError, match="Cowardly refusing"):
            pool.map(operator.neg, [p])  # -p requires grad and is no leaf: it cannot come back
    assert [o.tolist() for o in out] == [[-1.0, 2.0], [[0, -1, -2], [-3, -4, -5]]]
    assert [o.dtype for o in out] == [ag.float32, ag.int64]
    assert type(q) is nn.Parameter
    assert q.requires_grad
    assert q.tolist() == [1.0, 1.0]


def test_equal_and_allclose_are_tensor_methods_as_in_torch() -> None:
    a = ag.tensor([1.0, 2.0, float("nan")])
    assert a[:2].equal(ag.tensor([1.0, 2.0]))
    assert not a[:2].equal(ag.tensor([[1.0, 2.0]]))  # another shape
    assert not a.equal(a.clone())  # NaN is not equal to itself
    assert a[:2].allclose(ag.tensor([1.0, 2.0 + 1e-6]))
    assert not a[:2].allclose(ag.tensor([1.0, 2.1]))
    assert a.allclose(a.clone(), equal_nan=True)
    assert not a.allclose(a.clone())
