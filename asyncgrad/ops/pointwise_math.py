"""Elementwise math beyond pointwise.py: inverse trig, hyperbolic, rounding, bitwise, logical,
and the special functions, with their in-place forms (``t.log2_()``: See ``inplace_variant`` in
ops/inplace.py).

Example:
    >>> import asyncgrad as ag
    >>> ag.atan2(ag.tensor([1.0, -1.0]), ag.tensor([0.0, 1.0]))
    tensor([ 1.5708, -0.7854])
    >>> t = ag.tensor([0.25, 4.0])
    >>> t.log2_()
    tensor([-2.,  2.])
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import quiet_fp, restore_fp
from ..rules.pointwise_math import ARRAY, OPS_FNS
from ._record import NO_PARAMS, OPS, arr, check_devices, make, wrap
from .convert import to
from .creation import as_tensor
from .inplace import inplace, inplace_variant
from .pointwise import (
    UnaryOp,
    _binary,
    _no_grad_binary,
    _raise_broadcast,
    _sign_array,
    _ufunc_function,
    _unary,
    abs,
    add,
    clamp,
    cos,
    div,
    eq,
    erf,
    exp,
    expm1,
    floor_divide,
    ge,
    gt,
    le,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    lt,
    mul,
    ne,
    neg,
    pow,
    reciprocal,
    remainder,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    sub,
    tan,
    tanh,
)

namespace = backend.namespace
_float32: Final = dtypes.float32


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else as_tensor(x)


def _is_float(a: Any) -> bool:
    return bool(a.dtype.kind in "fc")


def _floats(a: Any) -> Any:
    """``a`` as float32 if it is an integer or bool array (torch's dtype for such inputs)."""
    return a if _is_float(a) else a.astype(_float32)


def _same(out: Any, a: Any) -> Any:
    out = backend.ensure_array(out)
    return out if out.dtype == a.dtype else out.astype(a.dtype)


def _special_unary(name: str) -> UnaryOp:
    """The differentiable op ``name`` computed by ``ARRAY[name]`` (SciPy's function)."""
    op = OPS[name]
    impl = ARRAY[name]

    def unary(input: Any) -> Tensor:
        return _unary(op, lambda xp, a: _same(impl(a), a), input)

    unary.__name__ = unary.__qualname__ = name
    return unary


def _no_grad_unary(name: str) -> UnaryOp:
    """``ARRAY[name]`` of a tensor, not differentiable: as torch's, its result does not require
    grad."""
    impl = ARRAY[name]

    def unary(input: Any) -> Tensor:
        a = _floats(arr(_t(input)))
        token = quiet_fp()  # See NOTE [Silent floating point]
        try:
            return wrap(_same(impl(a), a))
        finally:
            restore_fp(token)

    unary.__name__ = unary.__qualname__ = name
    return unary


# ----------------------------------------------------------------------------- unary math
acos: Final[UnaryOp] = _ufunc_function(OPS["acos"], "arccos", "acos")
asin: Final[UnaryOp] = _ufunc_function(OPS["asin"], "arcsin", "asin")
atan: Final[UnaryOp] = _ufunc_function(OPS["atan"], "arctan", "atan")
acosh: Final[UnaryOp] = _ufunc_function(OPS["acosh"], "arccosh", "acosh")
asinh: Final[UnaryOp] = _ufunc_function(OPS["asinh"], "arcsinh", "asinh")
atanh: Final[UnaryOp] = _ufunc_function(OPS["atanh"], "arctanh", "atanh")
sinh: Final[UnaryOp] = _ufunc_function(OPS["sinh"], "sinh", "sinh")
cosh: Final[UnaryOp] = _ufunc_function(OPS["cosh"], "cosh", "cosh")
exp2: Final[UnaryOp] = _ufunc_function(OPS["exp2"], "exp2", "exp2")
log2: Final[UnaryOp] = _ufunc_function(OPS["log2"], "log2", "log2")
log10: Final[UnaryOp] = _ufunc_function(OPS["log10"], "log10", "log10")
arccos, arcsin, arctan = acos, asin, atan
arccosh, arcsinh, arctanh = acosh, asinh, atanh

erfc: Final = _special_unary("erfc")
erfinv: Final = _special_unary("erfinv")
lgamma: Final = _special_unary("lgamma")
digamma: Final = _special_unary("digamma")
i0: Final = _special_unary("i0")
sinc: Final = _special_unary("sinc")


def _deg(input: Any, factor: float) -> Tensor:
    x = _t(input)
    if x.dtype.kind not in "fc":
        x = to(x, _float32)
    return mul(x, factor)


def deg2rad(input: Tensor) -> Tensor:
    return _deg(input, math.pi / 180.0)


def rad2deg(input: Tensor) -> Tensor:
    return _deg(input, 180.0 / math.pi)


def square(input: Tensor) -> Tensor:
    x = _t(input)
    if x.dtype == dtypes.bool_:
        x = to(x, dtypes.int64)
    return pow(x, 2)


def logit(input: Tensor, eps: float | None = None) -> Tensor:
    def compute(xp: Any, a: Any) -> Any:
        if eps is not None:
            a = xp.clip(a, eps, 1.0 - eps)
        return xp.log(a / (1.0 - a))

    return _unary(OPS["logit"], compute, input, {"eps": eps})


def polygamma(n: int, input: Tensor) -> Tensor:
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    impl = ARRAY["polygamma"]
    return _unary(OPS["polygamma"], lambda xp, a: _same(impl(n, a), a), input, {"n": n})


def mvlgamma(input: Tensor, p: int) -> Tensor:
    """The multivariate log-gamma function of dimension ``p``: ``sum_{j<p} lgamma(x - j/2) +
    p (p - 1) / 4 log(pi)``."""
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    x = _t(input)
    a = x._array
    if not bool(namespace(a).all(a > (p - 1) / 2.0)):
        raise RuntimeError("All elements must be greater than (p-1)/2")
    out = lgamma(x)
    for j in range(1, p):  # p is small: one op per term
        out = add(out, lgamma(sub(x, j / 2.0)))
    return add(out, p * (p - 1) / 4.0 * math.log(math.pi))


def nan_to_num(
    input: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
) -> Tensor:
    x = _t(input)
    if not _is_float(x._array):
        return wrap(x._array.copy())
    return _unary(
        OPS["nan_to_num"],
        lambda xp, a: xp.nan_to_num(a, nan=nan, posinf=posinf, neginf=neginf),
        x,
    )


# ----------------------------------------------------------------------------- rounding, signs
def _keeps_int(op_fn: UnaryOp, name: str) -> UnaryOp:
    """``op_fn`` for floats; an integer tensor's copy, as torch's rounding of integers."""

    def unary(input: Any) -> Tensor:
        x = _t(input)
        if not _is_float(x._array):
            if x.dtype == dtypes.bool_:
                raise NotImplementedError(f"\"{name}_vml_cpu\" not implemented for 'Bool'")
            return wrap(x._array.copy())
        return op_fn(x)

    unary.__name__ = unary.__qualname__ = name
    return unary


ceil: Final = _keeps_int(_ufunc_function(OPS["ceil"], "ceil", "ceil"), "ceil")
floor: Final = _keeps_int(_ufunc_function(OPS["floor"], "floor", "floor"), "floor")
trunc: Final = _keeps_int(_ufunc_function(OPS["trunc"], "trunc", "trunc"), "trunc")
fix = trunc
_round0: Final = _keeps_int(_ufunc_function(OPS["round"], "round", "round"), "round")


def round(input: Tensor, *, decimals: int = 0) -> Tensor:
    if decimals == 0:
        return _round0(input)
    x = _t(input)
    if not _is_float(x._array):
        return wrap(x._array.copy())
    return _unary(OPS["round"], lambda xp, a: xp.round(a, decimals), x, {"decimals": decimals})


def frac(input: Tensor) -> Tensor:
    x = _t(input)
    if not _is_float(x._array):
        raise NotImplementedError(f"\"frac_cpu\" not implemented for '{_torch_name(x.dtype)}'")
    return _unary(OPS["frac"], lambda xp, a: a - xp.trunc(a), x)


def sgn(input: Tensor) -> Tensor:
    x = _t(input)
    if not _is_float(x._array):
        return sign(x)
    return _unary(OPS["sgn"], _sign_array, x)


def signbit(input: Tensor) -> Tensor:
    a = arr(_t(input))
    return wrap(namespace(a).signbit(a))


def angle(input: Tensor) -> Tensor:
    """The argument of a real number: pi below 0, else 0 (NaN at NaN)."""

    def compute(xp: Any, a: Any) -> Any:
        return xp.where(a < 0, math.pi, xp.where(a != a, a, 0.0)).astype(a.dtype)

    return _unary(OPS["angle"], compute, input)


def positive(input: Tensor) -> Tensor:
    x = _t(input)
    if x.dtype == dtypes.bool_:
        raise RuntimeError(
            "The `+` operator, on a bool tensor is not supported. If you are trying to invert "
            "a mask, use the `~` or `logical_not()` operator instead."
        )
    return x


def real(input: Tensor) -> Tensor:
    """The real part: a real tensor itself, as torch's."""
    return _t(input)


# ----------------------------------------------------------------------------- binary math
def atan2(input: Any, other: Any) -> Tensor:
    return _binary(OPS["atan2"], "arctan2", *_float_operands(input, other))


arctan2 = atan2


def hypot(input: Any, other: Any) -> Tensor:
    _refuse_integers("hypot", input, other)
    return _binary(OPS["hypot"], "hypot", input, other)


def copysign(input: Any, other: Any) -> Tensor:
    return _binary(OPS["copysign"], "copysign", *_float_operands(input, other))


def logaddexp(input: Any, other: Any) -> Tensor:
    _refuse_integers("logaddexp", input, other)
    return _binary(OPS["logaddexp"], "logaddexp", input, other)


def logaddexp2(input: Any, other: Any) -> Tensor:
    _refuse_integers("logaddexp2", input, other)
    return _binary(OPS["logaddexp2"], "logaddexp2", input, other)


def fmod(input: Any, other: Any) -> Tensor:
    if all(getattr(arr(v), "dtype", None) == dtypes.bool_ for v in (input, other)):
        raise NotImplementedError("\"fmod_cpu\" not implemented for 'Bool'")
    return _binary(OPS["fmod"], "fmod", input, other)


def fmax(input: Any, other: Any) -> Tensor:
    return _binary(OPS["fmax"], "fmax", input, other)


def fmin(input: Any, other: Any) -> Tensor:
    return _binary(OPS["fmin"], "fmin", input, other)


def nextafter(input: Any, other: Any) -> Tensor:
    _refuse_integers("nextafter", input, other)
    return _binary(OPS["nextafter"], "nextafter", input, other)


def heaviside(input: Any, values: Any) -> Tensor:
    xa, va = arr(input), arr(values)
    if hasattr(va, "dtype") and hasattr(xa, "dtype") and va.dtype != xa.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    out = _binary(OPS["heaviside"], "heaviside", input, values)
    if hasattr(xa, "dtype") and not _is_float(xa):  # integers keep their dtype, as torch's
        return wrap(out._array.astype(xa.dtype))
    return out


def _refuse_integers(name: str, input: Any, other: Any) -> None:
    """torch's NotImplementedError for a floating-point op of integer or bool operands."""
    xa, ya = arr(input), arr(other)
    if isinstance(xa, builtins.float) or isinstance(ya, builtins.float):
        return
    arrays = [a for a in (xa, ya) if hasattr(a, "dtype")]
    if not arrays or any(_is_float(a) for a in arrays):
        return
    dt = namespace(arrays[0]).result_type(*arrays)
    raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_torch_name(dt)}'")


def _float_operands(input: Any, other: Any) -> tuple[Any, Any]:
    """The operands of an op that computes in floats: integer and bool tensors as float32 when
    no operand is a float (NumPy would give float16 for small integers and bool)."""
    xa, ya = arr(input), arr(other)
    if isinstance(xa, builtins.float) or isinstance(ya, builtins.float):
        return input, other
    if any(hasattr(a, "dtype") and _is_float(a) for a in (xa, ya)):
        return input, other
    return tuple(
        wrap(a.astype(_float32)) if hasattr(a, "dtype") else v
        for v, a in ((input, xa), (other, ya))
    )  # type: ignore[return-value]


def _special_binary(name: str, input: Any, other: Any) -> Tensor:
    """``ARRAY[name](input, other)`` (SciPy's), recorded as ``name``, in torch's dtype."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        input = as_tensor(input)
    if name in ("igamma", "igammac", "zeta"):
        _refuse_integers(name, input, other)
    xa, ya = arr(input), arr(other)
    if hasattr(xa, "shape") and hasattr(ya, "shape") and type(xa) is not type(ya):
        check_devices(name, xa, ya)
    try:
        out = backend.ensure_array(ARRAY[name](xa, ya))
    except ValueError:
        _raise_broadcast(xa, ya)
        raise
    want = dtypes.promote_binary(namespace(out).result_type(xa, ya), xa, ya)
    if want.kind not in "fc":
        want = _float32
    if want != out.dtype:
        out = out.astype(want)
    return make(OPS[name], out, (input, other), NO_PARAMS, (xa, ya))


def xlogy(input: Any, other: Any) -> Tensor:
    return _special_binary("xlogy", input, other)


def igamma(input: Any, other: Any) -> Tensor:
    return _special_binary("igamma", input, other)


def igammac(input: Any, other: Any) -> Tensor:
    return _special_binary("igammac", input, other)


def float_power(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` in float64."""
    x = to(input, dtypes.float64) if isinstance(input, Tensor) else float(input)
    e = to(exponent, dtypes.float64) if isinstance(exponent, Tensor) else float(exponent)
    if not isinstance(x, Tensor) and not isinstance(e, Tensor):
        x = as_tensor(x, dtype=dtypes.float64)
    return pow(x, e)


def ldexp(input: Tensor, other: Any) -> Tensor:
    """``input * 2 ** other``."""
    x = _t(input)
    if not _is_float(x._array):
        x = to(x, _float32)
    return mul(x, pow(2.0, other) if isinstance(other, Tensor) else 2.0 ** float(other))


class FrexpResult(NamedTuple):
    """torch.return_types.frexp: ``input = mantissa * 2 ** exponent``."""

    mantissa: Tensor
    exponent: Tensor


def frexp(input: Tensor) -> FrexpResult:
    a = arr(_t(input))
    if not _is_float(a):
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    xp = namespace(a)
    m, e = xp.frexp(a)
    t = _t(input)
    if t.requires_grad:
        # m = x * 2**-e exactly (powers of two), so dm/dx = 2**-e, as torch's; in two factors,
        # each finite also for a subnormal x, whose 2**-e overflows.
        half = e // 2
        one = xp.ones_like(a)
        m_t = mul(mul(t, wrap(xp.ldexp(one, -half))), wrap(xp.ldexp(one, half - e)))
    else:
        m_t = wrap(m)
    return FrexpResult(m_t, wrap(e.astype(dtypes.int32)))


_C10_NAMES: Final = {
    "float16": "c10::Half",
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "int16": "short int",
    "int32": "int",
    "int64": "long int",
    "uint8": "unsigned char",
    "bool": "bool",
}


def lerp(input: Tensor, end: Any, weight: Any) -> Tensor:
    """``input + weight * (end - input)``; floating tensors of one dtype, as torch's."""
    xa = arr(_t(input))
    for what, v in (("end", end), ("weight", weight)):
        va = arr(v)
        if hasattr(va, "dtype") and va.dtype != xa.dtype:
            raise RuntimeError(
                f"expected dtype {_C10_NAMES.get(str(xa.dtype), str(xa.dtype))} for `{what}` but "
                f"got dtype {_C10_NAMES.get(str(va.dtype), str(va.dtype))}"
            )
    if not _is_float(xa):
        kernel = "tensor" if isinstance(weight, Tensor) else "scalar"
        raise NotImplementedError(
            f"\"lerp_kernel_{kernel}\" not implemented for '{_torch_name(xa.dtype)}'"
        )
    return add(input, mul(weight, sub(end, input)))


def addcmul(input: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``input + value * tensor1 * tensor2``."""
    prod = mul(tensor1, tensor2)
    return add(input, prod if value == 1 else mul(prod, value))


def addcdiv(input: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``input + value * tensor1 / tensor2``."""
    a1, a2 = arr(tensor1), arr(tensor2)
    if not _is_float(backend.ensure_array(a1)) and not _is_float(backend.ensure_array(a2)):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future release "
            "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
            "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2))."
            "to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) for "
            "float inputs. The future addcdiv behavior is just the latter implementation: "
            "(input + value * tensor1 / tensor2), for all dtypes."
        )
    q = div(tensor1, tensor2)
    return add(input, q if value == 1 else mul(q, value))


def clamp_min(input: Tensor, min: Any) -> Tensor:
    return clamp(input, min=min)


def clamp_max(input: Tensor, max: Any) -> Tensor:
    return clamp(input, max=max)


# ----------------------------------------------------------------------------- aliases
absolute = abs
negative = neg
multiply = mul
divide = div
subtract = sub
greater = gt
greater_equal = ge
less = lt
less_equal = le
not_equal = ne


def true_divide(dividend: Any, divisor: Any) -> Tensor:
    return div(dividend, divisor)


# ----------------------------------------------------------------------------- predicates
def isinf(input: Tensor) -> Tensor:
    a = arr(_t(input))
    return wrap(namespace(a).isinf(a))


def isposinf(input: Tensor) -> Tensor:
    a = arr(_t(input))
    return wrap(a == math.inf)  # (CuPy has no isposinf)


def isneginf(input: Tensor) -> Tensor:
    a = arr(_t(input))
    return wrap(a == -math.inf)


def isreal(input: Tensor) -> Tensor:
    a = arr(_t(input))
    xp = namespace(a)
    return wrap(xp.isreal(a) if a.dtype.kind == "c" else xp.ones(a.shape, dtype=dtypes.bool_))


def isclose(
    input: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> Tensor:
    for pos, (what, v) in enumerate((("input", input), ("other", other)), 1):
        if not isinstance(v, Tensor):  # torch's isclose takes no number (nor list)
            raise TypeError(
                f"isclose(): argument '{what}' (position {pos}) must be Tensor, not "
                f"{type(v).__name__}"
            )
    a, b = arr(input), arr(other)
    if hasattr(b, "dtype") and a.dtype != b.dtype:
        raise RuntimeError(f"{_torch_name(a.dtype)} did not match {_torch_name(b.dtype)}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        return wrap(namespace(a).isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))
    finally:
        restore_fp(token)


# ----------------------------------------------------------------------------- integers, logic
_TORCH_NAMES: Final = {
    "float16": "Half",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "uint8": "Byte",
    "bool": "Bool",
}


def _torch_name(dt: Any) -> str:
    return _TORCH_NAMES.get(str(dt), str(dt))


def _integer_binary(name: str, fname: str, input: Any, other: Any) -> Tensor:
    for v in (input, other):
        a = arr(v)
        if isinstance(a, builtins.float) or (hasattr(a, "dtype") and a.dtype.kind in "fc"):
            dt = a.dtype if hasattr(a, "dtype") else dtypes.float32
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_torch_name(dt)}'")
    return _no_grad_binary(fname, input, other)


def bitwise_and(input: Any, other: Any) -> Tensor:
    return _integer_binary("bitwise_and", "bitwise_and", input, other)


def bitwise_or(input: Any, other: Any) -> Tensor:
    return _integer_binary("bitwise_or", "bitwise_or", input, other)


def bitwise_xor(input: Any, other: Any) -> Tensor:
    return _integer_binary("bitwise_xor", "bitwise_xor", input, other)


def bitwise_left_shift(input: Any, other: Any) -> Tensor:
    return _integer_binary("lshift", "left_shift", input, other)


def bitwise_right_shift(input: Any, other: Any) -> Tensor:
    return _integer_binary("rshift", "right_shift", input, other)


def gcd(input: Any, other: Any) -> Tensor:
    return _integer_binary("gcd", "gcd", input, other)


def lcm(input: Any, other: Any) -> Tensor:
    return _integer_binary("lcm", "lcm", input, other)


def bitwise_not(input: Tensor) -> Tensor:
    a = arr(_t(input))
    if _is_float(a):
        raise NotImplementedError(
            f"\"bitwise_not_cpu\" not implemented for '{_torch_name(a.dtype)}'"
        )
    return wrap(namespace(a).invert(a))


def logical_xor(input: Any, other: Any) -> Tensor:
    return _no_grad_binary("logical_xor", input, other)


# ----------------------------------------------------------------------------- in-place
abs_: Final = inplace_variant("abs", abs)
absolute_: Final = abs_
acos_: Final = inplace_variant("acos", acos)
acosh_: Final = inplace_variant("acosh", acosh)
asin_: Final = inplace_variant("asin", asin)
asinh_: Final = inplace_variant("asinh", asinh)
atan_: Final = inplace_variant("atan", atan)
atanh_: Final = inplace_variant("atanh", atanh)
arccos_, arccosh_, arcsin_, arcsinh_, arctan_, arctanh_ = (
    acos_,
    acosh_,
    asin_,
    asinh_,
    atan_,
    atanh_,
)
ceil_: Final = inplace_variant("ceil", ceil)
clamp_max_: Final = inplace_variant("clamp", clamp_max)
clamp_min_: Final = inplace_variant("clamp", clamp_min)
cos_: Final = inplace_variant("cos", cos)
cosh_: Final = inplace_variant("cosh", cosh)
deg2rad_: Final = inplace_variant("mul", deg2rad)
erf_: Final = inplace_variant("erf", erf)
erfc_: Final = inplace_variant("erfc", erfc)
exp2_: Final = inplace_variant("exp2", exp2)
exp_: Final = inplace_variant("exp", exp)
expm1_: Final = inplace_variant("expm1", expm1)
floor_: Final = inplace_variant("floor", floor)
frac_: Final = inplace_variant("frac", frac)
fix_: Final = inplace_variant("trunc", fix)
gcd_: Final = inplace_variant("gcd", gcd)
i0_: Final = inplace_variant("i0", i0)
lcm_: Final = inplace_variant("lcm", lcm)
ldexp_: Final = inplace_variant("ldexp", ldexp)
log10_: Final = inplace_variant("log10", log10)
log1p_: Final = inplace_variant("log1p", log1p)
log2_: Final = inplace_variant("log2", log2)
log_: Final = inplace_variant("log", log)
logit_: Final = inplace_variant("logit", logit)
nan_to_num_: Final = inplace_variant("nan_to_num", nan_to_num)
neg_: Final = inplace_variant("neg", neg)
negative_: Final = neg_
rad2deg_: Final = inplace_variant("mul", rad2deg)
reciprocal_: Final = inplace_variant("reciprocal", reciprocal)
round_: Final = inplace_variant("round", round)
rsqrt_: Final = inplace_variant("rsqrt", rsqrt)
sigmoid_: Final = inplace_variant("sigmoid", sigmoid)
sin_: Final = inplace_variant("sin", sin)
sinc_: Final = inplace_variant("sinc", sinc)
sinh_: Final = inplace_variant("sinh", sinh)
sqrt_: Final = inplace_variant("sqrt", sqrt)
square_: Final = inplace_variant("pow", square)
tan_: Final = inplace_variant("tan", tan)
tanh_: Final = inplace_variant("tanh", tanh)
trunc_: Final = inplace_variant("trunc", trunc)
xlogy_: Final = inplace_variant("xlogy", xlogy)

# Tensor's in-place methods that torch has no function of (``t.lerp_``, ``t.eq_``): reached as
# ``ops.pointwise_math.<name>``, not exported.
addcdiv_: Final = inplace_variant("addcdiv", addcdiv)
addcmul_: Final = inplace_variant("addcmul", addcmul)
atan2_: Final = inplace_variant("atan2", atan2)
arctan2_ = atan2_
bitwise_and_: Final = inplace_variant("bitwise_and", bitwise_and)
bitwise_or_: Final = inplace_variant("bitwise_or", bitwise_or)
bitwise_xor_: Final = inplace_variant("bitwise_xor", bitwise_xor)
bitwise_not_: Final = inplace_variant("bitwise_not", bitwise_not)
bitwise_left_shift_: Final = inplace_variant("bitwise_left_shift", bitwise_left_shift)
bitwise_right_shift_: Final = inplace_variant("bitwise_right_shift", bitwise_right_shift)
copysign_: Final = inplace_variant("copysign", copysign)
digamma_: Final = inplace_variant("digamma", digamma)
divide_: Final = inplace_variant("div", div)
true_divide_: Final = inplace_variant("div", true_divide)


def _compare_into(name: str, fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    """``t.eq_(other)`` and friends: the comparison written into ``t`` in its dtype; recorded,
    as torch's EqBackward1, with a zero gradient."""
    op = OPS[name]

    def method(self: Tensor, other: Any) -> Tensor:
        def compute(s: Tensor) -> Tensor:
            r = fn(s, other)._array
            return make(op, r.astype(s.dtype), (s,), NO_PARAMS, (s._array,))

        return inplace(self, name, compute)

    method.__name__ = method.__qualname__ = name + "_"
    return method


eq_: Final = _compare_into("eq", eq)
ne_: Final = _compare_into("ne", ne)
lt_: Final = _compare_into("lt", lt)
le_: Final = _compare_into("le", le)
gt_: Final = _compare_into("gt", gt)
ge_: Final = _compare_into("ge", ge)
greater_, greater_equal_, less_, less_equal_, not_equal_ = gt_, ge_, lt_, le_, ne_
erfinv_: Final = inplace_variant("erfinv", erfinv)


def float_power_(self: Tensor, exponent: Any) -> Tensor:
    if self.dtype != dtypes.float64:
        raise RuntimeError(
            f"the base given to float_power_ has dtype {_torch_name(self.dtype)} but the "
            "operation's result requires dtype Double"
        )
    return inplace(self, "float_power", lambda s: float_power(s, exponent))


def floor_divide_(self: Tensor, other: Any) -> Tensor:
    """``t.floor_divide_(other)``: recorded, as torch's, with no derivative (a backward through
    it raises)."""

    def compute(s: Tensor) -> Tensor:
        q = floor_divide(s, other)._array
        return make(OPS["floor_divide"], q, (s, other), NO_PARAMS, (s._array, arr(other)))

    return inplace(self, "floor_divide", compute)


fmod_: Final = inplace_variant("fmod", fmod)
heaviside_: Final = inplace_variant("heaviside", heaviside)
hypot_: Final = inplace_variant("hypot", hypot)
igamma_: Final = inplace_variant("igamma", igamma)
igammac_: Final = inplace_variant("igammac", igammac)
lerp_: Final = inplace_variant("lerp", lerp)
lgamma_: Final = inplace_variant("lgamma", lgamma)
logical_and_: Final = inplace_variant("logical_and", logical_and)
logical_or_: Final = inplace_variant("logical_or", logical_or)
logical_xor_: Final = inplace_variant("logical_xor", logical_xor)
logical_not_: Final = inplace_variant("logical_not", logical_not)
multiply_: Final = inplace_variant("mul", mul)
subtract_: Final = inplace_variant("sub", sub)
mvlgamma_: Final = inplace_variant("mvlgamma", mvlgamma)
nextafter_: Final = inplace_variant("nextafter", nextafter)
remainder_: Final = inplace_variant("remainder", remainder)
sgn_: Final = inplace_variant("sgn", sgn)
sign_: Final = inplace_variant("sign", sign)


def polygamma_(self: Tensor, n: int) -> Tensor:
    return inplace(self, "polygamma", lambda s: polygamma(n, s))


# The ops the rules call on Tensors under create_graph (See NOTE [Special functions in rules]).
OPS_FNS.update(
    {
        "sinh": sinh,
        "cosh": cosh,
        "trunc": trunc,
        "lgamma": lgamma,
        "digamma": digamma,
        "polygamma": lambda n, x: polygamma(n, x),
        "i0": i0,
        "xlogy": xlogy,
    }
)

__all__: list[str] = [
    "abs_",
    "absolute",
    "acos",
    "acos_",
    "acosh",
    "acosh_",
    "addcdiv",
    "addcmul",
    "angle",
    "arccos",
    "arccos_",
    "arccosh",
    "arccosh_",
    "arcsin",
    "arcsin_",
    "arcsinh",
    "arcsinh_",
    "arctan",
    "arctan2",
    "arctan_",
    "arctanh",
    "arctanh_",
    "asin",
    "asin_",
    "asinh",
    "asinh_",
    "atan",
    "atan2",
    "atan_",
    "atanh",
    "atanh_",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_not",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "ceil",
    "ceil_",
    "clamp_max",
    "clamp_max_",
    "clamp_min",
    "clamp_min_",
    "copysign",
    "cos_",
    "cosh",
    "cosh_",
    "deg2rad",
    "deg2rad_",
    "digamma",
    "divide",
    "erf_",
    "erfc",
    "erfc_",
    "erfinv",
    "exp2",
    "exp2_",
    "exp_",
    "expm1_",
    "fix",
    "fix_",
    "float_power",
    "floor",
    "floor_",
    "fmax",
    "fmin",
    "fmod",
    "frac",
    "frac_",
    "frexp",
    "gcd",
    "gcd_",
    "greater",
    "greater_equal",
    "heaviside",
    "hypot",
    "i0",
    "i0_",
    "igamma",
    "igammac",
    "isclose",
    "isinf",
    "isneginf",
    "isposinf",
    "isreal",
    "lcm",
    "lcm_",
    "ldexp",
    "ldexp_",
    "lerp",
    "less",
    "less_equal",
    "lgamma",
    "log1p_",
    "log2",
    "log2_",
    "log10",
    "log10_",
    "log_",
    "logaddexp",
    "logaddexp2",
    "logical_xor",
    "logit",
    "logit_",
    "multiply",
    "mvlgamma",
    "nan_to_num",
    "nan_to_num_",
    "neg_",
    "negative",
    "negative_",
    "nextafter",
    "not_equal",
    "polygamma",
    "positive",
    "rad2deg",
    "rad2deg_",
    "real",
    "reciprocal_",
    "round",
    "round_",
    "rsqrt_",
    "sgn",
    "sigmoid_",
    "signbit",
    "sin_",
    "sinc",
    "sinc_",
    "sinh",
    "sinh_",
    "sqrt_",
    "square",
    "square_",
    "subtract",
    "tan_",
    "tanh_",
    "true_divide",
    "trunc",
    "trunc_",
    "xlogy",
    "xlogy_",
]  # fmt: skip
