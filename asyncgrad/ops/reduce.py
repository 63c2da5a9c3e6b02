"""Reductions (sum, mean, max, logsumexp, ...) and the normalisations along a dim (softmax)."""

from __future__ import annotations

import builtins
import math
from typing import Any, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import silent_fp
from ..rules import keeps_for_backward
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
    given = None if dtype is None else dtypes.to_dtype(dtype)
    if (xa.dtype if given is None else given).kind not in "fc":
        what, dt = ("Input", xa.dtype) if given is None else ("Optional", given)
        raise RuntimeError(
            f"mean(): could not infer output dtype. {what} dtype must be either a floating point "
            f"or complex dtype. Got: {_TORCH_NAMES.get(str(dt), str(dt))}"
        )
    axis = None if xa.ndim == 0 else dims(dim, xa.ndim)
    out = xa.mean(axis=axis, keepdims=keepdim, dtype=given)
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
    if xa.ndim == 0:  # dim 0 or -1 of a 0-d tensor, as torch: the element itself
        axis = None
    _check_extreme_dims(name, xa.shape, axis)
    out = (
        xa.max(axis=axis, keepdims=keepdim)
        if name == "amax"
        else xa.min(axis=axis, keepdims=keepdim)
    )
    params = {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape, "evenly": evenly}
    return make(OPS[name], out, (input,), params, (xa,))  # See NOTE [Ops save what they read]


def _check_extreme_dims(name: str, shape: tuple[int, ...], axis: Any) -> None:
    """torch's errors for a max or min over a repeated dim or an empty one (NumPy's are
    ValueErrors)."""
    ax = tuple(range(len(shape))) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    seen = set()
    for d in ax:
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        seen.add(d)
    for d in ax:
        if shape[d] == 0:
            if axis is None:
                raise RuntimeError(
                    f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                    "Specify the reduction dim with the 'dim' argument."
                )
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


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
    v = make(OPS["max_dim"], vals, (input,), params, (xa,))
    keeps_for_backward(v._grad_fn)  # torch's MaxBackward0 saves the indices
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
    if xa.ndim == 0:  # dim 0 or -1 of a 0-d tensor; CuPy refuses an axis of a 0-d array
        dims(dim, 0)
        return wrap(backend.ensure_array(f()).astype(dtypes.int64))
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
    if xa.ndim == 0:  # dim 0 or -1 of a 0-d tensor, as torch
        axis = None
    m = xa.max(axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    out = xp.log(xp.exp(xa - m).sum(axis=axis, keepdims=True)) + m
    if not keepdim:
        out = out.squeeze(axis=axis)
    params = {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape}
    return make(OPS["logsumexp"], out, (input,), params, (xa,))


def _norm_axis(dim: int, ndim: int) -> int | None:
    """``dim`` of a softmax-like op as an axis; ``None`` for a 0-d array (CuPy refuses axis 0)."""
    d = dim % builtins.max(ndim, 1)
    return None if ndim == 0 else d


@silent_fp  # See NOTE [Silent floating point]
def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    xa = input._array if dtype is None else input._array.astype(dtypes.to_dtype(dtype))
    d = _norm_axis(dim, xa.ndim)
    if xa.size == 0:  # torch returns the empty input; max has no identity
        z = xa.copy()
    else:
        z = namespace(xa).exp(xa - xa.max(axis=d, keepdims=True))
        z /= z.sum(axis=d, keepdims=True)
    return make(OPS["softmax"], z, (input,), {"dim": d})


@silent_fp  # See NOTE [Silent floating point]
def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    xa = input._array if dtype is None else input._array.astype(dtypes.to_dtype(dtype))
    d = _norm_axis(dim, xa.ndim)
    xp = namespace(xa)
    if xa.size == 0:  # torch returns the empty input; max has no identity
        s = xa.copy()
    else:
        s = xa - xa.max(axis=d, keepdims=True)  # array methods skip NumPy's Python-level wrappers
        s -= xp.log(xp.exp(s).sum(axis=d, keepdims=True))
    return make(OPS["log_softmax"], s, (input,), {"dim": d})


# ----- var, std, prod, norm, cumsum, all, any -----
def _float_only(xa: Any, what: str) -> None:
    if xa.dtype.kind not in "fc":
        raise RuntimeError(f"{what} only support floating point and complex dtypes")


def _correction(dim: Any, unbiased: Any, correction: Any) -> tuple[Any, float]:
    # torch's two overloads: var(input, dim, unbiased, keepdim) and var(input, dim, *,
    # correction, keepdim); ``var(input, True)`` is the first with dim left out.
    if isinstance(dim, bool):
        if unbiased is not None:
            raise TypeError("var(): dim must be an int or a tuple of ints, not bool")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise RuntimeError("var(): cannot specify both unbiased and correction")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return dim, float(correction)


@silent_fp  # See NOTE [Silent floating point]
def var(
    input: Tensor,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: Any = None,
) -> Tensor:
    """The variance over ``dim`` (all dims when None), divided by ``N - correction``."""
    return _var_std("var", input, dim, unbiased, keepdim, correction)


@silent_fp  # See NOTE [Silent floating point]
def std(
    input: Tensor,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: Any = None,
) -> Tensor:
    """The standard deviation over ``dim``: the square root of ``var``."""
    return _var_std("std", input, dim, unbiased, keepdim, correction)


def _var_std(
    name: str, input: Tensor, dim: Any, unbiased: Any, keepdim: bool, correction: Any
) -> Tensor:
    xa = input._array
    _float_only(xa, "std and var")
    dim, corr = _correction(dim, unbiased, correction)
    axis = None if xa.ndim == 0 or dim is None or dim == () or dim == [] else dims(dim, xa.ndim)
    n = xa.size if axis is None else math.prod(xa.shape[d] for d in axis)
    # Divided by max(N - correction, 0), as torch does: inf or NaN past it, silently (NumPy's
    # var would warn there, and its mean warns on empty slices).
    xp = namespace(xa)
    mu = xa.sum(axis=axis, keepdims=True) / xa.dtype.type(n)
    d = xa - mu
    out = (d * d).sum(axis=axis, keepdims=keepdim) / xa.dtype.type(builtins.max(n - corr, 0))
    if name == "std":
        out = xp.sqrt(out)
    params = {"dim": axis, "keepdim": keepdim, "n": n, "correction": corr}
    return make(OPS[name], out, (input,), params, (xa,))


def _int_dim(dim: Any, what: str) -> Any:
    if dim is not None and not isinstance(dim, (int, backend.integer)):
        raise TypeError(f"{what}(): argument 'dim' must be int, not {type(dim).__name__}")
    return dim


@silent_fp  # See NOTE [Silent floating point]
def prod(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The product of the elements (along one ``dim``); integers and bools give int64."""
    xa = input._array
    _int_dim(dim, "prod")
    axis = None if dim is None or xa.ndim == 0 else dims(dim, xa.ndim)[0]  # type: ignore[index]
    dt = None if dtype is None else dtypes.to_dtype(dtype)
    if dt is None and xa.dtype.kind in "biu":
        dt = dtypes.int64
    out = xa.prod(axis=axis, keepdims=keepdim and axis is not None, dtype=dt)
    if keepdim and axis is None and xa.ndim:
        out = backend.ensure_array(out).reshape((1,) * xa.ndim)
    return make(OPS["prod"], out, (input,), {"dim": axis, "keepdim": keepdim}, (xa,))


@silent_fp  # See NOTE [Silent floating point]
def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Cumulative sums along ``dim``; integers and bools give int64."""
    xa = input._array
    (d,) = dims(_int_dim(dim, "cumsum"), xa.ndim) or (0,)
    dt = None if dtype is None else dtypes.to_dtype(dtype)
    if dt is None and xa.dtype.kind in "biu":
        dt = dtypes.int64
    if xa.ndim == 0:
        out = xa.astype(dt) if dt is not None else xa.copy()
    else:
        out = xa.cumsum(axis=d, dtype=dt)
    return make(OPS["cumsum"], out, (input,), {"dim": d if xa.ndim else None})


_TORCH_NAMES: dict[str, str] = {
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def _listed(dim: Any) -> str:
    """``dim`` as torch's messages write it: ``0 1 2``."""
    return str(dim) if isinstance(dim, (int, backend.integer)) else " ".join(map(str, dim))


@silent_fp  # See NOTE [Silent floating point]
def norm(
    input: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None
) -> Tensor:
    """The vector ``p``-norm over ``dim`` (all elements when None), as ``torch.norm``.

    ``p``: ``"fro"`` (the 2-norm of the elements, over at most two dims), a number, ``inf`` or
    ``-inf``. ``p=0`` counts the non-zero elements.
    """
    xa = input._array
    if dtype is not None:
        input = input.to(dtypes.to_dtype(dtype))
        xa = input._array
    if xa.dtype.kind not in "fc":
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. "
            f"Got {_TORCH_NAMES.get(str(xa.dtype), str(xa.dtype))}"
        )
    if isinstance(p, str):
        nd = 1 if isinstance(dim, (int, backend.integer)) or dim is None else len(dim)
        if p == "nuc":
            # torch.norm's nuclear norm: over all dims when None, which must be two
            from .decomp import matrix_norm

            d = tuple(range(xa.ndim)) if dim is None else dim
            if xa.ndim >= 2 and (isinstance(d, (int, backend.integer)) or len(d) != 2):
                raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {_listed(d)}")
            return matrix_norm(input, "nuc", d, keepdim)
        if p != "fro":
            raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
        if nd > 2:
            raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {_listed(dim)}")
        p = 2.0
    p = float(p)
    axis = None if dim is None or xa.ndim == 0 else dims(dim, xa.ndim)
    xp = namespace(xa)
    a = xp.abs(xa)
    if p == 2.0:
        out = xp.sqrt((a * a).sum(axis=axis, keepdims=keepdim))
    elif p == 1.0:
        out = a.sum(axis=axis, keepdims=keepdim)
    elif p == math.inf:
        out = a.max(axis=axis, keepdims=keepdim)
    elif p == -math.inf:
        out = a.min(axis=axis, keepdims=keepdim)
    elif p == 0.0:
        out = (xa != 0).sum(axis=axis, keepdims=keepdim).astype(xa.dtype)
    else:
        out = (a**p).sum(axis=axis, keepdims=keepdim) ** (1.0 / p)
    out = backend.ensure_array(out).astype(xa.dtype, copy=False)
    return make(OPS["norm"], out, (input,), {"p": p, "dim": axis, "keepdim": keepdim}, (xa,))


def _all_any(name: str, input: Tensor, dim: Any, keepdim: bool) -> Tensor:
    xa = input._array
    axis = None if dim is None or xa.ndim == 0 else dims(dim, xa.ndim)
    f = xa.all if name == "all" else xa.any
    out = backend.ensure_array(f(axis=axis, keepdims=keepdim))
    if keepdim and axis is None and xa.ndim:
        out = out.reshape((1,) * xa.ndim)
    if xa.dtype.kind == "u" and xa.dtype.itemsize == 1:  # torch keeps uint8 for uint8 inputs
        out = out.astype(xa.dtype)
    return wrap(out)


def all(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether all elements (along ``dim``) are non-zero: a bool tensor without grad."""
    return _all_any("all", input, dim, keepdim)


def any(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether any element (along ``dim``) is non-zero: a bool tensor without grad."""
    return _all_any("any", input, dim, keepdim)
