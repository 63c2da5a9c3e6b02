"""``ag.special``: torch.special's functions.

SciPy's ``scipy.special`` computes them (``cupyx.scipy.special`` on CuPy arrays). Those torch
differentiates have its gradients; the Bessel and Airy functions and the orthogonal polynomials
are not differentiable in torch, and their results do not require grad here either.

Example:
    >>> import asyncgrad as ag
    >>> x = ag.tensor([0.5, 2.0], requires_grad=True)
    >>> ag.special.gammaln(x)
    tensor([0.5724, 0.0000], grad_fn=<LgammaBackward0>)
    >>> ag.grad_sync(ag.special.gammaln(x).sum(), [x])[0]  # digamma(x)
    tensor([-1.9635,  0.4228])
    >>> ag.special.bessel_j0(x).requires_grad
    False
"""

from __future__ import annotations

from typing import Any, Final

from . import backend, dtypes
from ._tensor import Tensor
from .ops import (
    as_tensor,
    erf,
    exp2,
    expm1,
    log1p,
    log_softmax,
    logsumexp,
    sigmoid,
    softmax,
    wrap,
)
from .ops._record import arr
from .ops.pointwise_math import (
    _no_grad_unary,
    _special_binary,
    _special_unary,
    digamma,
    erfc,
    erfinv,
    i0,
    lgamma,
    logit,
    mvlgamma,
    polygamma,
    round,
    sinc,
    xlogy,
)
from .ops.pointwise_math import igamma as gammainc
from .ops.pointwise_math import igammac as gammaincc
from .rules.pointwise_math import OPS_FNS

__all__ = [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammainc",
    "gammaincc",
    "gammaln",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "sinc",
    "softmax",
    "spherical_bessel_j0",
    "xlog1py",
    "xlogy",
    "zeta",
]

expit: Final = sigmoid
gammaln: Final = lgamma
psi: Final = digamma
multigammaln: Final = mvlgamma

erfcx: Final = _special_unary("erfcx")
i0e: Final = _special_unary("i0e")
i1: Final = _special_unary("i1")
i1e: Final = _special_unary("i1e")
ndtr: Final = _special_unary("ndtr")
ndtri: Final = _special_unary("ndtri")
log_ndtr: Final = _special_unary("log_ndtr")
entr: Final = _special_unary("entr")

bessel_j0: Final = _no_grad_unary("bessel_j0")
bessel_j1: Final = _no_grad_unary("bessel_j1")
bessel_y0: Final = _no_grad_unary("bessel_y0")
bessel_y1: Final = _no_grad_unary("bessel_y1")
modified_bessel_i0: Final = _no_grad_unary("modified_bessel_i0")
modified_bessel_i1: Final = _no_grad_unary("modified_bessel_i1")
modified_bessel_k0: Final = _no_grad_unary("modified_bessel_k0")
modified_bessel_k1: Final = _no_grad_unary("modified_bessel_k1")
scaled_modified_bessel_k0: Final = _no_grad_unary("scaled_modified_bessel_k0")
scaled_modified_bessel_k1: Final = _no_grad_unary("scaled_modified_bessel_k1")
spherical_bessel_j0: Final = _no_grad_unary("spherical_bessel_j0")
airy_ai: Final = _no_grad_unary("airy_ai")


def xlog1py(input: Any, other: Any) -> Tensor:
    """``input * log1p(other)``, 0 where ``input`` is 0 (unless ``other`` is NaN)."""
    return _special_binary("xlog1py", input, other)


def zeta(input: Any, other: Any) -> Tensor:
    """The Hurwitz zeta function ``sum_k (k + other) ** -input``."""
    return _special_binary("zeta", input, other)


OPS_FNS.update({"i0e": i0e, "i1": i1, "i1e": i1e, "zeta": zeta, "xlog1py": xlog1py})


# ----- orthogonal polynomials: P_n(x) of integer degrees n (0 for n < 0), not differentiable --
def _polynomial(x: Any, n: Any, kind: str, shift: bool = False) -> Tensor:
    if not isinstance(x, Tensor) and not isinstance(n, Tensor):
        x = as_tensor(x)
    xa, na = arr(x), arr(n)
    host = xa if hasattr(xa, "shape") else na
    xp = backend.namespace(host)
    if not hasattr(na, "dtype"):  # a Python number: x's dtype decides, as torch's
        na = xp.asarray(na)
    if not hasattr(xa, "dtype"):
        weak = na.dtype if na.dtype.kind == "f" else dtypes.get_default_dtype()
        xa = xp.asarray(xa, dtype=weak if isinstance(xa, float) else None)
    out_dtype = dtypes.promote_binary(xp.result_type(xa, na), xa, na)
    if out_dtype.kind not in "fc":
        out_dtype = dtypes.float32
    xf = xa.astype(out_dtype)
    if shift:
        xf = 2.0 * xf - 1.0
    ni = xp.trunc(na).astype(dtypes.int64) if na.dtype.kind in "fc" else na.astype(dtypes.int64)
    nn = xp.maximum(ni, 0)
    if kind in ("t", "u"):
        out = backend.special("eval_cheby" + kind, nn, xf)
    elif kind in ("v", "w"):
        # V_n = U_n - U_{n-1}, W_n = U_n + U_{n-1} (U_{-1} = 0)
        u = backend.special("eval_chebyu", nn, xf)
        um = xp.where(nn > 0, backend.special("eval_chebyu", xp.maximum(nn - 1, 0), xf), 0.0)
        out = u - um if kind == "v" else u + um
    else:
        name = {
            "h": "eval_hermite",
            "he": "eval_hermitenorm",
            "l": "eval_laguerre",
            "p": "eval_legendre",
        }[kind]
        out = backend.special(name, nn, xf)
    out = xp.where(ni < 0, 0.0, out).astype(out_dtype)
    return wrap(out)


def chebyshev_polynomial_t(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "t")


def chebyshev_polynomial_u(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "u")


def chebyshev_polynomial_v(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "v")


def chebyshev_polynomial_w(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "w")


def shifted_chebyshev_polynomial_t(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "t", shift=True)


def shifted_chebyshev_polynomial_u(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "u", shift=True)


def shifted_chebyshev_polynomial_v(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "v", shift=True)


def shifted_chebyshev_polynomial_w(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "w", shift=True)


def hermite_polynomial_h(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "h")


def hermite_polynomial_he(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "he")


def laguerre_polynomial_l(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "l")


def legendre_polynomial_p(input: Any, n: Any) -> Tensor:
    return _polynomial(input, n, "p")
