"""Activation functions of ``ag.nn.functional``, their in-place forms, channel dropouts and the
distance functions (``cosine_similarity``, ``pairwise_distance``, ``pdist``, ``normalize``).

Compositions of differentiable ops (``asyncgrad/ops/activations.py`` holds the torch-level ones),
so their gradients, and gradients of gradients, come from the ops' rules; each selection is a
``where`` on torch's condition, so the gradient at a kink is torch's.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..ops import activations as act
from .functional_core import _softmax_dim, elu, leaky_relu, relu

__all__ = [
    "alpha_dropout",
    "celu",
    "celu_",
    "cosine_similarity",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "elu_",
    "feature_alpha_dropout",
    "glu",
    "gumbel_softmax",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "hardtanh_",
    "leaky_relu_",
    "logsigmoid",
    "normalize",
    "pairwise_distance",
    "pdist",
    "prelu",
    "relu6",
    "relu_",
    "rrelu",
    "rrelu_",
    "selu",
    "selu_",
    "softmin",
    "softshrink",
    "softsign",
    "tanhshrink",
    "threshold",
    "threshold_",
]


def _maybe_inplace(input: Tensor, inplace: bool, fn: Any) -> Tensor:
    out: Tensor = act.in_place(input, fn) if inplace else fn(input)
    return out


def _const(x: Tensor, value: float) -> Any:
    return backend.scalar(value, x.dtype)


# ----- hard activations: torch's gradients are 0 at and beyond the corners -----
def _hardtanh(x: Tensor, lo: float, hi: float) -> Tensor:
    out = ops.where(ops.ge(x, hi), _const(x, hi), x)
    return ops.where(ops.le(x, lo), _const(x, lo), out)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """``x`` clamped to ``[min_val, max_val]``; the gradient is 0 at the bounds, as torch's."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    if input.dtype == dtypes.bool_:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    return _maybe_inplace(input, inplace, lambda x: _hardtanh(x, min_val, max_val))


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(0, x), 6)`` (hardtanh over ``[0, 6]``)."""
    return hardtanh(input, 0.0, 6.0, inplace)


def _hardsigmoid(x: Tensor) -> Tensor:
    # torch's gradient: 1/6 strictly inside (-3, 3), else 0 (NaN included: its value stays NaN)
    inside = ops.logical_and(ops.gt(x, -3.0), ops.lt(x, 3.0))
    outside = ops.where(ops.le(x, -3.0), _const(x, 0.0), x.detach())
    outside = ops.where(ops.ge(x, 3.0), _const(x, 1.0), outside)
    return ops.where(inside, ops.add(ops.div(x, 6.0), 0.5), outside)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """0 for ``x <= -3``, 1 for ``x >= 3``, else ``x / 6 + 1 / 2``."""
    act.require_float(input, "hardsigmoid")
    return _maybe_inplace(input, inplace, _hardsigmoid)


def _hardswish(x: Tensor) -> Tensor:
    fused = act.fused_hardswish(x)
    if fused is not None:
        return fused  # type: ignore[no-any-return]
    # The middle branch reads x only inside (-3, 3), so an infinite x gives no NaN gradient
    # through it; beyond 3 (and at NaN) x itself, at or below -3 x * 0 (NaN at -inf, as torch's
    # x * relu6(x + 3) / 6).
    inside = ops.logical_and(ops.gt(x, -3.0), ops.lt(x, 3.0))
    xs = ops.where(inside, x, _const(x, 0.0))
    mid = ops.div(ops.mul(xs, ops.add(xs, 3.0)), 6.0)
    outside = ops.where(ops.le(x, -3.0), ops.mul(x, 0.0), x)
    return ops.where(inside, mid, outside)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6`` (torch's gradient: ``x / 3 + 1 / 2`` on ``(-3, 3)``, 0 at -3
    and 1 at 3)."""
    act.require_float(input, "hardswish")
    return _maybe_inplace(input, inplace, _hardswish)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0."""
    return act.hardshrink(input, lambd)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x - lambd * sign(x)`` where ``|x| > lambd``, else 0."""
    act.require_float(input, "softshrink_check", device_suffix=False)
    if lambd < 0:
        big = "1.79769e+308" if input.dtype == dtypes.float64 else "3.40282e+38"
        name = {"float64": "Double", "float16": "Half"}.get(str(input.dtype), "Float")
        raise RuntimeError(
            f"lambda must be in range [0, {big}] for input dtype {name}, but found {lambd:g}"
        )
    inside = ops.le(ops.abs(input), lambd)
    shrunk = ops.sub(input, ops.mul(ops.sign(input), lambd))
    return ops.where(inside, _const(input, 0.0), shrunk)


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    return ops.sub(input, ops.tanh(input))


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return ops.div(input, ops.add(ops.abs(input), 1.0))


def softmin(
    input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None
) -> Tensor:
    """``softmax(-x, dim)``; ``dim=None`` picks torch's implicit (deprecated) dim, warning."""
    if dim is None:
        dim = _softmax_dim("softmin", input.ndim)
    if dtype is None:
        last = input.ndim == 0 or dim % input.ndim == input.ndim - 1
        kernel = "softmax_lastdim_kernel_impl" if last else "softmax_kernel_impl"
        act.require_float(input, kernel, device_suffix=False)
    else:
        input = input.to(dtype)
    return ops.softmax(ops.neg(input), dim)


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|))``, stable for every ``x``."""
    act.require_float(input, "log_sigmoid")
    neg = ops.lt(input, 0)
    zero = _const(input, 0.0)
    lo = ops.where(neg, input, zero)  # min(x, 0)
    hi = ops.where(neg, zero, input)  # max(x, 0)
    return ops.sub(lo, ops.log1p(ops.exp(ops.sub(lo, hi))))


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)`` with ``a, b`` the halves of ``input`` along ``dim``."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    act.require_float(input, "glu")
    d = dim % input.ndim if -input.ndim <= dim < input.ndim else dim
    if not 0 <= d < input.ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-input.ndim}, "
            f"{input.ndim - 1}], but got {dim})"
        )
    n = input.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    a = ops.narrow(input, d, 0, n // 2)
    b = ops.narrow(input, d, n // 2, n // 2)
    return ops.mul(a, ops.sigmoid(b))


# ----- the ELU family and the in-place forms -----
def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with SELU's constants."""
    return act.selu_(input) if inplace else act.selu(input)


def selu_(input: Tensor) -> Tensor:
    return act.selu_(input)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return act.celu_(input, alpha) if inplace else act.celu(input, alpha)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return act.celu_(input, alpha)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return elu(input, alpha, inplace=True)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return leaky_relu(input, negative_slope, inplace=True)


def relu_(input: Tensor) -> Tensor:
    return relu(input, inplace=True)


def rrelu(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Leaky ReLU with slopes drawn from ``U(lower, upper)`` in training, else their mean."""
    if inplace:
        return act.rrelu_(input, lower, upper, training)
    return act.rrelu(input, lower, upper, training)


def rrelu_(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False
) -> Tensor:
    return act.rrelu_(input, lower, upper, training)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, else ``value``."""
    if inplace:
        return act.threshold_(input, threshold, value)
    return act.threshold(input, threshold, value)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return act.threshold_(input, threshold, value)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` where ``x > 0``, else ``weight * x`` (one weight, or one per channel of dim 1)."""
    return act.prelu(input, weight)


# ----- sampling -----
def gumbel_softmax(
    logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1
) -> Tensor:
    """``softmax((logits + g) / tau)`` with Gumbel(0, 1) noise ``g`` from asyncgrad's
    generator; ``hard`` returns the one-hot argmax with the soft sample's gradient."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    rng = ops.default_generator.state(logits.device)
    u = rng.random(tuple(logits.shape), logits.dtype)
    xp = backend.namespace(u)
    gumbels = -xp.log(-xp.log1p(-u))  # -log(Exp(1)), Exp(1) = -log(1 - u)
    y_soft = ops.softmax(ops.div(ops.add(logits, ops.wrap(gumbels.astype(logits.dtype))), tau), dim)
    if not hard:
        return y_soft
    index = ops.argmax(y_soft, dim, keepdim=True)
    d = dim % logits.ndim if logits.ndim else 0
    shape = [1] * logits.ndim
    if logits.ndim:
        shape[d] = logits.shape[d]
    positions = ops.reshape(
        ops.arange(logits.shape[d] if logits.ndim else 1, device=logits.device), tuple(shape)
    )
    y_hard = ops.eq(positions, index).to(logits.dtype)
    return ops.add(ops.sub(y_hard, y_soft.detach()), y_soft)


# ----- distances and normalisation -----
def normalize(
    input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Tensor | None = None
) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim``."""
    denom = ops.clamp(ops.norm(input, p, dim, keepdim=True), min=eps)
    res = ops.div(input, denom)
    if out is not None:
        ops.copy_(out, res)
        return out
    return res


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between ``x1`` and ``x2`` along ``dim``."""
    return act.cosine_similarity(x1, x2, dim, eps)


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """``||x1 - x2 + eps||_p`` over the last dim."""
    return act.pairwise_distance(x1, x2, p, eps, keepdim)


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """The ``p``-norm distances between the rows of ``input``, pairs ``i < j``."""
    return act.pdist(input, p)


# ----- dropouts (See NOTE [Dropout masks] in asyncgrad/ops/activations.py) -----
def alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """Dropout that keeps a SELU network's mean and variance."""
    return (act.alpha_dropout_ if inplace else act.alpha_dropout)(input, p, training)


def feature_alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """Alpha dropout of whole channels."""
    return (act.feature_alpha_dropout_ if inplace else act.feature_alpha_dropout)(
        input, p, training
    )


def _feature(input: Tensor, p: float, training: bool, inplace: bool) -> Tensor:
    return (act.feature_dropout_ if inplace else act.feature_dropout)(input, p, training)


def dropout1d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zero whole channels of (N, C, L) or (C, L) inputs with probability ``p``."""
    act._check_p(p)
    inp_dim = input.ndim
    if inp_dim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {inp_dim}D input. "
            "Note that dropout1d exists to provide channel-wise dropout on inputs with 1 "
            "spatial dimension, a channel dimension, and an optional batch dimension "
            "(i.e. 2D or 3D inputs)."
        )
    if inp_dim == 3:
        return _feature(input, p, training, inplace)
    out = _feature(ops.unsqueeze(input, 0), p, training, False)
    out = ops.squeeze(out, 0)
    return ops.copy_(input, out) if inplace and out is not input else out


def dropout2d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zero whole channels of (N, C, H, W) inputs (a 3-D input is read as (N, C, L), as
    torch's, with its warning)."""
    act._check_p(p)
    inp_dim = input.ndim
    if inp_dim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {inp_dim}-D input to dropout2d, which is deprecated "
            "and will result in an error in a future release. To retain the behavior "
            "and silence this warning, please use dropout instead. Note that dropout2d "
            "exists to provide channel-wise dropout on inputs with 2 spatial dimensions, "
            "a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).",
            stacklevel=2,
        )
    if inp_dim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
            "1D dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    return _feature(input, p, training, inplace)


def dropout3d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) inputs."""
    act._check_p(p)
    inp_dim = input.ndim
    if inp_dim not in (4, 5):
        warnings.warn(
            f"dropout3d: Received a {inp_dim}-D input to dropout3d, which is deprecated "
            "and will result in an error in a future release. To retain the behavior "
            "and silence this warning, please use dropout instead. Note that dropout3d "
            "exists to provide channel-wise dropout on inputs with 3 spatial dimensions, "
            "a channel dimension, and an optional batch dimension (i.e. 4D or 5D inputs).",
            stacklevel=2,
        )
    if inp_dim == 5:
        return _feature(input, p, training, inplace)
    out = ops.squeeze(_feature(ops.unsqueeze(input, 0), p, training, False), 0)
    return ops.copy_(input, out) if inplace and out is not input else out
