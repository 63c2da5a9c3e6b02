"""The derivative rules of the linalg ops that are not composites: ``matrix_exp``, ``pinv`` and
the LU factorisation (torch's formulas from FunctionsManual.cpp), and ``expm``, the matrix
exponential both the forward and the backward use."""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import xp
from .linalg import _solve, mT
from .registry import defvjp

__all__: list[str] = []


def _identity(a: Any, n: int) -> Any:
    """The n x n identity of ``a``'s dtype, on its device (an array, also for a Tensor)."""
    dev = a.device if isinstance(a, Tensor) else backend.device_of(a)
    return backend.eye(n, None, a.dtype, dev)


# ----- matrix_exp -----
# NOTE [matrix_exp by scaling and squaring]
# exp(A) = exp(A / 2^s)^(2^s): the scaled matrix has 1-norm at most 1, where the Taylor
# polynomial of degree 18 is exact to rounding (1/19! < 1e-17), evaluated by Horner's rule; then s
# squarings. One s serves the batch (the largest the batch needs): a loop over matrix products,
# never over elements. Only array functions are used, so under create_graph the same code runs
# on Tensors and records its own (differentiable) graph.
_TAYLOR_DEGREE = 18


def expm(a: Any) -> Any:
    """The matrix exponential of each matrix of ``a`` (See NOTE [matrix_exp by scaling and
    squaring])."""
    n = a.shape[-1]
    if n == 0 or math.prod(a.shape) == 0:
        return a + 0
    plain = a.detach()._array if isinstance(a, Tensor) else a
    norm = float(backend.namespace(plain).abs(plain).sum(-2).max())  # the 1-norm, batch's max
    s = 0
    if math.isfinite(norm) and norm > 1.0:
        s = math.ceil(math.log2(norm))
    b = a / (2.0**s) if s else a
    ident = _identity(plain, n)
    r = ident + b / _TAYLOR_DEGREE
    for k in range(_TAYLOR_DEGREE - 1, 0, -1):
        r = ident + xp.matmul(b, r) / k
    for _ in range(s):
        r = xp.matmul(r, r)
    return r


def matrix_exp_grad(g: Any, a: Any) -> Any:
    # torch's linalg_matrix_exp_differential: the gradient is the upper-right block of
    # exp([[A^T, G], [0, A^T]])
    n = a.shape[-1]
    at = mT(a)
    top = xp.concatenate([at, g], axis=-1)
    bottom = xp.concatenate([xp.zeros_like(at), at], axis=-1)
    return expm(xp.concatenate([top, bottom], axis=-2))[..., :n, n:]


# ----- pinv -----
def pinv_grad(g: Any, ans: Any, a: Any) -> Any:
    # torch's pinv_backward: the derivative of the pseudo-inverse at a matrix of constant rank
    # (Golub and Pereyra), arranged so the products stay small
    m, n = a.shape[-2], a.shape[-1]
    p, ph, gh = ans, mT(ans), mT(g)
    if m <= n:
        k = xp.matmul(gh, p)
        kph = xp.matmul(k, ph)
        return (
            -mT(xp.matmul(p, k))
            + kph
            - xp.matmul(xp.matmul(a, p), kph)
            + xp.matmul(xp.matmul(ph, p), gh - xp.matmul(k, a))
        )
    k = xp.matmul(p, gh)
    phk = xp.matmul(ph, k)
    return (
        -mT(xp.matmul(k, p))
        + xp.matmul(xp.matmul(gh - xp.matmul(a, k), p), ph)
        + phk
        - xp.matmul(xp.matmul(phk, p), a)
    )


# ----- LU -----
def _back_substitute(t: Any, b: Any, upper: bool) -> Any:
    """``t^-1 b`` for triangular arrays ``t``, row by row (a loop over the matrix size), so a
    singular ``t`` gives infinities and NaNs as LAPACK's trsm does rather than an error."""
    xp = backend.namespace(t)
    batch = backend.broadcast_shapes(t.shape[:-2], b.shape[:-2])
    t = xp.broadcast_to(t, (*batch, *t.shape[-2:]))
    b = xp.broadcast_to(b, (*batch, *b.shape[-2:]))
    n = t.shape[-1]
    x = xp.zeros(b.shape, dtype=xp.result_type(t, b))
    for i in range(n - 1, -1, -1) if upper else range(n):
        done = slice(i + 1, n) if upper else slice(0, i)
        s = b[..., i, :] - xp.matmul(t[..., i : i + 1, done], x[..., done, :])[..., 0, :]
        x[..., i, :] = s / t[..., i, i, None]
    return x


def _tri_solve(a: Any, b: Any, upper: bool) -> Any:
    """``a^-1 b`` for triangular ``a``: LAPACK's solve, and where it finds ``a`` singular,
    back substitution (torch's backward gives infinities there, not an error)."""
    try:
        return _solve(a, b)
    except backend.LinAlgError:
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            raise
        return _back_substitute(a, b, upper)


def _tri_solve_right(b: Any, a: Any, upper: bool) -> Any:
    """``b a^-1`` for triangular ``a``."""
    return mT(_tri_solve(mT(a), mT(b), not upper))


def lu_factor_grad(g: Any, ans: Any, perm_matrix: Any) -> Any:
    # torch's linalg_lu_backward for A = P L U, with the gradient of the packed LU split into
    # gL (strictly lower, L's unit diagonal is constant) and gU (upper)
    m, n = ans.shape[-2], ans.shape[-1]
    k = min(m, n)
    ident = _identity(ans, m)[..., :k]
    lo = xp.tril(ans, -1)[..., :, :k] + ident  # L, m x k
    up = xp.triu(ans)[..., :k, :]  # U, k x n
    gl = xp.tril(g, -1)[..., :, :k]
    gu = xp.triu(g)[..., :k, :]
    if m == n:
        # P L^-T [tril(L^T gL, -1) + triu(gU U^T)] U^-T
        inner = xp.tril(xp.matmul(mT(lo), gl), -1) + xp.triu(xp.matmul(gu, mT(up)))
        ga = _tri_solve(mT(lo), _tri_solve_right(inner, mT(up), False), True)
    elif m < n:
        # [L^-T (tril(L^T gL - gU U^T, -1) U1^-T + gU1) | L^-T gU2]
        u1 = up[..., :, :k]
        inner = xp.matmul(mT(lo), gl) - xp.matmul(gu, mT(up))
        left = _tri_solve_right(xp.tril(inner, -1), mT(u1), False) + gu[..., :, :k]
        ga = _tri_solve(mT(lo), xp.concatenate([left, gu[..., :, k:]], axis=-1), True)
    else:
        # [L1^-T triu(gU U^T - L^T gL) + gL1 ; gL2] U^-T
        l1 = lo[..., :k, :]
        inner = xp.matmul(gu, mT(up)) - xp.matmul(mT(lo), gl)
        top = _tri_solve(mT(l1), xp.triu(inner), True) + gl[..., :k, :]
        ga = _tri_solve_right(xp.concatenate([top, gl[..., k:, :]], axis=-2), mT(up), False)
    return xp.matmul(perm_matrix, ga)


defvjp("linalg_matrix_exp", lambda g, ans, a: matrix_exp_grad(g, a), save="a")
defvjp("linalg_pinv", lambda g, ans, a: pinv_grad(g, ans, a), save="ans a")
defvjp(
    "linalg_lu_factor_ex",
    lambda g, ans, a, *, perm_matrix: lu_factor_grad(g, ans, perm_matrix),
    save="ans",
)
