"""torch.linalg's functions beyond inv/det/solve/cholesky/qr/svd/eigh (pinv, matrix_power,
matrix_exp, lu and its relatives, solve_triangular, the *_ex forms, lstsq, householder_product,
cond, matrix_rank, tensorinv/tensorsolve, vander, ...) and torch's top-level names of them
(det, inverse, pinverse, cholesky_solve, triangular_solve, lu, lu_solve, geqrf, ormqr, ...):
values and gradients against torch, finite differences, errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(5)


def _general(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def _wellcond(*shape: int) -> np.ndarray:
    """Square matrices away from singular: random plus a multiple of the identity."""
    n = shape[-1]
    return RNG.standard_normal(shape) + 3 * np.eye(n)


def _spd(*shape: int) -> np.ndarray:
    a = RNG.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _lower(*shape: int) -> np.ndarray:
    """A well-conditioned lower-triangular factor (positive diagonal)."""
    return np.linalg.cholesky(_spd(*shape))


def _to_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def _compare(
    ag_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    arrays: list[np.ndarray],
    grad: bool = True,
    rtol: float = 1e-8,
) -> None:
    """Each output against torch's, then the gradients of a random weighting of all the
    floating outputs."""
    xs = [ag.tensor(a, dtype=ag.float64, requires_grad=grad) for a in arrays]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=grad) for a in arrays]
    outs, refs = _to_list(ag_fn(*xs)), _to_list(torch_fn(*ts))
    assert len(outs) == len(refs)
    loss, tloss = None, None
    for o, r in zip(outs, refs, strict=True):
        assert tuple(o.shape) == tuple(r.shape)
        assert str(o.dtype) == str(r.dtype).removeprefix("torch.")
        np.testing.assert_allclose(o.detach().numpy(), r.detach().numpy(), rtol=rtol, atol=rtol)
        if grad and r.requires_grad and r.numel():
            w = RNG.standard_normal(tuple(r.shape))
            term, tterm = (o * ag.tensor(w)).sum(), (r * torch.tensor(w)).sum()
            loss = term if loss is None else loss + term
            tloss = tterm if tloss is None else tloss + tterm
    if loss is None:
        return
    gs = ag.grad_sync(loss, xs, allow_unused=True)
    rs = torch.autograd.grad(tloss, ts, allow_unused=True)
    for g, r in zip(gs, rs, strict=True):
        if r is None:
            assert g is None or not np.any(g.numpy())
            continue
        assert g is not None
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=rtol * 10, atol=rtol * 10)


def _svd_invariants(svd: Callable[..., Any]) -> Callable[..., Any]:
    """Sign-free functions of an SVD: S, U diag(S) V^T and the projector U U^T."""

    def fn(a: Any) -> Any:
        u, s, v = svd(a)
        return s, (u * s.unsqueeze(-2)) @ v.mT, u @ u.mT

    return fn


def _lu_unpacked(mod: Any) -> Callable[..., Any]:
    def fn(a: Any) -> Any:
        lu, piv = mod.linalg.lu_factor(a)
        return mod.lu_unpack(lu, piv)

    return fn


def _householder(mod: Any) -> Callable[..., Any]:
    def fn(a: Any, tau: Any) -> Any:
        return mod.linalg.householder_product(a, tau)

    return fn


def _geqrf_inputs(m: int, n: int, batch: tuple[int, ...] = ()) -> list[np.ndarray]:
    a, tau = torch.geqrf(torch.tensor(_general(*batch, m, n)))
    return [a.numpy(), tau.numpy()]


# name: (ag function, torch function, inputs)
CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[np.ndarray]]] = {
    "det": (ag.det, torch.det, [_general(2, 3, 3)]),
    "det_method": (lambda a: a.det(), lambda a: a.det(), [_general(4, 4)]),
    "logdet": (ag.logdet, torch.logdet, [_spd(2, 3, 3)]),
    "slogdet": (ag.slogdet, torch.slogdet, [_general(3, 3)]),
    "inverse": (ag.inverse, torch.inverse, [_wellcond(2, 3, 3)]),
    "pinv_tall": (ag.linalg.pinv, torch.linalg.pinv, [_general(2, 5, 3)]),
    "pinv_wide": (ag.linalg.pinv, torch.linalg.pinv, [_general(3, 5)]),
    "pinv_hermitian": (
        lambda a: ag.linalg.pinv(a + a.mT, hermitian=True),
        lambda a: torch.linalg.pinv(a + a.mT, hermitian=True),
        [_general(2, 4, 4)],
    ),
    "pinv_rank_deficient": (
        ag.linalg.pinv,
        torch.linalg.pinv,
        [np.outer(_general(4), _general(3))],
    ),
    "pinverse": (ag.pinverse, torch.pinverse, [_general(4, 2)]),
    "pinv_rcond_positional": (
        lambda a: ag.linalg.pinv(a @ a.mT, 0.5, True),
        lambda a: torch.linalg.pinv(a @ a.mT, 0.5, True),
        [_general(3, 3)],
    ),
    "matrix_rank_tol_positional": (
        lambda a: ag.linalg.matrix_rank(a, 0.5),
        lambda a: torch.linalg.matrix_rank(a, 0.5),
        [_general(2, 4, 4)],
    ),
    "matrix_power_3": (
        lambda a: ag.linalg.matrix_power(a, 3),
        lambda a: torch.linalg.matrix_power(a, 3),
        [_general(2, 3, 3)],
    ),
    "matrix_power_0": (
        lambda a: ag.matrix_power(a, 0),
        lambda a: torch.matrix_power(a, 0),
        [_general(2, 3, 3)],
    ),
    "matrix_power_1": (lambda a: a.matrix_power(1), lambda a: a.matrix_power(1), [_general(3, 3)]),
    "matrix_power_neg": (
        lambda a: ag.matrix_power(a, -2),
        lambda a: torch.matrix_power(a, -2),
        [_wellcond(3, 3)],
    ),
    "matrix_exp": (ag.matrix_exp, torch.matrix_exp, [_general(2, 3, 3)]),
    "matrix_exp_large": (ag.linalg.matrix_exp, torch.linalg.matrix_exp, [8 * _general(4, 4)]),
    "matrix_exp_small": (ag.linalg.matrix_exp, torch.linalg.matrix_exp, [1e-3 * _general(3, 3)]),
    "cholesky_torch": (ag.cholesky, torch.cholesky, [_spd(2, 3, 3)]),
    "cholesky_upper": (
        lambda a: ag.cholesky(a, True),
        lambda a: torch.linalg.cholesky(a, upper=True),
        [_spd(3, 3)],
    ),
    "cholesky_inverse": (ag.cholesky_inverse, torch.cholesky_inverse, [_lower(2, 3, 3)]),
    "cholesky_inverse_upper": (
        lambda u: ag.cholesky_inverse(u, upper=True),
        lambda u: torch.cholesky_inverse(u, upper=True),
        [np.swapaxes(_lower(3, 3), -1, -2)],
    ),
    "cholesky_solve": (ag.cholesky_solve, torch.cholesky_solve, [_general(2, 3, 2), _lower(3, 3)]),
    "cholesky_solve_upper": (
        lambda b, u: b.cholesky_solve(u, True),
        lambda b, u: b.cholesky_solve(u, True),
        [_general(3, 2), np.swapaxes(_lower(2, 3, 3), -1, -2)],
    ),
    "solve_triangular_lower": (
        lambda a, b: ag.linalg.solve_triangular(a, b, upper=False),
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=False),
        [_wellcond(2, 3, 3), _general(2, 3, 4)],
    ),
    "solve_triangular_upper_right_unit": (
        lambda a, b: ag.linalg.solve_triangular(a, b, upper=True, left=False, unitriangular=True),
        lambda a, b: torch.linalg.solve_triangular(
            a, b, upper=True, left=False, unitriangular=True
        ),
        [_wellcond(3, 3), _general(2, 4, 3)],
    ),
    "triangular_solve": (
        ag.triangular_solve,
        torch.triangular_solve,
        [_general(2, 3, 2), _wellcond(3, 3)],
    ),
    "triangular_solve_transpose": (
        lambda b, a: b.triangular_solve(a, False, True, True),
        lambda b, a: b.triangular_solve(a, False, True, True),
        [_general(3, 2), _wellcond(2, 3, 3)],
    ),
    "qr_some": (ag.qr, torch.qr, [_general(4, 3)]),
    "qr_complete": (lambda a: a.qr(False), lambda a: a.qr(False), [_general(3, 3)]),
    "svd_some": (_svd_invariants(ag.svd), _svd_invariants(torch.svd), [_general(2, 4, 3)]),
    "svd_method_wide": (
        _svd_invariants(lambda a: a.svd()),
        _svd_invariants(lambda a: a.svd()),
        [_general(3, 5)],
    ),
    "svd_no_uv": (
        lambda a: ag.svd(a, compute_uv=False),
        lambda a: torch.svd(a, compute_uv=False),
        [_general(4, 3)],
    ),
    "lu_factor_square": (ag.linalg.lu_factor, torch.linalg.lu_factor, [_general(2, 4, 4)]),
    "lu_factor_wide": (ag.linalg.lu_factor, torch.linalg.lu_factor, [_general(3, 5)]),
    "lu_factor_tall": (ag.linalg.lu_factor, torch.linalg.lu_factor, [_general(2, 5, 3)]),
    "lu_factor_ex": (ag.linalg.lu_factor_ex, torch.linalg.lu_factor_ex, [_general(4, 4)]),
    # singular: U has a zero pivot, and torch's gradient is infinite or NaN there, not an error
    "lu_factor_ex_singular": (
        ag.linalg.lu_factor_ex,
        torch.linalg.lu_factor_ex,
        [np.ones((2, 3, 3)) * np.arange(1.0, 4.0)],
    ),
    "lu_factor_ex_singular_wide": (
        ag.linalg.lu_factor_ex,
        torch.linalg.lu_factor_ex,
        [np.ones((3, 4))],
    ),
    "linalg_lu_square": (ag.linalg.lu, torch.linalg.lu, [_general(2, 4, 4)]),
    "linalg_lu_wide": (ag.linalg.lu, torch.linalg.lu, [_general(3, 5)]),
    "linalg_lu_tall": (ag.linalg.lu, torch.linalg.lu, [_general(5, 2)]),
    "torch_lu_infos": (
        lambda a: ag.lu(a, get_infos=True),
        lambda a: torch.lu(a, get_infos=True),
        [_general(2, 3, 3)],
    ),
    "lu_unpack": (_lu_unpacked(ag), _lu_unpacked(torch), [_general(2, 4, 3)]),
    "lu_solve": (
        lambda a, b: ag.linalg.lu_solve(*ag.linalg.lu_factor(a), b),
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
        [_wellcond(2, 3, 3), _general(2, 3, 2)],
    ),
    "lu_solve_adjoint": (
        lambda a, b: ag.linalg.lu_solve(*ag.linalg.lu_factor(a), b, adjoint=True),
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True),
        [_wellcond(3, 3), _general(3, 2)],
    ),
    "lu_solve_right": (
        lambda a, b: ag.linalg.lu_solve(*ag.linalg.lu_factor(a), b, left=False),
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False),
        [_wellcond(3, 3), _general(2, 3)],
    ),
    "lu_solve_right_adjoint": (
        lambda a, b: ag.linalg.lu_solve(*ag.linalg.lu_factor(a), b, left=False, adjoint=True),
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False, adjoint=True),
        [_wellcond(3, 3), _general(4, 3)],
    ),
    "torch_lu_solve": (
        lambda a, b: b.lu_solve(*a.lu()),
        lambda a, b: b.lu_solve(*a.lu()),
        [_wellcond(3, 3), _general(3, 1)],
    ),
    "householder_product": (_householder(ag), _householder(torch), _geqrf_inputs(5, 3, (2,))),
    "orgqr": (ag.orgqr, torch.orgqr, _geqrf_inputs(4, 4)),
    "householder_partial_tau": (
        lambda a, t: ag.linalg.householder_product(a, t[..., :2]),
        lambda a, t: torch.linalg.householder_product(a, t[..., :2]),
        _geqrf_inputs(5, 3),
    ),
    "ormqr_left": (
        ag.ormqr,
        torch.ormqr,
        [*_geqrf_inputs(4, 3), _general(4, 2)],
    ),
    "ormqr_left_transpose": (
        lambda a, t, c: a.ormqr(t, c, True, True),
        lambda a, t, c: a.ormqr(t, c, True, True),
        [*_geqrf_inputs(4, 3), _general(4, 2)],
    ),
    "ormqr_right": (
        lambda a, t, c: ag.ormqr(a, t, c, left=False),
        lambda a, t, c: torch.ormqr(a, t, c, left=False),
        [*_geqrf_inputs(4, 4), _general(3, 4)],
    ),
    "ormqr_right_transpose": (
        lambda a, t, c: ag.ormqr(a, t, c, left=False, transpose=True),
        lambda a, t, c: torch.ormqr(a, t, c, left=False, transpose=True),
        [*_geqrf_inputs(3, 2), _general(2, 3)],
    ),
    "lstsq_tall": (
        lambda a, b: ag.linalg.lstsq(a, b)[0],
        lambda a, b: torch.linalg.lstsq(a, b)[0],
        [_general(2, 5, 3), _general(2, 5, 2)],
    ),
    "lstsq_rank": (
        lambda a, b: ag.linalg.lstsq(a, b)[2],
        lambda a, b: torch.linalg.lstsq(a, b)[2],
        [_general(5, 3), _general(5, 2)],
    ),
    "lstsq_vector": (
        lambda a, b: ag.linalg.lstsq(a, b).solution,
        lambda a, b: torch.linalg.lstsq(a, b).solution,
        [_general(3, 5, 3), _general(3, 5)],
    ),
    "lstsq_gelsd": (
        lambda a, b: ag.linalg.lstsq(a, b, driver="gelsd"),
        lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd"),
        [_general(5, 3), _general(5, 2)],
    ),
    "cond_2": (ag.linalg.cond, torch.linalg.cond, [_general(2, 3, 3)]),
    "cond_tall": (ag.linalg.cond, torch.linalg.cond, [_general(5, 3)]),
    "cond_neg2": (
        lambda a: ag.linalg.cond(a, -2),
        lambda a: torch.linalg.cond(a, -2),
        [_general(3, 3)],
    ),
    "cond_fro": (
        lambda a: ag.linalg.cond(a, "fro"),
        lambda a: torch.linalg.cond(a, "fro"),
        [_wellcond(2, 3, 3)],
    ),
    "cond_nuc": (
        lambda a: ag.linalg.cond(a, "nuc"),
        lambda a: torch.linalg.cond(a, "nuc"),
        [_wellcond(3, 3)],
    ),
    "cond_inf": (
        lambda a: ag.linalg.cond(a, math.inf),
        lambda a: torch.linalg.cond(a, math.inf),
        [_wellcond(3, 3)],
    ),
    "cond_1": (
        lambda a: ag.linalg.cond(a, 1),
        lambda a: torch.linalg.cond(a, 1),
        [_wellcond(3, 3)],
    ),
    "matrix_rank": (
        ag.linalg.matrix_rank,
        torch.linalg.matrix_rank,
        [np.stack([_general(4, 3), np.outer(_general(4), _general(3))])],
    ),
    "matrix_rank_hermitian_atol": (
        lambda a: ag.linalg.matrix_rank(a @ a.mT, hermitian=True, atol=1.0),
        lambda a: torch.linalg.matrix_rank(a @ a.mT, hermitian=True, atol=1.0),
        [_general(2, 4, 4)],
    ),
    "tensorinv": (ag.linalg.tensorinv, torch.linalg.tensorinv, [_wellcond(6, 6).reshape(2, 3, 6)]),
    "tensorinv_ind1": (
        lambda a: ag.linalg.tensorinv(a, ind=1),
        lambda a: torch.linalg.tensorinv(a, ind=1),
        [_wellcond(4, 4).reshape(4, 2, 2)],
    ),
    "tensorsolve": (
        ag.linalg.tensorsolve,
        torch.linalg.tensorsolve,
        [_wellcond(6, 6).reshape(2, 3, 6), _general(2, 3)],
    ),
    "tensorsolve_dims": (
        lambda a, b: ag.linalg.tensorsolve(a, b, dims=(0,)),
        lambda a, b: torch.linalg.tensorsolve(a, b, dims=(0,)),
        [_wellcond(6, 6).reshape(6, 2, 3), _general(2, 3)],
    ),
    "linalg_vander": (ag.linalg.vander, torch.linalg.vander, [_general(2, 4)]),
    "linalg_vander_N": (
        lambda x: ag.linalg.vander(x, N=6),
        lambda x: torch.linalg.vander(x, N=6),
        [np.array([0.0, 1.5, -2.0])],
    ),
    "vander": (ag.vander, torch.vander, [np.array([0.0, 1.0, -2.0, 3.0])]),
    "vander_increasing": (
        lambda x: ag.vander(x, 3, True),
        lambda x: torch.vander(x, 3, True),
        [_general(5)],
    ),
    "linalg_diagonal": (
        lambda a: ag.linalg.diagonal(a, offset=1, dim1=0, dim2=2),
        lambda a: torch.linalg.diagonal(a, offset=1, dim1=0, dim2=2),
        [_general(3, 2, 4)],
    ),
    "solve_ex": (ag.linalg.solve_ex, torch.linalg.solve_ex, [_wellcond(2, 3, 3), _general(2, 3)]),
    "inv_ex": (ag.linalg.inv_ex, torch.linalg.inv_ex, [_wellcond(3, 3)]),
    "cholesky_ex": (
        lambda a: ag.linalg.cholesky_ex(a, upper=True),
        lambda a: torch.linalg.cholesky_ex(a, upper=True),
        [_spd(2, 3, 3)],
    ),
}


# torch's backward of cond for these orders fails (it modifies the inverse it saved in place)
# and its vander's (an in-place write into a saved view)
NO_TORCH_GRAD = [
    "vander",
    "vander_increasing",
    "cond_1",
    "cond_fro",
    "cond_inf",
    "cond_nuc",
    "matrix_rank",
    "matrix_rank_hermitian_atol",
    "matrix_rank_tol_positional",
]


# torch warns once that its older names (torch.cholesky, torch.lu, ...) are deprecated
@pytest.mark.filterwarnings("ignore:.*is deprecated:UserWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_matches_torch(name: str) -> None:
    ag_fn, torch_fn, arrays = CASES[name]
    grad = name not in NO_TORCH_GRAD
    _compare(ag_fn, torch_fn, [a.copy() for a in arrays], grad=grad)


GRADCHECKED = [
    "det",
    "logdet",
    "pinv_tall",
    "pinv_wide",
    "matrix_power_neg",
    "matrix_exp",
    "matrix_exp_large",
    "cholesky_inverse",
    "cholesky_solve",
    "solve_triangular_upper_right_unit",
    "lu_factor_square",
    "lu_factor_wide",
    "lu_factor_tall",
    "linalg_lu_tall",
    "lu_solve",
    "lu_solve_right_adjoint",
    "householder_product",
    "ormqr_right_transpose",
    "lstsq_tall",
    "cond_2",
    "tensorsolve",
    "linalg_vander_N",
    "svd_some",
]
GRADGRADCHECKED = [
    "pinv_tall",
    "matrix_exp",
    "lu_factor_square",
    "lu_factor_wide",
    "lu_factor_tall",
    "householder_product",
]


def _floating_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*xs: Any) -> Any:
        outs = [o for o in _to_list(fn(*xs)) if o.dtype == ag.float64]
        return tuple(outs) if len(outs) > 1 else outs[0]

    return wrapped


@pytest.mark.parametrize("name", GRADCHECKED)
def test_linalg_gradcheck(name: str) -> None:
    ag_fn, _, arrays = CASES[name]
    if name == "matrix_exp_large":
        arrays = [a / 4 for a in arrays]  # finite differences of a large exponential are noisy
    xs = tuple(ag.tensor(a, dtype=ag.float64, requires_grad=True) for a in arrays)
    if name.startswith("cholesky_"):
        # torch's gradient reaches the triangle the value does not read (as if the factor were
        # the whole matrix): finite differences see the triangle only
        inner = ag_fn
        ag_fn = lambda *ts: inner(*ts[:-1], ts[-1].tril())  # noqa: E731
    fn = _floating_outputs(ag_fn)
    assert gradcheck(fn, xs)
    if name in GRADGRADCHECKED:
        assert gradgradcheck(fn, xs)


def test_ex_forms_report_failures_as_info() -> None:
    a = np.stack([_wellcond(3, 3), np.zeros((3, 3))])
    a[1, 0, 0] = 1.0  # singular: the second pivot is zero
    for fn, args in (
        ("inv_ex", (a,)),
        ("solve_ex", (a, _general(2, 3, 1))),
    ):
        out = getattr(ag.linalg, fn)(*(ag.tensor(x) for x in args))
        ref = getattr(torch.linalg, fn)(*(torch.tensor(x) for x in args))
        np.testing.assert_array_equal(out.info.numpy(), ref.info.numpy())
        assert out.info.dtype == ag.int32
        np.testing.assert_allclose(out[0].numpy()[0], ref[0].numpy()[0], rtol=1e-10)
        with pytest.raises(RuntimeError, match="singular"):
            getattr(ag.linalg, fn)(*(ag.tensor(x) for x in args), check_errors=True)
    s = np.stack([_spd(3, 3), np.diag([1.0, 2.0, -1.0])])
    out = ag.linalg.cholesky_ex(ag.tensor(s))
    ref = torch.linalg.cholesky_ex(torch.tensor(s))
    np.testing.assert_array_equal(out.info.numpy(), ref.info.numpy())
    np.testing.assert_allclose(out.L.numpy()[0], ref.L.numpy()[0], rtol=1e-10)
    lu = ag.linalg.lu_factor_ex(ag.tensor(a))
    tlu = torch.linalg.lu_factor_ex(torch.tensor(a))
    np.testing.assert_array_equal(lu.info.numpy(), tlu.info.numpy())
    np.testing.assert_array_equal(lu.pivots.numpy(), tlu.pivots.numpy())
    with pytest.raises(RuntimeError, match=r"U\[2,2\] is zero"):
        ag.linalg.lu_factor(ag.tensor(a))


def test_geqrf_matches_lapack() -> None:
    a = _general(2, 5, 3)
    h, tau = ag.geqrf(ag.tensor(a))
    th, ttau = torch.geqrf(torch.tensor(a))
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tau.numpy(), ttau.numpy(), rtol=1e-10, atol=1e-12)
    h2, _ = ag.tensor(a[0]).geqrf()
    np.testing.assert_allclose(h2.numpy(), th.numpy()[0], rtol=1e-10, atol=1e-12)


def test_matrix_exp_of_nilpotent_and_empty() -> None:
    # exp of a nilpotent matrix is a finite polynomial: exact
    n = ag.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]], dtype=ag.float64)
    expected = np.eye(3) + n.numpy() + n.numpy() @ n.numpy() / 2
    np.testing.assert_allclose(ag.matrix_exp(n).numpy(), expected, rtol=1e-14)
    assert ag.linalg.matrix_exp(ag.zeros(2, 0, 0)).shape == (2, 0, 0)


def test_removed_tensor_methods_raise_as_torch() -> None:
    x = ag.eye(2)
    for name in ("lstsq", "solve"):
        with pytest.raises(RuntimeError, match=r"deprecated since version 1\.9 and is now removed"):
            getattr(x, name)(x)
    for name in ("eig", "symeig"):
        with pytest.raises(RuntimeError, match=r"deprecated since version 1\.9 and is now removed"):
            getattr(x, name)()


ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (lambda: ag.linalg.eig(ag.eye(2)), NotImplementedError, "complex tensors"),
    (lambda: ag.linalg.eigvals(ag.eye(2)), NotImplementedError, "complex tensors"),
    (
        lambda: ag.linalg.matrix_power(ag.zeros(2, 3), 2),
        RuntimeError,
        "linalg.matrix_power: A must be batches of square matrices, but they are 2 by 3 matrices",
    ),
    (
        lambda: ag.linalg.matrix_power(ag.eye(2), 1.5),  # type: ignore[arg-type]
        TypeError,
        "must be int",
    ),
    (
        lambda: ag.linalg.matrix_exp(ag.zeros(2, 3)),
        RuntimeError,
        "linalg.matrix_exp: A must be batches of square matrices",
    ),
    (
        lambda: ag.linalg.pinv(ag.zeros(3)),
        RuntimeError,
        "linalg.pinv: The input tensor A must have at least 2 dimensions.",
    ),
    (
        lambda: ag.linalg.solve_triangular(ag.eye(3), ag.zeros(3), upper=True),
        RuntimeError,
        "linalg.solve_triangular: The input tensor B must have at least 2 dimensions.",
    ),
    (
        lambda: ag.linalg.solve_triangular(ag.eye(3), ag.zeros(2, 2), upper=True),
        RuntimeError,
        r"Incompatible shapes of A and B for the equation AX = B \(3x3 and 2x2\)",
    ),
    (
        lambda: ag.linalg.householder_product(ag.zeros(2, 3), ag.zeros(2)),
        RuntimeError,
        "input.shape\\[-2\\] must be greater than or equal to input.shape\\[-1\\]",
    ),
    (
        lambda: ag.linalg.householder_product(ag.zeros(4, 2), ag.zeros(3)),
        RuntimeError,
        "input.shape\\[-1\\] must be greater than or equal to tau.shape\\[-1\\]",
    ),
    (
        lambda: ag.linalg.tensorinv(ag.zeros(2, 3), ind=1),
        RuntimeError,
        "Expected self to satisfy the requirement prod\\(self.shape\\[ind:\\]\\) == "
        "prod\\(self.shape\\[:ind\\]\\), but got 3 != 2",
    ),
    (
        lambda: ag.linalg.tensorinv(ag.eye(2), ind=0),
        RuntimeError,
        "Expected a strictly positive integer for 'ind', but got 0",
    ),
    (
        lambda: ag.linalg.lstsq(ag.zeros(3, 2), ag.zeros(4, 1)),
        RuntimeError,
        "torch.linalg.lstsq: input.size\\(-2\\) should match other.size\\(-2\\)",
    ),
    (
        lambda: ag.linalg.lstsq(ag.zeros(3, 2), ag.zeros(3, 1), driver="x"),
        RuntimeError,
        "parameter `driver` should be one of",
    ),
    (
        lambda: ag.lu_unpack(ag.eye(2), ag.tensor([1, 2])),
        RuntimeError,
        "LU_pivots is expected to be a contiguous tensor of torch.int32 dtype",
    ),
    (lambda: ag.linalg.cond(ag.eye(2), "x"), RuntimeError, "linalg.cond got an invalid norm type"),
    (
        lambda: ag.linalg.det(ag.zeros(2, 2, dtype=ag.int64)),
        RuntimeError,
        "Expected a floating point or complex tensor as input. Got Long",
    ),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_as_torch(i: int) -> None:
    fn, exc, msg = ERRORS[i]
    with pytest.raises(exc, match=msg):
        fn()


@pytest.mark.filterwarnings("ignore:.*is deprecated:UserWarning")
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3), (3, 0), (2, 0, 3)])
@pytest.mark.parametrize(
    "name", ["lu_factor_ex", "lu", "pinv", "matrix_exp", "matrix_rank", "inv_ex", "geqrf"]
)
def test_empty_matrices(name: str, shape: tuple[int, ...]) -> None:
    a = np.zeros(shape)
    square = name in ("matrix_exp", "inv_ex")
    if square and shape[-1] != shape[-2]:
        return
    mod_ag = ag if name == "geqrf" else ag.linalg
    mod_t = torch if name == "geqrf" else torch.linalg
    outs = _to_list(getattr(mod_ag, name)(ag.tensor(a)))
    refs = _to_list(getattr(mod_t, name)(torch.tensor(a)))
    for o, r in zip(outs, refs, strict=True):
        assert tuple(o.shape) == tuple(r.shape)
        assert str(o.dtype) == str(r.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(o.numpy(), r.numpy())


@pytest.mark.parametrize("n", [0, 1, 2])
def test_vander_sizes(n: int) -> None:
    x = _general(3)
    np.testing.assert_allclose(
        ag.vander(ag.tensor(x), n).numpy(), torch.vander(torch.tensor(x), n).numpy()
    )
    if n <= 1:
        with pytest.raises(RuntimeError, match="N must be greater than 1"):
            ag.linalg.vander(ag.tensor(x), N=n)
        with pytest.raises(RuntimeError, match="N must be greater than 1"):
            torch.linalg.vander(torch.tensor(x), N=n)


def test_cond_of_singular_matrix_is_inf() -> None:
    a = np.ones((3, 3))
    for p in (1, math.inf, "fro"):
        out = ag.linalg.cond(ag.tensor(a), p)
        ref = torch.linalg.cond(torch.tensor(a), p)
        assert out.item() == ref.item() == math.inf


# ----- ldl_factor, ldl_solve (LAPACK's Bunch-Kaufman pivoting: the same LD and pivots) -----
def _symmetric_cases() -> list[np.ndarray]:
    rng = np.random.default_rng(17)
    out = []
    for n in (1, 2, 3, 5, 6):
        a = rng.standard_normal((n, n))
        out.append(a + a.T)
        z = a + a.T
        np.fill_diagonal(z, 0.0)  # forces 2 x 2 pivots
        out.append(z)
    out.append(rng.standard_normal((4, 4)))  # not symmetric: both read the lower triangle
    return out


@pytest.mark.parametrize("i", range(11))
def test_ldl_factor_matches_lapack(i: int) -> None:
    a = _symmetric_cases()[i]
    out = ag.linalg.ldl_factor_ex(ag.tensor(a))
    ref = torch.linalg.ldl_factor_ex(torch.tensor(a))
    np.testing.assert_allclose(out.LD.numpy(), ref.LD.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(out.pivots.numpy(), ref.pivots.numpy())
    assert out.pivots.dtype == ag.int32
    assert out.info.item() == ref.info.item()
    if ref.info.item():  # singular: torch's solve gives inf and NaN, ours raises
        return
    b = RNG.standard_normal((a.shape[0], 2))
    x = ag.linalg.ldl_solve(out.LD, out.pivots, ag.tensor(b))
    xr = torch.linalg.ldl_solve(ref.LD, ref.pivots, torch.tensor(b))
    np.testing.assert_allclose(x.numpy(), xr.numpy(), rtol=1e-8, atol=1e-10)


def test_ldl_batched_singular_and_errors() -> None:
    a = np.stack([_symmetric_cases()[4], np.zeros((3, 3))])
    out = ag.linalg.ldl_factor_ex(ag.tensor(a))
    ref = torch.linalg.ldl_factor_ex(torch.tensor(a))
    np.testing.assert_allclose(out.LD.numpy(), ref.LD.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(out.pivots.numpy(), ref.pivots.numpy())
    np.testing.assert_array_equal(out.info.numpy(), ref.info.numpy())
    ld, piv = ag.linalg.ldl_factor(ag.tensor(a[:1], dtype=ag.float32))
    assert ld.dtype == ag.float32
    assert ag.linalg.ldl_factor(ag.zeros(0, 0)).LD.shape == (0, 0)
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        ag.linalg.ldl_factor(ag.zeros(2, 3))
    with pytest.raises(RuntimeError, match="Expected B to have at least 2 dimensions"):
        ag.linalg.ldl_solve(ld, piv, ag.zeros(3))


F32 = ["det", "inverse", "pinv_tall", "matrix_power_neg", "matrix_exp", "cholesky_solve",
       "solve_triangular_lower", "lu_factor_tall", "linalg_lu_wide", "lu_solve",
       "householder_product", "ormqr_left", "lstsq_tall", "cond_2", "tensorsolve",
       "linalg_vander"]  # fmt: skip


@pytest.mark.filterwarnings("ignore:.*is deprecated:UserWarning")
@pytest.mark.parametrize("name", F32)
def test_float32_stays_float32(name: str) -> None:
    ag_fn, torch_fn, arrays = CASES[name]
    xs = [ag.tensor(a, dtype=ag.float32, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, dtype=torch.float32, requires_grad=True) for a in arrays]
    outs = [o for o in _to_list(ag_fn(*xs)) if o.is_floating_point()]
    refs = [r for r in _to_list(torch_fn(*ts)) if r.dtype.is_floating_point]
    assert [o.dtype for o in outs] == [ag.float32] * len(refs)
    for o, r in zip(outs, refs, strict=True):
        np.testing.assert_allclose(o.detach().numpy(), r.detach().numpy(), rtol=1e-4, atol=1e-5)
    gs = ag.grad_sync(sum(o.sum() for o in outs), xs)
    rs = torch.autograd.grad(sum(r.sum() for r in refs), ts)
    for g, r in zip(gs, rs, strict=True):
        assert g is not None
        assert g.dtype == ag.float32
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-3, atol=1e-4)
