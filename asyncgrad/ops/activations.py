"""torch-level activations, dropouts, distances and losses (``torch.celu``, ``torch.pdist``,
``torch.ctc_loss``, ...), built from differentiable ops; ``ag.nn.functional`` wraps them with its
own signatures (``size_average``/``reduce``, ``inplace``).

The loss functions here take torch's ATen ``reduction``: an int (0 none, 1 mean, 2 sum), as
``torch.kl_div`` does, or its name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import quiet_fp, restore_fp
from ..graph.grad_mode import no_grad
from . import creation, pointwise, reduce, shape
from ._record import NO_PARAMS, OPS, arr, make, wrap
from .convert import clone
from .index import gather, index_select
from .inplace import add_, copy_, mul_, relu_

__all__ = [
    "alpha_dropout",
    "alpha_dropout_",
    "binary_cross_entropy_with_logits",
    "cdist",
    "celu",
    "celu_",
    "cosine_embedding_loss",
    "cosine_similarity",
    "ctc_loss",
    "dropout",
    "dropout_",
    "feature_alpha_dropout",
    "feature_alpha_dropout_",
    "feature_dropout",
    "feature_dropout_",
    "hardshrink",
    "hinge_embedding_loss",
    "kl_div",
    "margin_ranking_loss",
    "pairwise_distance",
    "pdist",
    "poisson_nll_loss",
    "prelu",
    "relu_",
    "rrelu",
    "rrelu_",
    "selu",
    "selu_",
    "threshold",
    "threshold_",
    "triplet_margin_loss",
]

_REDUCTION_ENUM = {0: "none", 1: "mean", 2: "sum"}

# SELU's constants (Klambauer et al., 2017), as torch's.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def reduction_name(reduction: Any) -> str:
    """torch's reduction as a name: ATen's int enum or the name itself."""
    if isinstance(reduction, int) and not isinstance(reduction, bool):
        if reduction not in _REDUCTION_ENUM:
            raise ValueError(f"{reduction} is not a valid value for reduction")
        return _REDUCTION_ENUM[reduction]
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return str(reduction)


def apply_reduction(loss: Tensor, reduction: Any) -> Tensor:
    r = reduction_name(reduction)
    if r == "mean":
        return reduce.mean(loss)
    if r == "sum":
        return reduce.sum(loss)
    return loss


def in_place(input: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """``input`` overwritten with ``fn(input)``, computed from a clone (which the backward reads),
    so the values and gradients are those of the out-of-place form, as torch's."""
    return copy_(input, fn(clone(input)))


def _float(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else creation.as_tensor(x)


_TORCH_NAMES = {
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
}


def require_float(x: Tensor, kernel: str, device_suffix: bool = True) -> None:
    """torch's error for a floating-point kernel given an integer or bool tensor."""
    if x.dtype.kind not in "fc":
        name = _TORCH_NAMES.get(str(x.dtype), str(x.dtype))
        where = f"{kernel}_{x.device.type}" if device_suffix else kernel
        raise NotImplementedError(f"\"{where}\" not implemented for '{name}'")


# ----------------------------------------------------------------------------- activations
def elu_like(x: Tensor, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    """``scale * x`` where ``x > 0``, else ``scale * alpha * (exp(x * input_scale) - 1)``:
    torch's elu, selu and celu. expm1 reads the clamped value so the dropped branch stays
    finite, and so does its gradient."""
    neg = pointwise.clamp(x, max=0.0)
    if input_scale != 1.0:
        neg = pointwise.mul(neg, input_scale)
    lo = pointwise.mul(pointwise.expm1(neg), alpha * scale)
    hi = x if scale == 1.0 else pointwise.mul(x, scale)
    return pointwise.where(pointwise.le(x, 0), lo, hi)


def celu(input: Tensor, alpha: float = 1.0) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    require_float(input, "elu")
    return elu_like(input, alpha, 1.0, 1.0 / alpha)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return in_place(input, lambda x: celu(x, alpha))


def selu(input: Tensor) -> Tensor:
    """``scale * elu(x, alpha)`` with SELU's fixed ``alpha`` and ``scale``."""
    require_float(input, "elu")
    return elu_like(input, SELU_ALPHA, SELU_SCALE)


def selu_(input: Tensor) -> Tensor:
    return in_place(input, selu)


def leaky(x: Tensor, slope: Any) -> Tensor:
    """``x`` where ``x > 0``, else ``slope * x`` (``slope`` a number or a tensor)."""
    return pointwise.where(pointwise.gt(x, 0), x, pointwise.mul(x, slope))


def _generator(generator: Any) -> Any:
    return creation.default_generator if generator is None else generator


def rrelu(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    generator: Any = None,
) -> Tensor:
    """Leaky ReLU with a random slope per element, drawn uniformly from ``[lower, upper]`` in
    training, and the fixed slope ``(lower + upper) / 2`` otherwise."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    require_float(input, "leaky_relu")
    if not training:
        return leaky(input, (lower + upper) / 2)
    rng = _generator(generator).state(input.device)
    u = rng.random(tuple(input.shape), dtypes.float64)
    slope = wrap((u * (upper - lower) + lower).astype(input.dtype))
    # torch's noise: the slope where x <= 0 (0 included), 1 elsewhere
    return pointwise.where(pointwise.le(input, 0), pointwise.mul(input, slope), input)


def rrelu_(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    generator: Any = None,
) -> Tensor:
    return in_place(input, lambda x: rrelu(x, lower, upper, training, generator))


def _threshold(input: Tensor, limit: float, value: float) -> Tensor:
    fill = backend.scalar(value, input.dtype)
    return pointwise.where(pointwise.le(input, limit), fill, input)


def threshold(input: Tensor, threshold: float, value: float) -> Tensor:
    """``x`` where ``x > threshold``, else ``value`` (NaN stays NaN, as torch's)."""
    return _threshold(input, threshold, value)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    limit = threshold
    return in_place(input, lambda x: _threshold(x, limit, value))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0."""
    require_float(input, "hardshrink")
    inside = pointwise.logical_and(pointwise.ge(input, -lambd), pointwise.le(input, lambd))
    return pointwise.where(inside, backend.scalar(0, input.dtype), input)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` where ``x > 0``, else ``weight * x``; ``weight`` holds one slope or one per channel
    (dim 1; an input of one dim is one channel's)."""
    require_float(input, "prelu")
    n_w = weight.numel()
    if weight.ndim > 1:
        raise RuntimeError(
            f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}"
        )
    if input.ndim == 0:
        if n_w != 1:
            raise RuntimeError("Not allow zero-dim input tensor.")
        return leaky(input, shape.reshape(weight, ()))
    channels = input.shape[1] if input.ndim >= 2 else 1
    if n_w != 1 and n_w != channels:
        raise RuntimeError(
            "Mismatch of parameter numbers and input channel size. Found parameter numbers = "
            f"{n_w} and channel size = {channels}."
        )
    if n_w == 1:
        w = shape.reshape(weight, (1,) * input.ndim)
    else:
        w = shape.reshape(weight, (1, channels) + (1,) * (input.ndim - 2))
    return leaky(input, w)


# ----------------------------------------------------------------------------- dropouts
# NOTE [Dropout masks]
# The masks are drawn from asyncgrad's generator (``ag.manual_seed``), not torch's stream, so
# the same seed gives other masks than torch; the distributions and scales are torch's.
def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(input: Tensor, p: float, feature: bool) -> Any:
    """A 0/1 array (``input``'s dtype) keeping each element, or each (sample, channel) with
    ``feature``, with probability ``1 - p``."""
    if feature:
        if input.ndim < 2:
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        mshape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    else:
        mshape = tuple(input.shape)
    rng = creation.default_generator.state(input.device)
    return (rng.random(mshape, dtypes.float64) >= p).astype(input.dtype)


def _dropout(
    input: Tensor, p: float, train: bool, feature: bool, alpha: bool, inplace: bool
) -> Tensor:
    if not train or p == 0.0 or input.numel() == 0:
        return input
    if alpha and p == 1.0:
        # torch: the input times zeros (as its p == 1 shortcut), every element 0
        keep = _keep_mask(input, 1.0, feature)
        out_mask = wrap(keep)
        return mul_(input, out_mask) if inplace else pointwise.mul(input, out_mask)
    keep = _keep_mask(input, p, feature)
    if not alpha:
        scale = wrap(keep * (1.0 / (1.0 - p)) if p < 1.0 else keep)
        return mul_(input, scale) if inplace else pointwise.mul(input, scale)
    # alpha dropout: dropped elements take SELU's negative saturation -scale*alpha, then an
    # affine map a x + b restores the mean and variance (torch's _dropout_impl)
    sat = SELU_ALPHA * SELU_SCALE
    a = 1.0 / math.sqrt((sat * sat * p + 1.0) * (1.0 - p))
    b = wrap(((keep - 1.0) * (sat * a) + sat * a * p).astype(input.dtype))
    noise = wrap((keep * a).astype(input.dtype))
    if inplace:
        return add_(mul_(input, noise), b)
    return pointwise.add(pointwise.mul(input, noise), b)


def dropout(input: Tensor, p: float, train: bool) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``."""
    _check_p(p)
    return _dropout(input, p, train, False, False, False)


def dropout_(input: Tensor, p: float, train: bool) -> Tensor:
    _check_p(p)
    return _dropout(input, p, train, False, False, True)


def feature_dropout(input: Tensor, p: float, train: bool) -> Tensor:
    """Zero whole channels (each (sample, channel) slice) with probability ``p``."""
    _check_p(p)
    return _dropout(input, p, train, True, False, False)


def feature_dropout_(input: Tensor, p: float, train: bool) -> Tensor:
    _check_p(p)
    return _dropout(input, p, train, True, False, True)


def alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:
    """Dropout keeping a SELU network's mean and variance (See NOTE [Dropout masks])."""
    _check_p(p)
    return _dropout(input, p, train, False, True, False)


def alpha_dropout_(input: Tensor, p: float, train: bool) -> Tensor:
    _check_p(p)
    return _dropout(input, p, train, False, True, True)


def feature_alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:
    _check_p(p)
    return _dropout(input, p, train, True, True, False)


def feature_alpha_dropout_(input: Tensor, p: float, train: bool) -> Tensor:
    _check_p(p)
    return _dropout(input, p, train, True, True, True)


# ----------------------------------------------------------------------------- distances
def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """``||x1 - x2 + eps||_p`` over the last dim (the inputs broadcast)."""
    x1, x2 = _float(x1), _float(x2)
    out_ndim = max(x1.ndim, x2.ndim)
    d = pointwise.add(pointwise.sub(x1, x2), eps)
    if out_ndim == 0:
        return reduce.norm(d, p, None, keepdim)
    return reduce.norm(d, p, out_ndim - 1, keepdim)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1 * x2) / max(||x1|| * ||x2||, eps)`` along ``dim`` (the inputs broadcast)."""
    x1, x2 = _float(x1), _float(x2)
    if x1.dtype.kind not in "fc" and x2.dtype.kind not in "fc":
        common = max(x1.dtype, x2.dtype, key=lambda d: (d.itemsize, d.kind != "b"))
        name = _TORCH_NAMES.get(str(common), str(common))
        raise RuntimeError(
            f"expected common dtype to be floating point, yet common dtype is {name}"
        )
    x1b, x2b = x1, x2
    if x1.shape != x2.shape:
        out = backend.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
        x1b, x2b = shape.broadcast_to(x1, out), shape.broadcast_to(x2, out)
    # torch: each input divided by its norm clamped to eps, then the products summed
    n1 = pointwise.clamp(reduce.norm(x1b, 2, dim, True), min=eps)
    n2 = pointwise.clamp(reduce.norm(x2b, 2, dim, True), min=eps)
    return reduce.sum(pointwise.mul(pointwise.div(x1b, n1), pointwise.div(x2b, n2)), dim)


def _distance(d: Tensor, p: float, dim: int) -> Tensor:
    """``norm(d, p, dim)``; for ``p = 0`` (a count, no gradient) still in the graph, with the
    zero gradient torch's pdist and cdist give."""
    out = reduce.norm(d, p, dim)
    if p == 0 and d.requires_grad:
        keep = backend.namespace(out._array).ones(out.shape, dtype=bool)
        out = pointwise.where(wrap(keep), out, reduce.sum(d, dim))
    return out


def _row_pairs(n: int, like: Any) -> tuple[Tensor, Tensor]:
    """The row indices ``(i, j)``, ``i < j``, in torch's pdist order (on ``like``'s device)."""
    xp = backend.namespace(like)
    r = xp.arange(n)
    i, j = xp.nonzero(r.reshape(-1, 1) < r.reshape(1, -1))  # row-major: triu_indices(n, 1)
    return wrap(i.astype(dtypes.int64)), wrap(j.astype(dtypes.int64))


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """The ``p``-norm distances between the rows of ``input`` (N, M), pairs ``i < j`` in
    row-major order: ``N (N - 1) / 2`` values.

    Args:
        input: a floating-point (N, M) tensor.
        p: the norm's order (``p >= 0``; ``inf`` the largest difference).

    Returns:
        A 1-D tensor of ``N (N - 1) / 2`` distances.

    Raises:
        RuntimeError: for an input that is not 2-D or not floating point, or ``p < 0``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.pdist(ag.tensor([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])).tolist()
        [5.0, 10.0, 5.0]
    """
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if input.dtype.kind != "f":
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    i, j = _row_pairs(input.shape[0], input._array)
    d = pointwise.sub(index_select(input, 0, i), index_select(input, 0, j))
    return _distance(d, p, 1)


_CDIST_MODES = (
    "use_mm_for_euclid_dist_if_necessary",
    "use_mm_for_euclid_dist",
    "donot_use_mm_for_euclid_dist",
)


def cdist(
    x1: Tensor,
    x2: Tensor,
    p: float = 2.0,
    compute_mode: str = "use_mm_for_euclid_dist_if_necessary",
) -> Tensor:
    """The ``p``-norm distances between each row of ``x1`` (B.., P, M) and each row of ``x2``
    (B.., R, M): shape (B.., P, R). Every ``compute_mode`` computes the differences directly
    (torch's exact mode; its matrix-product modes differ from it by rounding).

    Args:
        x1: a floating-point (B.., P, M) tensor.
        x2: a floating-point (B.., R, M) tensor; the batch dims broadcast.
        p: the norm's order (``p >= 0``).
        compute_mode: torch's choice of algorithm, checked and otherwise ignored.

    Returns:
        The (B.., P, R) distances.

    Raises:
        RuntimeError: for inputs of fewer than 2 dims, unequal ``M``, integer dtypes or ``p < 0``.
        ValueError: for an unknown ``compute_mode``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.cdist(ag.tensor([[0.0, 0.0]]), ag.tensor([[3.0, 4.0], [1.0, 0.0]])).tolist()
        [[5.0, 1.0]]
    """
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(
            f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D"
            if x1.ndim < 2
            else f"cdist only supports at least 2D tensors, X2 got: {x2.ndim}D"
        )
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    for name, x in (("X1", x1), ("X2", x2)):
        if x.dtype.kind != "f":
            raise RuntimeError(
                f"cdist only supports floating-point dtypes, {name} got: "
                f"{_TORCH_NAMES.get(str(x.dtype), str(x.dtype))}"
            )
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    d = pointwise.sub(shape.unsqueeze(x1, -2), shape.unsqueeze(x2, -3))
    return _distance(d, p, -1)


# ----------------------------------------------------------------------------- losses
def _where0(cond: Any, x: Tensor) -> Tensor:
    return pointwise.where(cond, x, backend.scalar(0, x.dtype))


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Any,
    weight: Any = None,
    pos_weight: Any = None,
    reduction: Any = 1,
) -> Tensor:
    """torch-level ``binary_cross_entropy_with_logits`` (``pos_weight`` before ``reduction``;
    the target broadcasts, where ``F``'s insists on the input's shape)."""
    loss = pointwise.binary_cross_entropy_with_logits(input, target, weight, pos_weight)
    return apply_reduction(loss, reduction)


def binary_cross_entropy(input: Tensor, target: Any, weight: Any = None) -> Tensor:
    """The elementwise ``-w [y log(x) + (1 - y) log(1 - x)]``, the logs clamped to -100 (one
    op, with torch's gradients: finite at x = 0 and 1)."""
    xa, ta, wa = input._array, arr(target), arr(weight)
    xp = backend.namespace(xa)
    if xa.size and not bool(((xa >= 0) & (xa <= 1)).all()):
        raise RuntimeError("all elements of input should be between 0 and 1")
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        loss = (ta - 1) * xp.maximum(xp.log1p(-xa), -100.0) - ta * xp.maximum(xp.log(xa), -100.0)
        if wa is not None:
            loss = loss * wa
    finally:
        restore_fp(token)
    loss = backend.ensure_array(loss)
    if loss.dtype != xa.dtype:
        loss = loss.astype(xa.dtype)
    return make(OPS["binary_cross_entropy"], loss, (input, target, weight), NO_PARAMS, (xa, ta, wa))


def fused_smooth_loss(
    input: Tensor, target: Tensor, reduction: str, beta: float, huber: bool
) -> Any:
    """``smooth_l1_loss`` (``huber=False``) or ``huber_loss`` (``beta`` the delta) as one op with
    torch's gradients, the reduction inside; None where the inputs are not two floating tensors
    of one dtype on one device (the caller composes it then)."""
    xa, ta = input._array, target._array
    if xa.dtype != ta.dtype or xa.dtype.kind != "f" or type(xa) is not type(ta):
        return None
    if xa.ndim == 0 and ta.ndim == 0:  # NumPy arithmetic on 0-d arrays gives scalars
        return None
    if backend.device_of(xa) is not backend.device_of(ta):
        return None
    xp = backend.namespace(xa)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        # With c = d clipped to [-beta, beta]: (d - c / 2) c is torch's 0.5 z z inside (exactly:
        # d - d / 2 is d / 2) and beta (z - beta / 2) outside (z = |d|); smooth_l1 takes c / beta
        # for c, which is +-1 outside. Halving c in place and doubling the result changes no bit
        # (scaling by 2 commutes with rounding). clip, not where: NumPy's where is slow on a mixed
        # mask; NaN stays NaN.
        loss = xa - ta
        c = xp.clip(loss, -beta, beta)
        if huber or beta == 1.0:
            c *= 0.5
            loss -= c
            loss *= c
            scale = 2.0
        else:
            loss -= c * 0.5
            c /= beta
            loss *= c
            scale = 1.0
        if reduction == "mean":  # NumPy's mean, without its wrapper's overhead
            loss = loss.sum() / loss.size * scale
        elif reduction == "sum":
            loss = loss.sum() * scale
        elif scale != 1.0:
            loss *= scale
    finally:
        restore_fp(token)
    loss = backend.ensure_array(loss)
    if loss.dtype != xa.dtype:
        loss = loss.astype(xa.dtype)
    name = "huber_loss" if huber else "smooth_l1_loss"
    params = {"reduction": reduction, ("delta" if huber else "beta"): beta}
    return make(OPS[name], loss, (input, target), params, (xa, ta))


def fused_hardswish(input: Tensor) -> Any:
    """torch's ``x * min(max(x + 3, 0), 6) / 6`` as one op with torch's gradient; None for a
    0-d or non-float32/64 input (the caller composes it then)."""
    xa = input._array
    if xa.ndim == 0 or (xa.dtype != dtypes.float32 and xa.dtype != dtypes.float64):
        return None
    xp = backend.namespace(xa)
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        out = xa + 3.0
        xp.clip(out, 0.0, 6.0, out=out)
        out *= xa
        out /= 6.0
    finally:
        restore_fp(token)
    return make(OPS["hardswish"], out, (input,), NO_PARAMS, (xa,))


def kl_div(input: Tensor, target: Any, reduction: Any = 1, *, log_target: bool = False) -> Tensor:
    """``target * (log(target) - input)`` (0 where target is 0), or with ``log_target``
    ``exp(target) * (target - input)``; torch-level ``reduction`` (no "batchmean")."""
    target = _float(target)
    if log_target:
        loss = pointwise.mul(pointwise.exp(target), pointwise.sub(target, input))
    else:
        zero = pointwise.eq(target, 0)
        safe = pointwise.where(zero, backend.scalar(1, target.dtype), target)
        xlogx = _where0(pointwise.logical_not(zero), pointwise.mul(target, pointwise.log(safe)))
        loss = pointwise.sub(xlogx, pointwise.mul(target, input))
    return apply_reduction(loss, reduction)


def margin_ranking_loss(
    input1: Tensor, input2: Tensor, target: Any, margin: float = 0.0, reduction: Any = 1
) -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``."""
    target = _float(target)
    d = pointwise.sub(input1, input2)
    loss = pointwise.clamp(pointwise.add(pointwise.mul(pointwise.neg(target), d), margin), min=0)
    return apply_reduction(loss, reduction)


def hinge_embedding_loss(
    input: Tensor, target: Any, margin: float = 1.0, reduction: Any = 1
) -> Tensor:
    """``x`` where target is 1, ``max(0, margin - x)`` where it is -1 (torch's sum of both
    selections for other values)."""
    target = _float(target)
    margin_part = pointwise.clamp(pointwise.sub(margin, input), min=0)
    out = pointwise.add(
        _where0(pointwise.ne(target, 1), margin_part), _where0(pointwise.ne(target, -1), input)
    )
    return apply_reduction(out, reduction)


def cosine_embedding_loss(
    input1: Tensor, input2: Tensor, target: Any, margin: float = 0.0, reduction: Any = 1
) -> Tensor:
    """``1 - cos(x1, x2)`` where target is 1, ``max(0, cos(x1, x2) - margin)`` where it is -1."""
    target = _float(target)
    t_dim = target.ndim
    if t_dim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if t_dim == 1:
        if input1.ndim != 2 or input2.ndim != 2:
            raise RuntimeError(
                f"1D target tensor expects 2D input tensors, but found inputs with sizes "
                f"{list(input1.shape)} and {list(input2.shape)}."
            )
    elif input1.ndim != 1 or input2.ndim != 1:
        raise RuntimeError(
            f"0D target tensor expects 1D input tensors, but found inputs with sizes "
            f"{list(input1.shape)} and {list(input2.shape)}."
        )
    eps = 1e-12  # torch's EPSILON
    prod = reduce.sum(pointwise.mul(input1, input2), t_dim)
    m1 = pointwise.add(reduce.sum(pointwise.mul(input1, input1), t_dim), eps)
    m2 = pointwise.add(reduce.sum(pointwise.mul(input2, input2), t_dim), eps)
    cos = pointwise.div(prod, pointwise.sqrt(pointwise.mul(m1, m2)))
    pos = pointwise.sub(1, cos)
    neg = pointwise.clamp(pointwise.sub(cos, margin), min=0)
    out = pointwise.add(
        _where0(pointwise.eq(target, 1), pos), _where0(pointwise.eq(target, -1), neg)
    )
    return apply_reduction(out, reduction)


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    reduction: Any = 1,
) -> Tensor:
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` the pairwise ``p``-distance; ``swap``
    uses ``min(d(a, n), d(p, n))``."""
    a_dim, p_dim, n_dim = anchor.ndim, positive.ndim, negative.ndim
    if not (a_dim == p_dim == n_dim):
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number of "
            f"dimensions, but got: anchor {a_dim}D, positive {p_dim}D, and negative {n_dim}D "
            "inputs"
        )
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = pointwise.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    loss = pointwise.clamp(pointwise.sub(pointwise.add(d_pos, margin), d_neg), min=0)
    return apply_reduction(loss, reduction)


def poisson_nll_loss(
    input: Tensor, target: Any, log_input: bool, full: bool, eps: float, reduction: Any
) -> Tensor:
    """``exp(x) - y x`` (``log_input``), else ``x - y log(x + eps)``; ``full`` adds Stirling's
    ``y log y - y + log(2 pi y) / 2`` where ``y > 1``."""
    target = _float(target)
    if log_input:
        loss = pointwise.sub(pointwise.exp(input), pointwise.mul(target, input))
    else:
        loss = pointwise.sub(input, pointwise.mul(target, pointwise.log(pointwise.add(input, eps))))
    if full:
        big = pointwise.gt(target, 1)
        safe = pointwise.where(big, target, backend.scalar(2, target.dtype))
        stirling = pointwise.add(
            pointwise.sub(pointwise.mul(safe, pointwise.log(safe)), safe),
            pointwise.mul(pointwise.log(pointwise.mul(safe, 2 * math.pi)), 0.5),
        )
        loss = pointwise.add(loss, _where0(big, stirling))
    return apply_reduction(loss, reduction)


# ----------------------------------------------------------------------------- CTC
# NOTE [CTC in log space]
# ctc_loss runs the forward (alpha) recursion of Graves et al. (2006) over the extended label
# sequence (blank, l1, blank, l2, ..., blank), vectorised over the batch and the label positions,
# one step per time frame, with differentiable ops: the gradient is the composition's, the exact
# gradient of the loss with respect to ``log_probs``. (torch's own backward returns
# ``exp(log_probs) - posterior``, which equals this one only after a log_softmax; see the
# README's differences.) Each step's log-sum-exp is taken against its detached maximum and
# selects -inf where all terms are -inf, so unreachable cells neither give NaN values nor NaN
# gradients.
def _logsumexp_safe(terms: Sequence[Tensor]) -> Tensor:
    arrays = [t._array for t in terms]
    xp = backend.namespace(arrays[0])
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        m = arrays[0]
        for a in arrays[1:]:
            m = xp.maximum(m, a)
        finite = xp.isfinite(m)
        m = xp.where(finite, m, 0).astype(arrays[0].dtype)
    finally:
        restore_fp(token)
    mt = wrap(m)
    total = pointwise.exp(pointwise.sub(terms[0], mt))
    for t in terms[1:]:
        total = pointwise.add(total, pointwise.exp(pointwise.sub(t, mt)))
    ok = wrap(finite)
    safe = pointwise.where(ok, total, backend.scalar(1, total.dtype))
    neg_inf = backend.scalar(-math.inf, total.dtype)
    return pointwise.where(ok, pointwise.add(pointwise.log(safe), mt), neg_inf)


def _lengths(x: Any, what: str, n: int) -> list[int]:
    vals = [int(v) for v in (arr(x).reshape(-1).tolist() if hasattr(arr(x), "reshape") else x)]
    if len(vals) != n:
        raise RuntimeError(f"{what} must be of size batch_size")
    return vals


def ctc_loss(
    log_probs: Tensor,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: Any = 1,
    zero_infinity: bool = False,
) -> Tensor:
    """The connectionist temporal classification loss of ``log_probs`` (T, N, C), or (T, C)
    unbatched, against ``targets``: padded (N, S) or concatenated (sum(target_lengths)).
    See NOTE [CTC in log space].

    Args:
        log_probs: log-probabilities over the C classes per frame (a log_softmax's output).
        targets: the label sequences (class indices other than ``blank``).
        input_lengths: the frames of each sample (a tensor or a sequence of ints).
        target_lengths: the labels of each sample.
        blank: the blank class.
        reduction: ATen's int (0 none, 1 mean, 2 sum) or its name; "mean" divides each
            sample's loss by its target length, then averages.
        zero_infinity: give 0 (and a zero gradient) for targets no alignment reaches.

    Returns:
        The loss: per sample with "none", else a scalar.

    Raises:
        RuntimeError: for lengths that do not fit ``log_probs`` or ``targets``, or a ``blank``
            outside the classes.

    Example:
        >>> import asyncgrad as ag
        >>> lp = ag.full((2, 1, 2), 0.5).log()  # two frames, classes {blank, 1}
        >>> round(ag.ctc_loss(lp, ag.tensor([[1]]), [2], [1], reduction=2).item(), 4)
        0.2877
    """
    red = reduction_name(reduction)
    batched = log_probs.ndim == 3
    if log_probs.ndim not in (2, 3):
        raise RuntimeError(
            f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional tensor for "
            "argument #1 'log_probs' (while checking arguments for ctc_loss_allocate_outputs)"
        )
    lp = log_probs if batched else shape.unsqueeze(log_probs, 1)
    t_max, n, c = lp.shape
    xp = backend.namespace(lp._array)
    ta = xp.asarray(arr(targets))
    if ta.dtype.kind not in "iu":  # torch takes float labels too, as their integer values
        ta = ta.astype(dtypes.int64)
    if not batched and ta.ndim == 1:
        ta = ta.reshape(1, -1)
    in_len = _lengths(input_lengths, "input_lengths", n)
    tg_len = _lengths(target_lengths, "target_lengths", n)
    if not 0 <= blank < c:
        raise RuntimeError("blank must be in label range")
    for v in in_len:
        if v > t_max or v < 0:
            raise RuntimeError(
                f"Expected input_lengths to have value at most {t_max}, but got value {v} "
                "(while checking arguments for ctc_loss_cpu)"
            )
    s_max = max(tg_len, default=0)
    # the targets as a padded (N, S) array
    if ta.ndim == 1 and batched:
        if ta.shape[0] != sum(tg_len):
            raise RuntimeError(
                f"Expected tensor to have size {sum(tg_len)} at dimension 0, but got size "
                f"{ta.shape[0]} for argument #2 'targets' (while checking arguments for "
                "ctc_loss_allocate_outputs)"
            )
        offsets = [0]
        for v in tg_len[:-1]:
            offsets.append(offsets[-1] + v)
        pos = xp.arange(s_max)
        idx = xp.asarray(offsets).reshape(-1, 1) + pos
        padded = (
            ta[xp.minimum(idx, max(ta.shape[0] - 1, 0))]
            if ta.size
            else xp.zeros((n, s_max), dtype=ta.dtype)
        )
    else:
        if ta.shape[1] < s_max:
            raise RuntimeError(
                f"Expected tensor to have size at least {s_max} at dimension 1, but got size "
                f"{ta.shape[1]} for argument #2 'targets' (while checking arguments for "
                "ctc_loss_cpu)"
            )
        padded = ta[:, :s_max]
    tlen = xp.asarray(tg_len).reshape(-1, 1)
    valid_lab = xp.arange(s_max).reshape(1, -1) < tlen
    labels = xp.where(valid_lab, padded, blank).astype(dtypes.int64)
    n_ext = 2 * s_max + 1
    ext = xp.full((n, n_ext), blank, dtype=dtypes.int64)
    ext[:, 1::2] = labels
    skip = xp.zeros((n, n_ext), dtype=bool)
    if n_ext > 2:
        skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    # emissions (T, N, L): the log-probability of each extended label at each frame
    index = wrap(xp.broadcast_to(ext.reshape(1, n, n_ext), (t_max, n, n_ext)).copy())
    emit = gather(lp, 2, index)
    dt = lp.dtype
    neg_inf = backend.scalar(-math.inf, dt)
    start = xp.zeros((n, n_ext), dtype=bool)
    start[:, 0] = True
    if n_ext > 1:
        start[:, 1] = xp.asarray(tg_len) > 0
    skip_t, start_t = wrap(skip), wrap(start)
    inf_col1 = creation.full((n, 1), -math.inf, dtype=dt, device=lp.device)
    inf_col2 = creation.full((n, 2), -math.inf, dtype=dt, device=lp.device)
    if t_max:
        alpha = pointwise.where(start_t, emit[0], neg_inf)
    else:
        alpha = creation.full((n, n_ext), -math.inf, dtype=dt, device=lp.device)
    in_len_a = xp.asarray(in_len).reshape(-1, 1)
    for t in range(1, t_max):
        a1 = shape.cat([inf_col1, alpha[:, :-1]], 1)
        a2 = shape.cat([inf_col2, alpha[:, :-2]], 1) if n_ext > 1 else a1
        a2 = pointwise.where(skip_t, a2, neg_inf)
        new = pointwise.add(_logsumexp_safe([alpha, a1, a2]), emit[t])
        alpha = pointwise.where(wrap(xp.broadcast_to(t < in_len_a, (n, n_ext))), new, alpha)
    # the last two cells of each sample's lattice: 2 len and 2 len - 1 (when len > 0)
    last = xp.asarray(tg_len) * 2
    pick = wrap(xp.stack([last, xp.maximum(last - 1, 0)], axis=1).astype(dtypes.int64))
    ends = gather(alpha, 1, pick)
    has_two = wrap(xp.stack([xp.ones(n, dtype=bool), last > 0], axis=1))
    ends = pointwise.where(has_two, ends, neg_inf)
    e0, e1 = shape.unbind(ends, 1)
    nll = pointwise.neg(_logsumexp_safe([e0, e1]))
    zero_in = xp.asarray(in_len) == 0
    if bool(zero_in.any()):  # no frames: probability 1 for an empty target, else 0
        empty = xp.asarray(tg_len) == 0
        fill = xp.where(empty, 0.0, math.inf).astype(dt)
        nll = pointwise.where(wrap(zero_in), wrap(fill), nll)
    if zero_infinity:
        nll = pointwise.where(pointwise.eq(nll, math.inf), backend.scalar(0, dt), nll)
    if red == "none":
        return nll if batched else shape.squeeze(nll, 0)
    if red == "sum":
        return reduce.sum(nll)
    denom = wrap(xp.maximum(xp.asarray(tg_len), 1).astype(dt))
    return reduce.mean(pointwise.div(nll, denom))


def _no_grad_clamp(x: Tensor, lo: float) -> Tensor:
    """``x`` clamped below at ``lo`` with the gradient of the identity, as torch's
    ``var.clone(); with no_grad(): var.clamp_(min=eps)`` in gaussian_nll_loss."""
    with no_grad():
        shift = pointwise.sub(pointwise.clamp(x, min=lo), x)
    return pointwise.add(x, shift)
