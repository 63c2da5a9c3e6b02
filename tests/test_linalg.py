"""ag.linalg: values and gradients against torch.linalg (where torch is installed) and against
finite differences in float64 (ag.autograd.gradcheck) otherwise; errors as torch raises them;
the same ops on a CUDA device (simulated by default)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

RNG = np.random.default_rng(1234)


def _t(a: Any, requires_grad: bool = True) -> ag.Tensor:
    return ag.tensor(a, dtype=ag.float64, requires_grad=requires_grad)


def _square(*batch: int, n: int = 3) -> Any:
    return RNG.standard_normal((*batch, n, n)) + 2.0 * np.eye(n)


def _spd(*batch: int, n: int = 3) -> Any:
    a = RNG.standard_normal((*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _sym(*batch: int, n: int = 3) -> Any:
    a = RNG.standard_normal((*batch, n, n))
    return a + np.swapaxes(a, -1, -2)


# Functions of the decompositions that do not depend on their sign conventions (NumPy's and
# torch's LAPACK calls may pick other signs for singular and eigen vectors, and for Q and R).
def _qr_loss(lib: Any) -> Callable[[Any], Any]:
    def f(a: Any) -> Any:
        q, r = lib.linalg.qr(a)
        return (q @ q.mT).sin().sum() + r.abs().sum() + (q @ r).pow(2).sum()

    return f


def _svd_loss(lib: Any) -> Callable[[Any], Any]:
    def f(a: Any) -> Any:
        u, s, vh = lib.linalg.svd(a, full_matrices=False)
        return s.pow(3).sum() + (u @ u.mT).sin().sum() + (vh.mT @ vh).cos().sum()

    return f


def _eigh_loss(lib: Any) -> Callable[[Any], Any]:
    def f(a: Any) -> Any:
        lam, v = lib.linalg.eigh(a)
        return lam.pow(2).sum() + (v * v * lam.unsqueeze(-2)).sum() + (v @ v.mT).sin().sum()

    return f


# ----- finite differences (no torch needed) -----
GRADCHECKS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[Any, ...]]]] = {
    "inv": (ag.linalg.inv, lambda: (_square(2),)),
    "det": (ag.linalg.det, lambda: (_square(2),)),
    "slogdet": (lambda a: ag.linalg.slogdet(a).logabsdet, lambda: (_square(2),)),
    "solve": (ag.linalg.solve, lambda: (_square(2), RNG.standard_normal((2, 3, 2)))),
    "solve vector": (ag.linalg.solve, lambda: (_square(2), RNG.standard_normal((2, 3)))),
    "solve broadcast": (ag.linalg.solve, lambda: (_square(), RNG.standard_normal((2, 3, 2)))),
    "solve left=False": (
        lambda a, b: ag.linalg.solve(a, b, left=False),
        lambda: (_square(2), RNG.standard_normal((2, 4, 3))),
    ),
    "cholesky": (lambda a: ag.linalg.cholesky(a @ a.mT), lambda: (_spd(2),)),
    "cholesky upper": (lambda a: ag.linalg.cholesky(a @ a.mT, upper=True), lambda: (_spd(2),)),
    "qr tall": (_qr_loss(ag), lambda: (RNG.standard_normal((2, 4, 3)),)),
    "qr square": (_qr_loss(ag), lambda: (RNG.standard_normal((2, 3, 3)),)),
    "qr wide": (_qr_loss(ag), lambda: (RNG.standard_normal((2, 3, 5)),)),
    "svd tall": (_svd_loss(ag), lambda: (RNG.standard_normal((2, 4, 3)),)),
    "svd wide": (_svd_loss(ag), lambda: (RNG.standard_normal((2, 3, 5)),)),
    "eigh": (lambda a: _eigh_loss(ag)(a + a.mT), lambda: (RNG.standard_normal((2, 3, 3)),)),
    "svdvals": (ag.linalg.svdvals, lambda: (RNG.standard_normal((2, 4, 3)),)),
    "matrix_norm nuc": (lambda a: ag.linalg.matrix_norm(a, "nuc"), lambda: (_square(2),)),
    "matrix_norm 2": (lambda a: ag.linalg.matrix_norm(a, 2), lambda: (_square(2),)),
    "matrix_norm -1": (lambda a: ag.linalg.matrix_norm(a, -1), lambda: (_square(2),)),
    "matrix_norm inf": (lambda a: ag.linalg.matrix_norm(a, math.inf), lambda: (_square(2),)),
    "matrix_norm fro dims": (
        lambda a: ag.linalg.matrix_norm(a, "fro", dim=(0, 2), keepdim=True),
        lambda: (RNG.standard_normal((3, 2, 4)),),
    ),
    "vector_norm 3": (
        lambda a: ag.linalg.vector_norm(a, 3, dim=1),
        lambda: (RNG.standard_normal((3, 4)),),
    ),
    "norm": (ag.linalg.norm, lambda: (RNG.standard_normal((3, 4)),)),
}


@pytest.mark.parametrize("name", GRADCHECKS)
def test_gradient_matches_finite_differences(name: str) -> None:
    fn, make = GRADCHECKS[name]
    assert gradcheck(fn, tuple(_t(a) for a in make()))


def test_singular_det_gradient_is_the_adjugate() -> None:
    # det of a singular matrix: the gradient is the adjugate (transposed), finite, as torch's
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]])
    x = _t(a)
    (g,) = ag.grad_sync(ag.linalg.det(x), [x])
    cof = np.array(
        [
            [np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) * (-1) ** (i + j) for j in range(3)]
            for i in range(3)
        ]
    )
    np.testing.assert_allclose(g.numpy(), cof, atol=1e-12)


def test_singular_logabsdet_gradient_is_infinite_not_an_error() -> None:
    # torch: log|det| is -inf there and its gradient infinite (the signs depend on the
    # direction of approach: See the README's differences)
    x = _t([[1.0, 2.0], [2.0, 4.0]])
    sign, logabs = ag.linalg.slogdet(x)
    assert (sign.item(), logabs.item()) == (0.0, -math.inf)
    (g,) = ag.grad_sync(logabs, [x])
    assert np.isinf(g.numpy()).all()


@pytest.mark.parametrize(
    ("name", "fn", "make"),
    [
        ("inv", ag.linalg.inv, lambda: _square(2)),
        ("det", ag.linalg.det, lambda: _square(2)),
        ("solve", lambda a: ag.linalg.solve(a, a[..., :1] * 2.0), lambda: _square(2)),
        ("cholesky", lambda a: ag.linalg.cholesky(a @ a.mT), lambda: _spd(2)),
        ("slogdet", lambda a: ag.linalg.slogdet(a).logabsdet, lambda: _square(2)),
        ("qr", _qr_loss(ag), lambda: RNG.standard_normal((2, 4, 3))),
        ("qr wide", _qr_loss(ag), lambda: RNG.standard_normal((2, 3, 4))),
        ("svd", _svd_loss(ag), lambda: RNG.standard_normal((2, 4, 3))),
        ("eigh", lambda a: _eigh_loss(ag)(a + a.mT), lambda: RNG.standard_normal((2, 3, 3))),
    ],
)
def test_second_derivatives_match_finite_differences(name: str, fn: Any, make: Any) -> None:
    assert gradgradcheck(fn, (_t(make()),))


# ----- against torch -----
def _torch() -> Any:
    return pytest.importorskip("torch", reason="compares with torch.linalg (pip install torch)")


TORCH_CASES: dict[str, tuple[str, Callable[[], tuple[Any, ...]]]] = {
    "inv": ("lambda L, a: (L.linalg.inv(a) * a).sum()", lambda: (_square(2),)),
    "det": ("lambda L, a: (L.linalg.det(a) ** 2).sum()", lambda: (_square(2),)),
    "slogdet": ("lambda L, a: L.linalg.slogdet(a).logabsdet.sum()", lambda: (_square(2),)),
    "solve": (
        "lambda L, a, b: L.linalg.solve(a, b).pow(2).sum()",
        lambda: (_square(2), RNG.standard_normal((2, 3, 2))),
    ),
    "solve vector": (
        "lambda L, a, b: L.linalg.solve(a, b).pow(2).sum()",
        lambda: (_square(2), RNG.standard_normal((2, 3))),
    ),
    "cholesky": (
        "lambda L, a: (L.linalg.cholesky(a) * a).sum()",
        lambda: (_spd(2),),
    ),
    "cholesky upper": (
        "lambda L, a: (L.linalg.cholesky(a, upper=True) * a).sum()",
        lambda: (_spd(2),),
    ),
    "eigh": ("lambda L, a: EIGH(L)(a)", lambda: (_sym(2),)),
    "eigh reads the lower triangle": (
        "lambda L, a: (L.linalg.eigh(a)[1].pow(2) * a).sum() + L.linalg.eigh(a)[0].sum()",
        lambda: (RNG.standard_normal((2, 3, 3)),),
    ),
    "qr tall": ("lambda L, a: QR(L)(a)", lambda: (RNG.standard_normal((2, 4, 3)),)),
    "qr wide": ("lambda L, a: QR(L)(a)", lambda: (RNG.standard_normal((2, 3, 5)),)),
    "svd tall": ("lambda L, a: SVD(L)(a)", lambda: (RNG.standard_normal((2, 4, 3)),)),
    "svd wide": ("lambda L, a: SVD(L)(a)", lambda: (RNG.standard_normal((2, 3, 5)),)),
    "svdvals": ("lambda L, a: L.linalg.svdvals(a).sum()", lambda: (RNG.standard_normal((4, 3)),)),
    "matrix_norm nuc": (
        "lambda L, a: L.linalg.matrix_norm(a, 'nuc').sum()",
        lambda: (RNG.standard_normal((2, 3, 4)),),
    ),
    "matrix_norm -2": (
        "lambda L, a: L.linalg.matrix_norm(a, -2).sum()",
        lambda: (RNG.standard_normal((2, 3, 4)),),
    ),
    "matrix_norm 1 keepdim": (
        "lambda L, a: (L.linalg.matrix_norm(a, 1, keepdim=True) * a).sum()",
        lambda: (RNG.standard_normal((2, 3, 4)),),
    ),
    "matrix_norm -inf dims": (
        "lambda L, a: (L.linalg.matrix_norm(a, -math.inf, dim=(2, 0))).sum()",
        lambda: (RNG.standard_normal((2, 3, 4)),),
    ),
    "norm 2-D ord 2": ("lambda L, a: L.linalg.norm(a, 2)", lambda: (RNG.standard_normal((3, 4)),)),
    "norm dim": (
        "lambda L, a: L.linalg.norm(a, 3, dim=0).sum()",
        lambda: (RNG.standard_normal((3, 4)),),
    ),
    "norm all": ("lambda L, a: L.linalg.norm(a)", lambda: (RNG.standard_normal((2, 3, 4)),)),
    "vector_norm inf": (
        "lambda L, a: L.linalg.vector_norm(a, math.inf, dim=(0, 1)).sum()",
        lambda: (RNG.standard_normal((2, 3, 4)),),
    ),
}


@pytest.mark.parametrize("name", TORCH_CASES)
def test_value_and_gradient_match_torch(name: str) -> None:
    torch = _torch()
    src, make = TORCH_CASES[name]
    env = {"math": math, "QR": _qr_loss, "SVD": _svd_loss, "EIGH": _eigh_loss}
    fn = eval(src, env)
    arrays = make()
    xs = [_t(a) for a in arrays]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    ours, theirs = fn(ag, *xs), fn(torch, *ts)
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-10)
    for g, h in zip(ag.grad_sync(ours, xs), torch.autograd.grad(theirs, ts), strict=True):
        np.testing.assert_allclose(g.numpy(), h.numpy(), rtol=1e-8, atol=1e-10)


def test_decomposition_values_match_torch() -> None:
    torch = _torch()
    a = RNG.standard_normal((2, 4, 3))
    x, t = _t(a, False), torch.tensor(a)
    u, s, vh = ag.linalg.svd(x, full_matrices=True)
    assert (u.shape, s.shape, vh.shape) == ((2, 4, 4), (2, 3), (2, 3, 3))
    np.testing.assert_allclose(s.numpy(), torch.linalg.svd(t).S.numpy())
    q, r = ag.linalg.qr(x, mode="complete")
    assert (q.shape, r.shape) == tuple(o.shape for o in torch.linalg.qr(t, mode="complete"))
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-12)
    q, r = ag.linalg.qr(x, mode="r")
    assert q.shape == (0,)
    assert r.shape == (2, 3, 3)
    sq = _sym(2)
    lam, _v = ag.linalg.eigh(_t(sq, False))
    np.testing.assert_allclose(lam.numpy(), torch.linalg.eigh(torch.tensor(sq)).eigenvalues)
    sign, _logabs = ag.linalg.slogdet(_t(_square(2), False))
    assert sign.dtype == ag.float64
    assert not sign.requires_grad
    f32 = ag.linalg.inv(ag.tensor(_square(), dtype=ag.float32))
    assert f32.dtype == ag.float32


# ----- errors -----
def test_errors_name_the_function_and_the_fault() -> None:
    with pytest.raises(ag.linalg.LinAlgError, match=r"linalg\.inv: .*singular"):
        ag.linalg.inv(ag.zeros(2, 2))
    with pytest.raises(RuntimeError, match=r"linalg\.inv: A must be batches of square matrices"):
        ag.linalg.inv(ag.zeros(2, 3))
    with pytest.raises(RuntimeError, match=r"linalg\.det: The input tensor A must have at least"):
        ag.linalg.det(ag.zeros(3))
    with pytest.raises(ag.linalg.LinAlgError, match=r"linalg\.cholesky: .*not positive-definite"):
        ag.linalg.cholesky(-ag.eye(2))
    with pytest.raises(ag.linalg.LinAlgError, match=r"linalg\.solve: .*singular"):
        ag.linalg.solve(ag.zeros(2, 2), ag.ones(2))
    with pytest.raises(RuntimeError, match=r"linalg\.solve: Incompatible shapes"):
        ag.linalg.solve(ag.eye(2), ag.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"Expected a floating point or complex tensor"):
        ag.linalg.det(ag.eye(2, dtype=ag.int64))
    with pytest.raises(RuntimeError, match=r"qr received unrecognized mode 'full'"):
        ag.linalg.qr(ag.eye(2), mode="full")
    with pytest.raises(RuntimeError, match=r"matrix_norm: Order 3 not supported"):
        ag.linalg.matrix_norm(ag.eye(2), 3)
    with pytest.raises(RuntimeError, match=r"If dim is not specified but ord is, the input must"):
        ag.linalg.norm(ag.ones(2, 2, 2), 2)


def test_undefined_derivatives_raise_as_torch() -> None:
    x = _t(RNG.standard_normal((3, 2)))
    _, r = ag.linalg.qr(x, mode="r")
    with pytest.raises(RuntimeError, match=r"depends on Q, which is not computed when mode='r'"):
        ag.grad_sync(r.sum(), [x])
    q, _ = ag.linalg.qr(x, mode="complete")
    with pytest.raises(RuntimeError, match=r"not differentiable when mode='complete' and nrows"):
        ag.grad_sync(q.sum(), [x])


def test_svd_with_full_matrices_ignores_the_extra_columns_as_torch() -> None:
    torch = _torch()
    a = RNG.standard_normal((4, 3))
    x, t = _t(a), torch.tensor(a, requires_grad=True)
    w = RNG.standard_normal((4, 4))
    ours = (ag.linalg.svd(x).U.abs() * ag.tensor(w)).sum() + ag.linalg.svd(x).S.sum()
    theirs = (torch.linalg.svd(t).U.abs() * torch.tensor(w)).sum() + torch.linalg.svd(t).S.sum()
    (g,) = ag.grad_sync(ours, [x])
    (h,) = torch.autograd.grad(theirs, [t])
    np.testing.assert_allclose(g.numpy(), h.numpy(), rtol=1e-8, atol=1e-10)


def test_no_graph_under_no_grad() -> None:
    x = _t(_square())
    with ag.no_grad():
        outs = [ag.linalg.inv(x), *ag.linalg.svd(x), *ag.linalg.eigh(x), *ag.linalg.qr(x)]
    assert all(o.grad_fn is None and not o.requires_grad for o in outs)
    assert ag.linalg.svd(x).S.grad_fn.name() == "LinalgSvdBackward0"


# ----- on a CUDA device -----
@pytest.mark.cuda
def test_linalg_on_a_cuda_device_matches_the_cpu() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")
    a = _square(2)
    spd = _spd(2)
    for fn, arr in [
        (ag.linalg.inv, a),
        (ag.linalg.det, a),
        (lambda m: ag.linalg.slogdet(m).logabsdet, a),
        (lambda m: ag.linalg.solve(m, m[..., 0]), a),
        (lambda m: ag.linalg.solve(m[0], m), a),  # broadcast: CuPy's solve does not
        (ag.linalg.cholesky, spd),
        (_qr_loss(ag), a),
        (_svd_loss(ag), a),
        (_eigh_loss(ag), spd),
        (lambda m: ag.linalg.matrix_norm(m, "nuc"), a),
    ]:
        x = _t(arr)
        xc = ag.tensor(arr, dtype=ag.float64, device="cuda", requires_grad=True)
        y, yc = fn(x), fn(xc)
        assert yc.device.type == "cuda"
        np.testing.assert_allclose(
            yc.detach().cpu().numpy(), y.detach().numpy(), rtol=1e-9, atol=1e-12
        )
        (g,) = ag.grad_sync(y.sum(), [x])
        (gc,) = ag.grad_sync(yc.sum(), [xc])
        assert gc.device.type == "cuda"
        np.testing.assert_allclose(gc.cpu().numpy(), g.numpy(), rtol=1e-8, atol=1e-10)
