"""ag.nn.functional: neural-network functions built from asyncgrad ops.

Functions without an op of their own are compositions of differentiable ops, so their gradients
(and gradients of gradients) come from the ops' rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import ops
from ..ops import (
    cross_entropy,
    gelu,
    linear,
    log_softmax,
    mse_loss,
    nll_loss,
    relu,
    sigmoid,
    silu,
    softmax,
    tanh,
)
from ..tensor import Tensor

__all__ = [
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "dropout",
    "embedding",
    "gelu",
    "l1_loss",
    "layer_norm",
    "linear",
    "log_softmax",
    "mse_loss",
    "nll_loss",
    "relu",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
]

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    return loss


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction!r} is not a valid value for reduction ({_REDUCTIONS})")


def _on_device_of(arr: np.ndarray[Any, Any], like: Tensor) -> Tensor:
    t = ops.from_numpy(arr)
    return t if like.device == t.device else t.to(like.device)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    z = ops.mul(input, beta) if beta != 1 else input
    # exp of the clamped value: the branch that where() drops stays finite, so its (zero)
    # gradient does too.
    soft = ops.log1p(ops.exp(ops.clamp(z, max=threshold)))
    if beta != 1:
        soft = ops.div(soft, beta)
    return ops.where(ops.gt(z, threshold), input, soft)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``.

    The mask is drawn from the default generator (``ag.manual_seed``)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        scale = np.zeros(input.shape, dtype=input.dtype)
    else:
        keep = ops._default_generator._rng.random(input.shape) >= p
        scale = keep.astype(input.dtype) * np.asarray(1.0 / (1.0 - p), dtype=input.dtype)
    mask = _on_device_of(scale, input)
    return ops.mul_(input, mask) if inplace else ops.mul(input, mask)


def layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims (biased variance), as torch."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size {list(input.shape)}"
        )
    dims = tuple(range(-k, 0))
    centred = ops.sub(input, ops.mean(input, dim=dims, keepdim=True))
    var = ops.mean(ops.mul(centred, centred), dim=dims, keepdim=True)
    out = ops.mul(centred, ops.rsqrt(ops.add(var, eps)))
    if weight is not None:
        out = ops.mul(out, weight)
    if bias is not None:
        out = ops.add(out, bias)
    return out


def embedding(input: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` picked by integer ``input``; rows at ``padding_idx`` get no gradient."""
    idx = input if isinstance(input, Tensor) else ops.tensor(input)
    if idx.dtype.kind not in "iu":
        raise TypeError(
            f"embedding indices must be an integer tensor, got a tensor of dtype {idx.dtype}"
        )
    out = ops.getitem(weight, idx)
    if padding_idx is not None:
        padding_idx %= weight.shape[0]
        keep = ops.unsqueeze(ops.ne(idx, padding_idx), -1)
        out = ops.where(keep, out, out.detach())
    return out


def l1_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    _check_reduction(reduction)
    return _reduce(ops.abs(ops.sub(input, target)), reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Any,
    weight: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> Tensor:
    """``-[pos_weight * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x))]``, computed
    stably as ``pos_weight * y * softplus(-x) + (1 - y) * softplus(x)``."""
    _check_reduction(reduction)
    tshape = tuple(np.shape(target._array if isinstance(target, Tensor) else target))
    if tshape != tuple(input.shape):
        raise ValueError(
            f"Target size ({tshape}) must be the same as input size ({tuple(input.shape)})"
        )
    positive = ops.mul(target, softplus(ops.neg(input)))
    if pos_weight is not None:
        positive = ops.mul(positive, pos_weight)
    loss = ops.add(positive, ops.mul(ops.sub(1, target), softplus(input)))
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v``. A bool ``attn_mask`` marks the positions that
    take part (True); a float one is added to the scores. ``is_causal`` masks the future."""
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both")
    n_q, n_k = query.shape[-2], key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    scores = ops.mul(ops.matmul(query, ops.transpose(key, -2, -1)), scale)
    if is_causal:
        future = ~np.tril(np.ones((n_q, n_k), dtype=bool))
        scores = ops.masked_fill(scores, _on_device_of(future, scores), float("-inf"))
    elif attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            scores = ops.masked_fill(scores, ops.logical_not(attn_mask), float("-inf"))
        else:
            scores = ops.add(scores, attn_mask)
    attn = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p)
    return ops.matmul(attn, value)
