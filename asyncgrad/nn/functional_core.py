"""The core of ag.nn.functional: activations, losses, normalisation, embedding, dropout and
attention, which the family modules (functional_activations, _losses, _spatial, _layers) build
on; ``asyncgrad.nn.functional`` gathers them all.

Functions without an op of their own are compositions of differentiable ops, so their gradients
(and gradients of gradients) come from the ops' rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..backend import kernels, silent_fp
from ..graph.grad_mode import no_grad
from ..ops import (
    gelu,
    linear,
    log_softmax,
    sigmoid,
    softmax,
    tanh,
)
from ..ops._record import OPS, arr, make
from ..ops.index import getitem_for

__all__ = [
    "batch_norm",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "group_norm",
    "instance_norm",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "mish",
    "mse_loss",
    "nll_loss",
    "one_hot",
    "pad",
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


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    return ops.pointwise.softplus(input, beta, threshold)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``.

    The mask is drawn from the default generator (``ag.manual_seed``)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        mask = ops.zeros(input.shape, dtype=input.dtype, device=input.device)
    else:
        rng = ops.default_generator.state(input.device)
        keep = rng.random(input.shape, dtypes.float64) >= p
        mask = ops.wrap((keep.astype(input.dtype) * (1.0 / (1.0 - p))).astype(input.dtype))
    return ops.mul_(input, mask) if inplace else ops.mul(input, mask)


def _standardize(x: Tensor, dims: Any, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(mean, var, (x - mean) / sqrt(var + eps))`` over ``dims`` (kept), with the biased
    variance: the normalisation layer_norm, batch_norm, instance_norm and group_norm share.
    An empty ``x`` (e.g. an empty batch) normalises to itself, with NaN statistics, as torch's
    (without NumPy's warnings about empty means)."""
    if x.numel() == 0:
        keep = tuple(1 if d in _dims(dims, x.ndim) else n for d, n in enumerate(x.shape))
        nan = ops.full(keep, float("nan"), dtype=x.dtype, device=x.device)
        return nan, nan, ops.mul(x, 1.0)
    mean = ops.mean(x, dim=dims, keepdim=True)
    centred = ops.sub(x, mean)
    var = ops.mean(ops.mul(centred, centred), dim=dims, keepdim=True)
    return mean, var, ops.mul(centred, ops.rsqrt(ops.add(var, eps)))


def _dims(dims: Any, ndim: int) -> set[int]:
    return {d % ndim for d in ((dims,) if isinstance(dims, int) else dims)}


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
    if k == 0:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
            "one element, but got normalized_shape = []"
        )
    if input.ndim < k or tuple(input.shape[input.ndim - k :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size {list(input.shape)}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise RuntimeError(
                f"Expected {name} to be of same shape as normalized_shape, but got {name} of "
                f"shape {list(t.shape)} and normalized_shape = {list(shape)}"
            )
    out = _standardize(input, tuple(range(-k, 0)), eps)[2]
    if weight is not None:
        out = ops.mul(out, weight)
    if bias is not None:
        out = ops.add(out, bias)
    return out


def embedding(
    input: Any,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` picked by integer ``input``, as torch's: rows at ``padding_idx`` get
    no gradient; ``max_norm`` first renormalises (in place) the rows looked up whose
    ``norm_type``-norm exceeds it; ``scale_grad_by_freq`` divides each row's gradient by how
    often it occurs in ``input``. ``sparse=True`` (sparse gradients) is not supported."""
    idx = input if isinstance(input, Tensor) else ops.tensor(input)
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if idx.dtype.kind not in "iu":
        # torch raises RuntimeError; TypeError is kept here, as before (tests rely on it).
        raise TypeError(
            f"embedding indices must be an integer tensor, got a tensor of dtype {idx.dtype}"
        )
    if sparse:
        raise NotImplementedError("embedding: sparse=True (sparse gradients) is not supported")
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx %= n
    if max_norm is not None:
        embedding_renorm_(weight, idx, max_norm, norm_type)
    out = getitem_for("embedding", weight, idx)
    if scale_grad_by_freq:
        # The value stays exactly weight[idx]; the gradient of each row is scaled by
        # 1 / count(row) (as torch's), through ``(out - out.detach()) * scale``.
        ia = idx._array
        xp = backend.namespace(ia)
        _, inverse, counts = xp.unique(ia.reshape(-1), return_inverse=True, return_counts=True)
        scale = (1.0 / counts[inverse.reshape(-1)]).reshape((*ia.shape, 1)).astype(weight.dtype)
        base = out.detach()
        out = ops.add(base, ops.mul(ops.sub(out, base), ops.wrap(scale)))
    if padding_idx is not None:
        keep = ops.unsqueeze(ops.ne(idx, padding_idx), -1)
        out = ops.where(keep, out, out.detach())
    return out


def embedding_renorm_(weight: Tensor, input: Any, max_norm: float, norm_type: float) -> Tensor:
    """Scale in place (without recording) each row of ``weight`` indexed by ``input`` whose
    ``norm_type``-norm exceeds ``max_norm`` to norm ``max_norm`` (by ``max_norm / (norm +
    1e-7)``, as torch's)."""
    idx = input if isinstance(input, Tensor) else ops.tensor(input)
    with no_grad():
        xp = backend.namespace(weight._array)
        rows_idx = xp.unique(xp.asarray(idx._array).reshape(-1))
        if rows_idx.size == 0:
            return weight
        rows = weight._array[rows_idx]
        mags = xp.abs(rows)
        if norm_type == float("inf"):
            norms = mags.max(axis=1)
        else:
            norms = (mags**norm_type).sum(axis=1) ** (1.0 / norm_type)
        scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).astype(weight.dtype)
        ops.setitem(weight, ops.wrap(rows_idx), ops.wrap(rows * scale[:, None]))
    return weight


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
    stably as torch does, ``(1 - y) x - (1 + (pos_weight - 1) y) log_sigmoid(x)``, one op."""
    _check_reduction(reduction)
    tshape = tuple(getattr(arr(target), "shape", ()))
    if tshape != tuple(input.shape):
        raise ValueError(
            f"Target size ({tshape}) must be the same as input size ({tuple(input.shape)})"
        )
    loss = ops.pointwise.binary_cross_entropy_with_logits(input, target, weight, pos_weight)
    return _reduce(loss, reduction)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v``. A bool ``attn_mask`` marks the positions that
    take part (True); a float one is added to the scores. ``is_causal`` masks the future.
    ``enable_gqa``: grouped-query attention, each key/value head shared by consecutive
    query heads (dim -3), as torch's."""
    if is_causal and attn_mask is not None:
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
            "is_causal=True"
        )
    if attn_mask is not None and attn_mask.dtype != dtypes.bool_ and attn_mask.dtype.kind != "f":
        raise RuntimeError(
            "Expected attn_mask dtype to be bool or float or to match query dtype, but got "
            f"attn_mask.dtype: {attn_mask.dtype} and  query.dtype: {query.dtype} instead."
        )
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk == 0 or hv == 0 or hq % hk or hq % hv:
            raise RuntimeError(
                "Number of heads in key and value must divide the number of heads in query"
            )
        key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hv)
    n_q, n_k = query.shape[-2], key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    scores = ops.mul(ops.matmul(query, ops.transpose(key, -2, -1)), scale)
    if is_causal:
        rows = ops.unsqueeze(ops.arange(n_q, device=scores.device), 1)
        future = ops.gt(ops.arange(n_k, device=scores.device), rows)
        scores = ops.masked_fill(scores, future, float("-inf"))
    elif attn_mask is not None:
        if attn_mask.dtype == dtypes.bool_:
            scores = ops.masked_fill(scores, ops.logical_not(attn_mask), float("-inf"))
        else:
            scores = ops.add(scores, attn_mask)
    attn = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p)
    return ops.matmul(attn, value)


def _repeat_heads(x: Tensor, r: int) -> Tensor:
    """Each head (dim -3) repeated ``r`` times in place, as ``repeat_interleave``."""
    if r == 1:
        return x
    shape = tuple(x.shape)
    lead, (h, s, e) = shape[:-3], shape[-3:]
    wide = ops.expand(ops.unsqueeze(x, -3), (*lead, h, r, s, e))
    return ops.reshape(wide, (*lead, h * r, s, e))


# ----------------------------------------------------------------------------- losses
def _beside(x: Any, input: Tensor) -> Any:
    """A NumPy array (or list) of class indices on ``input``'s device, as a tensor there."""
    if isinstance(x, Tensor) or not backend.is_device_array(input._array):
        return x
    return ops.as_tensor(x, device=input.device)


def _check_target_shape(ishape: tuple[int, ...], tshape: tuple[int, ...]) -> None:
    """torch's checks and messages for a class-index target against ``input``'s shape."""
    if len(ishape) < 1:
        raise ValueError(f"Expected input of at least 1 dimension, got shape {list(ishape)}")
    if len(ishape) <= 2 and len(tshape) > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if len(ishape) == 1:
        if tshape not in ((), (1,)):
            raise ValueError(
                f"For 1D input, 1D target must have size 1, but got target size: {tshape[0]}"
            )
        return
    n_t = tshape[0] if tshape else 1
    if ishape[0] != n_t:
        raise ValueError(
            f"Expected input batch_size ({ishape[0]}) to match target batch_size ({n_t})."
        )
    want = ishape[:1] + ishape[2:]
    if len(ishape) > 2 and tuple(tshape) != want:
        raise RuntimeError(f"Expected target size {list(want)}, got {list(tshape)}")


def _class_indices(input: Tensor, target: Any, weight: Any) -> Any:
    """The array of class indices ``target`` for log-probabilities (or logits) ``input``, after
    torch's checks of its device, dtype and shape, and of ``weight``'s device."""
    la = input._array
    ta = arr(_beside(target, input))
    for name, other in (("target", ta), ("weight", arr(weight))):
        if backend.is_array(other) and backend.device_of(other) is not backend.device_of(la):
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"{backend.device_of(la)} and {backend.device_of(other)}! (nll_loss: input and "
                f"{name})"
            )
    if not hasattr(ta, "dtype") or ta.dtype.kind not in "iu":
        raise RuntimeError(
            f"nll_loss: expected target of integer class indices, got "
            f"{getattr(ta, 'dtype', type(ta).__name__)}"
        )
    _check_target_shape(la.shape, ta.shape)
    return ta


def _every_target_a_class(ta: Any, n_cls: int, ignore_index: int) -> bool:
    """Whether the (host, non-empty) targets ``ta`` are all classes and none is ignored."""
    lo, hi = int(ta.min()), int(ta.max())
    return lo >= 0 and hi < n_cls and not lo <= ignore_index <= hi


@silent_fp  # See NOTE [Silent floating point]
def nll_loss(
    input: Tensor,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """The negative log likelihood of class indices ``target`` under log-probabilities
    ``input`` (classes along dim 1)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    la = input._array
    ta = _class_indices(input, target, weight)
    if la.ndim == 1:  # a single sample
        one = nll_loss(
            ops.unsqueeze(input, 0), ops.wrap(ta.reshape(1)), weight, ignore_index, reduction
        )
        return ops.squeeze(one, 0) if reduction == "none" else one
    xp = backend.namespace(la)
    n_cls = la.shape[1]
    wa = None if weight is None else arr(weight)
    if la.ndim == 2 and backend.is_device_array(la):
        return _nll_loss_on_device(input, ta, wa, ignore_index, reduction)
    if la.ndim == 2 and wa is None and reduction != "none" and ta.size:
        if _every_target_a_class(ta, n_cls, ignore_index):
            # Every target is a valid class and none is ignored: the common case, in few ops.
            total = -la[xp.arange(ta.shape[0]), ta].sum()
            denom = float(ta.shape[0]) if reduction == "mean" else 1.0
            params = {
                "target": ta,
                "weight": None,
                "reduction": reduction,
                "ignore_index": ignore_index,
                "denom": denom,
                "all_valid": True,
                "row_scale": None,
            }
            out = xp.asarray(total / denom, dtype=la.dtype)
            return make(OPS["nll_loss"], out, (input,), params)
    valid = ta != ignore_index
    bad = (ta[valid] < 0) | (ta[valid] >= n_cls)
    if bad.any():
        raise IndexError(f"Target {ta[valid][bad][0]} is out of bounds for {n_cls} classes.")
    safe = xp.where(valid, ta, 0)
    picked = xp.take_along_axis(la, xp.expand_dims(safe, 1), axis=1).squeeze(1)
    coef = valid.astype(la.dtype)
    if wa is not None:
        coef = coef * wa[safe]
    losses = xp.where(valid, -picked * coef, 0.0)  # an ignored target's NaN logp too
    denom = 1.0
    if reduction == "none":
        out = losses
    elif reduction == "sum":
        out = losses.sum()
    else:
        denom = float(coef.sum())
        out = losses.sum() / denom if denom else xp.asarray(xp.nan, dtype=la.dtype)
    params = {
        "target": ta,
        "weight": wa,
        "reduction": reduction,
        "ignore_index": ignore_index,
        "denom": denom,
        "all_valid": False,
        "row_scale": None,
    }
    return make(OPS["nll_loss"], xp.asarray(out, dtype=la.dtype), (input,), params)


# NOTE [Class indices on a device]
# On the CPU nll_loss checks its targets on the host, as torch does: IndexError for one out of
# range. On a CUDA device that check would read the targets on the host: a synchronisation that
# holds the host until the GPU has run everything queued before it, every step (torch checks in
# its kernel instead, and the device-side assert surfaces at a later CUDA call). So on a device
# nothing is read on the host. Ignored targets are masked in the kernels, and a target out of
# range makes the loss and every gradient it sends NaN, visible at the first read of either:
# nothing is silently wrong. Each row's share of the loss, ``row_scale`` (minus its weight over
# the mean's denominator; NaN for all when a target is out of range), is computed once in the
# forward and is the whole backward: ``g * row_scale`` put at the targets' columns.
def _nll_loss_on_device(
    input: Tensor, ta: Any, wa: Any, ignore_index: int, reduction: str
) -> Tensor:
    la = input._array
    xp = backend.namespace(la)
    n, n_cls = la.shape
    valid = ta != ignore_index
    safe = xp.where(valid, ta, 0)
    # Out of range, negative included: seen as unsigned, a negative index is a large one.
    unsigned = xp.dtype(f"u{safe.dtype.itemsize}")
    bad = (safe.view(unsigned) >= n_cls).any()
    picked = xp.where(valid, la[xp.arange(n), safe], 0.0)  # an ignored target's NaN logp too
    coef = valid.astype(la.dtype) if wa is None else xp.where(valid, wa[safe], 0.0)
    row_scale = xp.where(bad, xp.nan, -coef).astype(la.dtype, copy=False)
    if reduction == "none":
        out = picked * row_scale
    elif reduction == "sum":
        out = xp.dot(picked, row_scale)
    else:
        total = coef.sum()
        out = xp.dot(picked, row_scale) / total  # no valid target: 0/0, NaN as torch's
        row_scale = xp.where(valid, row_scale / total, 0.0).astype(la.dtype, copy=False)
    params = {
        "target": safe,
        "weight": None,
        "reduction": reduction,
        "ignore_index": ignore_index,
        "denom": 1.0,
        "all_valid": False,
        "row_scale": row_scale,
    }
    return make(OPS["nll_loss"], xp.asarray(out, dtype=la.dtype), (input,), params)


def cross_entropy(
    input: Tensor,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross entropy: ``nll_loss(log_softmax(input, 1), target)`` for class indices, and
    ``-(target * log_softmax(input, 1)).sum(1)`` for a float ``target`` of class
    probabilities (the input's shape). ``label_smoothing`` mixes the target with the uniform
    distribution over classes, as torch does."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have at least one dimension (classes)")
    cls_dim = 1 if input.ndim > 1 else 0
    target = _beside(target, input)
    probs = getattr(arr(target), "dtype", dtypes.int64).kind == "f"
    if not probs and label_smoothing == 0.0 and reduction != "none" and input.ndim == 2:
        fused = _fused_cross_entropy(input, target, weight, ignore_index, reduction)
        if fused is not None:
            return fused
    logp = log_softmax(input, cls_dim)
    if probs:
        return _cross_entropy_probs(logp, target, weight, reduction, label_smoothing, cls_dim)
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return loss
    ta = arr(target)
    n_cls = input.shape[cls_dim]
    valid_a = (ta != ignore_index).astype(input.dtype)
    valid = ops.wrap(valid_a)
    lp = (
        logp
        if weight is None
        else logp * ops.reshape(ops.as_tensor(weight), (n_cls,) + (1,) * (input.ndim - 2))
    )
    smooth = -(lp.sum(cls_dim)) * valid if input.ndim > 1 else -(lp.sum(0))
    if reduction == "none":
        s = smooth
    elif reduction == "sum":
        s = smooth.sum()
    else:
        wa = arr(weight) if weight is not None else None
        if wa is None:
            denom = float(valid_a.sum())
        else:
            xp = backend.namespace(valid_a)
            denom = float((wa[xp.where(ta != ignore_index, ta, 0)] * valid_a).sum())
        s = smooth.sum() / denom
    return loss * (1.0 - label_smoothing) + s * (label_smoothing / n_cls)


# NOTE [One cross entropy op]
# The common cross entropy, a batch of logits (n, c) and class indices reduced to a mean or a sum
# without label smoothing, is one op, ``cross_entropy``, where torch records a log_softmax and
# an nll_loss: one node in the graph, and on a CUDA device three kernels for the forward and the
# backward where the composition launches about twenty (See NOTE [One cross entropy in three
# kernels] in asyncgrad/backend/kernels.py). On the CPU it is taken when no weight is given and
# every target is a class (checked on the host, as nll_loss checks); on a device for float32
# and float64 logits, int32 and int64 targets and any weight, nothing read on the host. What
# else there is (probabilities as targets, label smoothing, ``reduction="none"``, other dtypes or
# shapes, an ignored or out-of-range target on the CPU) is the composition, with its errors. The
# backward reads the logits (saved, so changing them in place before backward raises, as for any
# saved tensor) and the rows' log-sum-exp, and gives what the composition gives; under
# create_graph it is built of differentiable ops of the logits.
@silent_fp  # See NOTE [Silent floating point]
def _fused_cross_entropy(
    input: Tensor, target: Any, weight: Any, ignore_index: int, reduction: str
) -> Tensor | None:
    la = input._array
    ta = _class_indices(input, target, weight)
    wa = None if weight is None else arr(weight)
    mean = reduction == "mean"
    if backend.is_device_array(la):
        if not kernels.fusable(la, ta, wa):
            return None
        out, saved = kernels.cross_entropy_forward(la, ta, wa, ignore_index, mean)
    else:
        n, n_cls = la.shape
        if wa is not None or la.dtype.kind != "f" or not n:
            return None
        if not _every_target_a_class(ta, n_cls, ignore_index):
            return None  # the composition raises, or masks the ignored targets
        xp = backend.namespace(la)
        m = la.max(axis=1)
        e = la - m[:, None]
        xp.exp(e, out=e)
        ls = xp.log(e.sum(axis=1))
        total = (ls - (la[xp.arange(n), ta] - m)).sum()
        out = xp.asarray(total / n if mean else total, dtype=la.dtype)
        saved = ((m + ls)[:, None],)  # the rows' log-sum-exp, as a column
    params = {"target": ta, "mean": mean, "saved": saved}
    return make(OPS["cross_entropy"], out, (input,), params)


def _cross_entropy_probs(
    logp: Tensor,
    target: Any,
    weight: Any,
    reduction: str,
    label_smoothing: float,
    cls_dim: int,
) -> Tensor:
    _check_reduction(reduction)
    tshape = tuple(arr(target).shape)
    if tshape != tuple(logp.shape):
        raise RuntimeError(
            f"Expected target size {list(logp.shape)}, got {list(tshape)}"
            if len(tshape) == logp.ndim
            else "0D or 1D target tensor expected, multi-target not supported"
        )
    n_cls = logp.shape[cls_dim]
    if label_smoothing > 0.0:
        target = ops.add(ops.mul(target, 1.0 - label_smoothing), label_smoothing / n_cls)
    lp = logp
    if weight is not None:
        w = ops.as_tensor(weight, device=logp.device)
        lp = ops.mul(lp, ops.reshape(w, (n_cls,) + (1,) * (logp.ndim - cls_dim - 1)))
    # NOTE [Mean over class probabilities]
    # With probability targets torch's "mean" divides by the number of samples (every element
    # but the class dim), with or without class weights: unlike class indices, no sample's
    # weight is known to normalise by.
    loss = ops.neg(ops.sum(ops.mul(lp, target), dim=cls_dim))
    return _reduce(loss, reduction)


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    d: Tensor = input - target
    sq = d * d
    if reduction == "none":
        return sq
    return sq.sum() if reduction == "sum" else sq.mean()


# ----- pad, one_hot -----
def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: Any = None) -> Tensor:
    """Pad (or, with negative amounts, crop) ``input``: ``pad`` holds (before, after) pairs from
    the last dimension backward, as torch's; ``mode`` is "constant" (with ``value``, default 0),
    "reflect", "replicate" or "circular"."""
    return ops.pad(input, pad, mode, value)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 rows of ``num_classes`` zeros with a one at each value of ``tensor`` (int64);
    ``num_classes=-1``: one more than the largest value."""
    return ops.one_hot(tensor, num_classes)


# ----------------------------------------------------------------------------- convolution, pooling
from ..ops.conv import avg_pool2d, conv1d, conv2d, max_pool2d  # noqa: E402

__all__ += ["avg_pool2d", "conv1d", "conv2d", "max_pool2d"]


# ----------------------------------------------------------------------------- activations
def _activation(input: Tensor, inplace: bool, fn: Any, *args: Any) -> Tensor:
    """``fn(input, *args)``, or, with ``inplace``, ``input`` overwritten with it (the value is
    computed from a clone, which the backward then reads, as torch's in-place activations
    produce the same values and gradients)."""
    if not inplace:
        return fn(input, *args)  # type: ignore[no-any-return]
    return ops.copy_(input, fn(ops.clone(input), *args))


def _leaky_relu(x: Tensor, slope: float) -> Tensor:
    return ops.where(ops.gt(x, 0), x, ops.mul(x, slope))


def _elu(x: Tensor, alpha: float) -> Tensor:
    # expm1 of the clamped value: the branch where() drops stays finite, and so does its grad.
    # A NaN takes the identity branch, so its gradient is the incoming one, as torch's.
    return ops.where(ops.le(x, 0), ops.mul(ops.expm1(ops.clamp(x, max=0.0)), alpha), x)


def _mish(x: Tensor) -> Tensor:
    return ops.mul(x, ops.tanh(softplus(x)))


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``; with ``inplace``, ``input`` overwritten with it (``relu_``)."""
    return ops.relu_(input) if inplace else ops.relu(input)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)``; with ``inplace``, ``input`` overwritten with it."""
    return _activation(input, inplace, ops.silu)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0``, else ``negative_slope * x`` (the slope's gradient at 0, as torch)."""
    return _activation(input, inplace, _leaky_relu, negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return _activation(input, inplace, _elu, alpha)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return _activation(input, inplace, _mish)


def _softmax_dim(name: str, ndim: int) -> int:
    """torch's implicit dim for a softmax given no ``dim`` (with its deprecation warning)."""
    import warnings

    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
        "dim=X as an argument.",
        UserWarning,
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


# ----------------------------------------------------------------------------- normalisation
# NOTE [Running statistics]
# As torch: in training, batch_norm normalises with the batch's biased variance and, when given
# running buffers, updates them in place (without recording) as
# ``running = (1 - momentum) * running + momentum * batch_stat``, using the *unbiased* variance
# for ``running_var``. Outside training it normalises with the running statistics.
def _update_running(running: Tensor | None, stat: Tensor, momentum: float) -> None:
    if running is None:
        return
    with no_grad():
        new = ops.add(ops.mul(running, 1.0 - momentum), ops.mul(stat.detach(), momentum))
        ops.copy_(running, new.to(running.dtype))


def _affine(
    out: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]
) -> Tensor:
    if weight is not None:
        out = ops.mul(out, ops.reshape(weight, shape))
    if bias is not None:
        out = ops.add(out, ops.reshape(bias, shape))
    return out


def _check_sizes(c: int, scale: int = 1, **tensors: Tensor | None) -> None:
    """torch's message for a per-channel tensor of the wrong size (``scale``: how many times
    torch's kernel repeats it, as instance_norm's does per sample)."""
    for name, t in tensors.items():
        if t is not None and t.numel() != c:
            raise RuntimeError(
                f"{name} should contain {c * scale} elements not {t.numel() * scale}"
            )


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dim 1) over the batch and spatial dims (See NOTE [Running
    statistics])."""
    if input.ndim == 1 and input.numel() == 0:
        # As torch's (its empty-input branch): a copy of input, times weight[0], plus bias[0].
        out = ops.clone(input)
        if weight is not None:
            out = ops.mul(out, weight[0])
        if bias is not None:
            out = ops.add(out, bias[0])
        return out
    if input.ndim < 2:
        raise ValueError(
            f"batch_norm: expected an input with a channel dim (N, C, ...), got "
            f"shape {list(input.shape)}"
        )
    c = input.shape[1]
    _check_sizes(c, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    shape = (1, c) + (1,) * (input.ndim - 2)
    dims = (0, *tuple(range(2, input.ndim)))
    if training:
        n = input.shape[0] * math.prod(input.shape[2:])
        if n == 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size "
                f"{input.shape}"
            )
        mean, var, out = _standardize(input, dims, eps)
        if input.numel() == 0:  # As torch: an empty batch leaves the running statistics.
            return _affine(out, weight, bias, shape)
        with no_grad():
            _update_running(running_mean, ops.reshape(mean, (c,)), momentum)
            unbiased = ops.mul(ops.reshape(var, (c,)), n / (n - 1))
            _update_running(running_var, unbiased, momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError(
                "batch_norm: running_mean and running_var must be given when training=False"
            )
        rm = ops.reshape(running_mean, shape)
        rv = ops.reshape(running_var, shape)
        out = ops.mul(ops.sub(input, rm), ops.rsqrt(ops.add(rv, eps)))
    return _affine(out, weight, bias, shape)


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each (sample, channel) over its spatial dims; running statistics, when
    given, are updated with the batch's mean of the instances' statistics."""
    if input.ndim < 3:
        raise ValueError(
            f"instance_norm: expected an input of shape (N, C, *spatial), got {list(input.shape)}"
        )
    c = input.shape[1]
    _check_sizes(
        c,
        input.shape[0],
        weight=weight,
        bias=bias,
        running_mean=running_mean,
        running_var=running_var,
    )
    shape = (1, c) + (1,) * (input.ndim - 2)
    dims = tuple(range(2, input.ndim))
    if use_input_stats:
        n = math.prod(input.shape[2:])
        if n == 1:
            raise ValueError(
                f"Expected more than 1 spatial element when training, got input size {input.shape}"
            )
        mean, var, out = _standardize(input, dims, eps)
        with no_grad():
            if input.shape[0] == 0:  # as torch: an empty batch's statistics are NaN
                nan = ops.full((c,), float("nan"), dtype=input.dtype, device=input.device)
                _update_running(running_mean, nan, momentum)
                _update_running(running_var, nan, momentum)
            else:
                flat = (input.shape[0], c)
                batch_mean = ops.mean(ops.reshape(mean, flat), dim=0)
                _update_running(running_mean, batch_mean, momentum)
                unbiased = ops.mul(ops.reshape(var, flat), n / (n - 1) if n > 1 else math.nan)
                _update_running(running_var, ops.mean(unbiased, dim=0), momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError(
                "instance_norm: running_mean and running_var must be given when "
                "use_input_stats=False"
            )
        rm = ops.reshape(running_mean, shape)
        rv = ops.reshape(running_var, shape)
        out = ops.mul(ops.sub(input, rm), ops.rsqrt(ops.add(rv, eps)))
    return _affine(out, weight, bias, shape)


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Split the channels (dim 1) into ``num_groups`` groups and normalise each group of each
    sample over its channels and spatial dims (biased variance), then scale and shift per
    channel."""
    if input.ndim < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {input.ndim}"
        )
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(
            f"Expected number of channels in input to be divisible by num_groups, but got input "
            f"of shape {list(input.shape)} and num_groups={num_groups}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in "
                f"input, but got {name} of shape {list(t.shape)} and input of shape "
                f"{list(input.shape)}"
            )
    grouped = ops.reshape(input, (n, num_groups, c // num_groups * math.prod(input.shape[2:])))
    out = ops.reshape(_standardize(grouped, 2, eps)[2], tuple(input.shape))
    return _affine(out, weight, bias, (1, c) + (1,) * (input.ndim - 2))


# See NOTE [Ops run on their operands' device] in asyncgrad/ops/device_guard.py.
ops.device_guard.guard_module(__name__)
