"""The derivative rules of ops/statistics.py."""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import xp
from .formulas import reverse_cumsum
from .registry import defvjp

__all__ = ["scan"]


def _flip(a: Any, dim: int) -> Any:
    if isinstance(a, Tensor):
        return a.flip(dim)
    return a[(slice(None),) * dim + (slice(None, None, -1),)]


def _cumprod(a: Any, dim: int) -> Any:
    return a.cumprod(dim) if isinstance(a, Tensor) else xp.cumprod(a, axis=dim)


def scan(ufunc_name: str, a: Any, dim: int) -> Any:
    """``ufunc.accumulate`` along ``dim`` of an array (``maximum``, ``minimum``, ``logaddexp``):
    NumPy's, or where the array module has none (CuPy), a scan by doubling: log2(n) steps of
    one elementwise op each (Hillis and Steele)."""
    m = backend.namespace(a)
    f = getattr(m, ufunc_name)
    if type(a) is backend.ndarray:
        return f.accumulate(a, axis=dim)
    n = a.shape[dim]
    lead = (slice(None),) * dim
    out = a
    k = 1
    while k < n:
        out = m.concatenate(
            [
                out[(*lead, slice(0, k))],
                f(out[(*lead, slice(k, n))], out[(*lead, slice(0, n - k))]),
            ],
            axis=dim,
        )
        k *= 2
    return out.copy() if out is a else out


def _logcumsumexp(a: Any, dim: int) -> Any:
    if isinstance(a, Tensor):
        return a.logcumsumexp(dim)
    return scan("logaddexp", a, dim)


def _array(a: Any) -> Any:
    return a._array if isinstance(a, Tensor) else a


def cumprod_grad(g: Any, ans: Any, x: Any, dim: int | None) -> Any:
    # d out_j / d x_i = prod_{k <= j, k != i} x_k for j >= i. Before a slice's first zero that
    # is out_j / x_i; at the first zero it is the product with that zero left out (the cumprod
    # of x with it set to 1); past it, 0. Exact at zeros, as torch's cumprod_backward.
    if dim is None:
        return g
    xa = _array(x)
    m = backend.namespace(xa)
    zero = xa == 0
    if not bool(zero.any()):  # no zeros: every position is before a slice's first zero
        return reverse_cumsum(g * ans, dim) / x
    seen = m.cumsum(zero, axis=dim)
    before = seen == 0
    if isinstance(x, Tensor) and bool(m.isfinite(xa).all() & m.isfinite(_array(g)).all()):
        return _cumprod_grad_differentiable(g, x, dim)
    # Sums over the terms that are not 0 by a zero factor only, as torch's: an infinite g there
    # would add inf * 0 = NaN.
    g_before = reverse_cumsum(xp.where(before, g * ans, 0), dim) / xp.where(before, x, 1)
    first = zero & (seen == 1)
    cp = _cumprod(xp.where(first, 1, x), dim)
    g_first = reverse_cumsum(xp.where(seen <= 1, g * cp, 0), dim)
    return xp.where(before, g_before, xp.where(first, g_first, 0))


def _cumprod_grad_differentiable(g: Any, x: Tensor, dim: int) -> Any:
    # Under create_graph with zeros in x: the O(n) formula's masks would cut the dependence of
    # the gradient on the zeros themselves (d grad_i / d x_z is not 0), so as torch's double
    # backward, every product with one factor left out, here all at once: P[..., i, j] =
    # prod_{k <= j, k != i} x_k, and grad_i = sum_{j >= i} g_j P[..., i, j]. (Only for finite
    # x and g: with an inf or NaN the O(n) formula gives torch's values.)
    last = x.ndim - 1
    xl, gl = (x, g) if dim == last else (x.transpose(dim, last), g.transpose(dim, last))
    n = xl.shape[-1]
    m = backend.namespace(x._array)
    eye = m.eye(n, dtype=bool)
    later = m.arange(n)[None, :] >= m.arange(n)[:, None]  # j >= i
    prods = xp.where(eye, 1.0, xl.unsqueeze(-2)).cumprod(-1)
    out = xp.sum(xp.where(later, gl.unsqueeze(-2) * prods, 0.0), axis=-1)
    return out if dim == last else out.transpose(dim, last)


def logcumsumexp_grad(g: Any, ans: Any, x: Any, dim: int | None) -> Any:
    # torch's logcumsumexp_backward: sum_{j >= i} g_j exp(x_i - out_j), split by the sign of g
    # so that each part is a (reversed) logcumsumexp of log|g| - out.
    if dim is None:
        return g
    lowest = float(backend.namespace(_array(x)).finfo(_array(x).dtype).min)
    log_abs = xp.log(xp.abs(g))
    pos = xp.where(g > 0, log_abs, lowest)
    neg = xp.where(g < 0, log_abs, lowest)
    out_pos = xp.exp(_flip(_logcumsumexp(_flip(pos - ans, dim), dim), dim) + x)
    out_neg = xp.exp(_flip(_logcumsumexp(_flip(neg - ans, dim), dim), dim) + x)
    return out_pos - out_neg


# ----- scans -----
defvjp("cumprod", lambda g, ans, x, *, dim: cumprod_grad(g, ans, x, dim), save="ans x")
defvjp("logcumsumexp", lambda g, ans, x, *, dim: logcumsumexp_grad(g, ans, x, dim), save="ans x")
