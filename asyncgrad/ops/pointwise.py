"""Elementwise ops: arithmetic, comparisons, unary math and activations."""

from __future__ import annotations

import builtins
import math
from typing import Any, Final

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import quiet_fp, restore_fp
from ..graph.grad_mode import _grad_enabled
from ..rules import OpDef, pow_scalar
from ._record import NO_PARAMS, OPS, arr, check_devices, make, record, wrap
from .creation import as_tensor

ndarray: Final = backend.ndarray
namespace = backend.namespace
_float64: Final = dtypes.float64
_float32: Final = dtypes.float32


# ----------------------------------------------------------------------------- binary
def _binary(op: OpDef, fname: str, x: Any, y: Any) -> Tensor:
    xa = x._array if isinstance(x, Tensor) else x.item() if isinstance(x, backend.generic) else x
    ya = y._array if isinstance(y, Tensor) else y.item() if isinstance(y, backend.generic) else y
    # (NumPy scalars count as Python numbers, as in torch: they do not widen a tensor's dtype.)
    if type(xa) is ndarray:
        xp = backend.np_namespace if type(ya) is ndarray or not hasattr(ya, "shape") else None
    else:
        xp = None
    if xp is None:
        if hasattr(xa, "shape") and hasattr(ya, "shape") and type(xa) is not type(ya):
            check_devices(op.name, xa, ya)  # e.g. a NumPy and a CuPy array
        xp = namespace(xa if hasattr(xa, "shape") else ya)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = getattr(xp, fname)(xa, ya) if fname != "power" else pow_scalar(xa, ya)
    except ValueError:
        _raise_broadcast(xa, ya)
        raise
    finally:
        restore_fp(token)
    if type(out) is not ndarray:
        out = backend.ensure_array(out)
    dt = out.dtype
    if dt == _float64 or (
        hasattr(xa, "ndim") and hasattr(ya, "ndim") and (xa.ndim == 0) is not (ya.ndim == 0)
    ):
        want = dtypes.promote_binary(dt, xa, ya)
        if want != dt:
            out = out.astype(want)
    t = wrap(out)
    if _grad_enabled.get():
        record(op, (t,), (x, y), NO_PARAMS)
    return t


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


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return _binary(OPS["add"], "add", input, other)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return _binary(OPS["sub"], "subtract", input, other)


def mul(input: Any, other: Any) -> Tensor:
    return _binary(OPS["mul"], "multiply", input, other)


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is not None:
        if rounding_mode == "floor":
            return floor_divide(input, other)
        if rounding_mode != "trunc":
            raise ValueError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                f"{rounding_mode!r}"
            )
        q = _no_grad_binary("true_divide", input, other)
        return wrap(namespace(q._array).trunc(q._array))
    return _binary(OPS["div"], "true_divide", input, other)


def pow(input: Any, exponent: Any) -> Tensor:
    return _binary(OPS["pow"], "power", input, exponent)


def maximum(input: Any, other: Any) -> Tensor:
    return _binary(OPS["maximum"], "maximum", input, other)


def minimum(input: Any, other: Any) -> Tensor:
    return _binary(OPS["minimum"], "minimum", input, other)


def remainder(input: Any, other: Any) -> Tensor:
    """Python's modulo (the result has the sign of ``other``), differentiable as torch's:
    d/dinput = 1, d/dother = -floor(input / other)."""
    return _binary(OPS["remainder"], "remainder", input, other)


def _no_grad_binary(fname: str, x: Any, y: Any) -> Tensor:
    xa, ya = arr(x), arr(y)
    xp = namespace(xa if hasattr(xa, "shape") else ya)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        return wrap(getattr(xp, fname)(xa, ya))
    finally:
        restore_fp(token)


def floor_divide(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("floor_divide", input, other)


def eq(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("equal", input, other)


def ne(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("not_equal", input, other)


def lt(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("less", input, other)


def le(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("less_equal", input, other)


def gt(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("greater", input, other)


def ge(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("greater_equal", input, other)


def logical_and(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("logical_and", input, other)


def logical_or(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("logical_or", input, other)


def logical_not(input: Any) -> Tensor:
    a = arr(input)
    return wrap(namespace(a).logical_not(a))


def isnan(input: Any) -> Tensor:
    a = arr(input)
    return wrap(namespace(a).isnan(a))


def isfinite(input: Any) -> Tensor:
    a = arr(input)
    return wrap(namespace(a).isfinite(a))


def allclose(
    input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> bool:
    a, b = arr(input), arr(other)
    xp = namespace(a if hasattr(a, "shape") else b)
    return bool(xp.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(input: Any, other: Any) -> bool:
    a, b = arr(input), arr(other)
    return bool(a.shape == b.shape and namespace(a).array_equal(a, b))


# ----------------------------------------------------------------------------- unary
# Ops that keep an integer or bool input's dtype; the others compute in float32, as torch.
_KEEP_INT: Final = frozenset(("neg", "abs", "sign", "relu", "clamp"))


def _unary(op: OpDef, fn: Any, x: Any, params: dict[str, Any] = NO_PARAMS) -> Tensor:
    """``fn(xp, array)`` recorded as ``op``."""
    if not isinstance(x, Tensor):
        x = as_tensor(x)
    xa = x._array
    if xa.dtype.kind not in "fc" and op.name not in _KEEP_INT:
        xa = xa.astype(_float32)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = fn(namespace(xa), xa)
    finally:
        restore_fp(token)
    t = wrap(out)
    if _grad_enabled.get():
        record(op, (t,), (x,), params)
    return t


def neg(input: Tensor) -> Tensor:
    return _unary(OPS["neg"], lambda xp, a: xp.negative(a), input)


def exp(input: Tensor) -> Tensor:
    return _unary(OPS["exp"], lambda xp, a: xp.exp(a), input)


def log(input: Tensor) -> Tensor:
    return _unary(OPS["log"], lambda xp, a: xp.log(a), input)


def log1p(input: Tensor) -> Tensor:
    return _unary(OPS["log1p"], lambda xp, a: xp.log1p(a), input)


def expm1(input: Tensor) -> Tensor:
    return _unary(OPS["expm1"], lambda xp, a: xp.expm1(a), input)


def sqrt(input: Tensor) -> Tensor:
    return _unary(OPS["sqrt"], lambda xp, a: xp.sqrt(a), input)


def rsqrt(input: Tensor) -> Tensor:
    return _unary(OPS["rsqrt"], lambda xp, a: 1.0 / xp.sqrt(a), input)


def reciprocal(input: Tensor) -> Tensor:
    return _unary(OPS["reciprocal"], lambda xp, a: xp.reciprocal(a), input)


def sin(input: Tensor) -> Tensor:
    return _unary(OPS["sin"], lambda xp, a: xp.sin(a), input)


def cos(input: Tensor) -> Tensor:
    return _unary(OPS["cos"], lambda xp, a: xp.cos(a), input)


def tan(input: Tensor) -> Tensor:
    return _unary(OPS["tan"], lambda xp, a: xp.tan(a), input)


def tanh(input: Tensor) -> Tensor:
    return _unary(OPS["tanh"], lambda xp, a: xp.tanh(a), input)


def sigmoid_array(xp: Any, a: Any) -> Any:
    # Evaluated without overflow for large |a|: exp of a non-positive number only.
    e = xp.exp(-xp.abs(a))
    return xp.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(a.dtype, copy=False)


def sigmoid(input: Tensor) -> Tensor:
    return _unary(OPS["sigmoid"], sigmoid_array, input)


def relu(input: Tensor) -> Tensor:
    return _unary(OPS["relu"], lambda xp, a: xp.maximum(a, 0), input)


def abs(input: Tensor) -> Tensor:
    return _unary(OPS["abs"], lambda xp, a: xp.abs(a), input)


def _sign_array(xp: Any, a: Any) -> Any:
    if a.dtype.kind == "f":
        return xp.where(a != a, 0, xp.sign(a))  # torch's sign is 0 at NaN, NumPy's NaN
    return xp.sign(a)


def sign(input: Tensor) -> Tensor:
    return _unary(OPS["sign"], _sign_array, input)


def erf(input: Tensor) -> Tensor:
    return _unary(OPS["erf"], lambda xp, a: backend.erf(a), input)


_SQRT_2: Final = math.sqrt(2.0)
_SQRT_2_OVER_PI: Final = math.sqrt(2.0 / math.pi)


def _gelu_array(xp: Any, a: Any, approximate: str) -> Any:
    if approximate == "tanh":
        return 0.5 * a * (1.0 + xp.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)))
    return (0.5 * a * (1.0 + backend.erf(a / _SQRT_2))).astype(a.dtype, copy=False)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(
        OPS["gelu"],
        lambda xp, a: _gelu_array(xp, a, approximate),
        input,
        {"approximate": approximate},
    )


def silu(input: Tensor) -> Tensor:
    return _unary(OPS["silu"], lambda xp, a: a * sigmoid_array(xp, a), input)


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
    return _unary(OPS["clamp"], lambda xp, a: xp.clip(a, min, max), input, {"min": min, "max": max})


def where(condition: Any, input: Any, other: Any) -> Tensor:
    c = arr(condition)
    ia, oa = arr(input), arr(other)
    xp = namespace(c if hasattr(c, "shape") else ia if hasattr(ia, "shape") else oa)
    if not hasattr(c, "dtype"):  # a Python bool, e.g. from a rule run under create_graph
        c = xp.asarray(c)
    c = c.astype(bool) if c.dtype != dtypes.bool_ else c
    out = xp.where(c, ia, oa)
    if out.dtype == _float64 and not dtypes.is_float64(ia) and not dtypes.is_float64(oa):
        out = out.astype(_float32)
    return make(OPS["where"], out, (c, input, other))


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        value = backend.asarray(value, dtype=input.dtype)
    return where(mask, value, input)
