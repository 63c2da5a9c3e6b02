"""Convolution and pooling: conv1d/conv2d as one node over im2col and one batched matmul,
max_pool2d as a gather of the window maxima, avg_pool2d as a convolution.

The array work lives with the rules (asyncgrad/rules/formulas.py), which run it again in the
backward; see NOTE [Convolution is three ops] there.
"""

from __future__ import annotations

import math
from typing import Any, Final

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import silent_fp
from ..rules import formulas, keeps_for_backward
from ._record import OPS, check_devices, make, wrap

__all__ = ["avg_pool2d", "conv1d", "conv2d", "max_pool2d"]

_TORCH_NAMES: Final = {"float16": "Half", "float32": "Float", "float64": "Double"}


def _type_name(dt: Any) -> str:
    return _TORCH_NAMES.get(str(dt), str(dt))


def _size(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _tuple(v: Any, n: int, name: str) -> tuple[int, ...]:
    """An int or a sequence of n ints, as torch's conv and pool arguments."""
    if isinstance(v, int):
        return (v,) * n
    t = tuple(int(e) for e in v)
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise RuntimeError(
            f"expected {name} to be a single integer value or a list of {n} values to match "
            f"the convolution dimensions, but got {name}={list(t)}"
        )
    return t


def _conv_padding(
    padding: Any, n: int, kernel: tuple[int, ...], dilation: tuple[int, ...], stride: Any
) -> tuple[tuple[int, int], ...]:
    """Padding per spatial axis as (before, after); 'same' as torch: the extra one after."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return tuple((t // 2, t - t // 2) for t in total)
    p = _tuple(padding, n, "padding")
    if any(e < 0 for e in p):
        raise RuntimeError("negative padding is not supported")
    return tuple((e, e) for e in p)


def _conv(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
    n: int,
) -> Tensor:
    name = f"conv{n}d"
    xa, wa = input._array, weight._array
    if xa.ndim not in (n + 1, n + 2):
        raise RuntimeError(
            f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to {name}, but got "
            f"input of size: {_size(xa.shape)}"
        )
    if xa.ndim == n + 1:  # unbatched, as torch: a batch of one
        return _conv(input[None], weight, bias, stride, padding, dilation, groups, n)[0]
    if wa.ndim != n + 2:
        raise RuntimeError(
            f"weight should have at least three dimensions for {name}, but got weight of "
            f"size: {_size(wa.shape)}"
            if wa.ndim < 3
            else f"Expected {n + 2}-dimensional weight for {n + 2}-dimensional input "
            f"{_size(xa.shape)}, but got {wa.ndim}-dimensional weight of size "
            f"{_size(wa.shape)} instead"
        )
    check_devices(name, xa, wa)
    st = _tuple(stride, n, "stride")
    dil = _tuple(dilation, n, "dilation")
    kernel = tuple(wa.shape[2:])
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(s <= 0 for s in st):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dil):
        raise RuntimeError("non-positive dilation is not supported")
    pad = _conv_padding(padding, n, kernel, dil, st)
    o = wa.shape[0]
    if o % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
            f"0, but got weight of size [{_size(wa.shape)}] instead"
        )
    if xa.shape[1] != wa.shape[1] * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {_size(wa.shape)}, expected "
            f"input{_size(xa.shape)} to have {wa.shape[1] * groups} channels, but got "
            f"{xa.shape[1]} channels instead"
        )
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != o):
        raise RuntimeError(
            f"Given weight of size {_size(wa.shape)}, expected bias to be 1-dimensional with "
            f"{o} elements, but got bias of size {_size(bias.shape)} instead"
        )
    padded = [s + a + b for s, (a, b) in zip(xa.shape[2:], pad, strict=True)]
    effective = [d * (k - 1) + 1 for k, d in zip(kernel, dil, strict=True)]
    if any(p < k for p, k in zip(padded, effective, strict=True)):
        raise RuntimeError(
            f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
            f"Kernel size: ({' x '.join(map(str, effective))}). Kernel size can't be greater "
            "than actual input size"
        )
    for other in (weight, bias):
        if other is not None and other.dtype != input.dtype:
            raise RuntimeError(
                f"expected scalar type {_type_name(xa.dtype)} but found "
                f"{_type_name(other._array.dtype)}"
            )
    if bias is not None:
        check_devices(name, xa, bias._array)
    if n == 1:  # height 1: See NOTE [Convolution is three ops]
        st, dil, pad = (1, *st), (1, *dil), ((0, 0), *pad)
        kernel, hw = (1, *kernel), (1, xa.shape[2])
    else:
        hw = tuple(xa.shape[2:])
    params = {
        "stride": st,
        "padding": pad,
        "dilation": dil,
        "groups": groups,
        "x_hw": hw,
        "k_hw": kernel,
    }
    return conv_op(input, weight, bias, **params)


@silent_fp  # See NOTE [Silent floating point]
def conv_op(x: Any, w: Any, b: Any, **p: Any) -> Tensor:
    """The recorded ``conv`` op on checked arguments (also the rules' under create_graph)."""
    x, w = _tensor(x), _tensor(w)
    b = None if b is None else _tensor(b)
    xa, wa, ba = x._array, w._array, None if b is None else b._array
    out = formulas.conv_array(xa, wa, ba, **p)
    # The arrays read here are the ones saved (See NOTE [Ops save what they read]).
    return make(OPS["convolution"], out, (x, w, b), p, (xa, wa, ba))


@silent_fp  # See NOTE [Silent floating point]
def conv_input_grad_op(gy: Any, w: Any, **p: Any) -> Tensor:
    gy, w = _tensor(gy), _tensor(w)
    ga, wa = gy._array, w._array
    out = formulas.conv_input_grad_array(ga, wa, **p)
    return make(OPS["conv_input_grad"], out, (gy, w), p, (ga, wa))


@silent_fp  # See NOTE [Silent floating point]
def conv_weight_grad_op(x: Any, gy: Any, **p: Any) -> Tensor:
    x, gy = _tensor(x), _tensor(gy)
    xa, ga = x._array, gy._array
    out = formulas.conv_weight_grad_array(xa, ga, **p)
    return make(OPS["conv_weight_grad"], out, (x, gy), p, (xa, ga))


def _tensor(v: Any) -> Tensor:
    return v if isinstance(v, Tensor) else wrap(v)


formulas.CONV_OPS.update(
    conv=conv_op, conv_input_grad=conv_input_grad_op, conv_weight_grad=conv_weight_grad_op
)


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution over (N, C, L) (or unbatched (C, L)), as ``torch.nn.functional.conv1d``.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.ones(1, 1, 4)
        >>> ag.nn.functional.conv1d(x, ag.ones(1, 1, 2)).tolist()
        [[[2.0, 2.0, 2.0]]]
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution over (N, C, H, W) (or unbatched (C, H, W)), as
    ``torch.nn.functional.conv2d``: ``padding`` is an int, a pair, ``'valid'`` or ``'same'``.

    Recorded as one node (``ConvolutionBackward0``, as torch names it) whose gradients are
    convolutions too, so double backward works.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.ones(1, 1, 3, 3)
        >>> ag.nn.functional.conv2d(x, ag.ones(1, 1, 2, 2), padding="same").tolist()
        [[[[4.0, 4.0, 2.0], [4.0, 4.0, 2.0], [2.0, 2.0, 1.0]]]]
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2)


# ----- pooling -----
def _pool_args(
    input: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool
) -> tuple[Any, ...]:
    """Checked 4-D (N, C, H, W) input and pooling geometry, with the output size and the
    padding as ((top, bottom), (left, right)): bottom/right grow for ceil_mode's last window."""
    k = _tuple(kernel_size, 2, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride
    st = _tuple(s, 2, "stride")
    pad = _tuple(padding, 2, "padding")
    dil = _tuple(dilation, 2, "dilation")
    if any(e <= 0 for e in st):
        raise RuntimeError("stride should not be zero")
    if any(e <= 0 for e in k):
        raise RuntimeError("kernel size should be greater than zero")
    if any(e <= 0 for e in dil):
        raise RuntimeError("dilation should be greater than zero")
    for p, kk, d in zip(pad, k, dil, strict=True):
        if p < 0 or p > (d * (kk - 1) + 1) // 2:
            raise RuntimeError(
                "pad should be at most half of effective kernel size, but got "
                f"pad={p}, kernel_size={kk} and dilation={d}"
            )
    if input.ndim not in (3, 4) or input.numel() == 0:
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    x = input if input.ndim == 4 else input[None]
    hw = x.shape[2:]
    out = []
    pads = []
    for size, kk, ss, p, d in zip(hw, k, st, pad, dil, strict=True):
        span = size + 2 * p - d * (kk - 1) - 1
        o = (-(-span // ss) if ceil_mode else span // ss) + 1
        if ceil_mode and (o - 1) * ss >= size + p:  # the last window must start inside
            o -= 1
        out.append(o)
        pads.append((p, max(0, (o - 1) * ss + d * (kk - 1) + 1 - size - p)))
    if any(o <= 0 for o in out):
        raise RuntimeError(
            f"Given input size: ({x.shape[1]}x{hw[0]}x{hw[1]}). Calculated output size: "
            f"({x.shape[1]}x{max(out[0], 0)}x{max(out[1], 0)}). Output size is too small"
        )
    return x, k, st, tuple(pads), dil, tuple(out)


@silent_fp  # See NOTE [Silent floating point]
def max_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """2-D max pooling, as ``torch.nn.functional.max_pool2d`` (NaN wins, as in torch); with
    ``return_indices`` also the flat index of each maximum within its (H * W) plane.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.arange(16.0).reshape(1, 1, 4, 4)
        >>> ag.nn.functional.max_pool2d(x, 2).tolist()
        [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    x, k, st, pads, dil, (oh, ow) = _pool_args(
        input, kernel_size, stride, padding, dilation, ceil_mode
    )
    xa = x._array
    n, c, h, w = xa.shape
    mod = backend.namespace(xa)
    (pt, pb), (pl, pr) = pads
    if pt or pb or pl or pr:
        fill = -math.inf if xa.dtype.kind == "f" else mod.iinfo(xa.dtype).min
        xpad = mod.full((n, c, h + pt + pb, w + pl + pr), fill, dtype=xa.dtype)
        xpad[:, :, pt : pt + h, pl : pl + w] = xa
    else:
        xpad = xa
    win = backend.windows(xpad, k, st, dil)[..., :oh, :ow]  # (N, C, kh, kw, OH, OW), a view
    # NOTE [Max pooling by offsets]
    # A reduction over the window axes of the strided view (or an argmax over a copy of it) is
    # an order of magnitude slower in NumPy than kh*kw elementwise maxima of whole (N, C, OH, OW)
    # slices. The index is torch's: the first maximum, or the last NaN where the window has one.
    # Where the maximum sits in its input plane is linear in the offset (i, j): the window's
    # corner, (oh*sh - pt) * W + ow*sw - pl, plus i*dh*W + j*dw; so the chain of selections
    # carries that small offset (int32) and the corner is added once.
    offsets = [i * dil[0] * w + j * dil[1] for i in range(k[0]) for j in range(k[1])]
    slices = [win[:, :, i, j] for i in range(k[0]) for j in range(k[1])]
    if len(slices) == 1:
        vals = slices[0].copy()
    else:
        vals = mod.maximum(slices[0], slices[1])
        for v in slices[2:]:
            mod.maximum(vals, v, out=vals)
    off = mod.full(vals.shape, offsets[-1], dtype=mod.int32)
    for v, o in zip(slices[-2::-1], offsets[-2::-1], strict=True):
        off -= (v == vals) * (off - mod.int32(o))  # o where v is the maximum (half np.where's time)
    if xa.dtype.kind == "f" and (type(xa) is not backend.ndarray or mod.isnan(vals).any()):
        for v, o in zip(slices, offsets, strict=True):  # the host check only on the CPU
            off = mod.where(mod.isnan(v), mod.int32(o), off)
    corner = (mod.arange(oh) * (st[0] * w) - pt * w).reshape(oh, 1) + (mod.arange(ow) * st[1] - pl)
    first = (mod.arange(n * c) * (h * w)).reshape(n, c, 1, 1)  # each plane's first element
    index = off + (corner + first)  # (N, C, OH, OW): into x.reshape(-1)
    unique = all(s >= d * (kk - 1) + 1 for s, d, kk in zip(st, dil, k, strict=True))
    params = {"index": index.reshape(-1), "in_shape": xa.shape, "unique": unique}
    out = make(OPS["max_pool2d_with_indices"], vals, (x,), params)
    keeps_for_backward(out._grad_fn)  # torch's backward node saves the indices
    if not return_indices:
        return out if input.ndim == 4 else out[0]
    idx = wrap((index - first).astype(dtypes.int64))
    if input.ndim == 3:
        out, idx = out[0], idx[0]
    return (out, idx) if return_indices else out


def avg_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``: a convolution of each
    channel with a kernel of ones, divided by the window's count.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.arange(16.0).reshape(1, 1, 4, 4)
        >>> ag.nn.functional.avg_pool2d(x, 2).tolist()
        [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    x, k, st, pads, _, (oh, ow) = _pool_args(input, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    n, c, h, w = x.shape
    xa = x._array
    mod = backend.namespace(xa)
    uniform = divisor_override is not None or (
        pads[0][1] == pads[0][0] and pads[1][1] == pads[1][0] and count_include_pad
    )
    if uniform or not (pads[0][0] or pads[0][1] or pads[1][0] or pads[1][1]):
        div = float(divisor_override or k[0] * k[1])
        scale: Any = None
    else:
        # Per output position: the window's size within the padded input (count_include_pad)
        # or within the input, as torch counts it; ceil_mode's extra cells never count.
        counts = []
        for size, kk, ss, (p, _), o in zip((h, w), k, st, pads, (oh, ow), strict=True):
            start = mod.arange(o) * ss - p
            end = mod.minimum(start + kk, size + p)
            if not count_include_pad:
                start, end = mod.maximum(start, 0), mod.minimum(end, size)
            counts.append(end - start)
        div = 1.0
        scale = (1.0 / (counts[0].reshape(-1, 1) * counts[1])).astype(xa.dtype)
    weight = mod.full((1, 1, *k), 1.0 / div, dtype=xa.dtype)
    params = {
        "stride": st,
        "padding": pads,
        "dilation": (1, 1),
        "groups": 1,
        "x_hw": (h, w),
        "k_hw": k,
    }
    out = conv_op(x.reshape(n * c, 1, h, w), wrap(weight), None, **params).reshape(n, c, oh, ow)
    if scale is not None:
        out = out * wrap(scale)
    return out if input.ndim == 4 else out[0]
