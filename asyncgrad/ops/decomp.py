"""``ag.linalg``: norms, inverse, solve, determinants and the decompositions, with torch's
gradients (the rules are in asyncgrad/rules/linalg.py) and argument checks.

NOTE [linalg results]
Batched as torch's: every function takes ``(*, m, n)`` inputs and maps over the leading axes.
NumPy (or CuPy) computes the factorisations; a factorisation whose result is not unique (the
signs of singular and eigen vectors, Q and R's signs) may differ from torch's LAPACK calls by
those signs, as torch documents for different devices; gradients of losses that do not depend on
them agree. NumPy's ``LinAlgError`` (a singular matrix, a matrix that is not positive-definite)
is raised as ``ag.linalg.LinAlgError`` (a RuntimeError) naming the function, as torch does; CuPy
does not check, and gives NaNs there.
"""

from __future__ import annotations

import builtins
import math
from typing import Any, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import silent_fp
from ._record import NO_PARAMS, OPS, grad_enabled, make, record, wrap
from .creation import scalar_name

namespace = backend.namespace
LinAlgError = backend.LinAlgError


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def _check_float(name: str, a: Any) -> None:
    if a.dtype.kind != "f" or a.dtype == dtypes.float16:
        raise RuntimeError(
            f"linalg.{name}: Expected a floating point or complex tensor as input. Got "
            f"{scalar_name(a.dtype)}"
        )


def _check_matrix(name: str, a: Any, square: bool = True, what: str = "A") -> None:
    _check_float(name, a)
    if a.ndim < 2:
        raise RuntimeError(
            f"linalg.{name}: The input tensor {what} must have at least 2 dimensions."
        )
    if square and a.shape[-1] != a.shape[-2]:
        raise RuntimeError(
            f"linalg.{name}: {what} must be batches of square matrices, but they are "
            f"{a.shape[-2]} by {a.shape[-1]} matrices"
        )


def _call(name: str, fn: str, *args: Any, **kwargs: Any) -> Any:
    try:
        return backend.linalg_call(fn, *args, **kwargs)
    except backend.LinAlgError as e:
        raise backend.LinAlgError(f"linalg.{name}: {e}") from None


# ----- inv, det, slogdet, solve -----
@silent_fp  # See NOTE [Silent floating point]
def inv(A: Tensor) -> Tensor:
    """The inverse of each square matrix of ``A`` (``(*, n, n)``)."""
    a = A._array
    _check_matrix("inv", a)
    try:
        out = backend.linalg_call("inv", a)
    except backend.LinAlgError:
        raise backend.LinAlgError(
            "linalg.inv: The inversion could not be completed because the input matrix is singular."
        ) from None
    return make(OPS["linalg_inv_ex"], out, (A,))


@silent_fp  # See NOTE [Silent floating point]
def det(A: Tensor) -> Tensor:
    """The determinant of each square matrix of ``A``."""
    a = A._array
    _check_matrix("det", a)
    out = backend.ensure_array(_call("det", "det", a)).astype(a.dtype, copy=False)
    return make(OPS["linalg_det"], out, (A,), NO_PARAMS, (a,))  # NOTE [Ops save what they read]


@silent_fp  # See NOTE [Silent floating point]
def slogdet(A: Tensor) -> SlogdetResult:
    """``(sign, logabsdet)`` of the determinants of ``A``: ``logabsdet`` is differentiable
    (``-inf`` for a singular matrix, with sign 0), ``sign`` is not."""
    a = A._array
    _check_matrix("slogdet", a)
    sign, logabs = _call("slogdet", "slogdet", a)
    sign = backend.ensure_array(sign).astype(a.dtype, copy=False)
    logabs = backend.ensure_array(logabs).astype(a.dtype, copy=False)
    return SlogdetResult(wrap(sign), make(OPS["linalg_slogdet"], logabs, (A,), NO_PARAMS, (a,)))


def _is_vector_rhs(a: Any, b: Any) -> bool:
    # torch: B is a (batch of) vector(s) when it is 1-D, or has one dimension less than A and
    # A's batch shape as its own leading shape
    return bool(b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]))


@silent_fp  # See NOTE [Silent floating point]
def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """The solution ``X`` of ``A X = B`` (``X A = B`` with ``left=False``), batched and
    broadcast over the leading dimensions; ``B`` may be a (batch of) vector(s)."""
    a, b = A._array, B._array
    _check_matrix("solve", a)
    _check_float("solve", b)
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
            f"{scalar_name(a.dtype)} and B of type {scalar_name(b.dtype)} instead"
        )
    if not left:
        if b.ndim < 2:
            raise RuntimeError(
                "linalg.solve: Vector broadcasting of the left hand side is not supported for "
                "left=False. In this case linalg.solve is equivalent to B / A.squeeze(-1)"
            )
        return solve(A.mT, B.mT).mT
    if _is_vector_rhs(a, b):
        return _solve_matrix(A, B.unsqueeze(-1)).squeeze(-1)
    return _solve_matrix(A, B)


def _solve_matrix(A: Tensor, B: Tensor) -> Tensor:
    a, b = A._array, B._array
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(
            f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
            f"({a.shape[-2]}x{a.shape[-1]} and {b.shape[-2]}x{b.shape[-1]})"
        )
    try:
        batch = backend.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise RuntimeError(
            f"linalg.solve: the batch dimensions of A {tuple(a.shape[:-2])} and B "
            f"{tuple(b.shape[:-2])} do not broadcast"
        ) from None
    xp = namespace(a)
    a_b = xp.broadcast_to(a, (*batch, *a.shape[-2:]))
    b_b = xp.broadcast_to(b, (*batch, *b.shape[-2:]))
    try:
        out = backend.linalg_call("solve", a_b, b_b)
    except backend.LinAlgError:
        raise backend.LinAlgError(
            "linalg.solve: The solver failed because the input matrix is singular."
        ) from None
    return make(OPS["linalg_solve_ex"], out, (A, B), NO_PARAMS, (a, b))


# ----- cholesky, qr, svd, eigh -----
@silent_fp  # See NOTE [Silent floating point]
def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """The lower Cholesky factor ``L`` (``A = L L^T``) of each symmetric positive-definite
    matrix of ``A``; with ``upper=True`` its transpose."""
    a = A._array
    _check_matrix("cholesky", a)
    try:
        out = backend.linalg_call("cholesky", a)
    except backend.LinAlgError:
        raise backend.LinAlgError(
            "linalg.cholesky: The factorization could not be completed because the input is "
            "not positive-definite."
        ) from None
    L = make(OPS["linalg_cholesky_ex"], out, (A,))
    return L.mT if upper else L


_QR_MODES = ("reduced", "complete", "r")


@silent_fp  # See NOTE [Silent floating point]
def qr(A: Tensor, mode: str = "reduced") -> QRResult:
    """``(Q, R)`` with ``A = Q R``: ``mode`` "reduced" (Q is m x k), "complete" (m x m) or
    "r" (R only; Q is empty)."""
    a = A._array
    _check_matrix("qr", a, square=False)
    if mode not in _QR_MODES:
        raise RuntimeError(
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
            "'r', or 'complete'"
        )
    q, r = _call("qr", "qr", a, mode="complete" if mode == "complete" else "reduced")
    outs = [wrap(q), wrap(r)]
    if grad_enabled():
        record(OPS["linalg_qr"], outs, (A,), {"mode": mode})
    if mode == "r":
        return QRResult(wrap(backend.empty((0,), a.dtype, backend.device_of(a))), outs[1])
    return QRResult(outs[0], outs[1])


@silent_fp  # See NOTE [Silent floating point]
def svd(A: Tensor, full_matrices: bool = True) -> SVDResult:
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, singular values in descending order."""
    a = A._array
    _check_matrix("svd", a, square=False)
    u, s, vh = _call("svd", "svd", a, full_matrices=full_matrices)
    outs = [wrap(u), wrap(s), wrap(vh)]
    if grad_enabled():
        record(OPS["linalg_svd"], outs, (A,), {"full_matrices": bool(full_matrices)})
    return SVDResult(outs[0], outs[1], outs[2])


def svdvals(A: Tensor) -> Tensor:
    """The singular values of ``A``, in descending order."""
    return svd(A, full_matrices=False).S


@silent_fp  # See NOTE [Silent floating point]
def eigh(A: Tensor, UPLO: str = "L") -> EighResult:
    """``(eigenvalues, eigenvectors)`` of each symmetric matrix of ``A`` (read from its lower
    triangle, or upper with ``UPLO="U"``), eigenvalues in ascending order."""
    a = A._array
    _check_matrix("eigh", a)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    lam, v = _call("eigh", "eigh", a, UPLO)
    outs = [wrap(lam), wrap(v)]
    if grad_enabled():
        record(OPS["linalg_eigh"], outs, (A,), {"uplo": UPLO})
    return EighResult(outs[0], outs[1])


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:
    """The eigenvalues of each symmetric matrix of ``A``, ascending."""
    return eigh(A, UPLO).eigenvalues


# ----- norms -----
def vector_norm(
    x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Tensor:
    """The vector ``ord``-norm over ``dim`` (all elements when None): a number, ``inf``,
    ``-inf`` or 0."""
    from .reduce import norm

    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    if x.ndim == 0 and dim is not None:
        dim = None
    return norm(x, float(ord), dim, keepdim, dtype)


def _pair(dim: Any) -> tuple[int, int]:
    if isinstance(dim, (int, backend.integer)) or len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim}")
    return int(dim[0]), int(dim[1])


def matrix_norm(
    A: Tensor,
    ord: Any = "fro",
    dim: Any = (-2, -1),
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> Tensor:
    """The matrix norm over the two dims ``dim``: ``"fro"``, ``"nuc"``, ``inf``, ``-inf``, 1,
    -1 (largest/smallest absolute row or column sum), 2, -2 (largest/smallest singular
    value)."""
    from .reduce import amax, amin, norm, sum

    if dtype is not None:
        A = A.to(dtypes.to_dtype(dtype))
    _check_float("matrix_norm", A._array)
    nd = A.ndim
    if nd < 2:
        raise RuntimeError(
            "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."
        )
    d0, d1 = (d % nd for d in _pair(dim))
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({d0}, {d1})")
    if ord == "fro":
        return norm(A, 2.0, (d0, d1), keepdim)
    if ord == "nuc" or ord in (2, -2):
        # the singular values of the matrices moved to the last two dims
        rest = [d for d in range(nd) if d not in (d0, d1)]
        s = svdvals(A.permute(*rest, d0, d1))
        r = s.sum(-1) if ord == "nuc" else (s.amax(-1) if ord == 2 else s.amin(-1))
        if keepdim:
            r = r.unsqueeze(builtins.min(d0, d1)).unsqueeze(builtins.max(d0, d1))
        return r
    if ord in (1, -1, math.inf, -math.inf):
        # 1: max over columns of the column sums (sum over d0); inf: over rows (sum over d1)
        over, then = (d0, d1) if ord in (1, -1) else (d1, d0)
        sums = sum(A.abs(), over, True)
        pick = amax if ord in (1, math.inf) else amin
        r = pick(sums, then, True)
        return r if keepdim else r.squeeze((d0, d1))
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


def norm(
    A: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Tensor:
    """``vector_norm`` or ``matrix_norm`` by ``ord`` and ``dim``, as ``torch.linalg.norm``:
    without ``dim``, the 2-norm of all elements (``ord=None``) or the norm of the 1-D or 2-D
    input; an int ``dim`` is a vector norm, a 2-tuple a matrix norm."""
    if dim is not None:
        if isinstance(dim, (int, backend.integer)) or len(dim) == 1:
            d = dim if isinstance(dim, (int, backend.integer)) else dim[0]
            return vector_norm(A, 2 if ord is None else ord, d, keepdim, dtype=dtype)
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    if A.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    raise RuntimeError(
        f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
        f"{A.ndim}D."
    )
