"""Installs the op functions on Tensor as methods and operators, and the NumPy protocols."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .tensor import Tensor


def _r(fn: Any) -> Any:
    def reflected(self: Tensor, other: Any) -> Tensor:
        return fn(other, self)

    reflected.__name__ = f"__r{fn.__name__}__"
    return reflected


_METHODS = {
    # arithmetic
    "add": ops.add,
    "sub": ops.sub,
    "mul": ops.mul,
    "div": ops.div,
    "pow": ops.pow,
    "neg": ops.neg,
    "exp": ops.exp,
    "log": ops.log,
    "log1p": ops.log1p,
    "expm1": ops.expm1,
    "sqrt": ops.sqrt,
    "rsqrt": ops.rsqrt,
    "reciprocal": ops.reciprocal,
    "sin": ops.sin,
    "cos": ops.cos,
    "tan": ops.tan,
    "tanh": ops.tanh,
    "sigmoid": ops.sigmoid,
    "relu": ops.relu,
    "abs": ops.abs,
    "sign": ops.sign,
    "erf": ops.erf,
    "clamp": ops.clamp,
    "clip": ops.clamp,
    "maximum": ops.maximum,
    "minimum": ops.minimum,
    "floor_divide": ops.floor_divide,
    "remainder": ops.remainder,
    "eq": ops.eq,
    "ne": ops.ne,
    "lt": ops.lt,
    "le": ops.le,
    "gt": ops.gt,
    "ge": ops.ge,
    "isnan": ops.isnan,
    "isfinite": ops.isfinite,
    "logical_not": ops.logical_not,
    # reductions
    "sum": ops.sum,
    "mean": ops.mean,
    "amax": ops.amax,
    "amin": ops.amin,
    "max": ops.max,
    "min": ops.min,
    "argmax": ops.argmax,
    "argmin": ops.argmin,
    "logsumexp": ops.logsumexp,
    # linear algebra
    "matmul": ops.matmul,
    "mm": ops.mm,
    "bmm": ops.bmm,
    # shapes
    "reshape": ops.reshape,
    "view": ops.view,
    "flatten": ops.flatten,
    "unflatten": ops.unflatten,
    "squeeze": ops.squeeze,
    "unsqueeze": ops.unsqueeze,
    "transpose": ops.transpose,
    "swapaxes": ops.transpose,
    "permute": ops.permute,
    "t": ops.t,
    "expand": ops.expand,
    "expand_as": ops.expand_as,
    "broadcast_to": ops.broadcast_to,
    "split": ops.split,
    "chunk": ops.chunk,
    "unbind": ops.unbind,
    "masked_fill": ops.masked_fill,
    "clone": ops.clone,
    "contiguous": ops.contiguous,
    "softmax": ops.softmax,
    "log_softmax": ops.log_softmax,
    # in place
    "add_": ops.add_,
    "sub_": ops.sub_,
    "mul_": ops.mul_,
    "div_": ops.div_,
    "pow_": ops.pow_,
    "clamp_": ops.clamp_,
    "relu_": ops.relu_,
    "zero_": ops.zero_,
    "fill_": ops.fill_,
    "copy_": ops.copy_,
    "masked_fill_": ops.masked_fill_,
}

for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)

Tensor.__add__ = ops.add  # type: ignore[method-assign,assignment]
Tensor.__radd__ = _r(ops.add)  # type: ignore[attr-defined]
Tensor.__sub__ = ops.sub  # type: ignore[attr-defined]
Tensor.__rsub__ = _r(ops.sub)  # type: ignore[attr-defined]
Tensor.__mul__ = ops.mul  # type: ignore[attr-defined]
Tensor.__rmul__ = _r(ops.mul)  # type: ignore[attr-defined]
Tensor.__truediv__ = ops.div  # type: ignore[attr-defined]
Tensor.__rtruediv__ = _r(ops.div)  # type: ignore[attr-defined]
Tensor.__floordiv__ = ops.floor_divide  # type: ignore[attr-defined]
Tensor.__rfloordiv__ = _r(ops.floor_divide)  # type: ignore[attr-defined]
Tensor.__mod__ = ops.remainder  # type: ignore[attr-defined]
Tensor.__rmod__ = _r(ops.remainder)  # type: ignore[attr-defined]
Tensor.__pow__ = ops.pow  # type: ignore[attr-defined]
Tensor.__rpow__ = _r(ops.pow)  # type: ignore[attr-defined]
Tensor.__matmul__ = ops.matmul  # type: ignore[attr-defined]
Tensor.__rmatmul__ = _r(ops.matmul)  # type: ignore[attr-defined]
Tensor.__neg__ = ops.neg  # type: ignore[attr-defined]
Tensor.__abs__ = ops.abs  # type: ignore[attr-defined]
Tensor.__eq__ = ops.eq  # type: ignore[assignment,method-assign]
Tensor.__ne__ = ops.ne  # type: ignore[assignment,method-assign]
Tensor.__lt__ = ops.lt  # type: ignore[attr-defined]
Tensor.__le__ = ops.le  # type: ignore[attr-defined]
Tensor.__gt__ = ops.gt  # type: ignore[attr-defined]
Tensor.__ge__ = ops.ge  # type: ignore[attr-defined]
Tensor.__and__ = ops.logical_and  # type: ignore[attr-defined]
Tensor.__or__ = ops.logical_or  # type: ignore[attr-defined]
Tensor.__invert__ = ops.logical_not  # type: ignore[attr-defined]
Tensor.__getitem__ = ops.getitem  # type: ignore[attr-defined]
Tensor.__setitem__ = ops.setitem  # type: ignore[attr-defined]
Tensor.__hash__ = object.__hash__  # type: ignore[assignment,method-assign]


def _iadd(self: Tensor, other: Any) -> Tensor:
    return ops.add_(self, other)


def _isub(self: Tensor, other: Any) -> Tensor:
    return ops.sub_(self, other)


def _imul(self: Tensor, other: Any) -> Tensor:
    return ops.mul_(self, other)


def _itruediv(self: Tensor, other: Any) -> Tensor:
    return ops.div_(self, other)


Tensor.__iadd__ = _iadd  # type: ignore[attr-defined]
Tensor.__isub__ = _isub  # type: ignore[attr-defined]
Tensor.__imul__ = _imul  # type: ignore[attr-defined]
Tensor.__itruediv__ = _itruediv  # type: ignore[attr-defined]

Tensor.T = property(lambda self: ops.permute(self, tuple(range(self.ndim - 1, -1, -1))))  # type: ignore[attr-defined]
Tensor.mT = property(lambda self: ops.transpose(self, -2, -1))  # type: ignore[attr-defined]


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    return self.to(other.dtype)


Tensor.type_as = _type_as  # type: ignore[attr-defined]
Tensor.float = lambda self: self.to(np.float32)  # type: ignore[attr-defined]
Tensor.double = lambda self: self.to(np.float64)  # type: ignore[attr-defined]
Tensor.half = lambda self: self.to(np.float16)  # type: ignore[attr-defined]
Tensor.long = lambda self: self.to(np.int64)  # type: ignore[attr-defined]
Tensor.int = lambda self: self.to(np.int32)  # type: ignore[attr-defined]
Tensor.bool = lambda self: self.to(np.bool_)  # type: ignore[attr-defined]


# ----- NOTE [Rules are NumPy]: NumPy calls on Tensors run asyncgrad ops -----
def _np_sum(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **_: Any
) -> Any:
    return ops.sum(a, axis, keepdims)


def _np_mean(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **_: Any
) -> Any:
    return ops.mean(a, axis, keepdims)


def _np_reshape(a: Any, shape: Any = None, *args: Any, **kwargs: Any) -> Any:
    if shape is None:
        shape = kwargs.get("newshape")
    return ops.reshape(a, shape)


def _np_transpose(a: Any, axes: Any = None) -> Any:
    if axes is None:
        axes = tuple(range(a.ndim - 1, -1, -1))
    return ops.permute(a, tuple(axes))


def _np_expand_dims(a: Any, axis: Any) -> Any:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = a.ndim + len(axes)
    for ax in sorted(x % nd for x in axes):
        a = ops.unsqueeze(a, ax)
    return a


def _np_squeeze(a: Any, axis: Any = None) -> Any:
    return ops.squeeze(a, axis)


def _np_broadcast_to(a: Any, shape: Any, subok: bool = False) -> Any:
    return ops.expand(ops.as_tensor(a) if not isinstance(a, Tensor) else a, tuple(shape))


def _np_where(cond: Any, x: Any = None, y: Any = None) -> Any:
    return ops.where(cond, x, y)


def _np_concatenate(arrays: Any, axis: int = 0, **_: Any) -> Any:
    return ops.cat([a if isinstance(a, Tensor) else ops.as_tensor(a) for a in arrays], axis)


def _np_stack(arrays: Any, axis: int = 0, **_: Any) -> Any:
    return ops.stack([a if isinstance(a, Tensor) else ops.as_tensor(a) for a in arrays], axis)


def _np_zeros_like(
    a: Any, dtype: Any = None, order: Any = "K", subok: bool = True, shape: Any = None
) -> Any:
    arr = a._array if isinstance(a, Tensor) else a
    return Tensor._wrap(np.zeros_like(arr, dtype=dtype, shape=shape))


def _np_swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    return ops.transpose(a, axis1, axis2)


def _np_clip(a: Any, a_min: Any = None, a_max: Any = None, **_: Any) -> Any:
    return ops.clamp(a, a_min, a_max)


_ARRAY_FUNCTIONS = {
    np.sum: _np_sum,
    np.mean: _np_mean,
    np.reshape: _np_reshape,
    np.transpose: _np_transpose,
    np.expand_dims: _np_expand_dims,
    np.squeeze: _np_squeeze,
    np.broadcast_to: _np_broadcast_to,
    np.where: _np_where,
    np.concatenate: _np_concatenate,
    np.stack: _np_stack,
    np.zeros_like: _np_zeros_like,
    np.swapaxes: _np_swapaxes,
    np.clip: _np_clip,
}

_UFUNCS = {
    np.add: ops.add,
    np.subtract: ops.sub,
    np.multiply: ops.mul,
    np.true_divide: ops.div,
    np.power: ops.pow,
    np.negative: ops.neg,
    np.exp: ops.exp,
    np.log: ops.log,
    np.log1p: ops.log1p,
    np.expm1: ops.expm1,
    np.sqrt: ops.sqrt,
    np.sin: ops.sin,
    np.cos: ops.cos,
    np.tan: ops.tan,
    np.tanh: ops.tanh,
    np.absolute: ops.abs,
    np.sign: ops.sign,
    np.maximum: ops.maximum,
    np.minimum: ops.minimum,
    np.matmul: ops.matmul,
    np.reciprocal: ops.reciprocal,
    np.equal: ops.eq,
    np.not_equal: ops.ne,
    np.less: ops.lt,
    np.less_equal: ops.le,
    np.greater: ops.gt,
    np.greater_equal: ops.ge,
    np.logical_and: ops.logical_and,
    np.logical_or: ops.logical_or,
    np.logical_not: ops.logical_not,
    np.isnan: ops.isnan,
    np.isfinite: ops.isfinite,
    np.floor_divide: ops.floor_divide,
    np.remainder: ops.remainder,
}


def _array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    fn = _UFUNCS.get(ufunc)
    if fn is None or method != "__call__" or kwargs.get("out") is not None:
        return NotImplemented
    return fn(*inputs)


def _array_function(self: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    fn = _ARRAY_FUNCTIONS.get(func)
    if fn is None:
        return NotImplemented
    return fn(*args, **kwargs)


Tensor.__array_ufunc__ = _array_ufunc  # type: ignore[attr-defined]
Tensor.__array_function__ = _array_function  # type: ignore[attr-defined]
