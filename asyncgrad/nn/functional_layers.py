"""Functions of ``ag.nn.functional`` behind the recurrent, transformer, normalization and
other layers, and torch-level functions of that family (``torch.lstm_cell``,
``torch.batch_norm``, ...) that ``asyncgrad/__init__.py`` exports.

All are compositions of differentiable ops, so their gradients (and gradients of gradients)
come from the ops' rules.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from .functional_core import (
    batch_norm,
    dropout,
    embedding,
    embedding_renorm_,
    group_norm,
    instance_norm,
    layer_norm,
    softmax,
)

__all__ = ["bilinear", "embedding_bag", "multi_head_attention_forward", "rms_norm"]


# ----------------------------------------------------------------------------- recurrent cells
def rnn_step(
    xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, relu: bool = False
) -> Tensor:
    """One Elman step from the input projection ``xw = W_ih x + b_ih``."""
    pre = ops.add(xw, ops.linear(h, w_hh, b_hh))
    return ops.relu(pre) if relu else ops.tanh(pre)


def lstm_step(
    xw: Tensor,
    h: Tensor,
    c: Tensor,
    w_hh: Tensor,
    b_hh: Tensor | None,
    w_hr: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step from the input projection ``xw``: gates ``i, f, g, o``; ``w_hr``
    projects the new hidden state (torch's ``proj_size``)."""
    gates = ops.add(xw, ops.linear(h, w_hh, b_hh))
    i, f, g, o = ops.chunk(gates, 4, dim=-1)
    c = ops.add(ops.mul(ops.sigmoid(f), c), ops.mul(ops.sigmoid(i), ops.tanh(g)))
    h = ops.mul(ops.sigmoid(o), ops.tanh(c))
    if w_hr is not None:
        h = ops.linear(h, w_hr)
    return h, c


def gru_step(xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One GRU step from the input projection ``xw``: gates ``r, z, n``."""
    hw = ops.linear(h, w_hh, b_hh)
    x_r, x_z, x_n = ops.chunk(xw, 3, dim=-1)
    h_r, h_z, h_n = ops.chunk(hw, 3, dim=-1)
    r = ops.sigmoid(ops.add(x_r, h_r))
    z = ops.sigmoid(ops.add(x_z, h_z))
    new = ops.tanh(ops.add(x_n, ops.mul(r, h_n)))
    return ops.add(new, ops.mul(z, ops.sub(h, new)))  # (1 - z) * n + z * h


def rnn_tanh_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    """``tanh(input @ w_ih.T + b_ih + hx @ w_hh.T + b_hh)``, as ``torch.rnn_tanh_cell``."""
    return rnn_step(ops.linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def rnn_relu_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    """``relu(input @ w_ih.T + b_ih + hx @ w_hh.T + b_hh)``, as ``torch.rnn_relu_cell``."""
    return rnn_step(ops.linear(input, w_ih, b_ih), hx, w_hh, b_hh, relu=True)


def lstm_cell(
    input: Tensor,
    hx: Any,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step, as ``torch.lstm_cell``: ``hx`` is ``(h, c)``; returns ``(h', c')``."""
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise RuntimeError("lstm_cell: Expected hx to be a list of two tensors (h, c)")
    return lstm_step(ops.linear(input, w_ih, b_ih), hx[0], hx[1], w_hh, b_hh)


def gru_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    """One GRU step, as ``torch.gru_cell``."""
    return gru_step(ops.linear(input, w_ih, b_ih), hx, w_hh, b_hh)


# ----------------------------------------------------------------------------- bilinear, rms_norm
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y = x1^T A x2 + b`` over the last dims: ``input1`` (*, in1), ``input2`` (*, in2),
    ``weight`` (out, in1, in2), ``bias`` (out); as ``torch.nn.functional.bilinear``."""
    if input1.ndim != input2.ndim:
        raise RuntimeError(
            f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}"
        )
    for d in range(input1.ndim - 1):
        if input1.shape[d] != input2.shape[d]:
            raise RuntimeError(
                f"bilinear(): input batch dimensions do not match at dim {d}: got "
                f"{input1.shape[d]} and {input2.shape[d]}"
            )
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, got {weight.ndim}D")
    if input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(
            f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but "
            f"expected {weight.shape[1]}"
        )
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(
            f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but "
            f"expected {weight.shape[2]}"
        )
    o, i, j = weight.shape
    lead = tuple(input1.shape[:-1])
    # x1 @ A_o for every o at once: (*, in1) @ (in1, out * in2), then the dot with x2.
    t = ops.matmul(input1, ops.reshape(ops.transpose(weight, 0, 1), (i, o * j)))
    t = ops.reshape(t, (*lead, o, j))
    out = ops.sum(ops.mul(t, ops.unsqueeze(input2, -2)), dim=-1)
    return out if bias is None else ops.add(out, bias)


def rms_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the trailing ``normalized_shape`` dims;
    ``eps=None``: the machine epsilon of the input's dtype, as torch."""
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
            f"[*{', '.join(map(str, shape))}], but got input of size{list(input.shape)}"
        )
    if weight is not None and tuple(weight.shape) != shape:
        raise RuntimeError(
            f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
            f"{list(weight.shape)} and normalized_shape = {list(shape)}"
        )
    if eps is None:
        eps = float(backend.namespace(input._array).finfo(input.dtype).eps)
    if input.numel() == 0:  # an empty input (batch or normalized dims) stays empty
        out = ops.mul(input, 1.0)
        return out if weight is None else ops.mul(out, weight)
    dims = tuple(range(-k, 0))
    ms = ops.mean(ops.mul(input, input), dim=dims, keepdim=True) if k else ops.mul(input, input)
    out = ops.mul(input, ops.rsqrt(ops.add(ms, eps)))
    return out if weight is None else ops.mul(out, weight)


# ----------------------------------------------------------------------------- embedding_bag
def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """Sums, means or maxima of bags of embeddings, as ``torch.nn.functional.embedding_bag``:
    ``input`` 2-D (B, N) is B bags of N indices; 1-D, its bags start at ``offsets``. Entries
    equal to ``padding_idx`` are left out of their bag; an empty bag gives zeros.
    ``per_sample_weights`` (``mode="sum"`` only) scales each looked-up row. In ``max`` mode the
    gradient goes to the row that gave each maximum, as torch's."""

    if not isinstance(input, Tensor):
        input = ops.tensor(input)
    if input.dtype.kind not in "iu":
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {input.dtype} instead (while checking arguments for "
            "embedding_bag)"
        )
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(
            f"embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) is not "
            f"None, then it must have the same shape as the input ({list(input.shape)})"
        )
    if sparse:
        raise NotImplementedError("embedding_bag: sparse=True (sparse gradients) is not supported")
    n_rows = weight.shape[0]
    if padding_idx is not None:
        if not -n_rows <= padding_idx < n_rows:
            raise AssertionError("padding_idx must be within the number of embeddings")
        padding_idx %= n_rows
    ia = input._array
    xp = backend.namespace(ia)
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a "
                "mini-batch of fixed length sequences. However, found offsets of type "
                f"{type(offsets).__name__}"
            )
        b, length = input.shape
        off = xp.arange(0, b * length, length, dtype=ia.dtype) if length else xp.zeros(b, ia.dtype)
        ia = ia.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = ops.reshape(per_sample_weights, (-1,))
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        off = xp.asarray(offsets._array)
        if off.size and int(off[0]) != 0:
            raise RuntimeError(
                "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
                f"start from position 0. However, got {int(off[0])}"
            )
        if off.size and int(off[-1]) > ia.shape[0]:
            raise RuntimeError(
                f"offsets[-1] can not be greater than input's length ({ia.shape[0]}), but got "
                f"offsets[-1] of {int(off[-1])}"
            )
        if include_last_offset:
            if off.size == 0:
                raise RuntimeError("include_last_offset: number of offsets should be at least 1")
            off = off[:-1]
    else:
        raise ValueError(
            f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}"
        )
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only "
            f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
            "GitHub."
        )
    m = ia.shape[0]
    if m and (int(ia.min()) < 0 or int(ia.max()) >= n_rows):
        bad = int(xp.argmax((ia < 0) | (ia >= n_rows)))
        raise RuntimeError(
            f"Index {bad} of input takes value {int(ia[bad])} which is not in the valid range "
            f"[0, {n_rows})"
        )
    if max_norm is not None:
        embedding_renorm_(weight, ops.wrap(ia), max_norm, norm_type)
    n_bags = off.shape[0]
    d = weight.shape[1]
    if input.ndim == 2 and padding_idx is None and m and mode != "max":
        # Bags of one length: a sum (or mean) over the bag axis, as torch's sum then division
        # (no scatter: its backward would be a gather of every row).
        rows = embedding(ops.wrap(ia), weight, scale_grad_by_freq=scale_grad_by_freq)
        rows = ops.reshape(rows, (*input.shape, d))
        if per_sample_weights is not None:
            rows = ops.mul(rows, ops.reshape(per_sample_weights, (*input.shape, 1)))
        return ops.mean(rows, dim=1) if mode == "mean" else ops.sum(rows, dim=1)
    # Which bag each index belongs to (offsets need not be distinct: empty bags).
    bag = xp.searchsorted(off, xp.arange(m), side="right") - 1
    keep = xp.ones(m, dtype=bool) if padding_idx is None else ia != padding_idx
    d = weight.shape[1]
    if mode == "max":
        return _bag_max(weight, ia, off, bag, keep, n_bags)
    rows = embedding(ops.wrap(ia), weight, scale_grad_by_freq=scale_grad_by_freq)  # (m, d)
    coef = keep.astype(weight.dtype)
    if mode == "mean":
        counts = xp.bincount(bag[keep], minlength=n_bags).astype(weight.dtype)
        coef = coef / xp.maximum(counts, 1)[bag]
    rows = ops.mul(rows, ops.wrap(coef[:, None]))
    if per_sample_weights is not None:
        rows = ops.mul(rows, ops.unsqueeze(per_sample_weights, 1))
    zeros = Tensor._wrap(backend.zeros((n_bags, d), rows.dtype, weight.device))
    if m == 0:
        return _zero_bags(weight, n_bags)
    index = ops.wrap(xp.broadcast_to(bag[:, None], (m, d)).astype(xp.int64))
    return ops.scatter_add(zeros, 0, index, rows)


def _zero_bags(weight: Tensor, n_bags: int) -> Tensor:
    """Zeros for bags with nothing in them, still a function of ``weight`` (its gradient zero),
    as torch's output."""
    d = weight.shape[1]
    xp = backend.namespace(weight._array)
    if weight.shape[0] == 0:
        return Tensor._wrap(backend.zeros((n_bags, d), weight.dtype, weight.device))
    rows = ops.gather(weight, 0, ops.wrap(xp.zeros((n_bags, d), dtype=xp.int64)))
    return ops.where(ops.wrap(xp.zeros((n_bags, 1), dtype=bool)), rows, 0.0)


def _bag_max(weight: Tensor, ia: Any, off: Any, bag: Any, keep: Any, n_bags: int) -> Tensor:
    """Each bag's elementwise maximum, picked with ``gather`` so that the gradient goes to the
    one row that gave it (the first, on ties)."""
    if ia.shape[0] == 0 or n_bags == 0:
        return _zero_bags(weight, n_bags)
    picked, nonempty = _max_picks(weight._array, ia, off, bag, keep, n_bags)
    out = ops.gather(weight, 0, ops.wrap(picked))
    return ops.where(ops.wrap(nonempty[:, None]), out, 0.0)


def _max_picks(wa: Any, ia: Any, off: Any, bag: Any, keep: Any, n_bags: int) -> tuple[Any, Any]:
    """For each bag and column the row index of the maximum (0 for an empty bag), and which
    bags are not empty."""
    xp = backend.namespace(ia)
    m, d = ia.shape[0], wa.shape[1]
    nonempty = xp.zeros(n_bags, dtype=bool)
    if m == 0:
        return xp.zeros((n_bags, d), dtype=xp.int64), nonempty
    pos = xp.arange(m) - off[bag]
    width = int(pos.max()) + 1
    vals = xp.full((n_bags, width, d), -xp.inf, dtype=wa.dtype)
    idx = xp.zeros((n_bags, width), dtype=xp.int64)
    vals[bag[keep], pos[keep]] = wa[ia[keep]]
    idx[bag, pos] = ia
    arg = xp.argmax(vals, axis=1)  # (n_bags, d): the position of each maximum in its bag
    nonempty[bag[keep]] = True
    picked = xp.where(nonempty[:, None], xp.take_along_axis(idx, arg, axis=1), 0)
    return picked, nonempty


def torch_embedding_bag(
    weight: Tensor,
    indices: Tensor,
    offsets: Tensor,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``torch.embedding_bag`` (``mode`` 0 sum, 1 mean, 2 max): ``(output, offset2bag,
    bag_size, max_indices)`` with the values torch's CPU kernel gives: ``offset2bag`` each
    index's bag (empty for a float32 sum without padding), ``bag_size`` each bag's count
    (zeros for sums), ``max_indices`` each maximum's row (mode 2), the bag sizes (mode 1) or
    zeros. A negative ``padding_idx`` counts from the end."""
    names = {0: "sum", 1: "mean", 2: "max"}
    if mode not in names:
        raise RuntimeError(f"embedding_bag: unknown mode {mode}")
    if indices.ndim != 1 or offsets.ndim != 1:
        raise RuntimeError("embedding_bag: expected 1-D indices and offsets")
    pad = None if padding_idx is None else padding_idx % max(weight.shape[0], 1)
    out = embedding_bag(
        indices,
        weight,
        offsets,
        scale_grad_by_freq=scale_grad_by_freq,
        mode=names[mode],
        sparse=sparse,
        per_sample_weights=per_sample_weights,
        include_last_offset=include_last_offset,
        padding_idx=pad,
    )
    ia = indices._array
    xp = backend.namespace(ia)
    off = xp.asarray(offsets._array)
    n_offsets = off.shape[0]
    if include_last_offset:
        off = off[:-1]
    n_bags, m = off.shape[0], ia.shape[0]
    bag = (xp.searchsorted(off, xp.arange(m), side="right") - 1).astype(xp.int64)
    keep = xp.ones(m, dtype=bool) if pad is None else ia != pad
    counts = xp.bincount(bag[keep], minlength=n_bags).astype(xp.int64)
    # torch's CPU sum of float32 rows without padding takes a fast path that fills no
    # offset2bag; its sums report zero bag sizes, one per offset.
    fast = mode == 0 and pad is None and weight.dtype == dtypes.float32
    offset2bag = xp.zeros(0, dtype=xp.int64) if fast else bag
    bag_size = counts if mode != 0 else xp.zeros(n_offsets, dtype=xp.int64)
    if mode == 2:
        max_indices = _max_picks(weight._array, ia, off, bag, keep, n_bags)[0]
    elif mode == 1:
        max_indices = counts.copy()
    else:
        max_indices = xp.zeros(n_offsets, dtype=xp.int64)
    return out, ops.wrap(offset2bag), ops.wrap(bag_size), ops.wrap(max_indices)


# ----------------------------------------------------------------------------- attention
def _canonical_mask(
    mask: Tensor | None,
    name: str,
    like: Tensor,
    other: Tensor | None = None,
    other_name: str = "",
) -> Tensor | None:
    """torch's MultiheadAttention masks as one float mask: a bool mask's True (a position that
    may not be attended to) becomes -inf, its False 0; a float mask is kept. As torch, warns
    when ``other`` (the mask it is combined with) has another dtype."""
    if mask is None:
        return None
    if other is not None and other.dtype != mask.dtype:
        warnings.warn(
            f"Support for mismatched {name} and {other_name} is deprecated. Use same type for "
            "both instead.",
            UserWarning,
            stacklevel=3,
        )
    if mask.dtype == dtypes.bool_:
        zeros = ops.zeros(tuple(mask.shape), dtype=like.dtype, device=like.device)
        return ops.masked_fill(zeros, mask, float("-inf"))
    if mask.dtype.kind != "f":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


def _mha_shape_check(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None,
    attn_mask: Tensor | None,
    num_heads: int,
) -> bool:
    """torch's checks of the shapes; whether the input is batched."""
    if query.ndim == 3:
        if key.ndim != 3 or value.ndim != 3:
            raise AssertionError(
                "For batched (3-D) `query`, expected `key` and `value` to be 3-D but found "
                f"{key.ndim}-D and {value.ndim}-D tensors respectively"
            )
        if key_padding_mask is not None and key_padding_mask.ndim != 2:
            raise AssertionError(
                "For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but "
                f"found {key_padding_mask.ndim}-D tensor instead"
            )
        if attn_mask is not None and attn_mask.ndim not in (2, 3):
            raise AssertionError(
                "For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but "
                f"found {attn_mask.ndim}-D tensor instead"
            )
        return True
    if query.ndim == 2:
        if key.ndim != 2 or value.ndim != 2:
            raise AssertionError(
                "For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found "
                f"{key.ndim}-D and {value.ndim}-D tensors respectively"
            )
        if key_padding_mask is not None and key_padding_mask.ndim != 1:
            raise AssertionError(
                "For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D "
                f"but found {key_padding_mask.ndim}-D tensor instead"
            )
        if attn_mask is not None:
            if attn_mask.ndim not in (2, 3):
                raise AssertionError(
                    "For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                    f"but found {attn_mask.ndim}-D tensor instead"
                )
            want = (num_heads, query.shape[0], key.shape[0])
            if attn_mask.ndim == 3 and tuple(attn_mask.shape) != want:
                raise AssertionError(
                    f"Expected `attn_mask` shape to be {want} but got {tuple(attn_mask.shape)}"
                )
        return False
    raise AssertionError(
        "query should be unbatched 2D or batched 3D tensor but received "
        f"{query.ndim}-D query tensor"
    )


def _pad_last(mask: Tensor) -> Tensor:
    """``mask`` with one more (zero: allowed) column, for an added key."""
    zeros = ops.zeros((*tuple(mask.shape[:-1]), 1), dtype=mask.dtype, device=mask.device)
    return ops.cat([mask, zeros], dim=-1)


def _pad_masks(
    attn_mask: Tensor | None, key_padding_mask: Tensor | None
) -> tuple[Tensor | None, Tensor | None]:
    """Both masks (those given) with one more allowed column, for a key added to every
    sequence (``bias_k``/``bias_v``, ``add_zero_attn``)."""
    if attn_mask is not None:
        attn_mask = _pad_last(attn_mask)
    if key_padding_mask is not None:
        key_padding_mask = _pad_last(key_padding_mask)
    return attn_mask, key_padding_mask


def _heads(x: Tensor, static: Tensor | None, name: str, rows: int, head_dim: int) -> Tensor:
    """The keys or values ``x`` (L, N, E) split into ``rows`` = N * heads sequences of
    ``head_dim``, (rows, L, head_dim); or ``static`` (``static_k``/``static_v``), checked to be
    of that size, in their place."""
    if static is None:
        return ops.transpose(ops.reshape(x, (x.shape[0], rows, head_dim)), 0, 1)
    if static.shape[0] != rows or static.shape[2] != head_dim:
        raise AssertionError(
            f"expecting {name} of size ({rows}, *, {head_dim}), but got {tuple(static.shape)}"
        )
    return static


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """torch's ``F.multi_head_attention_forward`` over (L, N, E) inputs (unbatched: (L, E)):
    project, attend per head, concatenate, project. Masks follow torch's MultiheadAttention
    convention: a bool mask's True forbids a position; a float mask is added to the scores.
    Returns ``(output, weights)``; the weights (averaged over heads with
    ``average_attn_weights``) only with ``need_weights``."""

    batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = (ops.unsqueeze(t, 1) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = ops.unsqueeze(key_padding_mask, 0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    key_padding_mask = _canonical_mask(
        key_padding_mask, "key_padding_mask", query, attn_mask, "attn_mask"
    )
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
            "module method `generate_square_subsequent_mask` to create this mask."
        )
    causal = False
    if is_causal and key_padding_mask is None and not need_weights:
        # As torch: the mask is only a hint here; attention is causal without it.
        attn_mask = None
        causal = True
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", query)
    if embed_dim != embed_dim_to_check:
        raise AssertionError(
            f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}"
        )
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(
                f"key's sequence and batch dims {tuple(key.shape[:2])} do not match value's "
                f"{tuple(value.shape[:2])}"
            )
        if q_proj_weight is None or k_proj_weight is None or v_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is True but a proj weight is None")
        ws = [q_proj_weight, k_proj_weight, v_proj_weight]
    else:
        if tuple(key.shape) != tuple(value.shape):
            raise AssertionError(
                f"key shape {tuple(key.shape)} does not match value shape {tuple(value.shape)}"
            )
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        ws = [in_proj_weight[i * embed_dim : (i + 1) * embed_dim] for i in range(3)]
    bs: list[Tensor | None] = [None, None, None]
    if in_proj_bias is not None:
        bs = [in_proj_bias[i * embed_dim : (i + 1) * embed_dim] for i in range(3)]
    q = ops.linear(query, ws[0], bs[0])
    k = ops.linear(key, ws[1], bs[1])
    v = ops.linear(value, ws[2], bs[2])
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                    f"{(tgt_len, src_len)}."
                )
            attn_mask = ops.unsqueeze(attn_mask, 0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(
                f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                f"{(bsz * num_heads, tgt_len, src_len)}."
            )
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise AssertionError("bias cannot be added to static key/value.")
        k = ops.cat([k, ops.expand(bias_k, (1, bsz, embed_dim))], dim=0)
        v = ops.cat([v, ops.expand(bias_v, (1, bsz, embed_dim))], dim=0)
        attn_mask, key_padding_mask = _pad_masks(attn_mask, key_padding_mask)
    elif (bias_k is None) != (bias_v is None):
        raise AssertionError("bias_k and bias_v must both be given or both be None")
    q = ops.transpose(ops.reshape(q, (tgt_len, bsz * num_heads, head_dim)), 0, 1)
    k = _heads(k, static_k, "static_k", bsz * num_heads, head_dim)
    v = _heads(v, static_v, "static_v", bsz * num_heads, head_dim)
    if add_zero_attn:
        zeros = ops.zeros((bsz * num_heads, 1, head_dim), dtype=k.dtype, device=k.device)
        k = ops.cat([k, zeros], dim=1)
        v = ops.cat([v, zeros], dim=1)
        attn_mask, key_padding_mask = _pad_masks(attn_mask, key_padding_mask)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise AssertionError(
                f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                f"{tuple(key_padding_mask.shape)}"
            )
        kpm = ops.reshape(
            ops.expand(
                ops.reshape(key_padding_mask, (bsz, 1, 1, src_len)), (bsz, num_heads, 1, src_len)
            ),
            (bsz * num_heads, 1, src_len),
        )
        attn_mask = kpm if attn_mask is None else ops.add(attn_mask, kpm)
    if not training:
        dropout_p = 0.0
    scores = ops.matmul(ops.mul(q, 1.0 / math.sqrt(head_dim)), ops.transpose(k, -2, -1))
    if attn_mask is not None:
        scores = ops.add(scores, attn_mask)
    if causal:
        rows = ops.unsqueeze(ops.arange(tgt_len, device=scores.device), 1)
        future = ops.gt(ops.arange(src_len, device=scores.device), rows)
        scores = ops.masked_fill(scores, future, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = dropout(weights, p=dropout_p)
    out = ops.matmul(weights, v)  # (bsz * num_heads, tgt_len, head_dim)
    out = ops.reshape(ops.transpose(out, 0, 1), (tgt_len * bsz, embed_dim))
    out = ops.reshape(ops.linear(out, out_proj_weight, out_proj_bias), (tgt_len, bsz, -1))
    if not batched:
        out = ops.squeeze(out, 1)
    if not need_weights:
        return out, None
    w = ops.reshape(weights, (bsz, num_heads, tgt_len, src_len))
    if average_attn_weights:
        w = ops.mean(w, dim=1)
    if not batched:
        w = ops.squeeze(w, 0)
    return out, w


# ----------------------------------------------------------------------------- torch-level forms
# torch's own (``torch.batch_norm``, ...) signatures, which differ from ``F``'s; exported by
# asyncgrad/__init__.py under torch's names. The ``cudnn_enabled`` flags are accepted and unused.
def torch_batch_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> Tensor:
    """``torch.batch_norm``: ``F.batch_norm`` with torch's positional order."""

    return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def torch_instance_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    use_input_stats: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> Tensor:
    """``torch.instance_norm``: ``F.instance_norm`` with torch's positional order."""

    return instance_norm(
        input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
    )


def torch_layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
) -> Tensor:
    """``torch.layer_norm``."""

    return layer_norm(input, normalized_shape, weight, bias, eps)


def torch_group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
) -> Tensor:
    """``torch.group_norm``."""

    return group_norm(input, num_groups, weight, bias, eps)


def torch_embedding(
    weight: Tensor,
    indices: Any,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """``torch.embedding`` (weight first; a negative ``padding_idx`` means none)."""

    pad = padding_idx if padding_idx >= 0 else None
    return embedding(indices, weight, pad, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def torch_embedding_renorm_(
    input: Tensor, indices: Any, max_norm: float, norm_type: float
) -> Tensor:
    """``torch.embedding_renorm_``: rows of ``input`` indexed by ``indices`` renormalised in
    place to at most ``max_norm``."""

    return embedding_renorm_(input, indices, max_norm, norm_type)
