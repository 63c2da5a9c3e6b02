"""torch's matrix and vector products beyond matmul (addmm, addbmm, baddbmm, addmv, addr, mv,
ger, inner, vdot, kron, tensordot, chain_matmul, linalg.multi_dot, cross, linalg.cross,
linalg.vecdot) and the window functions: values and gradients against torch, finite
differences, errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck
from asyncgrad.ops import matrix

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(11)


def _arrays(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    return [RNG.standard_normal(s) for s in shapes]


def _compare(
    ag_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    arrays: list[np.ndarray],
    grad: bool = True,
) -> None:
    """Values, then the gradients of a random weighting of the output, against torch."""
    xs = [ag.tensor(a, dtype=ag.float64, requires_grad=grad) for a in arrays]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=grad) for a in arrays]
    out, ref = ag_fn(*xs), torch_fn(*ts)
    assert tuple(out.shape) == tuple(ref.shape)
    assert out.dtype == ag.float64
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-10)
    if not grad or ref.numel() == 0:
        return
    w = RNG.standard_normal(tuple(ref.shape))
    gs = ag.grad_sync((out * ag.tensor(w)).sum(), xs, allow_unused=True)
    rs = torch.autograd.grad((ref * torch.tensor(w)).sum(), ts, allow_unused=True)
    for g, r, t in zip(gs, rs, ts, strict=True):
        if r is None:
            assert g is None or not np.any(g.numpy())
            continue
        assert g is not None
        assert tuple(g.shape) == tuple(t.shape)
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-9, atol=1e-10)


def _quiet(fn: Callable[..., Any], *args: Any) -> Any:
    matrix.WARNED.clear()  # each deprecation warns once per process, as torch's
    with pytest.warns(UserWarning, match="is deprecated"):
        return fn(*args)


# name: (ag function, torch function, input shapes)
PRODUCTS: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[tuple[int, ...]]]] = {
    "addmm": (ag.addmm, torch.addmm, [(2, 4), (2, 3), (3, 4)]),
    "addmm_broadcast": (
        lambda i, a, b: ag.addmm(i, a, b, beta=0.5, alpha=-2.0),
        lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=-2.0),
        [(4,), (2, 3), (3, 4)],
    ),
    "addmm_method": (
        lambda i, a, b: i.addmm(a, b, alpha=3),
        lambda i, a, b: i.addmm(a, b, alpha=3),
        [(1, 1), (2, 3), (3, 4)],
    ),
    "baddbmm": (
        lambda i, a, b: ag.baddbmm(i, a, b, beta=2.0, alpha=0.5),
        lambda i, a, b: torch.baddbmm(i, a, b, beta=2.0, alpha=0.5),
        [(3, 2, 4), (3, 2, 5), (3, 5, 4)],
    ),
    "baddbmm_broadcast": (ag.baddbmm, torch.baddbmm, [(2, 1), (3, 2, 5), (3, 5, 4)]),
    "addbmm": (
        lambda i, a, b: ag.addbmm(i, a, b, alpha=1.5),
        lambda i, a, b: torch.addbmm(i, a, b, alpha=1.5),
        [(2, 4), (3, 2, 5), (3, 5, 4)],
    ),
    "addmv": (
        lambda i, a, b: ag.addmv(i, a, b, beta=-1.0),
        lambda i, a, b: torch.addmv(i, a, b, beta=-1.0),
        [(3,), (3, 4), (4,)],
    ),
    "addmv_scalar_input": (ag.addmv, torch.addmv, [(), (3, 4), (4,)]),
    "addr": (
        lambda i, a, b: ag.addr(i, a, b, beta=2, alpha=3),
        lambda i, a, b: torch.addr(i, a, b, beta=2, alpha=3),
        [(3, 4), (3,), (4,)],
    ),
    "mv": (ag.mv, torch.mv, [(3, 4), (4,)]),
    "mv_empty": (ag.mv, torch.mv, [(3, 0), (0,)]),
    "ger": (ag.ger, torch.ger, [(3,), (5,)]),
    "inner": (ag.inner, torch.inner, [(2, 3, 4), (5, 4)]),
    "inner_vectors": (ag.inner, torch.inner, [(4,), (4,)]),
    "inner_scalar": (ag.inner, torch.inner, [(), (2, 3)]),
    "vdot": (ag.vdot, torch.vdot, [(5,), (5,)]),
    "kron": (ag.kron, torch.kron, [(2, 3), (4, 2)]),
    "kron_ranks": (ag.kron, torch.kron, [(2, 3, 2), (3,)]),
    "kron_scalar": (ag.kron, torch.kron, [(), (2, 2)]),
    "tensordot_int": (ag.tensordot, torch.tensordot, [(2, 3, 4), (3, 4, 5)]),
    "tensordot_zero": (
        lambda a, b: ag.tensordot(a, b, dims=0),
        lambda a, b: torch.tensordot(a, b, dims=0),
        [(2, 3), (4,)],
    ),
    "tensordot_lists": (
        lambda a, b: ag.tensordot(a, b, dims=([1, 0], [0, 2])),
        lambda a, b: torch.tensordot(a, b, dims=([1, 0], [0, 2])),
        [(3, 4, 5), (4, 2, 3)],
    ),
    "tensordot_negative": (
        lambda a, b: ag.tensordot(a, b, dims=([-1], [0])),
        lambda a, b: torch.tensordot(a, b, dims=([-1], [0])),
        [(2, 3), (3, 2)],
    ),
    "chain_matmul": (
        lambda *ms: _quiet(ag.chain_matmul, *ms),
        lambda *ms: torch.linalg.multi_dot(ms),
        [(2, 3), (3, 6), (6, 1), (1, 4)],
    ),
    "multi_dot_vectors": (
        lambda a, b, c: ag.linalg.multi_dot([a, b, c]),
        lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
        [(3,), (3, 5), (5,)],
    ),
    "multi_dot_two": (
        lambda a, b: ag.linalg.multi_dot([a, b]),
        lambda a, b: torch.linalg.multi_dot([a, b]),
        [(4, 3), (3,)],
    ),
    "cross": (
        lambda a, b: ag.cross(a, b, dim=0),
        lambda a, b: torch.cross(a, b, dim=0),
        [(3, 4), (3, 4)],
    ),
    "cross_method": (
        lambda a, b: a.cross(b, 1),
        lambda a, b: a.cross(b, 1),
        [(2, 3), (2, 3)],
    ),
    "linalg_cross_broadcast": (
        ag.linalg.cross,
        torch.linalg.cross,
        [(2, 1, 3), (1, 4, 3)],
    ),
    "linalg_cross_dim": (
        lambda a, b: ag.linalg.cross(a, b, dim=-2),
        lambda a, b: torch.linalg.cross(a, b, dim=-2),
        [(3, 2), (3, 2)],
    ),
    "vecdot": (
        lambda a, b: ag.linalg.vecdot(a, b, dim=0),
        lambda a, b: torch.linalg.vecdot(a, b, dim=0),
        [(3, 2), (3, 1)],
    ),
    "linalg_matmul": (ag.linalg.matmul, torch.linalg.matmul, [(2, 3), (3,)]),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_products_match_torch(name: str) -> None:
    ag_fn, torch_fn, shapes = PRODUCTS[name]
    _compare(ag_fn, torch_fn, _arrays(*shapes))


GRADCHECKED = [
    "addmm",
    "baddbmm",
    "addbmm",
    "addmv",
    "addr",
    "inner",
    "kron",
    "tensordot_lists",
    "chain_matmul",
    "multi_dot_vectors",
    "linalg_cross_broadcast",
    "vecdot",
]


@pytest.mark.parametrize("name", GRADCHECKED)
def test_products_gradcheck(name: str) -> None:
    ag_fn, _, shapes = PRODUCTS[name]
    xs = tuple(ag.tensor(a, dtype=ag.float64, requires_grad=True) for a in _arrays(*shapes))
    assert gradcheck(ag_fn, xs)
    if name in ("addmm", "kron", "linalg_cross_broadcast", "tensordot_lists"):
        assert gradgradcheck(ag_fn, xs)


@pytest.mark.parametrize("name", ["addmm", "addbmm", "baddbmm", "addmv", "addr"])
def test_beta_zero_ignores_input(name: str) -> None:
    """torch: with beta=0, NaN and inf in input do not reach the result; its gradient is 0."""
    shapes = PRODUCTS[name][2]
    arrays = _arrays(*shapes)
    arrays[0][...] = np.nan
    xs = [ag.tensor(a, requires_grad=True, dtype=ag.float64) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    fn = getattr(ag, name)
    tfn = getattr(torch, name)
    out, ref = fn(*xs, beta=0), tfn(*ts, beta=0)
    assert not np.isnan(out.detach().numpy()).any()
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
    (g,) = ag.grad_sync(out.sum(), [xs[0]])
    (r,) = torch.autograd.grad(ref.sum(), [ts[0]])
    assert g is not None
    np.testing.assert_array_equal(g.numpy(), r.numpy())


@pytest.mark.parametrize("name", ["addmm", "addbmm", "baddbmm", "addmv", "addr"])
def test_inplace_forms(name: str) -> None:
    shapes = PRODUCTS[name][2]
    arrays = _arrays(*shapes)
    if name in ("addmv",):
        arrays[0] = RNG.standard_normal(3)
    xs = [ag.tensor(a, dtype=ag.float64, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    a0, t0 = xs[0] * 1.0, ts[0] * 1.0
    out = getattr(a0, name + "_")(*xs[1:], beta=0.5, alpha=2.0)
    ref = getattr(t0, name + "_")(*ts[1:], beta=0.5, alpha=2.0)
    assert out is a0
    assert a0._version > 0
    np.testing.assert_allclose(a0.detach().numpy(), t0.detach().numpy(), rtol=1e-12)
    w = RNG.standard_normal(tuple(ref.shape))
    gs = ag.grad_sync((out * ag.tensor(w)).sum(), xs)
    rs = torch.autograd.grad((ref * torch.tensor(w)).sum(), ts)
    for g, r in zip(gs, rs, strict=True):
        assert g is not None
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-10)


def test_addmv_torch_level_inplace() -> None:
    i, m, v = _arrays((3,), (3, 2), (2,))
    x = ag.tensor(i)
    ag.addmv_(x, ag.tensor(m), ag.tensor(v))
    t = torch.tensor(i)
    torch.addmv_(t, torch.tensor(m), torch.tensor(v))
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    ("fn", "dtype"),
    [
        ("addmm", "int64"),
        ("kron", "int64"),
        ("inner", "int32"),
        ("tensordot", "int64"),
        ("mv", "int64"),
        ("cross", "int64"),
    ],
)
def test_integer_dtypes(fn: str, dtype: str) -> None:
    all_shapes: dict[str, list[tuple[int, ...]]] = {
        "addmm": [(2, 2), (2, 3), (3, 2)],
        "kron": [(2, 2), (2,)],
        "inner": [(2, 3), (3,)],
        "tensordot": [(2, 3), (3, 2)],
        "mv": [(2, 3), (3,)],
        "cross": [(3,), (3,)],
    }
    shapes = all_shapes[fn]
    arrays = [RNG.integers(-5, 5, s) for s in shapes]
    xs = [ag.tensor(a, dtype=getattr(ag, dtype)) for a in arrays]
    ts = [torch.tensor(a, dtype=getattr(torch, dtype)) for a in arrays]
    kw = {"dim": 0} if fn == "cross" else ({"dims": 1} if fn == "tensordot" else {})
    out, ref = getattr(ag, fn)(*xs, **kw), getattr(torch, fn)(*ts, **kw)
    assert str(out.dtype) == str(ref.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(out.detach().numpy(), ref.numpy())


def test_cross_without_dim_warns_as_torch() -> None:
    a, b = _arrays((2, 3), (2, 3))
    matrix.WARNED.clear()
    with pytest.warns(UserWarning, match="without specifying the dim arg is deprecated"):
        out = ag.cross(ag.tensor(a), ag.tensor(b))
    np.testing.assert_allclose(out.detach().numpy(), np.cross(a, b), rtol=1e-12)


ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: ag.addmm(ag.zeros(2, 2), ag.zeros(2, 3), ag.zeros(2, 3)),
        RuntimeError,
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x3\)",
    ),
    (
        lambda: ag.addmm(ag.zeros(3), ag.zeros(3), ag.zeros(3, 3)),
        RuntimeError,
        "mat1 must be a matrix, got 1-D tensor",
    ),
    (
        lambda: ag.addmm(ag.zeros(2, 3, dtype=ag.float64), ag.zeros(2, 3), ag.zeros(3, 3)),
        RuntimeError,
        "self and mat2 must have the same dtype, but got Double and Float",
    ),
    (
        lambda: ag.addmm(ag.zeros(3), ag.zeros(2, 3, dtype=ag.float64), ag.zeros(3, 3)),
        RuntimeError,
        "mat1 and mat2 must have the same dtype, but got Double and Float",
    ),
    (
        lambda: ag.mv(ag.zeros(2, 3), ag.zeros(2)),
        RuntimeError,
        r"size mismatch, got input \(2\), mat \(2x3\), vec \(2\)",
    ),
    (
        lambda: ag.vdot(ag.zeros(2, 3), ag.zeros(3)),
        RuntimeError,
        "1D tensors expected, but got 2D and 1D tensors",
    ),
    (
        lambda: ag.linalg.cross(ag.zeros(2, 4), ag.zeros(2, 4)),
        RuntimeError,
        "linalg.cross: inputs dimension -1 must have length 3. Got 4 and 4",
    ),
    (
        lambda: ag.cross(ag.zeros(2, 3), ag.zeros(2, 4), dim=1),
        RuntimeError,
        "linalg.cross: inputs dimension 1 must have length 3. Got 3 and 4",
    ),
    (
        lambda: ag.tensordot(ag.zeros(2, 3), ag.zeros(3, 4), dims=2),
        RuntimeError,
        "contracted dimensions need to match, but first has size 2 in dim -2 and second has "
        "size 3 in dim 0",
    ),
    (
        lambda: ag.tensordot(ag.zeros(2, 3), ag.zeros(3, 4), dims=-1),
        RuntimeError,
        "tensordot expects dims >= 0, but got dims=-1",
    ),
    (
        lambda: ag.inner(ag.zeros(2, 3), ag.zeros(4, 4)),
        RuntimeError,
        "inner\\(\\) the last dimension must match on both input tensors",
    ),
    (
        lambda: ag.linalg.multi_dot([ag.zeros(2)]),
        RuntimeError,
        "multi_dot\\(\\): expected at least 2 tensors but got 1",
    ),
    (
        lambda: ag.baddbmm(ag.zeros(3, 3), ag.zeros(2, 2, 3), ag.zeros(2, 3, 2)),
        RuntimeError,
        r"The expanded size of the tensor \(2\) must match the existing size \(3\) at "
        r"non-singleton dimension 2.  Target sizes: \[2, 2, 2\].  Tensor sizes: \[3, 3\]",
    ),
    (
        lambda: ag.baddbmm(ag.zeros(2, 2), ag.zeros(2, 2, 3), ag.zeros(2, 2, 2)),
        RuntimeError,
        r"Expected size for first two dimensions of batch2 tensor to be: \[2, 3\] but got: "
        r"\[2, 2\].",
    ),
    (
        lambda: ag.addbmm(ag.zeros(2, 2), ag.zeros(2, 2), ag.zeros(2, 2, 2)),
        RuntimeError,
        "batch1 must be a 3D tensor",
    ),
    (
        lambda: ag.addbmm(ag.zeros(2, 2), ag.zeros(2, 2, 3, dtype=ag.float64), ag.zeros(2, 3, 2)),
        RuntimeError,
        "Input dtypes must be the same, got: input float, batch1: double, batch2: float",
    ),
    (
        lambda: ag.addmv(ag.zeros(2), ag.zeros(2, 3), ag.zeros(3, dtype=ag.float64)),
        RuntimeError,
        "addmv input tensors must have the same dtype, but got Float, Float, and Double",
    ),
    (
        lambda: ag.addmv(ag.zeros(3), ag.zeros(2, 3), ag.zeros(3)),
        RuntimeError,
        r"size mismatch, got input \(3\), mat \(2x3\), vec \(3\)",
    ),
    (
        lambda: ag.tensordot(ag.zeros(2, 3), ag.zeros(3, dtype=ag.float64), dims=1),
        RuntimeError,
        "both inputs should have same dtype",
    ),
    (
        lambda: ag.linalg.cross(ag.zeros(2, 3), ag.zeros(4, 3)),
        RuntimeError,
        r"The size of tensor a \(2\) must match the size of tensor b \(4\) at non-singleton "
        "dimension 0",
    ),
    (
        lambda: ag.baddbmm(ag.zeros(2, 2), ag.zeros(2, 2, 3), ag.zeros(3, 3, 2)),
        RuntimeError,
        "batch1 and batch2 must have same number of batches, got 2 and 3",
    ),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_as_torch(i: int) -> None:
    fn, exc, msg = ERRORS[i]
    with pytest.raises(exc, match=msg):
        fn()


# ----- window functions -----
WINDOWS = ["bartlett_window", "blackman_window", "hamming_window", "hann_window", "kaiser_window"]


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("length", [0, 1, 2, 5, 8])
@pytest.mark.parametrize("periodic", [True, False])
def test_windows_match_torch(name: str, length: int, periodic: bool) -> None:
    out = getattr(ag, name)(length, periodic, dtype=ag.float64)
    ref = getattr(torch, name)(length, periodic, dtype=torch.float64)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.detach().numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)


def test_window_parameters_and_dtypes() -> None:
    np.testing.assert_allclose(
        ag.hamming_window(7, True, 0.5, 0.4).numpy(),
        torch.hamming_window(7, True, 0.5, 0.4).numpy(),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        ag.kaiser_window(9, False, 5.0).numpy(),
        torch.kaiser_window(9, False, 5.0).numpy(),
        rtol=1e-5,
    )
    w = ag.hann_window(4, requires_grad=True)
    assert w.dtype == ag.float32
    assert w.requires_grad
    assert w.is_leaf
    with pytest.raises(RuntimeError, match="hann_window expects floating point dtypes, got: Long"):
        ag.hann_window(4, dtype=ag.int64)
    with pytest.raises(RuntimeError, match="hann_window requires non-negative window_length"):
        ag.hann_window(-1)


def test_inplace_through_a_view_and_without_grad() -> None:
    base = RNG.standard_normal((3, 2, 4))
    m1, m2 = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 4))
    xs = [ag.tensor(a, requires_grad=True) for a in (base, m1, m2)]
    ts = [torch.tensor(a, requires_grad=True) for a in (base, m1, m2)]
    y, ty = xs[0] * 1.0, ts[0] * 1.0
    y[1].addmm_(xs[1], xs[2], beta=-1.0)
    ty[1].addmm_(ts[1], ts[2], beta=-1.0)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    w = RNG.standard_normal(base.shape)
    gs = ag.grad_sync((y * ag.tensor(w)).sum(), xs)
    rs = torch.autograd.grad((ty * torch.tensor(w)).sum(), ts)
    for g, r in zip(gs, rs, strict=True):
        assert g is not None
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-10)
    z = ag.tensor(base[0])
    with ag.no_grad():
        z.addr_(ag.tensor(base[0, :, 0]), ag.tensor(base[0, 0]), alpha=2)
    np.testing.assert_allclose(
        z.numpy(), base[0] + 2 * np.outer(base[0, :, 0], base[0, 0]), rtol=1e-12
    )
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        xs[1].addmm_(xs[1].mT, xs[1].mT)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("cholesky", lambda: ag.cholesky(ag.eye(2))),
        ("qr", lambda: ag.qr(ag.eye(2))),
        ("lu", lambda: ag.eye(2).lu()),
        ("lu_solve", lambda: ag.lu_solve(ag.ones(2, 1), *ag.linalg.lu_factor(ag.eye(2)))),
        ("triangular_solve", lambda: ag.triangular_solve(ag.ones(2, 1), ag.eye(2))),
        ("chain_matmul", lambda: ag.chain_matmul(ag.eye(2), ag.eye(2))),
        ("cross", lambda: ag.cross(ag.ones(3), ag.ones(3))),
    ],
)
def test_deprecated_names_warn_once_as_torch(name: str, call: Callable[[], Any]) -> None:
    matrix.WARNED.discard(name)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        call()
        call()
    assert [type(w.message) for w in record] == [UserWarning]
    assert "deprecated" in str(record[0].message)
    call()  # silent now (warnings are errors in this suite)
