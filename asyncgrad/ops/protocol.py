"""NumPy's protocols on Tensors: NumPy functions and ufuncs called on Tensors run asyncgrad ops.

See NOTE [Rules are NumPy] in asyncgrad/rules: under ``create_graph`` the derivative rules run
on Tensors through these tables, so one rule serves the plain and the recording backward. The
tables are keyed by the NumPy function's name, so this module needs no NumPy import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .._tensor import Tensor
from . import linalg, pointwise, reduce, shape
from .creation import as_tensor, zeros, zeros_like
from .pointwise import where


def _t(a: Any) -> Tensor:
    return a if isinstance(a, Tensor) else as_tensor(a)


def _np_sum(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **_: Any
) -> Any:
    return reduce.sum(a, axis, keepdims)


def _np_mean(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **_: Any
) -> Any:
    return reduce.mean(a, axis, keepdims)


def _np_reshape(a: Any, shape_: Any = None, *args: Any, **kwargs: Any) -> Any:
    if shape_ is None:
        shape_ = kwargs.get("shape", kwargs.get("newshape"))
    return shape.reshape(a, shape_)


def _np_transpose(a: Any, axes: Any = None) -> Any:
    if axes is None:
        axes = tuple(range(a.ndim - 1, -1, -1))
    return shape.permute(a, tuple(axes))


def _np_expand_dims(a: Any, axis: Any) -> Any:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = a.ndim + len(axes)
    for ax in sorted(x % nd for x in axes):
        a = shape.unsqueeze(a, ax)
    return a


def _np_squeeze(a: Any, axis: Any = None) -> Any:
    return shape.squeeze(a, axis)


def _np_broadcast_to(a: Any, shape_: Any, subok: bool = False) -> Any:
    return shape.expand(_t(a), tuple(shape_))


def _np_where(cond: Any, x: Any = None, y: Any = None) -> Any:
    return where(cond, x, y)


def _np_concatenate(arrays: Any, axis: int = 0, **_: Any) -> Any:
    return shape.cat([_t(a) for a in arrays], axis)


def _np_stack(arrays: Any, axis: int = 0, **_: Any) -> Any:
    return shape.stack([_t(a) for a in arrays], axis)


def _np_zeros_like(
    a: Any, dtype: Any = None, order: Any = "K", subok: bool = True, shape: Any = None
) -> Any:
    if shape is None:
        return zeros_like(a, dtype=dtype)
    return zeros(shape, dtype=a.dtype if dtype is None else dtype, device=a.device)


def _np_swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    return shape.transpose(a, axis1, axis2)


def _np_clip(a: Any, a_min: Any = None, a_max: Any = None, **_: Any) -> Any:
    return pointwise.clamp(a, a_min, a_max)


_ARRAY_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "sum": _np_sum,
    "mean": _np_mean,
    "reshape": _np_reshape,
    "transpose": _np_transpose,
    "expand_dims": _np_expand_dims,
    "squeeze": _np_squeeze,
    "broadcast_to": _np_broadcast_to,
    "where": _np_where,
    "concatenate": _np_concatenate,
    "stack": _np_stack,
    "zeros_like": _np_zeros_like,
    "swapaxes": _np_swapaxes,
    "clip": _np_clip,
}

_UFUNCS: Final[dict[str, Callable[..., Any]]] = {
    "add": pointwise.add,
    "subtract": pointwise.sub,
    "multiply": pointwise.mul,
    "divide": pointwise.div,
    "true_divide": pointwise.div,
    "power": pointwise.pow,
    "negative": pointwise.neg,
    "exp": pointwise.exp,
    "log": pointwise.log,
    "log1p": pointwise.log1p,
    "expm1": pointwise.expm1,
    "sqrt": pointwise.sqrt,
    "sin": pointwise.sin,
    "cos": pointwise.cos,
    "tan": pointwise.tan,
    "tanh": pointwise.tanh,
    "absolute": pointwise.abs,
    "sign": pointwise.sign,
    "maximum": pointwise.maximum,
    "minimum": pointwise.minimum,
    "matmul": linalg.matmul,
    "reciprocal": pointwise.reciprocal,
    "equal": pointwise.eq,
    "not_equal": pointwise.ne,
    "less": pointwise.lt,
    "less_equal": pointwise.le,
    "greater": pointwise.gt,
    "greater_equal": pointwise.ge,
    "logical_and": pointwise.logical_and,
    "logical_or": pointwise.logical_or,
    "logical_not": pointwise.logical_not,
    "isnan": pointwise.isnan,
    "isfinite": pointwise.isfinite,
    "floor_divide": pointwise.floor_divide,
    "remainder": pointwise.remainder,
}


def _is_numpy(f: Any) -> bool:
    return type(f).__module__ == "numpy" or getattr(f, "__module__", "").startswith("numpy")


def array_ufunc(ufunc: Any, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    fn = _UFUNCS.get(ufunc.__name__) if _is_numpy(ufunc) else None
    if fn is None or method != "__call__" or kwargs.get("out") is not None:
        return NotImplemented
    return fn(*inputs)


def array_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    fn = _ARRAY_FUNCTIONS.get(func.__name__) if _is_numpy(func) else None
    if fn is None:
        return NotImplemented
    return fn(*args, **kwargs)


# ----- cumsum, prod, einsum (the rules of reductions and einsum under create_graph) -----
def _np_cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    return reduce.cumsum(a, axis)


def _np_prod(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **_: Any
) -> Any:
    return reduce.prod(a, axis, keepdims)


def _np_einsum(equation: str, *operands: Any, **_: Any) -> Any:
    return linalg.einsum(equation, *operands)


_ARRAY_FUNCTIONS.update({"cumsum": _np_cumsum, "prod": _np_prod, "einsum": _np_einsum})


# ----- tril, triu, diagonal; linalg.inv and linalg.solve (the rules of ag.linalg) -----
def _np_tril(m: Any, k: int = 0) -> Any:
    return shape.tril(m, k)


def _np_triu(m: Any, k: int = 0) -> Any:
    return shape.triu(m, k)


def _np_diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    from .extras import diagonal

    return diagonal(a, offset, axis1, axis2)


def _np_linalg_inv(a: Any) -> Any:
    from .decomp import inv

    return inv(a)


def _np_linalg_solve(a: Any, b: Any) -> Any:
    # NumPy 2's solve: ``b`` is a batch of matrices unless it is 1-D; the rules pass matrices
    from .decomp import _solve_matrix

    return _solve_matrix(_t(a), _t(b))


_ARRAY_FUNCTIONS.update(
    {
        "tril": _np_tril,
        "triu": _np_triu,
        "diagonal": _np_diagonal,
        "inv": _np_linalg_inv,
        "solve": _np_linalg_solve,
    }
)
