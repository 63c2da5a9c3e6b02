"""Loss functions of ``ag.nn.functional``, with torch's signatures: the legacy
``size_average``/``reduce`` arguments (deprecated, warning) beside ``reduction``.

Compositions of differentiable ops, or the torch-level functions of
``asyncgrad/ops/activations.py``; ``binary_cross_entropy`` is one op with torch's gradient.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from .. import backend, ops
from .._tensor import Tensor
from ..ops import activations as act
from ..ops._record import arr
from ..ops.creation import scalar_name
from .functional_activations import logsigmoid
from .functional_core import cross_entropy, l1_loss, linear

__all__ = [
    "binary_cross_entropy",
    "cosine_embedding_loss",
    "ctc_loss",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "huber_loss",
    "kl_div",
    "linear_cross_entropy",
    "margin_ranking_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
]


def legacy_reduction(size_average: bool | None, reduce: bool | None) -> str:
    """torch's ``_Reduction.legacy_get_string``: the reduction the legacy arguments mean."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
        UserWarning,
        stacklevel=3,
    )
    return ret


def _reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    if size_average is not None or reduce is not None:
        return legacy_reduction(size_average, reduce)
    return act.reduction_name(reduction)


def _warn_size(input: Tensor, target: Tensor) -> None:
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(
            f"Using a target size ({_size(target)}) that is different to the input size "
            f"({_size(input)}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            UserWarning,
            stacklevel=3,
        )


def _size(t: Tensor) -> str:
    return f"torch.Size([{', '.join(map(str, t.shape))}])"


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else ops.as_tensor(x)


def binary_cross_entropy(
    input: Tensor,
    target: Any,
    weight: Any = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``-w [y log(x) + (1 - y) log(1 - x)]`` for probabilities ``x``, the logs clamped to -100."""
    red = _reduction(size_average, reduce, reduction)
    target = _t(target)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Using a target size ({_size(target)}) that is different to the input size "
            f"({_size(input)}) is deprecated. Please ensure they have the same size."
        )
    if weight is not None:
        weight = ops.broadcast_to(_t(weight), tuple(input.shape))
    return act.apply_reduction(act.binary_cross_entropy(input, target, weight), red)


def kl_div(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """The Kullback-Leibler divergence of ``target`` from log-probabilities ``input``;
    ``reduction="batchmean"`` divides the sum by the batch size (the KL divergence itself)."""
    if size_average is not None or reduce is not None:
        red = legacy_reduction(size_average, reduce)
    else:
        if reduction == "mean":
            warnings.warn(
                "reduction: 'mean' divides the total loss by both the batch size and the "
                "support size.'batchmean' divides only by the batch size, and aligns with the KL "
                "div math definition.'mean' will be changed to behave the same as 'batchmean' in "
                "the next major release.",
                UserWarning,
                stacklevel=2,
            )
        red = "sum" if reduction == "batchmean" else act.reduction_name(reduction)
    out = act.kl_div(input, target, red, log_target=log_target)
    if reduction == "batchmean" and input.ndim != 0:
        out = ops.div(out, input.shape[0])
    return out


def smooth_l1_loss(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = x - y``)."""
    red = _reduction(size_average, reduce, reduction)
    target = _t(target)
    _warn_size(input, target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0.0:
        return l1_loss(input, target, red)
    fused = act.fused_smooth_loss(input, target, red, beta, huber=False)
    if fused is not None:
        return fused  # type: ignore[no-any-return]
    d = ops.sub(input, target)
    ad = ops.abs(d)
    quad = ops.div(ops.mul(ops.mul(d, d), 0.5), beta)
    return act.apply_reduction(ops.where(ops.lt(ad, beta), quad, ops.sub(ad, 0.5 * beta)), red)


def huber_loss(
    input: Tensor,
    target: Any,
    reduction: str = "mean",
    delta: float = 1.0,
    weight: Tensor | None = None,
) -> Tensor:
    """``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``; times ``weight``."""
    target = _t(target)
    _warn_size(input, target)
    red = act.reduction_name(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if weight is None:
        fused = act.fused_smooth_loss(input, target, red, delta, huber=True)
        if fused is not None:
            return fused  # type: ignore[no-any-return]
    d = ops.sub(input, target)
    ad = ops.abs(d)
    loss = ops.where(
        ops.lt(ad, delta), ops.mul(ops.mul(d, d), 0.5), ops.mul(ops.sub(ad, 0.5 * delta), delta)
    )
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape):
            raise ValueError("Weights and input must have the same size.")
        loss = ops.mul(loss, weight)
    return act.apply_reduction(loss, red)


def soft_margin_loss(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``log(1 + exp(-y x))``."""
    red = _reduction(size_average, reduce, reduction)
    loss = ops.log1p(ops.exp(ops.mul(ops.neg(input), target)))
    return act.apply_reduction(loss, red)


def multilabel_soft_margin_loss(
    input: Tensor,
    target: Any,
    weight: Any = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``-mean_c [y log sigmoid(x) + (1 - y) log sigmoid(-x)]`` (times ``weight``) per sample."""
    red = _reduction(size_average, reduce, reduction)
    target = _t(target)
    loss = ops.neg(
        ops.add(
            ops.mul(target, logsigmoid(input)),
            ops.mul(ops.sub(1, target), logsigmoid(ops.neg(input))),
        )
    )
    if weight is not None:
        loss = ops.mul(loss, weight)
    class_dim = input.ndim - 1
    n_cls = input.shape[class_dim] if input.ndim else 1
    loss = ops.div(ops.sum(loss, dim=class_dim) if input.ndim else loss, n_cls)
    return act.apply_reduction(loss, red)


def _empty_mean(reduction: str, n: int) -> str:
    """An empty batch's "mean" is 0 (torch's margin losses), not the mean of nothing."""
    return "sum" if reduction == "mean" and n == 0 else reduction


def _as_2d(input: Tensor, what: str) -> Tensor:
    empty = input.numel() == 0 if input.ndim < 2 else input.ndim == 2 and input.shape[1] == 0
    if input.ndim > 2 or empty:
        raise RuntimeError(
            f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
            f"{list(input.shape)}"
        )
    return ops.reshape(input, (1, -1)) if input.ndim < 2 else input


def multilabel_margin_loss(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``sum_{j in y, i not in y} max(0, 1 - (x[y_j] - x[i])) / C`` per sample; ``target``
    holds the class indices, ended by the first -1."""
    red = _reduction(size_average, reduce, reduction)
    x = _as_2d(input, "multilabel_margin_loss")
    xp = backend.namespace(x._array)
    ta = xp.asarray(arr(_t(target)))
    if ta.size != x.numel() or ta.ndim != input.ndim:
        raise RuntimeError(
            f"inconsistent target size: {list(ta.shape)} for input of size: {list(input.shape)}"
        )
    ta = ta.reshape(x.shape).astype("int64")
    n, c = x.shape
    # valid[n, j]: slot j is a label (before the first -1)
    valid = xp.cumprod((ta != -1).astype("int64"), axis=1).astype(bool)
    if bool(((ta < -1) | (ta >= c)).any()):
        raise RuntimeError("argument #2 'target' is out of range")
    safe = xp.where(valid, ta, 0)
    is_target = xp.zeros((n, c), dtype=bool)
    rows = xp.broadcast_to(xp.arange(n).reshape(-1, 1), (n, c))
    is_target[rows[valid], safe[valid]] = True
    x_t = ops.gather(x, 1, ops.wrap(safe))  # (N, J)
    margins = ops.add(ops.sub(1.0, ops.unsqueeze(x_t, 2)), ops.unsqueeze(x, 1))  # (N, J, C)
    mask = ops.wrap(valid[:, :, None] & ~is_target[:, None, :])
    hinge = ops.where(ops.logical_and(mask, ops.gt(margins, 0)), margins, 0.0)
    loss = ops.div(ops.sum(hinge, dim=(1, 2)), c)
    if input.ndim < 2 and red == "none":
        loss = ops.reshape(loss, ())
    return act.apply_reduction(loss, _empty_mean(red, n))


def multi_margin_loss(
    input: Tensor,
    target: Any,
    p: int = 1,
    margin: float = 1.0,
    weight: Any = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C`` per sample."""
    red = _reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and _t(weight).ndim != 1:
        raise ValueError("weight must be one-dimensional")
    x = _as_2d(input, "multi_margin_loss")
    n, c = x.shape
    xp = backend.namespace(x._array)
    ta = xp.asarray(arr(_t(target))).reshape(-1).astype("int64")
    t_shape = list(arr(_t(target)).shape)
    if ta.shape[0] != n or len(t_shape) > 1:
        raise RuntimeError(
            "multi_margin_loss: target tensor should be 1-D with size equal to the number of "
            f"input samples (batch size). Expected target size [{n}], but got {t_shape}. Input "
            f"has shape {list(input.shape)}."
        )
    if weight is not None and _t(weight).numel() != c:
        raise RuntimeError(
            f"inconsistent weight size, expected {c} but got {list(_t(weight).shape)}"
        )
    if arr(_t(target)).dtype.kind not in "iu":
        raise RuntimeError(
            f"expected scalar type Long but found {scalar_name(arr(_t(target)).dtype)}"
        )
    if ta.size and bool(((ta < 0) | (ta >= c)).any()):
        raise RuntimeError("target out of range")
    idx = ops.wrap(ta.reshape(-1, 1))
    x_y = ops.gather(x, 1, idx)  # (N, 1)
    z = ops.add(ops.sub(margin, x_y), x)
    other = ops.wrap(xp.arange(c).reshape(1, -1) != ta.reshape(-1, 1))
    h = ops.where(ops.logical_and(other, ops.gt(z, 0)), z, 0.0)
    if p == 2:
        h = ops.mul(h, h)
    if weight is not None:
        w = _t(weight)
        h = ops.mul(h, ops.unsqueeze(ops.index_select(w, 0, ops.wrap(ta)), 1))
    loss = ops.div(ops.sum(h, dim=1), c)
    if input.ndim < 2 and red == "none":
        loss = ops.reshape(loss, tuple(t_shape))
    return act.apply_reduction(loss, _empty_mean(red, n))


def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Any,
    margin: float = 0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, -y (x1 - x2) + margin)``."""
    red = _reduction(size_average, reduce, reduction)
    target = _t(target)
    if not (input1.ndim == input2.ndim == target.ndim):
        raise RuntimeError(
            "margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {_size(input1)}, input2: {_size(input2)}, target: {_size(target)} "
        )
    return act.margin_ranking_loss(input1, input2, target, margin, red)


def hinge_embedding_loss(
    input: Tensor,
    target: Any,
    margin: float = 1.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``x`` where ``y = 1``, ``max(0, margin - x)`` where ``y = -1``."""
    red = _reduction(size_average, reduce, reduction)
    return act.hinge_embedding_loss(input, target, margin, red)


def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Any,
    margin: float = 0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``1 - cos(x1, x2)`` where ``y = 1``, ``max(0, cos(x1, x2) - margin)`` where ``y = -1``."""
    red = _reduction(size_average, reduce, reduction)
    return act.cosine_embedding_loss(input1, input2, target, margin, red)


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, margin + d(a, p) - d(a, n))`` with the pairwise ``p``-distance ``d``."""
    red = _reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    return act.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, red)


def triplet_margin_with_distance_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, margin + d(a, p) - d(a, n))`` with any ``distance_function`` (default the
    pairwise 2-distance)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a_dim, p_dim, n_dim = anchor.ndim, positive.ndim, negative.ndim
    if not (a_dim == p_dim == n_dim):
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number of "
            f"dimensions, but got: anchor {a_dim}D, positive {p_dim}D, and negative {n_dim}D "
            "inputs"
        )
    dist = distance_function if distance_function is not None else act.pairwise_distance
    d_pos = dist(anchor, positive)
    d_neg = dist(anchor, negative)
    if swap:
        d_neg = ops.minimum(d_neg, dist(positive, negative))
    loss = ops.clamp(ops.sub(ops.add(d_pos, margin), d_neg), min=0)
    return act.apply_reduction(loss, reduction)


def poisson_nll_loss(
    input: Tensor,
    target: Any,
    log_input: bool = True,
    full: bool = False,
    size_average: bool | None = None,
    eps: float = 1e-8,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The negative log likelihood of ``target`` under Poisson(``exp(input)``), or
    Poisson(``input``) without ``log_input``."""
    red = _reduction(size_average, reduce, reduction)
    return act.poisson_nll_loss(input, target, log_input, full, eps, red)


def gaussian_nll_loss(
    input: Tensor,
    target: Any,
    var: Tensor | float,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> Tensor:
    """``0.5 (log(max(var, eps)) + (input - target)^2 / max(var, eps))``, plus
    ``0.5 log(2 pi)`` with ``full``; the clamp passes var's gradient through, as torch's."""
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = ops.mul(ops.ones_like(input), var)
    elif bool(ops.any(ops.lt(var, 0))):
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = ops.unsqueeze(var, -1)
        elif (
            input.ndim == var.ndim
            and sum(y for x, y in zip(input.shape, var.shape, strict=True) if x != y) == 1
        ):
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = act._no_grad_clamp(var, eps)
    d = ops.sub(input, target)
    loss = ops.mul(ops.add(ops.log(var), ops.div(ops.mul(d, d), var)), 0.5)
    if full:
        loss = ops.add(loss, 0.5 * math.log(2 * math.pi))
    return act.apply_reduction(loss, reduction)


def ctc_loss(
    log_probs: Tensor,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """The connectionist temporal classification loss (See NOTE [CTC in log space])."""
    return act.ctc_loss(
        log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity
    )


def linear_cross_entropy(
    input: Tensor,
    linear_weight: Tensor,
    target: Any,
    *,
    linear_bias: Tensor | None = None,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    options: Any = None,
) -> Tensor:
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``: torch's
    reference path (``options``, a chunking strategy, changes only memory use there and is
    accepted and ignored here)."""
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(
            f"expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}"
        )
    in_features = input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(
            "expected equal input and linear_weight last dimensions (in_features), "
            f"got {input.shape[-1]} and {linear_weight.shape[-1]}, respectively"
        )
    num_classes = linear_weight.shape[0]
    out_features = tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise RuntimeError(
            f"expected linear_bias shape {(num_classes, *out_features)}, got "
            f"{tuple(linear_bias.shape)}"
        )
    if out_features and input.ndim == 1:
        raise RuntimeError(
            f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} "
            f"requires batched input, (N, {in_features}), got unbatched input with shape "
            f"{tuple(input.shape)}"
        )
    target = _t(target)
    logits_shape = (*input.shape[:-1], num_classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    ignore = -100 if ignore_index is None else ignore_index
    w2 = ops.reshape(linear_weight, (-1, in_features))
    b2 = None if linear_bias is None else ops.reshape(linear_bias, (-1,))
    logits = ops.reshape(linear(input, w2, b2), logits_shape)
    return cross_entropy(logits, target, weight, ignore, reduction, label_smoothing)
