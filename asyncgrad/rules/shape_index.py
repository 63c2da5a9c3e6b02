"""The derivative rules of the shape, view and indexing ops added in ops/views.py.

``scatter_reduce`` with "prod", "amax" or "amin" (``index``: the advanced index that scatters
``src`` into ``x``): torch's ``scatter_reduce_backward`` formulas (FunctionsManual.cpp). The
masks and the products of the zero cases are read from the arrays; the rest is written in ``g``,
``ans`` and the inputs, so double backward differentiates it where those are Tensors.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import silent_fp, xp
from .registry import defvjp

__all__: list[str] = []


def _a(v: Any) -> Any:
    return v._array if isinstance(v, Tensor) else v


def _identity(dtype: Any, reduce: str) -> Any:
    if reduce == "prod":
        return 1
    if dtype.kind == "b":
        return reduce == "amin"
    if dtype.kind == "f":
        return -float("inf") if reduce == "amax" else float("inf")
    info = xp.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


_UFUNC = {"prod": "multiply", "amax": "maximum", "amin": "minimum"}


@silent_fp  # See NOTE [Silent floating point]
def scatter_reduce_array(
    x: Any, index: tuple[Any, ...], src: Any, reduce: str, include_self: bool
) -> Any:
    """``x`` with ``src`` combined in at ``index`` by ``reduce`` ("prod", "amax", "amin")."""
    ns = backend.namespace(x)
    out = x.copy()
    if not include_self:
        out[index] = _identity(x.dtype, reduce)
    ufunc = getattr(ns, _UFUNC[reduce])
    try:
        ufunc.at(out, index, src)
    except NotImplementedError:  # CuPy has no multiply.at
        _at_by_rounds(ufunc, out, index, src)
    return out


def _at_by_rounds(ufunc: Any, out: Any, index: tuple[Any, ...], src: Any) -> None:
    """``ufunc.at(out, index, src)`` for an index of integer arrays, one round per repeat: the
    k-th occurrence of every target in round k, where no target repeats."""
    ns = backend.namespace(out)
    if index == (Ellipsis,):
        out[...] = ufunc(out, src)
        return
    parts = ns.broadcast_arrays(*index)
    lin = ns.zeros(parts[0].shape, dtype=xp.int64)
    step = 1
    for a, n in zip(reversed(parts), reversed(out.shape), strict=False):
        lin = lin + (a % n) * step
        step *= n
    lin = lin.reshape(-1)
    vals = ns.broadcast_to(src, parts[0].shape).reshape(-1)
    order = ns.argsort(lin, kind="stable")
    sl = lin[order]
    start = ns.searchsorted(sl, sl, side="left")  # where each target's run begins
    rank = ns.empty_like(lin)
    rank[order] = ns.arange(sl.size) - start
    flat = out.reshape(-1)
    for k in range(int(rank.max()) + 1 if rank.size else 0):
        sel = rank == k
        pos = lin[sel]
        flat[pos] = ufunc(flat[pos], vals[sel])


def _indexed(x: Any, index: tuple[Any, ...]) -> Any:
    m = backend.namespace(x).zeros(x.shape, dtype=bool)
    m[index] = True
    return m


def _scatter_add(a: Any, index: tuple[Any, ...], b: Any) -> Any:
    out = a.copy()
    backend.namespace(a).add.at(out, index, b)
    return out


def _grads(
    g: Any, ans: Any, x: Any, src: Any, index: tuple[Any, ...], reduce: str, include_self: bool
) -> tuple[Any, Any]:
    xa, sa, ra = _a(x), _a(src), _a(ans)
    ns = backend.namespace(xa)
    if reduce == "prod":
        # grad_self = g * (the product of everything but self), by ans / self where self != 0
        x_zero = xa == 0
        masked_self = xp.where(x_zero, 1, x)
        excl = scatter_reduce_array(ns.where(x_zero, 1, xa), index, sa, "prod", include_self)
        grad_self = g * xp.where(x_zero, excl, ans / masked_self)
        # grad_src: (g * ans)[index] / src, or, for the one zero of its position, the product of
        # the others (torch: src_single_zero)
        s_zero = sa == 0
        zeros = _scatter_add(ns.zeros(xa.shape, dtype=xa.dtype), index, s_zero.astype(xa.dtype))
        single = s_zero & (zeros[index] == 1)
        others = scatter_reduce_array(xa, index, ns.where(single, 1, sa), "prod", include_self)
        grad_src = xp.where(
            single, g[index] * others[index], (g * ans)[index] / xp.where(s_zero, 1, src)
        )
    else:
        # ties share the gradient evenly (torch's N_to_distribute)
        value = ra[index]
        self_is = (xa == ra).astype(xa.dtype)
        src_is = (sa == value).astype(xa.dtype)
        n = _scatter_add(self_is, index, src_is)
        share = g / n
        grad_self = self_is * share
        grad_src = src_is * share[index]
    if not include_self:
        grad_self = xp.where(_indexed(xa, index), 0, grad_self)
    return grad_self, grad_src


defvjp(
    "scatter_reduce",
    lambda g, ans, x, src, *, index, reduce, include_self: _grads(
        g, ans, x, src, index, reduce, include_self
    )[0],
    lambda g, ans, x, src, *, index, reduce, include_self: _grads(
        g, ans, x, src, index, reduce, include_self
    )[1],
    save="ans x src",
)
