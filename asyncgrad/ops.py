"""Forward ops: each computes with NumPy and, when grad mode is on, records a backward Node."""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import numpy as np

from .autograd.derivatives import OPS, OpDef
from .autograd.grad_mode import _grad_enabled
from .autograd.graph import Edge, Node, SavedTensor
from .backend import CPU, Device, device_of, quiet_fp, restore_fp, silent_fp, to_device
from .tensor import Tensor, bool_, float16, float32, float64, int32, int64

ndarray = np.ndarray
_NO_PARAMS: Final[dict[str, Any]] = {}
_DTYPE_NAMES: Final = {
    "float16": float16,
    "half": float16,
    "float32": float32,
    "float": float32,
    "float64": float64,
    "double": float64,
    "int32": int32,
    "int": int32,
    "int64": int64,
    "long": int64,
    "bool": bool_,
}


def _dtype(d: Any) -> np.dtype[Any]:
    if isinstance(d, str):
        try:
            return _DTYPE_NAMES[d]
        except KeyError:
            raise TypeError(f"unknown dtype {d!r}") from None
    if d is float:
        return float32
    if d is int:
        return int64
    if d is bool:
        return bool_
    return np.dtype(d)


def _as_array(data: Any, dtype: Any = None) -> Any:
    """An ndarray for ``data`` (no copy when it already is one), with torch's default dtypes."""
    if isinstance(data, Tensor):
        arr = data._array
    elif type(data) is ndarray:
        arr = data
    elif hasattr(data, "__cuda_array_interface__"):
        arr = data
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in _flat(data)):
            data = _tensors_to_nested(data)
        arr = np.asarray(data)
        if dtype is None and not isinstance(data, (np.generic, ndarray)):
            # Python floats become float32 and ints int64, as in torch.
            if arr.dtype == float64:
                arr = arr.astype(float32)
            elif arr.dtype.kind == "i" and arr.dtype != int64:
                arr = arr.astype(int64)
        elif type(arr) is not ndarray:
            arr = np.asarray(arr)
    if dtype is not None:
        dt = _dtype(dtype)
        if arr.dtype != dt:
            arr = arr.astype(dt)
    return arr


def _flat(data: Any) -> Any:
    for d in data:
        if isinstance(d, (list, tuple)):
            yield from _flat(d)
        else:
            yield d


def _tensors_to_nested(data: Any) -> Any:
    if isinstance(data, Tensor):
        return data._array
    if isinstance(data, (list, tuple)):
        return [_tensors_to_nested(d) for d in data]
    return data


def _arr(x: Any) -> Any:
    return x._array if isinstance(x, Tensor) else x


def _wrap_out(out: Any) -> Tensor:
    if type(out) is not ndarray:
        out = np.asarray(out)
    return Tensor._wrap(out)


# =====================================================================================
# Recording
# =====================================================================================
def _record(
    op: OpDef, outs: Sequence[Tensor], inputs: Sequence[Any], params: dict[str, Any]
) -> None:
    """Attach a backward node of ``op`` to ``outs`` if any tensor input requires grad."""
    edges: list[Any] = []
    saved: list[Any] = [None]
    mask = 0
    bit = 1
    for x in inputs:
        if isinstance(x, Tensor):
            fn = x._grad_fn
            if x._base is not None or (fn is None and x._requires_grad):
                e = x._edge()
            elif fn is not None:
                e = (fn, x._output_nr)
            else:
                e = None
            if e is not None:
                mask |= bit
            edges.append(e)
            saved.append(None)
        else:
            edges.append(None)
            saved.append(x)  # constants are kept for the rules
        bit <<= 1
    if not mask:
        return
    node = object.__new__(op.node_cls)
    node._init_node(edges)
    node._op = op
    node._params = params
    if len(outs) == 1:
        a = outs[0]._array
        node._input_meta = ((a.shape, a.dtype),)
    else:
        a = outs[0]._array
        node._input_meta = tuple((o._array.shape, o._array.dtype) for o in outs)
    node._device = CPU if type(a) is ndarray else device_of(a)
    tensor_pos: list[int] = []
    for pos in op.saves_for(mask):
        if pos == 0:
            if op.num_outputs == 1:
                saved[0] = SavedTensor(outs[0], True)
            else:
                saved[0] = tuple(SavedTensor(o, True) for o in outs)
            tensor_pos.append(0)
        else:
            x = inputs[pos - 1]
            if isinstance(x, Tensor):
                tensor_pos.append(pos)
                if x._meta is not None and x._meta.inference:
                    raise RuntimeError(
                        "Inference tensors cannot be saved for backward. To work around you can "
                        "make a clone to get a normal tensor and use it in autograd."
                    )
                saved[pos] = SavedTensor(x, False)
    node._spos = tuple(tensor_pos)  # only these are released after backward
    node._saved = saved
    i = 0
    for o in outs:
        o._grad_fn = node
        o._output_nr = i
        i += 1


def _make(
    op: OpDef, out: Any, inputs: Sequence[Any], params: dict[str, Any] = _NO_PARAMS
) -> Tensor:
    if type(out) is not ndarray:
        out = np.asarray(out)
    t = Tensor._wrap(out)
    if _grad_enabled.get():
        _record(op, (t,), inputs, params)
    return t


def _check_devices(name: str, xa: Any, ya: Any) -> None:
    da, db = device_of(xa), device_of(ya)
    if da is not db:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{da} and {db}! (when checking arguments for {name})"
        )


# =====================================================================================
# Elementwise
# =====================================================================================
_OP = OPS


def _binary(op: OpDef, ufunc: Any, x: Any, y: Any) -> Tensor:
    xa = x._array if isinstance(x, Tensor) else x.item() if isinstance(x, np.generic) else x
    ya = y._array if isinstance(y, Tensor) else y.item() if isinstance(y, np.generic) else y
    # (NumPy scalars count as Python numbers, as in torch: they do not widen a tensor's dtype.)
    if type(xa) is not type(ya) and hasattr(xa, "shape") and hasattr(ya, "shape"):
        _check_devices(op.name, xa, ya)  # e.g. a NumPy and a CuPy array
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = ufunc(xa, ya)
        if type(out) is not ndarray:
            out = np.asarray(out)
        if out.dtype == float64 and not _is_f64(xa) and not _is_f64(ya):
            out = out.astype(float32)  # an int tensor with a Python float gives float32, as torch
        elif type(xa) is ndarray and type(ya) is ndarray and (xa.ndim == 0) is not (ya.ndim == 0):
            out = _zero_dim_promotion(out, xa, ya)
    except ValueError:
        _raise_broadcast(xa, ya)
        raise
    finally:
        restore_fp(token)
    t = Tensor._wrap(out)
    if _grad_enabled.get():
        _record(op, (t,), (x, y), _NO_PARAMS)
    return t


_CATEGORY: Final = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _zero_dim_promotion(out: Any, xa: Any, ya: Any) -> Any:
    """torch's rule for a 0-d tensor with a dimensioned one: the 0-d operand decides the result
    type only when its category (bool < int < float) is higher; otherwise the dimensioned
    operand's dtype wins. NumPy would let a 0-d float64 widen a float32 tensor."""
    big, small = (ya, xa) if xa.ndim == 0 else (xa, ya)
    cb, cs = _CATEGORY.get(big.dtype.kind, 3), _CATEGORY.get(small.dtype.kind, 3)
    want = big.dtype if cs <= cb else small.dtype
    return out if out.dtype == want else out.astype(want)


def _raise_broadcast(xa: Any, ya: Any) -> None:
    """Raise torch's RuntimeError if the shapes of ``xa`` and ``ya`` do not broadcast."""
    sa, sb = getattr(xa, "shape", ()), getattr(ya, "shape", ())
    n = builtins.max(len(sa), len(sb))
    pa, pb = (1,) * (n - len(sa)) + tuple(sa), (1,) * (n - len(sb)) + tuple(sb)
    for d in range(n - 1, -1, -1):
        if pa[d] != pb[d] and 1 not in (pa[d], pb[d]):
            raise RuntimeError(
                f"The size of tensor a ({pa[d]}) must match the size of tensor b ({pb[d]}) at "
                f"non-singleton dimension {d}"
            )


def _is_f64(a: Any) -> bool:
    dt = getattr(a, "dtype", None)  # not `== float64` alone: np.dtype(None) is float64
    return dt is not None and dt == float64


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return _binary(_OP["add"], np.add, input, other)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return _binary(_OP["sub"], np.subtract, input, other)


def mul(input: Any, other: Any) -> Tensor:
    return _binary(_OP["mul"], np.multiply, input, other)


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is not None:
        return _no_grad_binary(
            np.floor_divide if rounding_mode == "floor" else _trunc_div, input, other
        )
    return _binary(_OP["div"], np.true_divide, input, other)


def _trunc_div(a: Any, b: Any) -> Any:
    return np.trunc(np.true_divide(a, b))


def pow(input: Any, exponent: Any) -> Tensor:
    return _binary(_OP["pow"], _pow_scalar, input, exponent)


def _pow_scalar(a: Any, e: Any) -> Any:
    """``a ** e`` as torch computes it: for a float tensor and a Python number ``e`` in 2, 3, -2,
    0.5, -0.5, -1, as products, sqrt, rsqrt and reciprocal, which differ from pow at -0 and -inf
    (``(-inf) ** 0.5`` is NaN, ``(-0.0) ** -0.5`` is -inf). Also on Tensors (in rules)."""
    if type(e) in (int, float) and getattr(a, "dtype", float64).kind == "f":
        if e == 2:
            return a * a
        if e == 3:
            return a * a * a
        if e == 0.5:
            return np.sqrt(a)
        if e == -0.5:
            return 1.0 / np.sqrt(a)
        if e == -1:
            return 1.0 / a
        if e == -2:
            return 1.0 / (a * a)
    return np.power(a, e)


def maximum(input: Any, other: Any) -> Tensor:
    return _binary(_OP["maximum"], np.maximum, input, other)


def minimum(input: Any, other: Any) -> Tensor:
    return _binary(_OP["minimum"], np.minimum, input, other)


def _no_grad_binary(ufunc: Any, x: Any, y: Any) -> Tensor:
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        return _wrap_out(ufunc(_arr(x), _arr(y)))
    finally:
        restore_fp(token)


def floor_divide(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.floor_divide, input, other)


def remainder(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.remainder, input, other)


def eq(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.equal, input, other)


def ne(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.not_equal, input, other)


def lt(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.less, input, other)


def le(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.less_equal, input, other)


def gt(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.greater, input, other)


def ge(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.greater_equal, input, other)


def logical_and(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.logical_and, input, other)


def logical_or(input: Any, other: Any) -> Tensor:
    return _no_grad_binary(np.logical_or, input, other)


def logical_not(input: Any) -> Tensor:
    return _wrap_out(np.logical_not(_arr(input)))


def isnan(input: Any) -> Tensor:
    return _wrap_out(np.isnan(_arr(input)))


def isfinite(input: Any) -> Tensor:
    return _wrap_out(np.isfinite(_arr(input)))


def allclose(
    input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> bool:
    return bool(np.allclose(_arr(input), _arr(other), rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(input: Any, other: Any) -> bool:
    a, b = _arr(input), _arr(other)
    return bool(a.shape == b.shape and np.array_equal(a, b))


def _unary(op: OpDef, fn: Any, x: Any, params: dict[str, Any] = _NO_PARAMS) -> Tensor:
    if not isinstance(x, Tensor):
        x = as_tensor(x)
    xa = x._array
    if xa.dtype.kind not in "fc" and op.name not in ("neg", "abs", "sign", "relu", "clamp"):
        xa = xa.astype(float32)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = fn(xa)
    finally:
        restore_fp(token)
    if type(out) is not ndarray:
        out = np.asarray(out)
    t = Tensor._wrap(out)
    if _grad_enabled.get():
        _record(op, (t,), (x,), params)
    return t


def neg(input: Tensor) -> Tensor:
    return _unary(_OP["neg"], np.negative, input)


def exp(input: Tensor) -> Tensor:
    return _unary(_OP["exp"], np.exp, input)


def log(input: Tensor) -> Tensor:
    return _unary(_OP["log"], np.log, input)


def log1p(input: Tensor) -> Tensor:
    return _unary(_OP["log1p"], np.log1p, input)


def expm1(input: Tensor) -> Tensor:
    return _unary(_OP["expm1"], np.expm1, input)


def sqrt(input: Tensor) -> Tensor:
    return _unary(_OP["sqrt"], np.sqrt, input)


def rsqrt(input: Tensor) -> Tensor:
    return _unary(_OP["rsqrt"], lambda a: 1.0 / np.sqrt(a), input)


def reciprocal(input: Tensor) -> Tensor:
    return _unary(_OP["reciprocal"], np.reciprocal, input)


def sin(input: Tensor) -> Tensor:
    return _unary(_OP["sin"], np.sin, input)


def cos(input: Tensor) -> Tensor:
    return _unary(_OP["cos"], np.cos, input)


def tan(input: Tensor) -> Tensor:
    return _unary(_OP["tan"], np.tan, input)


def tanh(input: Tensor) -> Tensor:
    return _unary(_OP["tanh"], np.tanh, input)


def _sigmoid_array(a: Any) -> Any:
    # Evaluated without overflow for large |a|: exp of a non-positive number only.
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(a.dtype, copy=False)


def sigmoid(input: Tensor) -> Tensor:
    return _unary(_OP["sigmoid"], _sigmoid_array, input)


def relu(input: Tensor) -> Tensor:
    return _unary(_OP["relu"], lambda a: np.maximum(a, 0), input)


def abs(input: Tensor) -> Tensor:
    return _unary(_OP["abs"], np.abs, input)


def _sign_array(a: Any) -> Any:
    if a.dtype.kind == "f":
        return np.where(a != a, 0, np.sign(a))  # torch's sign is 0 at NaN, NumPy's NaN
    return np.sign(a)


def sign(input: Tensor) -> Tensor:
    return _unary(_OP["sign"], _sign_array, input)


try:  # SciPy's erf is exact and fast; without SciPy fall back to math.erf per element.
    from scipy.special import erf as _erf_array
except ImportError:  # pragma: no cover - depends on the environment
    _erf_vec = np.vectorize(math.erf, otypes=[float64])

    def _erf_array(a: Any) -> Any:
        return _erf_vec(a).astype(a.dtype, copy=False)


def erf(input: Any) -> Any:
    if not isinstance(input, Tensor):
        return _erf_array(input)
    return _unary(_OP["erf"], _erf_array, input)


def _gelu_array(a: Any, approximate: str) -> Any:
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * a * (1.0 + np.tanh(c * (a + 0.044715 * a * a * a)))
    return (0.5 * a * (1.0 + _erf_array(a / math.sqrt(2.0)))).astype(a.dtype, copy=False)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(
        _OP["gelu"], lambda a: _gelu_array(a, approximate), input, {"approximate": approximate}
    )


def silu(input: Tensor) -> Tensor:
    return _unary(_OP["silu"], lambda a: a * _sigmoid_array(a), input)


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        r = input
        if min is not None:
            r = maximum(r, min)
        if max is not None:
            r = minimum(r, max)
        return r
    return _unary(_OP["clamp"], lambda a: np.clip(a, min, max), input, {"min": min, "max": max})


def where(condition: Any, input: Any, other: Any) -> Tensor:
    c = _arr(condition)
    if not hasattr(c, "dtype"):  # a Python bool, e.g. from a rule run under create_graph
        c = np.asarray(c)
    c = c.astype(bool) if c.dtype != bool_ else c
    out = np.where(c, _arr(input), _arr(other))
    if out.dtype == float64 and not _is_f64(_arr(input)) and not _is_f64(_arr(other)):
        out = out.astype(float32)
    return _make(_OP["where"], out, (c, input, other))


# =====================================================================================
# Reductions
# =====================================================================================
def _dims(dim: Any, ndim: int) -> tuple[int, ...] | None:
    if dim is None:
        return None
    if isinstance(dim, (int, np.integer)):
        dim = (int(dim),)
    out = []
    for d in dim:
        d = int(d)
        if not -builtins.max(ndim, 1) <= d < builtins.max(ndim, 1):
            raise IndexError(
                f"Dimension out of range (expected to be in range of "
                f"[{-builtins.max(ndim, 1)}, {builtins.max(ndim, 1) - 1}], but got {d})"
            )
        out.append(d % builtins.max(ndim, 1))
    return tuple(out)


@silent_fp  # See NOTE [Silent floating point]
def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    xa = input._array
    axis = _dims(dim, xa.ndim)
    if xa.ndim == 0:
        axis = None
    out = np.sum(xa, axis=axis, keepdims=keepdim, dtype=None if dtype is None else _dtype(dtype))
    if xa.dtype.kind in "bi" and dtype is None:
        out = np.asarray(out).astype(int64)
    return _make(_OP["sum"], out, (input,), {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape})


@silent_fp  # See NOTE [Silent floating point]
def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    xa = input._array
    if xa.dtype.kind not in "fc" and dtype is None:
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
            f"complex dtype. Got: {xa.dtype}"
        )
    axis = _dims(dim, xa.ndim)
    if xa.ndim == 0:
        axis = None
    out = np.mean(xa, axis=axis, keepdims=keepdim, dtype=None if dtype is None else _dtype(dtype))
    return _make(
        _OP["mean"], out, (input,), {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape}
    )


def amax(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return _amax_amin("amax", np.amax, input, dim, keepdim, False)


def amin(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return _amax_amin("amin", np.amin, input, dim, keepdim, False)


def _amax_amin(name: str, fn: Any, input: Tensor, dim: Any, keepdim: bool, evenly: bool) -> Tensor:
    # evenly: max() and min() without a dim, whose gradient at a NaN result goes to the NaNs
    # (torch's evenly_distribute_backward); amax and amin make it NaN.
    xa = input._array
    axis = None if dim == () or dim is None else _dims(dim, xa.ndim)
    out = fn(xa, axis=axis, keepdims=keepdim)
    params = {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape, "evenly": evenly}
    return _make(_OP[name], out, (input,), params)


class _MinMax(NamedTuple):
    values: Tensor
    indices: Tensor


def _extreme(input: Tensor, dim: Any, keepdim: bool, name: str, argf: Any) -> Any:
    if dim is None:
        if name == "max":
            return _amax_amin("amax", np.amax, input, None, False, True)
        return _amax_amin("amin", np.amin, input, None, False, True)
    if isinstance(dim, Tensor):  # max(a, b) spelled as max(input, other)
        return maximum(input, dim) if name == "max" else minimum(input, dim)
    xa = input._array
    (d,) = _dims(dim, xa.ndim) or (0,)
    if xa.ndim == 0:
        return _MinMax(input.clone(), zeros((), dtype=int64))
    idx = np.expand_dims(argf(xa, axis=d), d)
    vals = np.take_along_axis(xa, idx, axis=d)
    if not keepdim:
        idx = np.squeeze(idx, d)
        vals = np.squeeze(vals, d)
    params = {"dim": d, "keepdim": keepdim, "indices": idx, "in_shape": xa.shape}
    v = _make(_OP["max_dim"], vals, (input,), params)
    return _MinMax(v, Tensor._wrap(idx.astype(int64)))


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    return _extreme(input, dim, keepdim, "max", np.argmax)


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    return _extreme(input, dim, keepdim, "min", np.argmin)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    xa = input._array
    if dim is None:
        r = np.argmax(xa)
        return _wrap_out(np.asarray(r, dtype=int64).reshape((1,) * xa.ndim if keepdim else ()))
    return _wrap_out(np.argmax(xa, axis=dim, keepdims=keepdim).astype(int64))


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    xa = input._array
    if dim is None:
        r = np.argmin(xa)
        return _wrap_out(np.asarray(r, dtype=int64).reshape((1,) * xa.ndim if keepdim else ()))
    return _wrap_out(np.argmin(xa, axis=dim, keepdims=keepdim).astype(int64))


@silent_fp  # See NOTE [Silent floating point]
def logsumexp(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    xa = input._array
    axis = _dims(dim, xa.ndim)
    m = np.amax(xa, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(xa - m), axis=axis, keepdims=True)) + m
    if not keepdim:
        out = np.squeeze(out, axis=axis)
    return _make(
        _OP["logsumexp"], out, (input,), {"dim": axis, "keepdim": keepdim, "in_shape": xa.shape}
    )


# =====================================================================================
# Linear algebra
# =====================================================================================
@silent_fp  # See NOTE [Silent floating point]
def matmul(input: Tensor, other: Tensor) -> Tensor:
    xa, ya = _arr(input), _arr(other)
    if getattr(xa, "ndim", 0) == 0 or getattr(ya, "ndim", 0) == 0:
        raise RuntimeError(
            "both arguments to matmul need to be at least 1D, but they are "
            f"{getattr(xa, 'ndim', 0)}D and {getattr(ya, 'ndim', 0)}D"
        )
    if xa.shape[-1] != ya.shape[-2 if ya.ndim > 1 else 0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(xa.shape)} and "
            f"{_shape_str(ya.shape)})"
        )
    return _make(_OP["matmul"], np.matmul(xa, ya), (input, other))


def _shape_str(s: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in s)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {input.shape[0]} and {mat2.shape[0]}")
    return matmul(input, mat2)


@silent_fp  # See NOTE [Silent floating point]
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` as one node (the hot op of an MLP)."""
    xa, wa = input._array, weight._array
    if xa.ndim < 2 or wa.ndim != 2:
        out = matmul(input, weight.t())
        return out if bias is None else out + bias
    if xa.shape[-1] != wa.shape[1]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(xa.shape)} and "
            f"{_shape_str(wa.shape[::-1])})"
        )
    out = np.matmul(xa, wa.T)
    if bias is not None:
        out += bias._array
    return _make(_OP["linear"], out, (input, weight, bias))


# =====================================================================================
# Views and shapes
# =====================================================================================
def _as_view(out: Tensor, x: Tensor, name: str, params: dict[str, Any]) -> Tensor:
    base = x._base if x._base is not None else x
    out._base = base
    out._vc = x._vc
    m = out._get_meta()
    xm = x._meta
    chain = xm.view_chain if (x._base is not None and xm is not None and xm.view_chain) else ()
    m.view_chain = (*chain, (name, params))
    m.view_version = x._vc[0]
    return out


def _shares_memory(out: Any, xa: Any) -> bool:
    ob = out if out.base is None else out.base
    xb = xa if xa.base is None else xa.base
    return ob is xb


def _infer_shape(shape: Any, numel: int, src: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def _reshape_impl(x: Tensor, shape: tuple[int, ...], must_view: bool) -> Tensor:
    xa = x._array
    if shape == xa.shape and not must_view:
        pass
    if must_view:
        try:
            out = xa.view()
            out.shape = shape  # raises instead of copying
        except AttributeError:
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least one "
                "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
            ) from None
    else:
        out = xa.reshape(shape)
    t = _make(_OP["reshape"], out, (x,), {"shape": shape, "in_shape": xa.shape})
    if _shares_memory(out, xa):
        _as_view(t, x, "reshape", {"shape": shape})
    return t


def reshape(input: Tensor, *shape: Any) -> Tensor:
    return _reshape_impl(input, _infer_shape(shape, input._array.size, input.shape), False)


def view(input: Tensor, *shape: Any) -> Tensor:
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        return input.to(shape[0])
    return _reshape_impl(input, _infer_shape(shape, input._array.size, input.shape), True)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    s = input.shape
    if not s:
        return reshape(input, (1,))
    a, b = start_dim % len(s), end_dim % len(s)
    n = 1
    for d in s[a : b + 1]:
        n *= d
    return reshape(input, (*s[:a], n, *s[b + 1 :]))


def unflatten(input: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    s = input.shape
    d = dim % len(s)
    sizes = _infer_shape((tuple(sizes),), s[d], (s[d],))
    return reshape(input, (*s[:d], *sizes, *s[d + 1 :]))


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    s = input.shape
    if dim is None:
        new = tuple(d for d in s if d != 1)
    else:
        dims = _dims(dim, len(s)) or ()
        new = tuple(d for i, d in enumerate(s) if not (i in dims and d == 1))
    return _reshape_impl(input, new, False)


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    s = input.shape
    nd = len(s) + 1
    if not -nd <= dim < nd:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})"
        )
    d = dim % nd
    return _reshape_impl(input, (*s[:d], 1, *s[d:]), False)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    xa = input._array
    nd = builtins.max(xa.ndim, 1)
    for d in (dim0, dim1):
        if not -nd <= d < nd:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                f"but got {d})"
            )
    if xa.ndim < 2:
        return _view_op(input, "permute", xa, {"dims": tuple(range(xa.ndim))})
    d0, d1 = dim0 % nd, dim1 % nd
    out = np.swapaxes(xa, d0, d1)
    t = _make(_OP["transpose"], out, (input,), {"dim0": d0, "dim1": d1})
    return _as_view(t, input, "transpose", {"dim0": d0, "dim1": d1})


def _view_op(x: Tensor, name: str, out: Any, params: dict[str, Any]) -> Tensor:
    t = _make(_OP[name], out, (x,), params)
    return _as_view(t, x, name, params)


def t(input: Tensor) -> Tensor:
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else input.view(input.shape)


def permute(input: Tensor, *dims: Any) -> Tensor:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    nd = input.ndim
    dd = tuple(int(d) % builtins.max(nd, 1) for d in dims)
    if sorted(dd) != list(range(nd)):
        raise RuntimeError(
            f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
            f"length of the desired ordering of dimensions i.e. input.dim() = {nd} is not equal "
            f"to len(dims) = {len(dims)}"
            if len(dd) != nd
            else f"permute(): duplicate dims are not allowed, got {list(dims)}"
        )
    return _view_op(input, "permute", np.transpose(input._array, dd), {"dims": dd})


def expand(input: Tensor, *sizes: Any) -> Tensor:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    xa = input._array
    lead = len(sizes) - xa.ndim
    if lead < 0:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to the "
            f"number of dimensions in the tensor ({xa.ndim})"
        )
    shape = tuple(
        xa.shape[i - lead] if (s == -1 and i >= lead) else int(s) for i, s in enumerate(sizes)
    )
    try:
        out = np.broadcast_to(xa, shape)
    except ValueError:
        raise RuntimeError(
            f"The expanded size of the tensor must match the existing size at non-singleton "
            f"dimensions. Target sizes: {list(sizes)}. Tensor sizes: {list(xa.shape)}"
        ) from None
    return _view_op(input, "expand", out, {"shape": shape})


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return expand(input, other.shape)


def broadcast_to(input: Tensor, shape: Sequence[int]) -> Tensor:
    return expand(input, tuple(shape))


# ----- indexing -----
def _norm_index(index: Any) -> tuple[tuple[Any, ...], bool]:
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    advanced = False
    for i in index:
        if isinstance(i, Tensor):
            i = i._array
            if i.dtype.kind not in "biu":
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            advanced = True
        elif isinstance(i, (list, ndarray)):
            i = np.asarray(i)
            advanced = True
        elif isinstance(i, (bool, np.bool_)):
            advanced = True
        elif not (i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))):
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                f"are valid indices (got {type(i).__name__})"
            )
        out.append(i)
    if not advanced and Ellipsis not in out:
        out.append(Ellipsis)  # keeps all-int indexing a 0-d *view*, not a NumPy scalar copy
    return tuple(out), advanced


def getitem(input: Tensor, index: Any) -> Tensor:
    idx, advanced = _norm_index(index)
    xa = input._array
    try:
        out = xa[idx]
    except IndexError as e:
        raise IndexError(f"{e} (indexing a tensor of shape {tuple(xa.shape)})") from None
    t = _make(_OP["getitem"], out, (input,), {"index": idx, "in_shape": xa.shape})
    if not advanced:
        _as_view(t, input, "getitem", {"index": idx})
    return t


def _index_add_zeros(g: Any, index: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """Zeros of ``shape`` with ``g`` added at ``index`` (repeated indices add up)."""
    ga = g._array if isinstance(g, Tensor) else g
    z = np.zeros(shape, dtype=ga.dtype)
    if _is_basic(index):
        z[index] = ga
    else:
        np.add.at(z, index, ga)
    if isinstance(g, Tensor):
        return _make(_OP["index_add_zeros"], z, (g,), {"index": index, "shape": shape})
    return z


def _is_basic(index: tuple[Any, ...]) -> bool:
    return not any(isinstance(i, (ndarray, bool, np.bool_)) for i in index)


def _zero_at(g: Any, index: tuple[Any, ...]) -> Any:
    mask = np.ones(g.shape, dtype=bool)
    mask[index] = False
    return np.where(mask, g, 0)  # not g * mask: inf * 0 is NaN


def setitem(input: Tensor, index: Any, value: Any) -> None:
    idx, advanced = _norm_index(index)
    if not advanced:
        getitem(input, idx).copy_(value)
        return
    _inplace(input, "index_put", lambda s: _index_put(s, idx, value))


def _index_put(x: Tensor, idx: tuple[Any, ...], value: Any) -> Tensor:
    out = x._array.copy()
    out[idx] = _arr(value)
    return _make(_OP["index_put"], out, (x, value), {"index": idx})


# ----- joining and splitting -----
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    nd = tensors[0].ndim
    d = dim % builtins.max(nd, 1)
    arrs = [_arr(x) for x in tensors]
    try:
        out = np.concatenate(arrs, axis=d)
    except ValueError as e:
        raise RuntimeError(
            f"torch.cat(): Sizes of tensors must match except in dimension {d}: "
            f"got shapes {[tuple(a.shape) for a in arrs]} ({e})"
        ) from None
    return _make(_OP["cat"], out, tensors, {"dim": d, "sizes": [a.shape[d] for a in arrs]})


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    arrs = [_arr(x) for x in tensors]
    if len({a.shape for a in arrs}) > 1:
        raise RuntimeError(
            f"stack expects each tensor to be equal size, but got {[list(a.shape) for a in arrs]}"
        )
    d = dim % (arrs[0].ndim + 1)
    return _make(_OP["stack"], np.stack(arrs, axis=d), tensors, {"dim": d, "n": len(arrs)})


def _multi_view(
    input: Tensor,
    name: str,
    arrays: list[Any],
    params: dict[str, Any],
    indices: list[tuple[Any, ...]],
) -> tuple[Tensor, ...]:
    outs = [Tensor._wrap(a) for a in arrays]
    if _grad_enabled.get():
        op = _OP[name]
        _record(op, outs, (input,), params)
    for o, idx in zip(outs, indices, strict=False):
        _as_view(o, input, "getitem", {"index": idx})
    return tuple(outs)


def split(input: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    xa = input._array
    d = dim % builtins.max(xa.ndim, 1)
    n = xa.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        s = int(split_size_or_sections)
        if s <= 0:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got {s}")
        sizes = [builtins.min(s, n - i) for i in range(0, n, s)] or [0]
    else:
        sizes = [int(v) for v in split_size_or_sections]
        if builtins.sum(sizes) != n:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                f"at dimension {d}), but got split_sizes={sizes}"
            )
    lead = (slice(None),) * d
    idxs, arrs, start = [], [], 0
    for s in sizes:
        idx = (*lead, slice(start, start + s), Ellipsis)
        idxs.append(idx)
        arrs.append(xa[idx])
        start += s
    params = {"dim": d, "sizes": sizes, "in_shape": xa.shape}
    return _multi_view(input, "split", arrs, params, idxs)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input.shape[dim]
    size = -(-n // chunks) if n else 1
    return split(input, builtins.max(size, 1), dim)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    xa = input._array
    d = dim % builtins.max(xa.ndim, 1)
    lead = (slice(None),) * d
    idxs = [(*lead, i, Ellipsis) for i in range(xa.shape[d])]
    arrs = [xa[i] for i in idxs]
    return _multi_view(input, "unbind", arrs, {"dim": d, "in_shape": xa.shape}, idxs)


# ----- view replay (see NOTE [View grad_fn regeneration]) -----
def _replay_view(base: Any, chain: tuple[tuple[str, dict[str, Any]], ...]) -> Any:
    x = base
    if isinstance(base, Tensor):
        for name, p in chain:
            if name == "reshape":
                x = _reshape_impl(x, p["shape"], False)
            elif name == "transpose":
                x = transpose(x, p["dim0"], p["dim1"])
            elif name == "permute":
                x = permute(x, p["dims"])
            elif name == "expand":
                x = expand(x, p["shape"])
            else:
                x = getitem(x, p["index"])
        return x
    for name, p in chain:
        if name == "reshape":
            x = x.reshape(p["shape"])
        elif name == "transpose":
            x = np.swapaxes(x, p["dim0"], p["dim1"])
        elif name == "permute":
            x = np.transpose(x, p["dims"])
        elif name == "expand":
            x = np.broadcast_to(x, p["shape"])
        else:
            x = x[p["index"]]
    return x


# =====================================================================================
# In-place ops
# =====================================================================================
class CopySlices(Node):
    """Backward of an in-place op on a view: routes the view's part of the base's gradient
    through the op's own backward ``fn`` and passes the rest of the base's gradient through."""

    __slots__ = ("_chain", "_fn")

    def __init__(self, base_edge: Any, chain: Any, fn: Node, base: Tensor) -> None:
        edges = [None if base_edge is None else Edge(base_edge[0], base_edge[1])]
        edges.extend(fn._next_edges[1:])
        self._init_node(edges)
        self._chain = chain
        self._fn = fn
        self._input_meta = ((base.shape, base.dtype),)
        self._device = base.device

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> list[Any]:
        g = grads[0]
        if g is None:
            return [None] * len(self._next_edges)
        res = g.clone() if create else g.copy()
        region = _replay_view(res, self._chain)
        piece = region.clone() if create else region.copy()
        sub = self._fn.apply([piece], None, create)
        g0 = sub[0]
        if create:
            region.copy_(zeros_like(region) if g0 is None else g0)
        else:
            region[...] = 0 if g0 is None else g0
        return [res, *sub[1:]]

    def release_variables(self) -> None:
        self._fn.release_variables()


def _check_inplace(self: Tensor) -> None:
    if self._grad_fn is None and self._requires_grad:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )
    base = self._base
    if base is not None and base._grad_fn is None and base._requires_grad:
        raise RuntimeError(
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )


def _write(self: Tensor, res: Any) -> None:
    dst = self._array
    if res.shape != dst.shape:
        raise RuntimeError(
            f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
            f"{list(res.shape)}"
        )
    if res.dtype != dst.dtype and not np.can_cast(res.dtype, dst.dtype, "same_kind"):
        raise RuntimeError(
            f"result type {res.dtype} can't be cast to the desired output type {dst.dtype}"
        )
    if not dst.flags.writeable:
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    np.copyto(dst, res, casting="unsafe")
    self._vc[0] += 1


def _inplace(self: Tensor, name: str, compute: Any) -> Tensor:
    """Run ``compute(alias)`` (an out-of-place op on self's value), write the result into self
    and rebase self's history onto the op's node (CopySlices for a view)."""
    if not _grad_enabled.get():
        _write(self, compute(self)._array)
        return self
    _check_inplace(self)
    op = OPS[name]
    if 1 in op.save:
        # The op's backward needs self's old value, which the write below destroys: save a copy
        # that carries self's place in the graph.
        self._edge()  # brings a view's grad_fn up to date
        alias = Tensor._wrap(self._array.copy())
        alias._grad_fn, alias._output_nr = self._grad_fn, self._output_nr
    else:
        alias = self
    res = compute(alias)
    base = self._base
    fn = res._grad_fn
    base_edge = base._edge() if (base is not None and fn is not None) else None
    _write(self, res._array)
    if fn is None:
        return self
    if base is None:
        self._grad_fn = fn
        self._output_nr = res._output_nr
    else:
        assert self._meta is not None
        assert self._meta.view_chain is not None
        cs = CopySlices(base_edge, self._meta.view_chain, fn, base)
        base._grad_fn = cs
        base._output_nr = 0
        # self and every other view of base now regenerate their grad_fn on next use.
    return self


@silent_fp  # See NOTE [Silent floating point]
def _inplace_arith(self: Tensor, name: str, ufunc: Any, other: Any) -> Tensor:
    oa = _arr(other)
    if not _grad_enabled.get() or not (
        self.requires_grad or (isinstance(other, Tensor) and other.requires_grad)
    ):
        if _grad_enabled.get():
            _check_inplace(self)
        dst = self._array
        try:
            ufunc(dst, oa, out=dst, casting="same_kind")
        except (TypeError, ValueError) as e:
            raise RuntimeError(f"{name}_: {e} (self: {dst.dtype}{list(dst.shape)})") from None
        self._vc[0] += 1
        return self
    return _inplace(self, name, lambda s: _binary(_OP[name], ufunc, s, other))


def add_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _inplace_arith(self, "add", np.add, other)


def sub_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _inplace_arith(self, "sub", np.subtract, other)


def mul_(self: Tensor, other: Any) -> Tensor:
    return _inplace_arith(self, "mul", np.multiply, other)


def div_(self: Tensor, other: Any) -> Tensor:
    return _inplace_arith(self, "div", np.true_divide, other)


def pow_(self: Tensor, exponent: Any) -> Tensor:
    return _inplace(self, "pow", lambda s: pow(s, exponent))


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return _inplace(self, "clamp", lambda s: clamp(s, min, max))


def relu_(self: Tensor) -> Tensor:
    return _inplace(self, "relu", relu)


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


def fill_(self: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(
                f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} "
                "dimensions."
            )
        return copy_(self, value)

    def compute(s: Tensor) -> Tensor:
        return _make(_OP["fill"], np.full_like(s._array, value), (s,), {"value": value})

    return _inplace(self, "fill", compute)


@silent_fp  # See NOTE [Silent floating point]
def copy_(self: Tensor, src: Any) -> Tensor:
    sa = _arr(src)
    if not hasattr(sa, "shape"):
        sa = np.asarray(sa)

    def compute(s: Tensor) -> Tensor:
        try:
            out = np.broadcast_to(sa, s.shape).astype(s.dtype, copy=True)
        except ValueError:
            raise RuntimeError(
                f"The size of tensor a ({list(s.shape)}) must match the size of tensor b "
                f"({list(sa.shape)}) (copy_ of a {list(sa.shape)} source into {list(s.shape)})"
            ) from None
        return _make(_OP["copy"], out, (s, src))

    return _inplace(self, "copy", compute)


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:
    return where(
        mask, value if isinstance(value, Tensor) else np.asarray(value, dtype=input.dtype), input
    )


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    return _inplace(self, "where", lambda s: masked_fill(s, mask, value))


def clone(input: Tensor) -> Tensor:
    return _make(_OP["clone"], input._array.copy(), (input,))


def contiguous(input: Tensor) -> Tensor:
    if input._array.flags.c_contiguous:
        return input
    return _make(_OP["clone"], np.ascontiguousarray(input._array), (input,))


@silent_fp  # See NOTE [Silent floating point]
def _to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    dev: Device | None = None
    dt = kwargs.pop("dtype", None)
    if "device" in kwargs:
        dev = Device(kwargs.pop("device"))
    kwargs.pop("copy", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dev, dt = a.device, a.dtype
        elif isinstance(a, Device) or (isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda")):
            dev = Device(a)
        else:
            dt = a
    out = self
    if dev is not None and dev != self.device:
        arr = to_device(self._array, dev)
        out = _make(_OP["clone"], arr, (self,))
    if dt is not None and _dtype(dt) != out.dtype:
        arr = out._array.astype(_dtype(dt))
        # As in torch, a cast to an integer or bool dtype leaves the graph.
        out = _make(_OP["cast"], arr, (out,)) if arr.dtype.kind in "fc" else Tensor._wrap(arr)
    return out


# =====================================================================================
# Neural-network functions
# =====================================================================================
@silent_fp  # See NOTE [Silent floating point]
def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    xa = input._array if dtype is None else input._array.astype(_dtype(dtype))
    d = dim % builtins.max(xa.ndim, 1)
    z = np.exp(xa - xa.max(axis=d, keepdims=True))
    z /= z.sum(axis=d, keepdims=True)
    return _make(_OP["softmax"], z, (input,), {"dim": d})


@silent_fp  # See NOTE [Silent floating point]
def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    xa = input._array if dtype is None else input._array.astype(_dtype(dtype))
    d = dim % builtins.max(xa.ndim, 1)
    s = xa - xa.max(axis=d, keepdims=True)  # array methods skip NumPy's Python-level wrappers
    s -= np.log(np.exp(s).sum(axis=d, keepdims=True))
    return _make(_OP["log_softmax"], s, (input,), {"dim": d})


@silent_fp  # See NOTE [Silent floating point]
def nll_loss(
    input: Tensor,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    la = input._array
    ta = _arr(target)
    if not hasattr(ta, "dtype") or ta.dtype.kind not in "iu":
        raise RuntimeError(
            f"nll_loss: expected target of integer class indices, got "
            f"{getattr(ta, 'dtype', type(ta).__name__)}"
        )
    if la.ndim < 1 or ta.shape != (la.shape[:1] + la.shape[2:] if la.ndim > 1 else ()):
        raise ValueError(
            f"Expected input batch_size ({la.shape[0] if la.ndim else 0}) to match target "
            f"batch_size ({ta.shape[0] if ta.ndim else 0}); input shape {list(la.shape)}, target "
            f"shape {list(ta.shape)}."
        )
    if la.ndim == 1:  # a single sample
        one = nll_loss(
            input.unsqueeze(0), Tensor._wrap(ta.reshape(1)), weight, ignore_index, reduction
        )
        return one.squeeze(0) if reduction == "none" else one
    n_cls = la.shape[1]
    wa = None if weight is None else _arr(weight)
    if la.ndim == 2 and wa is None and reduction != "none" and ta.size:
        lo, hi = int(ta.min()), int(ta.max())
        if lo >= 0 and hi < n_cls and not lo <= ignore_index <= hi:
            # Every target is a valid class and none is ignored: the common case, in few ops.
            total = -np.sum(la[np.arange(ta.shape[0]), ta])
            denom = float(ta.shape[0]) if reduction == "mean" else 1.0
            params = {
                "target": ta,
                "weight": None,
                "reduction": reduction,
                "ignore_index": ignore_index,
                "denom": denom,
                "all_valid": True,
            }
            return _make(
                _OP["nll_loss"], np.asarray(total / denom, dtype=la.dtype), (input,), params
            )
    valid = ta != ignore_index
    if np.any((ta[valid] < 0) | (ta[valid] >= n_cls)):
        bad = ta[valid][(ta[valid] < 0) | (ta[valid] >= n_cls)][0]
        raise IndexError(f"Target {bad} is out of bounds for {n_cls} classes.")
    safe = np.where(valid, ta, 0)
    picked = np.take_along_axis(la, np.expand_dims(safe, 1), axis=1).squeeze(1)
    coef = valid.astype(la.dtype)
    if wa is not None:
        coef = coef * wa[safe]
    losses = np.where(valid, -picked * coef, 0.0)  # an ignored target's NaN logp too
    denom = 1.0
    if reduction == "none":
        out = losses
    elif reduction == "sum":
        out = np.sum(losses)
    else:
        denom = float(np.sum(coef))
        out = np.sum(losses) / denom if denom else np.asarray(np.nan, dtype=la.dtype)
    out = np.asarray(out, dtype=la.dtype)
    params = {
        "target": ta,
        "weight": wa,
        "reduction": reduction,
        "ignore_index": ignore_index,
        "denom": denom,
        "all_valid": False,
    }
    return _make(_OP["nll_loss"], out, (input,), params)


def cross_entropy(
    input: Tensor,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross entropy over class indices: ``nll_loss(log_softmax(input, 1), target)``."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have at least one dimension (classes)")
    cls_dim = 1 if input.ndim > 1 else 0
    logp = log_softmax(input, cls_dim)
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return loss
    ta = _arr(target)
    n_cls = input.shape[cls_dim]
    valid = Tensor._wrap(np.asarray(ta != ignore_index, dtype=input.dtype))
    lp = (
        logp
        if weight is None
        else logp * reshape(as_tensor(weight), (n_cls,) + (1,) * (input.ndim - 2))
    )
    smooth = -(lp.sum(cls_dim)) * valid if input.ndim > 1 else -(lp.sum(0))  # type: ignore[attr-defined]
    if reduction == "none":
        s = smooth
    elif reduction == "sum":
        s = smooth.sum()  # type: ignore[attr-defined]
    else:
        wa = _arr(weight) if weight is not None else None
        if wa is None:
            denom = float(np.sum(valid._array))
        else:
            denom = float(np.sum(wa[np.where(ta != ignore_index, ta, 0)] * valid._array))
        s = smooth.sum() / denom  # type: ignore[attr-defined]
    return loss * (1.0 - label_smoothing) + s * (label_smoothing / n_cls)


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    d = input - target
    sq = d * d
    if reduction == "none":
        return sq
    return sq.sum() if reduction == "sum" else sq.mean()


# =====================================================================================
# Factories
# =====================================================================================
class Generator:
    """A random number generator (a NumPy ``Generator``), for the ``generator=`` arguments."""

    def __init__(self, device: Any = "cpu") -> None:
        self._rng = np.random.default_rng()

    def manual_seed(self, seed: int) -> Generator:
        self._rng = np.random.default_rng(seed)
        return self


_default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator used by ``rand``, ``randn``, ``randint`` and ``dropout``."""
    return _default_generator.manual_seed(int(seed))


def _size(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _finish(arr: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    if dtype is not None:
        arr = arr.astype(_dtype(dtype), copy=False)
    if device is not None and Device(device) is not CPU:
        arr = to_device(arr, Device(device))
    t = Tensor._wrap(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(
    data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A new tensor holding a copy of ``data``."""
    arr = _as_array(data, dtype)
    if isinstance(data, Tensor) or type(data) is ndarray or arr is data:
        arr = arr.copy()
    return _finish(
        np.array(arr, copy=True) if type(arr) is ndarray else arr, None, device, requires_grad
    )


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    if isinstance(data, Tensor):
        return data.to(*(a for a in (device, dtype) if a is not None))
    return _finish(_as_array(data, dtype), None, device, False)


def from_numpy(a: np.ndarray[Any, Any]) -> Tensor:
    if not isinstance(a, ndarray):
        raise TypeError(f"expected np.ndarray (got {type(a).__name__})")
    return Tensor._wrap(a)


def from_dlpack(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return Tensor._wrap(np.from_dlpack(x))


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(
        np.zeros(_size(size), dtype=_dtype(dtype or float32)), None, device, requires_grad
    )


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(
        np.ones(_size(size), dtype=_dtype(dtype or float32)), None, device, requires_grad
    )


def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(
        np.empty(_size(size), dtype=_dtype(dtype or float32)), None, device, requires_grad
    )


def full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    if dtype is None:
        dtype = (
            bool_
            if isinstance(fill_value, bool)
            else int64
            if isinstance(fill_value, int)
            else float32
        )
    return _finish(
        np.full(_size((size,)), fill_value, dtype=_dtype(dtype)), None, device, requires_grad
    )


def zeros_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    return _finish(
        np.zeros_like(_arr(input), dtype=None if dtype is None else _dtype(dtype)),
        None,
        device,
        requires_grad,
    )


def ones_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    return _finish(
        np.ones_like(_arr(input), dtype=None if dtype is None else _dtype(dtype)),
        None,
        device,
        requires_grad,
    )


def full_like(
    input: Tensor,
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _finish(
        np.full_like(_arr(input), fill_value, dtype=None if dtype is None else _dtype(dtype)),
        None,
        device,
        requires_grad,
    )


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = int64 if is_int else float32
    return _finish(np.arange(start, end, step).astype(_dtype(dtype)), None, device, requires_grad)


def linspace(
    start: float,
    end: float,
    steps: int,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _finish(
        np.linspace(start, end, steps).astype(_dtype(dtype or float32)), None, device, requires_grad
    )


def eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _finish(np.eye(n, m, dtype=_dtype(dtype or float32)), None, device, requires_grad)


def rand(
    *size: Any,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    rng = (generator or _default_generator)._rng
    dt = _dtype(dtype or float32)
    arr = rng.random(_size(size), dtype=dt if dt in (float32, float64) else float64).astype(
        dt, copy=False
    )
    return _finish(arr, None, device, requires_grad)


def randn(
    *size: Any,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    rng = (generator or _default_generator)._rng
    dt = _dtype(dtype or float32)
    arr = rng.standard_normal(
        _size(size), dtype=dt if dt in (float32, float64) else float64
    ).astype(dt, copy=False)
    return _finish(arr, None, device, requires_grad)


def randint(
    low: int,
    high: int | None = None,
    size: Sequence[int] = (),
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    if high is None:
        low, high = 0, low
    rng = (generator or _default_generator)._rng
    arr = rng.integers(low, high, size=tuple(size), dtype=np.int64)
    return _finish(arr, dtype, device, False)


# =====================================================================================
# Repr
# =====================================================================================
def _format_tensor(t: Tensor) -> str:
    arr = t._array
    if type(arr) is not ndarray:
        arr = arr.get()
    body = np.array2string(
        arr, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3, precision=4
    )
    extras = []
    if t.device is not CPU:
        extras.append(f"device='{t.device}'")
    if arr.dtype not in (float32, int64, bool_):
        extras.append(f"dtype=asyncgrad.{arr.dtype}")
    if arr.size == 0:
        extras.append(f"size={tuple(arr.shape)}")
    fn = t._grad_fn
    if fn is not None:
        extras.append(f"grad_fn=<{fn.name()}>")
    elif t._requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + ", ".join([body, *extras]) + ")"
