"""Reductions (sum, mean, max, logsumexp, ...) and the normalisations along a dim (softmax)."""

from __future__ import annotations

import builtins
from typing import Any, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import silent_fp
from ._record import OPS, make, wrap
from .pointwise import maximum, minimum

namespace = backend.namespace


def dims(dim: Any, ndim: int) -> tuple[int, ...] | None:
    """``dim`` (an int or a sequence, possibly negative) as a tuple of non-negative dims."""
    if dim is None:
        return None
    if isinstance(dim, (int, backend.integer)):
        dim = (int(dim),)
    out = []
    n = builtins.max(ndim, 1)
    for d in dim:
        d = int(d)
        if not -n <= d < n:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})"
            )
        out.append(d % n)
    return tuple(out)


@silent_fp  # See NOTE [Silent floating point]
def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    xa = input._array
    axis = None if xa.ndim == 0 else dims(dim, xa.ndim)
    out = xa.sum(
        axis=axis, keepdims=keepdim, dtype=None if dtype is None else dtypes.to_dtype(dtype)
    )
    if xa.dtype.kind in "bi" and dtype is None:
        out = backend.ensure_array(out).astype(dtypes.int64)
    return make(OPS["sum"], out, (input,), {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape})


@silent_fp  # See NOTE [Silent floating point]
def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    xa = input._array
    if xa.dtype.kind not in "fc" and dtype is None:
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
            f"complex dtype. Got: {xa.dtype}"
        )
    axis = None if xa.ndim == 0 else dims(dim, xa.ndim)
    out = xa.mean(
        axis=axis, keepdims=keepdim, dtype=None if dtype is None else dtypes.to_dtype(dtype)
    )
    return make(OPS["mean"], out, (input,), {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape})


def amax(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return _amax_amin("amax", input, dim, keepdim, False)


def amin(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return _amax_amin("amin", input, dim, keepdim, False)


def _amax_amin(name: str, input: Tensor, dim: Any, keepdim: bool, evenly: bool) -> Tensor:
    # evenly: max() and min() without a dim, whose gradient at a NaN result goes to the NaNs
    # (torch's evenly_distribute_backward); amax and amin make it NaN.
    xa = input._array
    axis = None if dim == () or dim is None else dims(dim, xa.ndim)
    out = (
        xa.max(axis=axis, keepdims=keepdim)
        if name == "amax"
        else xa.min(axis=axis, keepdims=keepdim)
    )
    params = {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape, "evenly": evenly}
    return make(OPS[name], out, (input,), params)


class MinMax(NamedTuple):
    """``max``/``min`` along a dim: the values (differentiable) and their indices."""

    values: Tensor
    indices: Tensor


def _extreme(input: Tensor, dim: Any, keepdim: bool, name: str) -> Any:
    if dim is None:
        return _amax_amin("amax" if name == "max" else "amin", input, None, False, True)
    if isinstance(dim, Tensor):  # max(a, b) spelled as max(input, other)
        return maximum(input, dim) if name == "max" else minimum(input, dim)
    xa = input._array
    (d,) = dims(dim, xa.ndim) or (0,)
    if xa.ndim == 0:
        return MinMax(input.clone(), wrap(backend.zeros((), dtypes.int64, input.device)))
    xp = namespace(xa)
    idx = xp.expand_dims(xa.argmax(axis=d) if name == "max" else xa.argmin(axis=d), d)
    vals = xp.take_along_axis(xa, idx, axis=d)
    if not keepdim:
        idx = idx.squeeze(d)
        vals = vals.squeeze(d)
    params = {"dim": d, "keepdim": keepdim, "indices": idx, "in_shape": xa.shape}
    v = make(OPS["max_dim"], vals, (input,), params)
    return MinMax(v, wrap(idx.astype(dtypes.int64)))


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    return _extreme(input, dim, keepdim, "max")


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    return _extreme(input, dim, keepdim, "min")


def _arg(xa: Any, dim: int | None, keepdim: bool, name: str) -> Tensor:
    f = xa.argmax if name == "max" else xa.argmin
    if dim is None:
        r = backend.ensure_array(f()).astype(dtypes.int64)
        return wrap(r.reshape((1,) * xa.ndim if keepdim else ()))
    return wrap(f(axis=dim, keepdims=keepdim).astype(dtypes.int64))


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg(input._array, dim, keepdim, "max")


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg(input._array, dim, keepdim, "min")


@silent_fp  # See NOTE [Silent floating point]
def logsumexp(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    xa = input._array
    xp = namespace(xa)
    axis = dims(dim, xa.ndim)
    m = xa.max(axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    out = xp.log(xp.exp(xa - m).sum(axis=axis, keepdims=True)) + m
    if not keepdim:
        out = out.squeeze(axis=axis)
    return make(
        OPS["logsumexp"], out, (input,), {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape}
    )


@silent_fp  # See NOTE [Silent floating point]
def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    xa = input._array if dtype is None else input._array.astype(dtypes.to_dtype(dtype))
    d = dim % builtins.max(xa.ndim, 1)
    z = namespace(xa).exp(xa - xa.max(axis=d, keepdims=True))
    z /= z.sum(axis=d, keepdims=True)
    return make(OPS["softmax"], z, (input,), {"dim": d})


@silent_fp  # See NOTE [Silent floating point]
def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    xa = input._array if dtype is None else input._array.astype(dtypes.to_dtype(dtype))
    d = dim % builtins.max(xa.ndim, 1)
    xp = namespace(xa)
    s = xa - xa.max(axis=d, keepdims=True)  # array methods skip NumPy's Python-level wrappers
    s -= xp.log(xp.exp(s).sum(axis=d, keepdims=True))
    return make(OPS["log_softmax"], s, (input,), {"dim": d})
