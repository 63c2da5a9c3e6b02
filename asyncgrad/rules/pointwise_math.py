"""The derivative rules of ops/pointwise_math.py, and the array functions its forwards share with
them (``ARRAY``).

# NOTE [Special functions in rules]
# A rule such as lgamma's (``g * digamma(x)``) calls a function that NumPy's protocols cannot
# reach on a Tensor (SciPy's, or a ufunc Tensor does not map). ``fn(name, ...)`` runs the array
# function on arrays and, under ``create_graph`` (Tensors, See NOTE [Rules are NumPy]), the
# asyncgrad op that ops/pointwise_math.py registers in ``OPS_FNS``: so double backward works
# without this layer importing the ops above it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from .. import backend
from .._tensor import Tensor
from ..backend import masked, xp
from .registry import defvjp

__all__: list[str] = []

_LN2: Final = math.log(2.0)
_LN10: Final = math.log(10.0)
_TWO_OVER_SQRT_PI: Final = 2.0 / math.sqrt(math.pi)
_SQRT_PI_OVER_2: Final = math.sqrt(math.pi) / 2.0
_SQRT_2PI: Final = math.sqrt(2.0 * math.pi)


def _ns(a: Any) -> Any:
    return backend.namespace(a)


def _spherical_j0(a: Any) -> Any:
    # sin(x) / x: 1 at 0, 0 at +-inf
    x = _ns(a)
    out = x.where(a == 0, 1.0, x.sin(a) / x.where(a == 0, 1.0, a))
    return x.where(x.isinf(a), 0.0, out)


def _lgamma(a: Any) -> Any:
    # log|Gamma(x)|: +inf at -inf, as torch's (SciPy's gammaln gives -inf)
    return _ns(a).where(a == -math.inf, math.inf, backend.special("gammaln", a))


def _sinc(a: Any) -> Any:
    # sin(pi x) / (pi x), 1 at 0 (CuPy has no sinc)
    x = _ns(a)
    px = math.pi * x.where(a == 0, 1.0, a)
    return x.where(a == 0, 1.0, x.sin(px) / px)


def _entr(a: Any) -> Any:
    # -x log x for x > 0, 0 at 0, -inf below 0, NaN at NaN
    x = _ns(a)
    safe = x.where(a > 0, a, 1.0)
    return x.where(a > 0, -a * x.log(safe), x.where(a == 0, 0.0, x.where(a < 0, -math.inf, a)))


# The array functions of the ops (forwards) and of the rules; each takes and returns arrays.
ARRAY: Final[dict[str, Callable[..., Any]]] = {
    "sinh": lambda a: _ns(a).sinh(a),
    "cosh": lambda a: _ns(a).cosh(a),
    "trunc": lambda a: _ns(a).trunc(a),
    "erfc": lambda a: backend.special("erfc", a),
    "erfinv": lambda a: backend.special("erfinv", a),
    "erfcx": lambda a: backend.special("erfcx", a),
    "lgamma": _lgamma,
    "digamma": lambda a: backend.special("psi", a),
    "polygamma": lambda n, a: backend.special("polygamma", n, a),
    "i0": lambda a: backend.special("i0", a),
    "i0e": lambda a: backend.special("i0e", a),
    "i1": lambda a: backend.special("i1", a),
    "i1e": lambda a: backend.special("i1e", a),
    "ndtr": lambda a: backend.special("ndtr", a),
    "ndtri": lambda a: backend.special("ndtri", a),
    "log_ndtr": lambda a: backend.special("log_ndtr", a),
    "sinc": _sinc,
    "entr": _entr,
    "zeta": lambda a, q: backend.special("zeta", a, q),
    "igamma": lambda a, x: backend.special("gammainc", a, x),
    "igammac": lambda a, x: backend.special("gammaincc", a, x),
    "xlogy": lambda a, b: backend.special("xlogy", a, b),
    "xlog1py": lambda a, b: backend.special("xlog1py", a, b),
    "bessel_j0": lambda a: backend.special("j0", a),
    "bessel_j1": lambda a: backend.special("j1", a),
    "bessel_y0": lambda a: backend.special("y0", a),
    "bessel_y1": lambda a: backend.special("y1", a),
    "modified_bessel_i0": lambda a: backend.special("i0", a),
    "modified_bessel_i1": lambda a: backend.special("i1", a),
    "modified_bessel_k0": lambda a: backend.special("k0", a),
    "modified_bessel_k1": lambda a: backend.special("k1", a),
    "scaled_modified_bessel_k0": lambda a: backend.special("k0e", a),
    "scaled_modified_bessel_k1": lambda a: backend.special("k1e", a),
    "spherical_bessel_j0": _spherical_j0,
    "airy_ai": lambda a: backend.special("airy", a)[0],
}

# name -> the asyncgrad op, for rules run on Tensors (filled by ops/pointwise_math.py).
OPS_FNS: Final[dict[str, Callable[..., Any]]] = {}


def fn(name: str, *args: Any) -> Any:
    """``name`` of ``args``: the array function, or the op on Tensors (See NOTE [Special functions
    in rules])."""
    if any(isinstance(a, Tensor) for a in args):
        return OPS_FNS[name](*args)
    return ARRAY[name](*args)


def _not_implemented(what: str, error: type[Exception] = NotImplementedError) -> Any:
    """A binary op's rule that raises torch's error for an input torch does not differentiate."""

    def rule(g: Any, ans: Any, x: Any, y: Any) -> Any:
        raise error(what)

    return rule


def _xlogy_self(g: Any, x: Any, y: Any, log: Any) -> Any:
    # torch: xlogy(grad, other).masked_fill((self == 0) & (other <= 0), 0); xlogy(grad, y) is 0
    # where grad is 0 (even at y = 0)
    keep = ~((x == 0) & (y <= (0.0 if log == "xlogy" else -1.0)))
    return masked(fn(log, g, y), keep)


def _atan2_recip(y: Any, x: Any) -> Any:
    # torch's atan2_backward: 1 / (x^2 + y^2), 0 where that is inf (at the origin)
    r = 1.0 / (x * x + y * y)
    return xp.where(r == math.inf, 0.0, r)


def _copysign_self(g: Any, x: Any, ans: Any) -> Any:
    # torch's copysign_tensor_self_backward: grad * result / self, 0 where self == 0
    ratio = ans / xp.where(x == 0, 1.0, x)
    return g * xp.where(x == 0, 0.0, ratio)


def _sinc_grad(g: Any, x: Any) -> Any:
    # d sinc(x) = (pi x cos(pi x) - sin(pi x)) / (pi x^2); near 0, where that difference cancels
    # (and is 0/0 at 0), its series -pi^2 x / 3 + pi^4 x^3 / 30, exact to rounding for
    # |x| < 1e-3, 0 at 0, and with the true second derivative -pi^2 / 3 there under create_graph.
    small = xp.abs(x) < 1e-3
    nz = xp.where(small, 1.0, x)
    pn = math.pi * nz
    d = (pn * xp.cos(pn) - xp.sin(pn)) / (math.pi * nz * nz)
    series = x * (-(math.pi**2) / 3.0 + (math.pi**4 / 30.0) * (x * x))
    out = g * xp.where(small, series, d)
    return xp.where((x == 0) & ~xp.isfinite(g), 0.0, out)  # torch's 0 at 0 for any gradient


def _logit_grad(g: Any, x: Any, eps: Any) -> Any:
    d = g / (x * (1.0 - x))
    if eps is None:
        return xp.where((x < 0.0) | (x > 1.0), math.nan, d)
    return xp.where((x < eps) | (x > 1.0 - eps), 0.0, d)


def _fmax_self(g: Any, x: Any, y: Any) -> Any:
    return masked(g, (x >= y) | xp.isnan(y))


def _fmax_other(g: Any, x: Any, y: Any) -> Any:
    return masked(g, ~((x >= y) | xp.isnan(y)))


def _fmin_self(g: Any, x: Any, y: Any) -> Any:
    return masked(g, (x <= y) | xp.isnan(y))


def _fmin_other(g: Any, x: Any, y: Any) -> Any:
    return masked(g, ~((x <= y) | xp.isnan(y)))


def _zeros(g: Any, ans: Any, *args: Any, **params: Any) -> Any:
    return xp.zeros_like(g)


# ----- Inverse trigonometric and hyperbolic functions -----
defvjp("acos", lambda g, ans, x: -g / xp.sqrt(1.0 - x * x), save="x")
defvjp("asin", lambda g, ans, x: g / xp.sqrt(1.0 - x * x), save="x")
defvjp("atan", lambda g, ans, x: g / (x * x + 1.0), save="x")
defvjp("acosh", lambda g, ans, x: g / xp.sqrt(x * x - 1.0), save="x")
defvjp("asinh", lambda g, ans, x: g / xp.sqrt(x * x + 1.0), save="x")
defvjp("atanh", lambda g, ans, x: g / (1.0 - x * x), save="x")
defvjp("sinh", lambda g, ans, x: g * fn("cosh", x), save="x")
defvjp("cosh", lambda g, ans, x: g * fn("sinh", x), save="x")
defvjp(
    "atan2",  # atan2(y, x): d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2)
    lambda g, ans, y, x: g * x * _atan2_recip(y, x),
    lambda g, ans, y, x: g * -y * _atan2_recip(y, x),
    save="y x",
)
defvjp("hypot", lambda g, ans, x, y: g * x / ans, lambda g, ans, x, y: g * y / ans, save="ans x y")

# ----- Exponentials and logarithms -----
defvjp("exp2", lambda g, ans, x: g * ans * _LN2, save="ans")
defvjp("log2", lambda g, ans, x: g / (x * _LN2), save="x")
defvjp("log10", lambda g, ans, x: g / (x * _LN10), save="x")
defvjp(
    "logaddexp",
    lambda g, ans, x, y: g / (1.0 + xp.exp(y - x)),
    lambda g, ans, x, y: g / (1.0 + xp.exp(x - y)),
    save="x y",
)
defvjp(
    "logaddexp2",
    lambda g, ans, x, y: g / (1.0 + xp.exp((y - x) * _LN2)),
    lambda g, ans, x, y: g / (1.0 + xp.exp((x - y) * _LN2)),
    save="x y",
)
defvjp("logit", lambda g, ans, x, *, eps: _logit_grad(g, x, eps), save="x")
defvjp(
    "xlogy",
    lambda g, ans, x, y: _xlogy_self(g, x, y, "xlogy"),
    lambda g, ans, x, y: g * x / y,
    save="x y",
)
defvjp(
    "xlog1py",
    lambda g, ans, x, y: _xlogy_self(g, x, y, "xlog1py"),
    lambda g, ans, x, y: g * x / (y + 1.0),
    save="x y",
)
defvjp("entr", lambda g, ans, x: g * -(xp.log(x) + 1.0), save="x")

# ----- Error and gamma functions, Bessel functions, the normal distribution -----
defvjp("erfc", lambda g, ans, x: -g * _TWO_OVER_SQRT_PI * xp.exp(-x * x), save="x")
defvjp("erfinv", lambda g, ans, x: g * _SQRT_PI_OVER_2 * xp.exp(ans * ans), save="ans")
defvjp("erfcx", lambda g, ans, x: g * (2.0 * x * ans - _TWO_OVER_SQRT_PI), save="ans x")
defvjp("lgamma", lambda g, ans, x: g * fn("digamma", x), save="x")
defvjp("digamma", lambda g, ans, x: g * fn("polygamma", 1, x), save="x")
defvjp("polygamma", lambda g, ans, x, *, n: g * fn("polygamma", n + 1, x), save="x")
defvjp("i0", lambda g, ans, x: g * fn("i1", x), save="x")
defvjp(
    "i0e",  # i1e(x) - sgn(x) i0e(x)
    lambda g, ans, x: g * (fn("i1e", x) - xp.sign(x) * ans),
    save="ans x",
)
defvjp(
    "i1",  # i0(x) - i1(x) / x, 1/2 at 0
    lambda g, ans, x: (
        g * xp.where(xp.abs(x) > 0, fn("i0", x) - ans / xp.where(x == 0, 1.0, x), 0.5)
    ),
    save="ans x",
)
defvjp(
    "i1e",  # i0e(x) - i1e(x) (sgn(x) + 1/x), 1/2 at 0
    lambda g, ans, x: (
        g
        * xp.where(
            xp.abs(x) > 0, fn("i0e", x) - ans * (xp.sign(x) + 1.0 / xp.where(x == 0, 1.0, x)), 0.5
        )
    ),
    save="ans x",
)
defvjp("ndtr", lambda g, ans, x: g * xp.exp(-0.5 * x * x) / _SQRT_2PI, save="x")
defvjp("ndtri", lambda g, ans, x: g * _SQRT_2PI * xp.exp(0.5 * ans * ans), save="ans")
defvjp("log_ndtr", lambda g, ans, x: g * xp.exp(-0.5 * x * x - ans) / _SQRT_2PI, save="ans x")
defvjp("sinc", lambda g, ans, x: _sinc_grad(g, x), save="x")
defvjp(
    "zeta",
    _not_implemented("the derivative for 'zeta' is not implemented."),
    lambda g, ans, x, y: g * -x * fn("zeta", x + 1.0, y),  # zeta(x, q): d/dq = -x zeta(x + 1, q)
    save="x y",
)
defvjp(
    "igamma",  # igamma(a, x): d/dx = exp((a - 1) log x - x - lgamma(a))
    _not_implemented("the derivative for 'igamma: input' is not implemented."),
    lambda g, ans, x, y: g * xp.exp((x - 1.0) * xp.log(y) - y - fn("lgamma", x)),
    save="x y",
)
defvjp(
    "igammac",
    _not_implemented("the derivative for 'igammac: input' is not implemented."),
    lambda g, ans, x, y: -g * xp.exp((x - 1.0) * xp.log(y) - y - fn("lgamma", x)),
    save="x y",
)

# ----- Rounding, signs and selections -----
for _name in ("ceil", "floor", "trunc", "round", "sgn", "angle"):
    defvjp(_name, _zeros)
defvjp("frac", lambda g, ans, x: g)
defvjp("copysign", lambda g, ans, x, y: _copysign_self(g, x, ans), _zeros, save="ans x")
defvjp(
    "fmod",  # x - trunc(x / y) y
    lambda g, ans, x, y: g,
    lambda g, ans, x, y: -g * fn("trunc", x / y),
    save="x y",
)
defvjp(
    "fmax",
    lambda g, ans, x, y: _fmax_self(g, x, y),
    lambda g, ans, x, y: _fmax_other(g, x, y),
    save="x y",
)
defvjp(
    "fmin",
    lambda g, ans, x, y: _fmin_self(g, x, y),
    lambda g, ans, x, y: _fmin_other(g, x, y),
    save="x y",
)
defvjp("nextafter", lambda g, ans, x, y: masked(g, x != y), _zeros, save="x y")
defvjp(
    "heaviside",
    _not_implemented("derivative for aten::heaviside is not implemented", RuntimeError),
    _not_implemented("derivative for aten::heaviside is not implemented", RuntimeError),
)
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):  # t.eq_(other): EqBackward1, zero
    defvjp(_name, _zeros)
defvjp(
    "floor_divide",
    _not_implemented("derivative for aten::floor_divide is not implemented", RuntimeError),
    _not_implemented("derivative for aten::floor_divide is not implemented", RuntimeError),
)
defvjp("nan_to_num", lambda g, ans, x: g * xp.isfinite(x), save="x")  # as torch: NaN for inf g
