"""``ag.linalg``: norms, inverse, solve, determinants and the decompositions (QR, SVD, eigh,
Cholesky, LU, LDL^T, Householder products), pinv, matrix_exp, lstsq and the ``*_ex`` forms, with
torch's gradients (the rules are in asyncgrad/rules/linalg.py and rules/matrix.py; the rest are
composites of differentiable ops) and argument checks.

NOTE [linalg results]
Batched as torch's: every function takes ``(*, m, n)`` inputs and maps over the leading axes.
NumPy (or CuPy) computes the factorisations; a factorisation whose result is not unique (the
signs of singular and eigen vectors, Q and R's signs) may differ from torch's LAPACK calls by
those signs, as torch documents for different devices; gradients of losses that do not depend on
them agree. NumPy's ``LinAlgError`` (a singular matrix, a matrix that is not positive-definite)
is raised as ``ag.linalg.LinAlgError`` (a RuntimeError) naming the function, as torch does; CuPy
does not check, and gives NaNs there. The LU and LDL^T factorisations are written here in array
code, as LAPACK's getf2 and sytf2 (the same pivots as torch's), since NumPy has neither.
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


# ----- matrix_power, matrix_exp, pinv, matrix_rank, cond -----
def _check_square(name: str, A: Tensor, what: str = "A") -> None:
    if A.ndim < 2:
        raise RuntimeError(
            f"linalg.{name}: The input tensor {what} must have at least 2 dimensions."
        )
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"linalg.{name}: {what} must be batches of square matrices, but they are "
            f"{A.shape[-2]} by {A.shape[-1]} matrices"
        )


def _batch_eye(A: Tensor) -> Tensor:
    """The identity of ``A``'s matrix size and dtype, expanded to ``A``'s batch shape."""
    n = A.shape[-1]
    ident = wrap(backend.eye(n, None, A.dtype, A.device))
    return ident.expand(*A.shape[:-2], n, n)


def matrix_power(A: Tensor, n: int) -> Tensor:
    """``A`` multiplied by itself ``n`` times (by repeated squaring); ``n = 0`` the identity,
    ``n < 0`` the power of ``inv(A)``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.linalg.matrix_power(ag.tensor([[1.0, 1.0], [0.0, 1.0]]), 3).tolist()
        [[1.0, 3.0], [0.0, 1.0]]
    """
    if isinstance(n, bool) or not isinstance(n, (int, backend.integer)):
        raise TypeError(f"matrix_power(): argument 'n' must be int, not {type(n).__name__}")
    _check_square("matrix_power", A)
    n = int(n)
    if n == 0:  # torch: the identity, with a (zero) gradient to A
        return A.masked_fill(wrap(backend.ones((), dtypes.bool_, A.device)), 0) + _batch_eye(A)
    if n < 0:
        A, n = inv(A), -n
    result: Tensor | None = None
    base = A
    while True:  # binary exponentiation: log2(n) products
        if n & 1:
            result = base if result is None else result.matmul(base)
        n >>= 1
        if not n:
            break
        base = base.matmul(base)
    assert result is not None
    return result if result is not A else A.clone()


@silent_fp  # See NOTE [Silent floating point]
def matrix_exp(A: Tensor) -> Tensor:
    """The matrix exponential ``sum_k A^k / k!`` of each square matrix of ``A`` (See NOTE
    [matrix_exp by scaling and squaring] in asyncgrad/rules/matrix.py)."""
    from ..rules.matrix import expm

    a = A._array
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(
            "linalg.matrix_exp: The input tensor A must have at least 2 dimensions."
            if a.ndim < 2
            else "linalg.matrix_exp: A must be batches of square matrices, but they are "
            f"{a.shape[-2]} by {a.shape[-1]} matrices"
        )
    _check_float("matrix_exp", a)
    return make(OPS["linalg_matrix_exp"], expm(a), (A,), NO_PARAMS, (a,))


def _tolerances(s_max: Any, shape: tuple[int, ...], atol: Any, rtol: Any, dtype: Any) -> Any:
    """torch's threshold ``max(atol, rtol * s_max)``: rtol defaults to eps * max(m, n) where
    atol is not given (or 0), else to 0."""
    xp = namespace(s_max)
    eps = float(xp.finfo(dtype).eps)
    a_arr = 0.0 if atol is None else (atol._array if isinstance(atol, Tensor) else atol)
    if rtol is None:
        r_arr: Any = eps * max(shape[-2:]) if (atol is None or _all_zero(a_arr)) else 0.0
    else:
        r_arr = rtol._array if isinstance(rtol, Tensor) else rtol
    return xp.maximum(a_arr, r_arr * s_max)


def _largest(s: Any) -> Any:
    """The largest of each row of values (0 for none; CuPy's max has no ``initial``)."""
    if s.shape[-1] == 0:
        return namespace(s).zeros(s.shape[:-1], dtype=s.dtype)
    return s.max(-1)


def _all_zero(x: Any) -> bool:
    return bool((namespace(x).asarray(x) == 0).all()) if not isinstance(x, float) else x == 0


@silent_fp  # See NOTE [Silent floating point]
def pinv(
    A: Tensor,
    rcond: Any = None,
    hermitian: bool = False,
    *,
    atol: Any = None,
    rtol: Any = None,
) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix of ``A``: singular values below
    ``max(atol, rtol * s_max)`` count as zero (``rcond`` is rtol's old name)."""
    a = A._array
    _check_matrix("pinv", a, square=False)
    if rcond is not None:
        rtol = rcond
    xp = namespace(a)
    if hermitian:
        _check_matrix("eigh", a)
        lam, v = _call("pinv", "eigh", a)
        s_abs = xp.abs(lam)
        thr = _tolerances(_largest(s_abs), a.shape, atol, rtol, a.dtype)
        keep = s_abs > xp.expand_dims(thr, -1)
        inv_s = xp.where(keep, 1.0 / xp.where(keep, lam, 1.0), 0.0)
        out = xp.matmul(v * xp.expand_dims(inv_s, -2), xp.swapaxes(v, -1, -2))
    else:
        u, s, vh = _call("pinv", "svd", a, full_matrices=False)
        thr = _tolerances(_largest(s), a.shape, atol, rtol, a.dtype)
        keep = s > xp.expand_dims(thr, -1)
        inv_s = xp.where(keep, 1.0 / xp.where(keep, s, 1.0), 0.0)
        out = xp.matmul(xp.swapaxes(vh, -1, -2) * xp.expand_dims(inv_s, -2), xp.swapaxes(u, -1, -2))
    out = out.astype(a.dtype, copy=False)
    return make(OPS["linalg_pinv"], out, (A,), NO_PARAMS, (a,))


def matrix_rank(
    A: Tensor, tol: Any = None, hermitian: bool = False, *, atol: Any = None, rtol: Any = None
) -> Tensor:
    """The number of singular values of each matrix of ``A`` above ``max(atol, rtol *
    s_max)`` (int64; ``tol`` is atol's old name)."""
    a = A._array
    _check_matrix("matrix_rank", a, square=False)
    if tol is not None:
        atol, rtol = tol, 0.0
    xp = namespace(a)
    if hermitian:
        s = xp.abs(_call("matrix_rank", "eigvalsh", a))
    else:
        s = _call("matrix_rank", "svd", a, compute_uv=False)
    thr = _tolerances(_largest(s), a.shape, atol, rtol, a.dtype)
    return wrap(backend.ensure_array((s > xp.expand_dims(thr, -1)).sum(-1).astype(dtypes.int64)))


def cond(A: Tensor, p: Any = None) -> Tensor:
    """The condition number of each matrix of ``A`` in norm ``p`` (None or 2: the ratio of the
    largest to the smallest singular value; -2 its inverse; others
    ``matrix_norm(A, p) * matrix_norm(inv(A), p)``)."""
    _check_float("cond", A._array)
    if A.ndim < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if p is None or p in (2, -2):
        s = svdvals(A)
        if s.shape[-1] == 0:
            return s.sum(-1)
        ratio = s[..., 0] / s[..., -1]
        return ratio if p != -2 else s[..., -1] / s[..., 0]
    if p not in ("fro", "nuc", 1, -1, math.inf, -math.inf):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"linalg.cond(ord={p}): A must be batches of square matrices, but they are "
            f"{A.shape[-2]} by {A.shape[-1]} matrices"
        )
    try:
        ainv = inv(A)
    except backend.LinAlgError:
        # a singular matrix: infinite, as torch
        return matrix_norm(A, p) * math.inf
    return matrix_norm(A, p) * matrix_norm(ainv, p)


# ----- solve_triangular, the *_ex functions -----
def _triangle(A: Tensor, upper: bool, unitriangular: bool) -> Tensor:
    t = A.triu() if upper else A.tril()
    if unitriangular:
        t = (A.triu(1) if upper else A.tril(-1)) + _batch_eye(A)
    return t


def solve_triangular(
    A: Tensor, B: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False
) -> Tensor:
    """The solution ``X`` of ``A X = B`` (``X A = B`` with ``left=False``) for triangular
    ``A``, read from its upper or lower triangle only (with ones on the diagonal where
    ``unitriangular``), batched and broadcast."""
    if A.dtype != B.dtype and A.dtype.kind == B.dtype.kind == "f":  # torch promotes here
        wide = dtypes.float64 if dtypes.float64 in (A.dtype, B.dtype) else A.dtype
        A, B = A.to(wide), B.to(wide)
    a, b = A._array, B._array
    _check_matrix("solve_triangular", a)
    _check_float("solve_triangular", b)
    if b.ndim < 2:
        raise RuntimeError(
            "linalg.solve_triangular: The input tensor B must have at least 2 dimensions."
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            "linalg.solve_triangular: Expected A and B to have the same dtype, but found A of "
            f"type {scalar_name(a.dtype)} and B of type {scalar_name(b.dtype)} instead"
        )
    n = a.shape[-1]
    if (b.shape[-2] if left else b.shape[-1]) != n:
        raise RuntimeError(
            "linalg.solve_triangular: Incompatible shapes of A and B for the equation "
            f"{'AX = B' if left else 'XA = B'} ({a.shape[-2]}x{a.shape[-1]} and "
            f"{b.shape[-2]}x{b.shape[-1]})"
        )
    t = _triangle(A, upper, unitriangular)
    if left:
        return _solve_matrix(t, B)
    return _solve_matrix(t.mT, B.mT).mT


class SolveExResult(NamedTuple):
    result: Tensor
    info: Tensor


class InvExResult(NamedTuple):
    inverse: Tensor
    info: Tensor


class CholeskyExResult(NamedTuple):
    L: Tensor
    info: Tensor


def _zero_info(A: Tensor) -> Tensor:
    return wrap(backend.zeros(tuple(A.shape[:-2]), dtypes.int32, A.device))


def _lu_info(A: Tensor) -> Tensor:
    """LAPACK's getrf info: the 1-based index of the first zero pivot of each matrix, 0 where
    there is none."""
    return lu_factor_ex(A.detach()).info


def _nan_where(t: Tensor, info: Tensor) -> Tensor:
    bad = wrap(info._array != 0).reshape(*info.shape, 1, 1)
    return t.masked_fill(bad, math.nan)


def solve_ex(
    A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False
) -> SolveExResult:
    """``(result, info)``: ``solve`` with LAPACK's info (0, or the index of the first zero
    pivot of a singular matrix, whose result is NaN) instead of an error, unless
    ``check_errors``."""
    try:
        return SolveExResult(solve(A, B, left=left), _zero_info(A))
    except backend.LinAlgError:
        if check_errors:
            raise
    info = _lu_info(A)
    ok = (info == 0).reshape(*info.shape, 1, 1)
    safe = where_(ok, A, _batch_eye(A))
    res = solve(safe, B, left=left)
    if res.ndim == B.ndim and B.ndim >= 2 and res.ndim >= 2:
        res = res.masked_fill(wrap(info._array != 0).reshape(*info.shape, 1, 1), math.nan)
    return SolveExResult(res, info)


def where_(cond: Tensor, x: Tensor, y: Tensor) -> Tensor:
    from .pointwise import where

    return where(cond, x, y)


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvExResult:
    """``(inverse, info)``: ``inv`` with LAPACK's info instead of an error (the inverse of a
    singular matrix is NaN), unless ``check_errors``."""
    try:
        return InvExResult(inv(A), _zero_info(A))
    except backend.LinAlgError:
        if check_errors:
            raise
    info = _lu_info(A)
    ok = (info == 0).reshape(*info.shape, 1, 1)
    res = inv(where_(ok, A, _batch_eye(A)))
    return InvExResult(_nan_where(res, info), info)


def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False) -> CholeskyExResult:
    """``(L, info)``: ``cholesky`` with LAPACK's info (0, or the order of the leading minor
    that is not positive-definite, whose factor is NaN) instead of an error, unless
    ``check_errors``."""
    try:
        return CholeskyExResult(cholesky(A, upper=upper), _zero_info(A))
    except backend.LinAlgError:
        if check_errors:
            raise
    # only on failure: the minors of each failed matrix, a loop over the batch and the order
    a = A.detach()._array
    flat = a.reshape(-1, *a.shape[-2:])
    info = [0] * flat.shape[0]
    for i in range(flat.shape[0]):
        for k in range(1, a.shape[-1] + 1):
            try:
                backend.linalg_call("cholesky", flat[i, :k, :k])
            except backend.LinAlgError:
                info[i] = k
                break
    xp = namespace(a)
    info_t = wrap(xp.asarray(info, dtype=dtypes.int32).reshape(a.shape[:-2]))
    ok = (info_t == 0).reshape(*info_t.shape, 1, 1)
    res = cholesky(where_(ok, A, _batch_eye(A)), upper=upper)
    return CholeskyExResult(_nan_where(res, info_t), info_t)


# ----- tensorinv, tensorsolve, vander, vecdot, diagonal, eig -----
def tensorinv(A: Tensor, ind: int = 2) -> Tensor:
    """The inverse of ``A`` seen as a matrix of its first ``ind`` dims by the rest: shape
    ``A.shape[ind:] + A.shape[:ind]``."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = math.prod(A.shape[:ind]), math.prod(A.shape[ind:])
    if rows != cols:
        raise RuntimeError(
            "Expected self to satisfy the requirement prod(self.shape[ind:]) == "
            f"prod(self.shape[:ind]), but got {cols} != {rows}"
        )
    try:
        res = inv(A.reshape(rows, cols))
    except backend.LinAlgError:
        raise backend.LinAlgError(
            "linalg.tensorinv: The inversion could not be completed because the input matrix is "
            "singular."
        ) from None
    return res.reshape(*A.shape[ind:], *A.shape[:ind])


def tensorsolve(A: Tensor, B: Tensor, dims: Any = None) -> Tensor:
    """The ``X`` with ``tensordot(A, X, X.ndim) = B``: shape ``A.shape[B.ndim:]`` (after
    moving ``dims`` of ``A`` to the end)."""
    if dims is not None:
        ds = [d % A.ndim for d in dims]
        A = A.permute(*[d for d in range(A.ndim) if d not in ds], *ds)
    rest = tuple(A.shape[B.ndim :])
    rows, cols = math.prod(A.shape[: B.ndim]), math.prod(rest)
    if rows != cols:
        raise RuntimeError(
            "Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
            f"prod(self.shape[:other.ndim]), but got {cols} != {rows}"
        )
    return solve(A.reshape(rows, cols), B.reshape(rows)).reshape(rest)


def linalg_vander(x: Tensor, *, N: int | None = None) -> Tensor:
    """The Vandermonde matrix of increasing powers ``x**0, ..., x**(N-1)`` along a new last
    dim (N defaults to ``x.shape[-1]``), batched over ``x``'s leading dims."""
    if x.ndim == 0:  # as a 1-element vector, as torch's
        x = x.reshape(1)
    n = x.shape[-1] if N is None else N
    if n <= 1:
        raise RuntimeError("N must be greater than 1.")
    return powers(x, n)


def powers(x: Tensor, n: int) -> Tensor:
    """``x**0, ..., x**(n-1)`` along a new last dim, each the previous times x (exact at 0,
    as torch's cumulative product)."""
    if n == 0:
        return x.unsqueeze(-1)[..., :0] * 1
    from .shape import stack

    cols = [x.new_ones(x.shape)]
    for _ in range(1, n):
        cols.append(cols[-1] * x)
    return stack(cols, -1)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """The dot products of ``x`` and ``y`` (broadcast) along ``dim``."""
    _check_float("vecdot", x._array)
    if x.dtype != y.dtype:
        raise RuntimeError(
            "linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
            f"{scalar_name(x.dtype)} and y of type {scalar_name(y.dtype)} instead"
        )
    return (x * y).sum(dim)


def linalg_diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """The diagonal of the matrices over ``dim1`` and ``dim2`` (a view), as the last dim."""
    return A.diagonal(offset, dim1, dim2)


_COMPLEX = (
    "asyncgrad has no complex tensors, and the eigenvalues of a general real matrix are complex "
    "(use linalg.eigh or linalg.eigvalsh for a symmetric matrix)"
)


def eig(A: Tensor) -> Any:
    """Not available: torch returns complex tensors (See ``_COMPLEX``)."""
    raise NotImplementedError(f"linalg.eig: {_COMPLEX}")


def eigvals(A: Tensor) -> Any:
    """Not available: torch returns complex tensors (See ``_COMPLEX``)."""
    raise NotImplementedError(f"linalg.eigvals: {_COMPLEX}")


# ----- lstsq -----
class LstsqResult(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A: Tensor, B: Tensor, rcond: Any = None, *, driver: str | None = None) -> LstsqResult:
    """The least-squares solution ``X`` minimising ``||A X - B||`` (the minimum-norm one for a
    rank-deficient ``A``), computed as ``pinv(A) @ B`` (differentiable in both); with the
    residuals, rank and singular values that torch's CPU ``driver`` returns (the default
    "gelsy": the rank only)."""
    a, b = A._array, B._array
    if a.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    _check_matrix("lstsq", a, square=False, what="input")
    if driver is not None and driver not in _DRIVERS:
        raise RuntimeError(f"parameter `driver` should be one of ({', '.join(_DRIVERS)})")
    if a.dtype != b.dtype:
        raise RuntimeError(
            "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
            f"input's dtype {scalar_name(a.dtype)} and other's dtype {scalar_name(b.dtype)}"
        )
    if not (a.ndim >= b.ndim and a.ndim - b.ndim <= 1):
        raise RuntimeError(
            "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
            "(input.dim() - other.dim()) <= 1"
        )
    vec = b.ndim == a.ndim - 1
    Bm = B.unsqueeze(-1) if vec else B
    if Bm.shape[-2] != a.shape[-2]:
        raise RuntimeError(
            "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"
            if not vec
            else "torch.linalg.lstsq: input.size(-2) should match other.size(-1)"
        )
    drv = driver or "gelsy"
    m, n = a.shape[-2:]
    xp = namespace(a)
    s = _call("lstsq", "svd", a, compute_uv=False)
    eps = float(xp.finfo(a.dtype).eps)
    rc = eps * max(m, n) if rcond is None or rcond < 0 else rcond
    x = pinv(A, rtol=rc).matmul(Bm)
    rank_arr = (s > rc * namespace(s).expand_dims(_largest(s), -1)).sum(-1).astype(dtypes.int64)
    empty = wrap(backend.empty((0,), a.dtype, backend.device_of(a)))
    rank = (
        wrap(backend.ensure_array(rank_arr))
        if drv != "gels"
        else wrap(backend.empty((0,), dtypes.int64, backend.device_of(a)))
    )
    sv = wrap(s) if drv in ("gelsd", "gelss") else empty
    residuals = empty
    if m > n and drv != "gelsy" and bool((rank_arr == n).all()):
        residuals = ((A.matmul(x) - Bm) ** 2).sum(-2)
    return LstsqResult(x.squeeze(-1) if vec else x, residuals, rank, sv)


# ----- LU: lu_factor(_ex), lu, lu_solve -----
class LUFactorResult(NamedTuple):
    LU: Tensor
    pivots: Tensor


class LUFactorExResult(NamedTuple):
    LU: Tensor
    pivots: Tensor
    info: Tensor


class LUResult(NamedTuple):
    P: Tensor
    L: Tensor
    U: Tensor


def _getrf(a: Any, pivot: bool) -> tuple[Any, Any, Any]:
    """LAPACK's getrf in array code: the packed LU of each matrix of ``a`` (partial pivoting:
    the first largest magnitude of the column), its 1-based int32 pivots and info. A loop over
    the columns, each step vectorised over the batch and the trailing block."""
    xp = namespace(a)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    batch = a.shape[:-2]
    nb = math.prod(batch)
    lu = xp.array(a, copy=True).reshape(nb, m, n)
    rows = xp.arange(nb)
    piv = xp.empty((nb, k), dtype=dtypes.int32)
    info = xp.zeros((nb,), dtype=dtypes.int32)
    for j in range(k):
        if pivot:
            p = j + xp.argmax(xp.abs(lu[:, j:, j]), axis=1)
            row_j = lu[rows, j, :].copy()
            lu[rows, j, :] = lu[rows, p, :]
            lu[rows, p, :] = row_j
            piv[:, j] = p + 1
        else:
            piv[:, j] = j + 1
        d = lu[:, j, j]
        zero = d == 0
        info = xp.where((info == 0) & zero, j + 1, info).astype(dtypes.int32)
        col = lu[:, j + 1 :, j] / xp.where(zero, 1.0, d)[:, None]
        col = xp.where(zero[:, None], lu[:, j + 1 :, j], col)
        lu[:, j + 1 :, j] = col
        lu[:, j + 1 :, j + 1 :] -= col[:, :, None] * lu[:, j, None, j + 1 :]
    return lu.reshape(a.shape), piv.reshape(*batch, k), info.reshape(batch)


def _permutation(piv: Any, m: int) -> Any:
    """The row permutation ``perm`` (LU = A[perm]) that the LAPACK row swaps ``piv`` make."""
    xp = namespace(piv)
    batch = piv.shape[:-1]
    nb = math.prod(batch)
    flat = piv.reshape(nb, piv.shape[-1]).astype(dtypes.int64) - 1
    perm = xp.broadcast_to(xp.arange(m), (nb, m)).copy()
    rows = xp.arange(nb)
    for j in range(flat.shape[1]):
        p = flat[:, j]
        at_j = perm[rows, j].copy()
        perm[rows, j] = perm[rows, p]
        perm[rows, p] = at_j
    return perm.reshape(*batch, m)


def _perm_matrix(perm: Any, dtype: Any) -> Any:
    """P with A = P L U: column i of P is e_perm[i]."""
    xp = namespace(perm)
    m = perm.shape[-1]
    return (xp.arange(m)[:, None] == xp.expand_dims(perm, -2)).astype(dtype)


@silent_fp  # See NOTE [Silent floating point]
def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False) -> LUFactorExResult:
    """``(LU, pivots, info)``: the packed LU factorisation ``A = P L U`` (L unit lower
    triangular below the diagonal of LU, U on and above it), LAPACK's 1-based int32 row
    swaps ``pivots`` and ``info`` (the index of the first zero pivot, or 0)."""
    a = A._array
    if a.ndim < 2:
        raise RuntimeError(
            "torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: "
            f"{list(a.shape)} instead"
        )
    _check_matrix("lu_factor_ex", a, square=False)
    lu, piv, info = _getrf(a, pivot)
    if check_errors and bool((info != 0).any()):
        raise backend.LinAlgError(
            "torch.linalg.lu_factor_ex: U[{0},{0}] is zero and using it on lu_solve would "
            "result in a division by zero. If you still want to perform the factorization, "
            "consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)".format(
                int(info.reshape(-1)[(info.reshape(-1) != 0).argmax()])
            )
        )
    pm = _perm_matrix(_permutation(piv, a.shape[-2]), a.dtype)
    out = make(OPS["linalg_lu_factor_ex"], lu, (A,), {"perm_matrix": pm}, (a,))
    return LUFactorExResult(out, wrap(piv), wrap(info))


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactorResult:
    """``(LU, pivots)`` of ``lu_factor_ex``; a singular matrix raises, as torch's."""
    res = lu_factor_ex(A, pivot=pivot)
    info = res.info._array
    if bool((info != 0).any()):
        first = int(info.reshape(-1)[(info.reshape(-1) != 0).argmax()])
        raise backend.LinAlgError(
            f"torch.linalg.lu_factor: U[{first},{first}] is zero and using it on lu_solve "
            "would result in a division by zero. If you still want to perform the "
            "factorization, consider calling linalg.lu(A, pivot) or "
            "linalg.lu_factor_ex(A, pivot)"
        )
    return LUFactorResult(res.LU, res.pivots)


def lu_unpack(
    LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True, unpack_pivots: bool = True
) -> LUResult:
    """``(P, L, U)`` from the packed ``(LU, pivots)`` of ``lu_factor`` (L and U are empty
    without ``unpack_data``, P without ``unpack_pivots``)."""
    if LU_pivots.dtype != dtypes.int32:
        raise RuntimeError(
            "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 "
            "dtype. Note: this function is intended to be used with the output produced by "
            "torch.linalg.lu_factor"
        )
    if LU_data.ndim < 2:
        raise RuntimeError("torch.lu_unpack: Expected tensor with 2 or more dimensions.")
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    empty = wrap(backend.empty((0,), LU_data.dtype, LU_data.device))
    if unpack_data:
        eye = wrap(backend.eye(m, k, LU_data.dtype, LU_data.device))
        L = LU_data.tril(-1)[..., :, :k] + eye
        U = LU_data.triu()[..., :k, :]
    else:
        L = U = empty
    if unpack_pivots:
        P = wrap(_perm_matrix(_permutation(LU_pivots._array, m), LU_data.dtype))
    else:
        P = empty
    return LUResult(P, L, U)


def lu(A: Tensor, *, pivot: bool = True) -> LUResult:
    """``(P, L, U)`` with ``A = P L U``: P a permutation, L (m x k) unit lower triangular, U
    (k x n) upper triangular, ``k = min(m, n)``."""
    _check_matrix("lu", A._array, square=False)
    lu_, piv, _ = lu_factor_ex(A, pivot=pivot)
    return lu_unpack(lu_, piv)


def lu_solve(
    LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False
) -> Tensor:
    """The solution ``X`` of ``A X = B`` (``A^T X = B`` with ``adjoint``, ``X A = B`` with
    ``left=False``) from ``A``'s ``lu_factor``; differentiable in ``LU`` and ``B``."""
    _check_matrix("lu_solve", LU._array, what="LU")
    if B.ndim < 2:
        raise RuntimeError("linalg.lu_solve: The input tensor B must have at least 2 dimensions.")
    n = LU.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(
            f"linalg.lu_solve: Incompatible shapes of A and B for the equation "
            f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})"
        )
    if not left:  # X A = B: A^T X^T = B^T
        return lu_solve(LU, pivots, B.mT, left=True, adjoint=not adjoint).mT
    P = wrap(_perm_matrix(_permutation(pivots._array, n), LU.dtype))
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B
        y = solve_triangular(LU, P.mT.matmul(B), upper=False, unitriangular=True)
        return solve_triangular(LU, y, upper=True)
    # A^T = U^T L^T P^T: X = P L^-T U^-T B
    y = solve_triangular(LU.mT, B, upper=False)
    return P.matmul(solve_triangular(LU.mT, y, upper=True, unitriangular=True))


# ----- Householder: householder_product, geqrf, ormqr -----
def _reflectors(A: Tensor, k: int) -> Tensor:
    """The Householder vectors of ``A``'s first k columns: ones on the diagonal, A's entries
    below it, zeros above (a differentiable composite)."""
    m = A.shape[-2]
    eye = wrap(backend.eye(m, k, A.dtype, A.device))
    return A[..., :, :k].tril(-1) + eye


def apply_reflectors(
    A: Tensor, tau: Tensor, C: Tensor, *, left: bool = True, transpose: bool = False
) -> Tensor:
    """``Q C`` (``Q^T C``, ``C Q``, ``C Q^T``) for Q = H_1 ... H_k, H_i = I - tau_i v_i v_i^T,
    applied one reflector at a time (a loop over the k reflectors)."""
    k = tau.shape[-1]
    V = _reflectors(A, k)
    # Q C = H_1 (... (H_k C)): the last reflector first; Q^T C: the first first; right-sided
    # products the other way round
    order = list(range(k))
    if left != transpose:
        order.reverse()
    for i in order:
        v = V[..., :, i : i + 1]
        t = tau[..., i : i + 1].unsqueeze(-1)
        if left:
            C = C - (t * v).matmul(v.mT.matmul(C))
        else:
            C = C - C.matmul(v).matmul(t * v.mT)
    return C


def householder_product(A: Tensor, tau: Tensor) -> Tensor:
    """The first n columns of Q = H_1 ... H_k from the Householder vectors below the diagonal
    of ``A`` (m x n) and their scales ``tau`` (k <= n), as LAPACK's orgqr."""
    a = A._array
    if a.ndim < 2:
        raise RuntimeError(
            "torch.linalg.householder_product: input must have at least 2 dimensions."
        )
    _check_matrix("householder_product", a, square=False)
    m, n = a.shape[-2], a.shape[-1]
    if m < n:
        raise RuntimeError(
            "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
            "input.shape[-1]"
        )
    if tau.shape[-1] > n:
        raise RuntimeError(
            "torch.linalg.householder_product: input.shape[-1] must be greater than or equal to "
            "tau.shape[-1]"
        )
    if tau.ndim != A.ndim - 1 or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(
            "torch.linalg.householder_product: Expected batch dimensions of tau to be equal to "
            f"input.shape[:-2], but got {list(tau.shape[:-1])}"
        )
    if tau.dtype != A.dtype:
        raise RuntimeError(
            "torch.linalg.householder_product: tau dtype "
            f"{scalar_name(tau.dtype)} does not match input dtype {scalar_name(A.dtype)}"
        )
    C = wrap(backend.eye(m, n, A.dtype, A.device)).expand(*A.shape[:-2], m, n)
    return apply_reflectors(A, tau, C)


# ----- LDL^T: ldl_factor(_ex), ldl_solve -----
class LDLFactorResult(NamedTuple):
    LD: Tensor
    pivots: Tensor


class LDLFactorExResult(NamedTuple):
    LD: Tensor
    pivots: Tensor
    info: Tensor


# NOTE [Bunch-Kaufman as LAPACK's sytf2]
# ldl_factor follows LAPACK's unblocked dsytf2 (lower), which torch's sytrf runs for matrices of
# up to its block size (64): at column k, a 1 x 1 pivot unless the column's largest
# off-diagonal entry is much larger (alpha = (1 + sqrt(17)) / 8), else a swap or a 2 x 2 pivot;
# pivots > 0 name the row swapped with k, a pair of equal negative pivots a 2 x 2 block. Each
# matrix takes its own choices, so this loops over the matrices of a batch and the columns of
# each; every step is one rank-1 or rank-2 update of the trailing block, kept symmetric (both
# triangles) so rows and columns swap alike. The earlier columns of L are not swapped (LAPACK's
# L is a product of permuted elementary factors).
_BK_ALPHA = (1.0 + math.sqrt(17.0)) / 8.0


def _sytf2(a: Any) -> tuple[Any, Any, int]:
    """One matrix's compact LD, 1-based int32 pivots and info (See NOTE [Bunch-Kaufman as
    LAPACK's sytf2])."""
    xp = namespace(a)
    n = a.shape[-1]
    w = xp.tril(a) + xp.swapaxes(xp.tril(a, -1), -1, -2)  # symmetric, from the lower triangle
    w = xp.array(w, copy=True)
    piv = [0] * n
    info = 0
    k = 0
    while k < n:
        step = 1
        absakk = float(abs(w[k, k]))
        if k + 1 < n:
            col = xp.abs(w[k + 1 :, k])
            imax = k + 1 + int(xp.argmax(col))
            colmax = float(col[imax - k - 1])
        else:
            imax, colmax = k, 0.0
        if max(absakk, colmax) == 0.0 or math.isnan(absakk):
            if info == 0:
                info = k + 1
            kp = k
        else:
            if absakk >= _BK_ALPHA * colmax:
                kp = k
            else:
                # the largest off-diagonal magnitude in row (and column) imax of the block
                others = xp.abs(w[k:, imax])
                others[imax - k] = 0
                rowmax = float(others.max())
                if absakk >= _BK_ALPHA * colmax * (colmax / rowmax):
                    kp = k
                elif float(abs(w[imax, imax])) >= _BK_ALPHA * rowmax:
                    kp = imax
                else:
                    kp, step = imax, 2
            kk = k + step - 1
            if kp != kk:  # swap rows and columns kk and kp of the trailing block
                idx = xp.arange(k, n)
                idx[kk - k], idx[kp - k] = kp, kk
                w[k:, k:] = w[idx][:, idx]
            if step == 1:
                d = w[k, k]
                x = w[k + 1 :, k].copy()
                w[k + 1 :, k + 1 :] -= xp.outer(x, x) / d
                w[k + 1 :, k] = x / d
                w[k, k + 1 :] = x / d
            else:
                dm = w[k : k + 2, k : k + 2].copy()
                c = w[k + 2 :, k : k + 2].copy()
                lc = xp.swapaxes(backend.linalg_call("solve", dm, xp.swapaxes(c, 0, 1)), 0, 1)
                w[k + 2 :, k + 2 :] -= xp.matmul(lc, xp.swapaxes(c, 0, 1))
                w[k + 2 :, k : k + 2] = lc
                w[k : k + 2, k + 2 :] = xp.swapaxes(lc, 0, 1)
        if step == 1:
            piv[k] = kp + 1
        else:
            piv[k] = piv[k + 1] = -(kp + 1)
        k += step
    return xp.tril(w), xp.asarray(piv, dtype=dtypes.int32), info


def ldl_factor_ex(
    A: Tensor, *, hermitian: bool = False, check_errors: bool = False
) -> LDLFactorExResult:
    """``(LD, pivots, info)``: the Bunch-Kaufman factorisation ``A = L D L^T`` of each
    symmetric matrix of ``A`` (read from its lower triangle) in LAPACK's compact form, as
    ``torch.linalg.ldl_factor_ex``; not differentiable (torch's is not either)."""
    a = A._array
    _check_float("ldl_factor_ex", a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(
            "torch.linalg.ldl_factor_ex: The input tensor A must have at least 2 dimensions."
            if a.ndim < 2
            else "torch.linalg.ldl_factor_ex: A must be batches of square matrices, but they "
            f"are {a.shape[-2]} by {a.shape[-1]} matrices"
        )
    xp = namespace(a)
    n = a.shape[-1]
    batch = a.shape[:-2]
    flat = a.reshape(math.prod(batch), n, n)
    lds, pivs, infos = [], [], []
    for i in range(flat.shape[0]):  # See NOTE [Bunch-Kaufman as LAPACK's sytf2]
        ld, piv, info = _sytf2(flat[i])
        lds.append(ld)
        pivs.append(piv)
        infos.append(info)
    if flat.shape[0]:
        ld_all = xp.stack(lds).reshape(a.shape)
        piv_all = xp.stack(pivs).reshape(*batch, n)
    else:
        ld_all = xp.zeros(a.shape, dtype=a.dtype)
        piv_all = xp.zeros((*batch, n), dtype=dtypes.int32)
    info_all = xp.asarray(infos, dtype=dtypes.int32).reshape(batch)
    if check_errors and any(infos):
        raise backend.LinAlgError(
            f"torch.linalg.ldl_factor_ex: The factorization could not be completed because "
            f"the input is singular (D[{max(infos)},{max(infos)}] is zero)."
        )
    return LDLFactorExResult(wrap(ld_all), wrap(piv_all), wrap(info_all))


def ldl_factor(A: Tensor, *, hermitian: bool = False) -> LDLFactorResult:
    """``(LD, pivots)`` of ``ldl_factor_ex``."""
    res = ldl_factor_ex(A, hermitian=hermitian)
    return LDLFactorResult(res.LD, res.pivots)


def _ldl_matrix(ld: Any, piv: Any) -> Any:
    """The symmetric matrix ``L D L^T`` of one compact factorisation: D, then each
    elementary factor P(k) L(k) applied on both sides, the last first."""
    xp = namespace(ld)
    n = ld.shape[-1]
    blocks: list[tuple[int, int, int]] = []  # (k, size, kp)
    k = 0
    p = [int(v) for v in piv.tolist()]
    while k < n:
        if p[k] > 0:
            blocks.append((k, 1, p[k] - 1))
            k += 1
        else:
            blocks.append((k, 2, -p[k] - 1))
            k += 2
    x = xp.zeros_like(ld)
    for k, size, _ in blocks:
        d = ld[k : k + size, k : k + size]
        x[k : k + size, k : k + size] = xp.tril(d) + xp.swapaxes(xp.tril(d, -1), 0, 1)
    for k, size, kp in reversed(blocks):
        # L(k) X L(k)^T, L(k) the identity plus C (the block's columns of L below the block):
        # two rank-size updates
        c = ld[k + size :, k : k + size]
        x[k + size :, :] += xp.matmul(c, x[k : k + size, :])
        x[:, k + size :] += xp.matmul(x[:, k : k + size], xp.swapaxes(c, 0, 1))
        kk = k + size - 1
        if kp != kk:
            idx = xp.arange(n)
            idx[kk], idx[kp] = kp, kk
            x = x[idx][:, idx]
    return x


def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False) -> Tensor:
    """The solution ``X`` of ``A X = B`` from ``A``'s ``ldl_factor``; differentiable in ``B``
    only (torch's is not differentiable)."""
    ld = LD._array
    _check_matrix("ldl_solve", ld, what="LD")
    if B.ndim < 2:
        raise RuntimeError("torch.linalg.ldl_solve: Expected B to have at least 2 dimensions.")
    if pivots.dtype != dtypes.int32:
        raise RuntimeError("torch.linalg.ldl_solve: Expected pivots to be integers. Got Long")
    n = ld.shape[-1]
    xp = namespace(ld)
    flat = ld.reshape(math.prod(ld.shape[:-2]), n, n)
    pflat = pivots._array.reshape(flat.shape[0], n)
    mats = [_ldl_matrix(flat[i], pflat[i]) for i in range(flat.shape[0])]
    a = xp.stack(mats).reshape(ld.shape) if mats else xp.zeros(ld.shape, dtype=ld.dtype)
    return solve(wrap(a), B)
