"""Elementwise ops: arithmetic, comparisons, unary math and activations."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any, Final, overload

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import quiet_fp, restore_fp
from ..graph.inference import inference_version
from ..rules import OpDef, pow_scalar
from ._record import (
    NO_PARAMS,
    OPS,
    arr,
    check_devices,
    grad_enabled,
    inference_enabled,
    make,
    new_tensor,
    record_binary,
    record_scalar,
    record_unary,
    wrap,
)
from .creation import as_tensor

ndarray: Final = backend.ndarray
namespace = backend.namespace
_float64: Final = dtypes.float64
_float32: Final = dtypes.float32


# ----------------------------------------------------------------------------- binary
_np: Final = backend.np_namespace  # only for arrays already checked to be ndarrays
_generic: Final = backend.generic
_float16: Final = dtypes.float16
_new: Final = object.__new__

BinaryOp = Callable[[Any, Any], Tensor]
UnaryOp = Callable[[Any], Tensor]


# NOTE [Elementwise ops are closures]
# An elementwise op on a small tensor costs about as much in Python calls as in NumPy, so each
# binary and plain-ufunc op is a closure over its table entry and NumPy function, made once by
# the factories below: ``a * b`` or ``t.tanh()`` costs Tensor's delegating method and this one
# call, rather than a wrapper calling a shared helper as well. For
# the same reason they make their result tensor inline, as Tensor._wrap does (keep the two in
# step), and record through record_unary/record_binary, which skip record's loops.


def _binary_function(op: OpDef, fname: str, name: str) -> BinaryOp:
    """The function ``(input, other) -> input <fname> other`` recorded as ``op``. NumPy's
    ``fname`` is called directly when both operands are ndarrays or Python numbers (the hot
    path); otherwise the operands' namespace's (CuPy)."""
    # torch evaluates a float tensor to a scalar power of 2, 3, -2, 0.5, -0.5 or -1 as products,
    # sqrt, rsqrt or reciprocal (See formulas.pow_scalar).
    ufunc = pow_scalar if fname == "power" else getattr(_np, fname)

    def binary(input: Any, other: Any) -> Tensor:
        # (NumPy scalars count as Python numbers, as in torch: they do not widen a tensor's
        # dtype.)
        x, y = input, other
        if isinstance(x, Tensor):
            xa = x._array
            xt = True
        else:
            xa = x.item() if isinstance(x, _generic) else x
            xt = False
        ty = type(y)
        if ty is float or ty is int:  # a Python number: the usual second operand
            ya = y
            cpu = type(xa) is ndarray
        else:
            ya = y._array if isinstance(y, Tensor) else y.item() if isinstance(y, _generic) else y
            ty = type(ya)
            tx = type(xa)
            if tx is ndarray:
                cpu = ty is ndarray or ty is float or ty is int
            else:
                cpu = ty is ndarray and (tx is float or tx is int)
        if not cpu:
            out = _binary_any(op, fname, xa, ya)
            dt = out.dtype
            promote = dt == _float64 or (
                hasattr(xa, "ndim") and hasattr(ya, "ndim") and (xa.ndim == 0) is not (ya.ndim == 0)
            )
        else:
            token = quiet_fp()  # See NOTE [Silent floating point]
            try:
                out = ufunc(xa, ya)
            except ValueError:
                _raise_broadcast(xa, ya)
                raise
            finally:
                restore_fp(token)
            if type(out) is not ndarray:
                out = backend.ensure_array(out)
            # torch's promotion differs from NumPy's only for a float64 result (see
            # dtypes.promote_binary) and for a 0-d array with a dimensioned one. Dtypes compare
            # by identity first: `==` on dtypes is slow, and the common dtypes are singletons.
            dt = out.dtype
            xnd = type(xa) is ndarray
            ynd = ty is ndarray
            if dt is _float32 or dt is _float16:
                promote = False
            elif dt is _float64:
                promote = not ((xnd and xa.dtype is _float64) or (ynd and ya.dtype is _float64))
            else:
                promote = dt == _float64
            if xnd and ynd and not promote:
                promote = (xa.ndim == 0) is not (ya.ndim == 0)
        if promote:
            want = dtypes.promote_binary(dt, xa, ya)
            if want != dt:
                out = out.astype(want)
        # Tensor._wrap(out), inline (See NOTE [Elementwise ops are closures]).
        t = _new(Tensor)
        t._array = out
        t._grad_fn = None
        t._output_nr = 0
        t._requires_grad = False
        t._grad = None
        t._vc = [0]
        t._base = None
        t._meta = None
        if inference_enabled():
            t._vc = inference_version()
        if grad_enabled():
            # The operands as read above (See NOTE [Ops save what they read]).
            if xt and (ty is float or ty is int):  # a tensor and a number
                record_scalar(op, t, x, y, xa)
            else:
                record_binary(op, t, x, y, (xa, ya))
        return t

    binary.__name__ = binary.__qualname__ = name
    return binary


_BINARY: dict[tuple[str, str], BinaryOp] = {}


def _binary(op: OpDef, fname: str, x: Any, y: Any) -> Tensor:
    """``x <fname> y`` recorded as ``op`` (``fname`` names the NumPy/CuPy function)."""
    f = _BINARY.get((op.name, fname))
    if f is None:
        f = _BINARY[op.name, fname] = _binary_function(op, fname, op.name)
    return f(x, y)


def _binary_any(op: OpDef, fname: str, xa: Any, ya: Any) -> Any:
    """``fname`` of two operands that are not both NumPy arrays or numbers (CuPy arrays, bools):
    NumPy's or CuPy's, whichever owns the array operand."""
    check_operands(op.name, xa, ya)
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
    return out


_NUMBERS: Final = (bool, int, float, complex)


def check_operands(name: str, xa: Any, ya: Any) -> None:
    """torch's TypeError for an operand that is neither a tensor (an array here) nor a number
    (a string, None, a list: torch takes no sequences where a tensor is expected)."""
    for v in (xa, ya):
        if not (isinstance(v, _NUMBERS) or isinstance(v, _generic) or hasattr(v, "dtype")):
            got = ", ".join("Tensor" if hasattr(a, "dtype") else type(a).__name__ for a in (xa, ya))
            raise TypeError(
                f"{name}() received an invalid combination of arguments - got ({got}), but "
                "expected one of:\n * (Tensor input, Tensor other)\n * (Tensor input, Number "
                "other)\n * (Number self, Tensor other)"
            )


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


# ``x + y`` and ``x - y`` without ``alpha``.
plain_add: Final[BinaryOp] = _binary_function(OPS["add"], "add", "add")
plain_sub: Final[BinaryOp] = _binary_function(OPS["sub"], "subtract", "sub")
mul: Final[BinaryOp] = _binary_function(OPS["mul"], "multiply", "mul")
# ``x / y`` without ``rounding_mode``: the operator.
plain_div: Final[BinaryOp] = _binary_function(OPS["div"], "true_divide", "div")
pow: Final[BinaryOp] = _binary_function(OPS["pow"], "power", "pow")
maximum: Final[BinaryOp] = _binary_function(OPS["maximum"], "maximum", "maximum")
minimum: Final[BinaryOp] = _binary_function(OPS["minimum"], "minimum", "minimum")
remainder: Final[BinaryOp] = _binary_function(OPS["remainder"], "remainder", "remainder")
remainder.__doc__ = """Python's modulo (the result has the sign of ``other``), differentiable as
torch's: d/dinput = 1, d/dother = -floor(input / other)."""


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return plain_add(input, other)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return plain_sub(input, other)


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
    return plain_div(input, other)


# torch's names of the NumPy functions _no_grad_binary calls, for its errors
_TORCH_NAME: Final = {
    "equal": "eq",
    "not_equal": "ne",
    "less": "lt",
    "less_equal": "le",
    "greater": "gt",
    "greater_equal": "ge",
    "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift",
}


def _no_grad_binary(fname: str, x: Any, y: Any) -> Tensor:
    xa, ya = arr(x), arr(y)
    if fname != "equal" and fname != "not_equal":
        # (not eq and ne: Tensor.__eq__ calls eq, and ``t == None`` must stay False, as
        # torch's, for ``in`` and the like)
        check_operands(_TORCH_NAME.get(fname, fname), xa, ya)
    xp = namespace(xa if hasattr(xa, "shape") else ya)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        return wrap(getattr(xp, fname)(xa, ya))
    finally:
        restore_fp(token)


def floor_divide(input: Any, other: Any) -> Tensor:
    # Not recorded (torch's raises in backward): the rules' np.floor_divide runs it on Tensors
    # under create_graph (remainder's), where a constant is the right answer.
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
    read = x._array
    xa = _float_input(op, read)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = fn(namespace(xa), xa)
    finally:
        restore_fp(token)
    if type(out) is not ndarray:
        out = backend.ensure_array(out)
    t = new_tensor(out)
    if inference_enabled():
        t._vc = inference_version()
    if grad_enabled():
        record_unary(op, t, x, params, read)  # See NOTE [Ops save what they read]
    return t


_NO_ARG: Final = object()
_BOOL_NEG: Final = (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert "
    "a mask, use the `~` or `logical_not()` operator instead."
)


def _ufunc_function(op: OpDef, fname: str, name: str, arg: Any = _NO_ARG) -> UnaryOp:
    """The function ``input -> fname(input)`` (``fname(input, arg)`` when ``arg`` is given)
    recorded as ``op``; NumPy's ``fname`` is called directly on an ndarray (no namespace lookup
    and no per-call closure on the hot path)."""
    ufunc = getattr(_np, fname)

    def unary(input: Any) -> Tensor:
        x = input if isinstance(input, Tensor) else as_tensor(input)
        xa = read = x._array
        dt = xa.dtype
        if dt is not _float64 and dt is not _float32:
            if dt.kind == "b" and fname == "negative":
                raise RuntimeError(_BOOL_NEG)
            xa = _float_input(op, xa)
        token = quiet_fp()  # See NOTE [Silent floating point]
        try:
            if type(xa) is ndarray:
                out = ufunc(xa) if arg is _NO_ARG else ufunc(xa, arg)
                if type(out) is not ndarray:
                    out = backend.ensure_array(out)
            else:
                f = getattr(namespace(xa), fname)
                out = backend.ensure_array(f(xa) if arg is _NO_ARG else f(xa, arg))
        finally:
            restore_fp(token)
        # Tensor._wrap(out), inline (See NOTE [Elementwise ops are closures]).
        t = _new(Tensor)
        t._array = out
        t._grad_fn = None
        t._output_nr = 0
        t._requires_grad = False
        t._grad = None
        t._vc = [0]
        t._base = None
        t._meta = None
        if inference_enabled():
            t._vc = inference_version()
        if grad_enabled():
            record_unary(op, t, x, NO_PARAMS, read)  # See NOTE [Ops save what they read]
        return t

    unary.__name__ = unary.__qualname__ = name
    return unary


def _float_input(op: OpDef, xa: Any) -> Any:
    """``xa`` as float32 if it is an integer or bool array and ``op`` computes in floats."""
    if xa.dtype.kind not in "fc" and op.name not in _KEEP_INT:
        return xa.astype(_float32)
    return xa


neg: Final[UnaryOp] = _ufunc_function(OPS["neg"], "negative", "neg")


exp: Final[UnaryOp] = _ufunc_function(OPS["exp"], "exp", "exp")


log: Final[UnaryOp] = _ufunc_function(OPS["log"], "log", "log")


log1p: Final[UnaryOp] = _ufunc_function(OPS["log1p"], "log1p", "log1p")


expm1: Final[UnaryOp] = _ufunc_function(OPS["expm1"], "expm1", "expm1")


sqrt: Final[UnaryOp] = _ufunc_function(OPS["sqrt"], "sqrt", "sqrt")


def _rsqrt_array(xp: Any, a: Any) -> Any:
    return 1.0 / xp.sqrt(a)


def rsqrt(input: Tensor) -> Tensor:
    return _unary(OPS["rsqrt"], _rsqrt_array, input)


reciprocal: Final[UnaryOp] = _ufunc_function(OPS["reciprocal"], "reciprocal", "reciprocal")


sin: Final[UnaryOp] = _ufunc_function(OPS["sin"], "sin", "sin")


cos: Final[UnaryOp] = _ufunc_function(OPS["cos"], "cos", "cos")


tan: Final[UnaryOp] = _ufunc_function(OPS["tan"], "tan", "tan")


tanh: Final[UnaryOp] = _ufunc_function(OPS["tanh"], "tanh", "tanh")


def sigmoid_array(xp: Any, a: Any) -> Any:
    # Evaluated without overflow for large |a|: exp of a non-positive number only.
    e = xp.exp(-xp.abs(a))
    return xp.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(a.dtype, copy=False)


def sigmoid(input: Tensor) -> Tensor:
    return _unary(OPS["sigmoid"], sigmoid_array, input)


relu: Final[UnaryOp] = _ufunc_function(OPS["relu"], "maximum", "relu", 0)  # maximum(x, 0)


abs: Final[UnaryOp] = _ufunc_function(OPS["abs"], "abs", "abs")


def _sign_array(xp: Any, a: Any) -> Any:
    if a.dtype.kind == "f":
        return xp.where(a != a, 0, xp.sign(a))  # torch's sign is 0 at NaN, NumPy's NaN
    return xp.sign(a)


def sign(input: Tensor) -> Tensor:
    return _unary(OPS["sign"], _sign_array, input)


def _erf_array(xp: Any, a: Any) -> Any:
    return backend.erf(a)


def erf(input: Tensor) -> Tensor:
    return _unary(OPS["erf"], _erf_array, input)


_SQRT_2: Final = math.sqrt(2.0)
_SQRT_2_OVER_PI: Final = math.sqrt(2.0 / math.pi)


def _gelu_array(xp: Any, a: Any, approximate: str) -> Any:
    if approximate == "tanh":
        return 0.5 * a * (1.0 + xp.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)))
    return (0.5 * a * (1.0 + backend.erf(a / _SQRT_2))).astype(a.dtype, copy=False)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    return _unary(
        OPS["gelu"],
        lambda xp, a: _gelu_array(xp, a, approximate),
        input,
        {"approximate": approximate},
    )


def _silu_array(xp: Any, a: Any) -> Any:
    return a * sigmoid_array(xp, a)


def silu(input: Tensor) -> Tensor:
    return _unary(OPS["silu"], _silu_array, input)


def _softplus_array(xp: Any, a: Any, beta: float, threshold: float) -> Any:
    # log1p(exp(beta x)) / beta, and x where beta x > threshold. exp reads min(beta x,
    # threshold), finite for every x, while NaN stays NaN (minimum propagates it, clip does not).
    bx = a * beta if beta != 1 else a
    soft = xp.log1p(xp.exp(xp.minimum(bx, threshold)))
    if beta != 1:
        soft = soft / beta
    return xp.where(bx > threshold, a, soft)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """torch's softplus, one op (SoftplusBackward0): its gradient is NaN at NaN, as torch's."""
    return _unary(
        OPS["softplus"],
        lambda xp, a: _softplus_array(xp, a, beta, threshold),
        input,
        {"beta": beta, "threshold": threshold},
    )


def _log_sigmoid_array(xp: Any, a: Any) -> Any:
    return xp.minimum(a, 0) - xp.log1p(xp.exp(-xp.abs(a)))


def binary_cross_entropy_with_logits(
    input: Tensor, target: Any, weight: Any = None, pos_weight: Any = None
) -> Tensor:
    """The elementwise loss of ``nn.functional.binary_cross_entropy_with_logits`` (the caller
    reduces it), one op with torch's formulas: ``(1 - y) x - (1 + (pos_weight - 1) y)
    log_sigmoid(x)``, times ``weight``; so NaN, inf and their gradients come out as torch's."""
    if grad_enabled():
        for name, w in (("weight", weight), ("pos_weight", pos_weight)):
            if isinstance(w, Tensor) and w.requires_grad:
                raise RuntimeError(
                    "The function 'binary_cross_entropy_with_logits' is not differentiable with "
                    f"respect to argument '{name}'. This input cannot have requires_grad True."
                )
    xa = input._array
    ta, wa, pa = arr(target), arr(weight), arr(pos_weight)
    xp = namespace(xa)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        ls = _log_sigmoid_array(xp, xa)
        if pos_weight is not None:
            ls = ls * ((pa - 1) * ta + 1)
        loss = (1 - ta) * xa - ls
        if weight is not None:
            loss = loss * wa
    finally:
        restore_fp(token)
    if loss.dtype != xa.dtype and xa.dtype.kind == "f":
        loss = loss.astype(dtypes.promote_binary(loss.dtype, xa, ta), copy=False)
    return make(
        OPS["binary_cross_entropy_with_logits"],
        loss,
        (input, target, weight, pos_weight),
        NO_PARAMS,
        (xa, ta, wa, pa),  # See NOTE [Ops save what they read]
    )


def _clamp_tensors(input: Tensor, min: Any, max: Any) -> Tensor:
    """clamp with tensor bounds, one op as torch's ClampBackward0: its gradients select (x's
    where min <= x <= max; 0 at NaN and nothing halved at ties), where maximum and minimum
    would split ties."""
    xa = input._array
    lo, hi = arr(min), arr(max)
    xp = namespace(xa)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = xa
        for ba, f in ((lo, xp.maximum), (hi, xp.minimum)):
            if ba is not None:
                r = f(out, ba)
                want = dtypes.promote_binary(r.dtype, out, ba)  # torch's dtypes, as maximum's
                out = r if r.dtype == want else r.astype(want)
    except ValueError:
        _raise_broadcast(xa, arr(min if min is not None else max))
        raise
    finally:
        restore_fp(token)
    if out is xa:
        out = xa.copy()
    return make(OPS["clamp_tensor"], out, (input, min, max), NO_PARAMS, (xa, lo, hi))


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        return _clamp_tensors(input, min, max)
    return _unary(OPS["clamp"], lambda xp, a: xp.clip(a, min, max), input, {"min": min, "max": max})


@overload
def where(condition: Any) -> tuple[Tensor, ...]: ...


@overload
def where(condition: Any, input: Any, other: Any) -> Tensor: ...


def where(condition: Any, input: Any = None, other: Any = None) -> Any:
    if input is None and other is None:  # where(cond): the indices of the non-zero elements
        from .sorting import nonzero

        return nonzero(condition, as_tuple=True)
    c = c0 = arr(condition)
    ia, oa = arr(input), arr(other)
    xp = namespace(c if hasattr(c, "shape") else ia if hasattr(ia, "shape") else oa)
    if not hasattr(c, "dtype"):  # a Python bool, e.g. from a rule run under create_graph
        c = xp.asarray(c)
    c = c.astype(bool) if c.dtype != dtypes.bool_ else c
    out = xp.where(c, ia, oa)
    if out.dtype == _float64 and not dtypes.is_float64(ia) and not dtypes.is_float64(oa):
        out = out.astype(_float32)
    return make(OPS["where"], out, (c, input, other), NO_PARAMS, (c0, ia, oa))


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(
            "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
            f"{value.ndim} dimension(s)."
        )
    if not isinstance(value, Tensor):
        value = backend.scalar(value, input.dtype)  # a NumPy scalar: any device takes it
    return where(mask, value, input)
