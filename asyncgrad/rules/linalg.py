"""The formulas of ``diagonal`` and of the ``ag.linalg`` decompositions (torch's
FunctionsManual.cpp has them too): each is written with NumPy's functions and the backend's
``linalg`` calls, so it runs on NumPy and CuPy arrays, and on Tensors under ``create_graph``
(See NOTE [Rules are NumPy] in registry.py)."""

from __future__ import annotations

from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import xp


def mT(a: Any) -> Any:
    return xp.swapaxes(a, -1, -2)


def _inv(a: Any) -> Any:
    return backend.linalg_of(a).inv(a)


def _solve(a: Any, b: Any) -> Any:
    """``a^-1 b`` for a batch of matrices ``b`` (never read as vectors), their batch dims
    broadcast first: CuPy's solve takes equal ones only."""
    if a.shape[:-2] != b.shape[:-2]:
        batch = backend.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = xp.broadcast_to(a, (*batch, *a.shape[-2:]))
        b = xp.broadcast_to(b, (*batch, *b.shape[-2:]))
    return backend.linalg_call("solve", a, b)


def _unsq(a: Any, k: int) -> Any:
    """``a`` with ``k`` trailing axes of size 1 (a batch of scalars against matrices)."""
    for _ in range(k):
        a = xp.expand_dims(a, -1)
    return a


def _eye_mask(a: Any, n: int) -> Any:
    """An n x n boolean identity on the device of ``a``."""
    if isinstance(a, Tensor):
        return backend.eye(n, None, dtypes.bool_, a.device)
    return backend.eye(n, None, dtypes.bool_, backend.device_of(a))


# ----- diagonal -----
def diagonal_grad(g: Any, in_shape: tuple[int, ...], offset: int, dim1: int, dim2: int) -> Any:
    """Zeros of the input's shape with ``g`` on the diagonal that ``diagonal`` read."""
    if isinstance(g, Tensor):  # create_graph: recorded, through getitem's backward
        k = g.shape[-1]
        r0, c0 = max(-offset, 0), max(offset, 0)
        dev = g.device
        idx: list[Any] = [slice(None)] * len(in_shape)
        idx[dim1] = backend.arange(r0, r0 + k, 1, dtypes.int64, dev)
        idx[dim2] = backend.arange(c0, c0 + k, 1, dtypes.int64, dev)
        # NumPy puts the indexed axis where the two were when they are adjacent, else first
        at = min(dim1, dim2) if abs(dim1 - dim2) == 1 else 0
        nd = g.ndim
        perm = list(range(nd - 1))
        perm.insert(at, nd - 1)
        return g.permute(perm)._index_add_zeros(tuple(idx), in_shape)
    z = backend.namespace(g).zeros(in_shape, dtype=g.dtype)
    backend.diagonal_view(z, offset, dim1, dim2)[...] = g
    return z


# ----- inv, det, slogdet, solve -----
def inv_grad(g: Any, ans: Any) -> Any:
    # d(A^-1) = -A^-1 dA A^-1
    ah = mT(ans)
    return -xp.matmul(ah, xp.matmul(g, ah))


def _adjugate_t(a: Any) -> Any:
    """The transposed adjugate of each matrix of ``a`` (arrays), through the SVD: for
    A = U S Vh, adj(A)^T = det(U) det(Vh) U diag(prod_{j != i} s_j) Vh, finite also where A is
    singular."""
    la = backend.linalg_of(a)
    u, s, vh = la.svd(a, full_matrices=False)
    sign = la.det(u) * la.det(vh)
    n = s.shape[-1]
    ones = xp.ones_like(s[..., :1])
    left = xp.cumprod(xp.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    right = xp.flip(
        xp.cumprod(xp.concatenate([ones, xp.flip(s, -1)[..., : n - 1]], axis=-1), axis=-1), -1
    )
    others = left * right  # prod over j != i
    return _unsq(sign, 2) * xp.matmul(u * xp.expand_dims(others, -2), vh)


def det_grad(g: Any, ans: Any, a: Any) -> Any:
    # d det(A) = det(A) tr(A^-1 dA) = tr(adj(A) dA): a solve, as torch, and the adjugate where
    # A is singular (torch's first-order backward gives 0 there, its create_graph one the
    # adjugate: See the README's differences)
    if not isinstance(a, Tensor) and not bool(xp.all(ans != 0)):
        return _unsq(g, 2) * _adjugate_t(a)
    try:
        return _solve(mT(a), _scaled_eye(g * ans, a))
    except backend.LinAlgError:
        if isinstance(a, Tensor):
            raise
        return _unsq(g, 2) * _adjugate_t(a)


def logabsdet_grad(g: Any, a: Any) -> Any:
    # d log|det A| = tr(A^-1 dA): gA = A^-T g; where A is singular, adj(A)^T / det(A), infinite
    # as torch's
    try:
        return _solve(mT(a), _scaled_eye(g, a))
    except backend.LinAlgError:
        if isinstance(a, Tensor):
            raise
        return _unsq(g / backend.linalg_call("det", a), 2) * _adjugate_t(a)


def _scaled_eye(c: Any, a: Any) -> Any:
    """The identity of ``a``'s size times each ``c`` of the batch (``c * I``, selected: an
    infinite ``c`` stays off the diagonal's zeros)."""
    n = a.shape[-1]
    return xp.where(_eye_mask(a, n), _unsq(c, 2), 0.0)


def solve_grad_b(g: Any, a: Any) -> Any:
    # X = A^-1 B: gB = A^-T g
    return _solve(mT(a), g)


def solve_grad_a(g: Any, ans: Any, a: Any) -> Any:
    # gA = -gB X^T
    return -xp.matmul(solve_grad_b(g, a), mT(ans))


# ----- cholesky, qr -----
def cholesky_grad(g: Any, ans: Any) -> Any:
    # A = L L^T: gA = L^-T Phi(L^T gL) L^-1, Phi taking the lower triangle with its diagonal
    # halved, then symmetrised (torch's cholesky_backward)
    p = xp.tril(xp.matmul(mT(ans), g))
    p = 0.5 * (p + mT(xp.tril(p, -1)))
    left = _solve(mT(ans), p)  # Y = L^-T P
    return mT(_solve(mT(ans), mT(left)))  # (L^-T Y^T)^T = Y L^-1


def _copyltu(m: Any) -> Any:
    """The lower triangle of ``m`` mirrored to the upper one (diagonal kept)."""
    return xp.tril(m) + mT(xp.tril(m, -1))


def _qr_square_or_tall(gq: Any, gr: Any, q: Any, r: Any) -> Any:
    # m >= n, reduced: gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q
    if gr is None:
        m = -xp.matmul(mT(gq), q)
    elif gq is None:
        m = xp.matmul(r, mT(gr))
    else:
        m = xp.matmul(r, mT(gr)) - xp.matmul(mT(gq), q)
    b = xp.matmul(q, _copyltu(m))
    if gq is not None:
        b = b + gq
    return mT(_solve(r, mT(b)))  # b R^-T


def qr_grad(grads: Any, ans: Any, a: Any, mode: str) -> Any:
    gq, gr = grads
    q, r = ans
    m, n = a.shape[-2], a.shape[-1]
    if mode == "r":
        raise RuntimeError(
            "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
            "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
            "linalg.qr."
        )
    if mode == "complete" and m > n:
        raise RuntimeError(
            "The QR decomposition is not differentiable when mode='complete' and nrows > ncols."
        )
    if m >= n:
        return _qr_square_or_tall(gq, gr, q, r)
    # m < n: A = Q [U | V] with X = Q U square; Y = Q V
    u = r[..., :, :m]
    y = a[..., :, m:]
    gu = None if gr is None else gr[..., :, :m]
    gq2 = gq
    gy = None
    if gr is not None:
        gv = gr[..., :, m:]
        gq2 = xp.matmul(y, mT(gv)) if gq is None else gq + xp.matmul(y, mT(gv))
        gy = xp.matmul(q, gv)
    gx = _qr_square_or_tall(gq2, gu, q, u)
    if gy is None:
        gy = xp.zeros_like(y)
    return xp.concatenate([gx, gy], axis=-1)


# ----- svd, eigh -----
def svd_grad(grads: Any, ans: Any, full_matrices: bool) -> Any:
    # torch's svd_backward (real case), for A = U diag(S) Vh with k = min(m, n)
    gu, gs, gvh = grads
    u, s, vh = ans
    m, n = u.shape[-2], vh.shape[-1]
    k = s.shape[-1]
    if full_matrices and m != n:
        # as torch: the columns of U (rows of Vh) past k span an arbitrary basis of the
        # complement, and their gradients are ignored
        u, vh = u[..., :, :k], vh[..., :k, :]
        gu = None if gu is None else gu[..., :, :k]
        gvh = None if gvh is None else gvh[..., :k, :]
    if gu is None and gvh is None:
        return xp.matmul(u * xp.expand_dims(gs, -2), vh)
    v = mT(vh)
    gv = None if gvh is None else mT(gvh)
    s_row = xp.expand_dims(s, -2)
    s_col = xp.expand_dims(s, -1)
    s2 = s * s
    e = xp.expand_dims(s2, -2) - xp.expand_dims(s2, -1)
    e = xp.where(_eye_mask(s, k), 1.0, e)
    if gu is not None:
        uhgu = xp.matmul(mT(u), gu)
        uhgu = uhgu - mT(uhgu)
    if gv is not None:
        vhgv = xp.matmul(vh, gv)
        vhgv = vhgv - mT(vhgv)
    if gu is not None and gv is not None:
        ga = (uhgu * s_row + s_col * vhgv) / e
    elif gu is not None:
        ga = (uhgu * s_row) / e
    else:
        ga = (s_col * vhgv) / e
    if gs is not None:
        ga = ga + xp.where(_eye_mask(s, k), _unsq(gs, 1), 0.0)
    if m > n and gu is not None:
        ga = xp.matmul(u, ga)
        gu_sinv = gu / s_row
        ga = ga + gu_sinv - xp.matmul(u, xp.matmul(mT(u), gu_sinv))
        return xp.matmul(ga, vh)
    if m < n and gv is not None:
        ga = xp.matmul(ga, vh)
        gv_sinv = gv / s_row
        ga = ga + mT(gv_sinv) - xp.matmul(xp.matmul(mT(gv_sinv), v), vh)
        return xp.matmul(u, ga)
    return xp.matmul(u, xp.matmul(ga, vh))


def eigh_grad(grads: Any, ans: Any) -> Any:
    # A = V diag(L) V^T: gA = V (diag(gL) + skew(V^T gV) / E) V^T, E_ij = L_j - L_i off the
    # diagonal and skew(M) = (M - M^T) / 2 (torch's linalg_eig_backward for Hermitian inputs)
    gl, gv = grads
    lam, v = ans
    n = lam.shape[-1]
    eye = _eye_mask(lam, n)
    if gv is None:
        inner = xp.where(eye, _unsq(gl, 1), 0.0)
    else:
        e = xp.expand_dims(lam, -2) - xp.expand_dims(lam, -1)
        e = xp.where(eye, 1.0, e)
        vtgv = xp.matmul(mT(v), gv)
        inner = xp.where(eye, 0.0, (0.5 * (vtgv - mT(vtgv))) / e)
        if gl is not None:
            inner = inner + xp.where(eye, _unsq(gl, 1), 0.0)
    return xp.matmul(v, xp.matmul(inner, mT(v)))
