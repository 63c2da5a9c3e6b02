"""Convolution and pooling: conv1d/conv2d as one node over im2col and one batched matmul,
max_pool2d as a gather of the window maxima, avg_pool2d as a convolution; conv3d and the
transposed convolutions built on the same three ops, the N-d max pools as one gather node, and the
patch ops (im2col, col2im) and max_unpool.

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
from .index import _index_put, index_add_zeros
from .shape import cat, stack
from .shape import pad as _pad

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
    if xa.shape[0] == 0:  # an empty batch: one sample of zeros, then none (keeps the graph)
        return _conv(_one_more(input), weight, bias, stride, padding, dilation, groups, n)[:0]
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
    if n == 3:
        return _conv3d(input, weight, bias, st, pad, dil, groups)
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


def _one_more(x: Tensor) -> Tensor:
    """x with one sample of zeros after its batch."""
    xa = x._array
    return cat([x, wrap(backend.namespace(xa).zeros((1, *xa.shape[1:]), dtype=xa.dtype))])


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
    if input.ndim not in (3, 4) or 0 in tuple(input.shape)[input.ndim - 3 :]:
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
    if x.shape[0] == 0:  # an empty batch: See _one_more
        got = max_pool2d(_one_more(x), kernel_size, stride, padding, dilation, ceil_mode, True)
        return (got[0][:0], got[1][:0]) if return_indices else got[0][:0]
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
    if pt or pb or pl or pr:  # a window of only -inf and padding: torch's first in-bounds element
        hit = vals == fill
        if type(xa) is not backend.ndarray or bool(hit.any()):
            starts = []
            for o, ss, p, d in zip((oh, ow), st, (pt, pl), dil, strict=True):
                s0 = mod.arange(o) * ss - p
                starts.append(s0 + (mod.maximum(-s0, 0) + d - 1) // d * d)
            inside = starts[0].reshape(oh, 1) * w + starts[1] + first
            index = mod.where(hit, inside, index)
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
    if x.shape[0] == 0:  # an empty batch: See _one_more
        args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        return avg_pool2d(_one_more(x), *args)[:0]
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
    params = {
        "stride": st,
        "padding": pads,
        "dilation": (1, 1),
        "groups": 1,
        "x_hw": (h, w),
        "k_hw": k,
    }
    if xa.dtype.kind in "biu":  # integers: the window sums, divided as torch's C++ (truncating)
        ones = mod.ones((1, 1, *k), dtype=mod.int64)
        sa = formulas.conv_array(xa.astype(mod.int64).reshape(n * c, 1, h, w), ones, None, **params)
        d = int(div) if scale is None else (counts[0].reshape(-1, 1) * counts[1]).astype(mod.int64)
        q = mod.where(sa < 0, -(-sa // d), sa // d).astype(xa.dtype).reshape(n, c, oh, ow)
        return wrap(q if input.ndim == 4 else q[0])
    weight = mod.full((1, 1, *k), 1.0 / div, dtype=xa.dtype)
    out = conv_op(x.reshape(n * c, 1, h, w), wrap(weight), None, **params).reshape(n, c, oh, ow)
    if scale is not None:
        out = out * wrap(scale)
    return out if input.ndim == 4 else out[0]


# ----- conv3d and the transposed convolutions -----
def _conv3d(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    st: tuple[int, ...],
    pad: tuple[tuple[int, int], ...],
    dil: tuple[int, ...],
    groups: int,
) -> Tensor:
    """conv3d as one 2-D ``convolution`` node: the depth taps of each output depth become input
    channels, ordered (G, kd, C/G) so that the groups still split them, and the output depths
    join the batch."""
    n, c, d, h, wd = x.shape
    o, cg, kd, kh, kw = w.shape
    (pf, pk), sd, dd = pad[0], st[0], dil[0]
    if pf or pk:
        x = _pad(x, (0, 0, 0, 0, pf, pk))
    od = (d + pf + pk - dd * (kd - 1) - 1) // sd + 1
    taps = [x[:, :, i * dd : i * dd + sd * (od - 1) + 1 : sd] for i in range(kd)]
    cols = stack(taps, 2).reshape(n, groups, c // groups, kd, od, h, wd)
    cols = cols.permute(0, 4, 1, 3, 2, 5, 6).reshape(n * od, c * kd, h, wd)
    w2 = w.permute(0, 2, 1, 3, 4).reshape(o, kd * cg, kh, kw)
    params = {
        "stride": st[1:],
        "padding": pad[1:],
        "dilation": dil[1:],
        "groups": groups,
        "x_hw": (h, wd),
        "k_hw": (kh, kw),
    }
    y = conv_op(cols, w2, None, **params)
    y = y.reshape(n, od, o, *y.shape[2:]).permute(0, 2, 1, 3, 4)
    return y if b is None else y + b.reshape(1, o, 1, 1, 1)


def conv3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """3-D convolution over (N, C, D, H, W) (or unbatched (C, D, H, W)), as
    ``torch.nn.functional.conv3d``: the depth taps folded into one 2-D convolution node.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.conv3d(ag.ones(1, 1, 2, 2, 2), ag.ones(1, 1, 2, 2, 2)).tolist()
        [[[[[8.0]]]]]
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3)


def _axis_names(n: int) -> tuple[str, ...]:
    return ("depth", "height", "width")[3 - n :]


def _conv_transpose(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: int,
    dilation: Any,
    n: int,
) -> Tensor:
    name = f"conv_transpose{n}d"
    xa, wa = input._array, weight._array
    if xa.ndim not in (n + 1, n + 2):
        raise RuntimeError(
            f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to {name}, but got "
            f"input of size: {_size(xa.shape)}"
        )
    if xa.ndim == n + 1:
        return _conv_transpose(
            input[None], weight, bias, stride, padding, output_padding, groups, dilation, n
        )[0]
    if xa.shape[0] == 0:  # See _conv
        return _conv_transpose(
            _one_more(input), weight, bias, stride, padding, output_padding, groups, dilation, n
        )[:0]
    if wa.ndim != n + 2:
        raise RuntimeError(
            f"Expected {n + 2}-dimensional weight for {n + 2}-dimensional input "
            f"{_size(xa.shape)}, but got {wa.ndim}-dimensional weight of size "
            f"{_size(wa.shape)} instead"
        )
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    check_devices(name, xa, wa)
    st = _tuple(stride, n, "stride")
    pad = _tuple(padding, n, "padding")
    out_pad = _tuple(output_padding, n, "output_padding")
    dil = _tuple(dilation, n, "dilation")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(s <= 0 for s in st):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dil):
        raise RuntimeError("non-positive dilation is not supported")
    if any(p < 0 for p in pad):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in out_pad):
        raise RuntimeError("negative output_padding is not supported")
    if any(p >= s and p >= d for p, s, d in zip(out_pad, st, dil, strict=True)):
        axes = _axis_names(n)
        raise RuntimeError(
            "output padding must be smaller than either stride or dilation, but got "
            + " ".join(f"output_padding_{a}: {p}" for a, p in zip(axes, out_pad, strict=True))
            + " "
            + " ".join(f"stride_{a}: {s}" for a, s in zip(axes, st, strict=True))
            + " "
            + " ".join(f"dilation_{a}: {d}" for a, d in zip(axes, dil, strict=True))
        )
    ci, cog = wa.shape[:2]
    if ci % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
            f"0, but got weight of size {_size(wa.shape)} instead"
        )
    if xa.shape[1] != ci:
        raise RuntimeError(
            f"Given transposed=1, weight of size {_size(wa.shape)}, expected input"
            f"{_size(xa.shape)} to have {ci} channels, but got {xa.shape[1]} channels instead"
        )
    co = cog * groups
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != co):
        raise RuntimeError(
            f"Given transposed=1, weight of size {_size(wa.shape)}, expected bias to be "
            f"1-dimensional with {co} elements, but got bias of size {_size(bias.shape)} instead"
        )
    for other in (weight, bias):
        if other is not None and other.dtype != input.dtype:
            raise RuntimeError(
                f"expected scalar type {_type_name(xa.dtype)} but found "
                f"{_type_name(other._array.dtype)}"
            )
    if bias is not None:
        check_devices(name, xa, bias._array)
    kernel = tuple(wa.shape[2:])
    sizes = tuple(xa.shape[2:])
    out = tuple(
        (i - 1) * s - 2 * p + d * (k - 1) + op + 1
        for i, s, p, d, k, op in zip(sizes, st, pad, dil, kernel, out_pad, strict=True)
    )
    if any(o <= 0 for o in out):
        raise RuntimeError(
            f"Given input size per channel: ({' x '.join(map(str, sizes))}). Calculated output "
            f"size per channel: ({' x '.join(map(str, out))}). Output size is too small"
        )
    if n == 3:
        y = _conv_transpose3d(input, weight, st, pad, dil, groups, out)
    else:
        lead = ((1,), ((0, 0),), (1,), (1,)) if n == 1 else ((), (), (), ())
        params = {
            "stride": (*lead[0], *st),
            "padding": (*lead[1], *((p, p) for p in pad)),
            "dilation": (*lead[2], *dil),
            "groups": groups,
            "x_hw": (*lead[3], *out),
            "k_hw": (*lead[3], *kernel),
        }
        y = conv_input_grad_op(input, weight, **params)
    return y if bias is None else y + bias.reshape(co, *(1,) * n)


def _conv_transpose3d(
    x: Tensor,
    w: Tensor,
    st: tuple[int, ...],
    pad: tuple[int, ...],
    dil: tuple[int, ...],
    groups: int,
    out: tuple[int, ...],
) -> Tensor:
    """conv_transpose3d as one 2-D transposed convolution of every input depth with every depth
    tap of the kernel (the taps become output channels (G, kd, Co/G)), then each tap's result
    spread over the output depths with the stride (zeros between) and shifted into place."""
    n, ci, d, h, wd = x.shape
    _, cog, kd, kh, kw = w.shape
    w2 = w.permute(0, 2, 1, 3, 4).reshape(ci, kd * cog, kh, kw)
    xs = x.permute(0, 2, 1, 3, 4).reshape(n * d, ci, h, wd)
    params = {
        "stride": st[1:],
        "padding": tuple((p, p) for p in pad[1:]),
        "dilation": dil[1:],
        "groups": groups,
        "x_hw": out[1:],
        "k_hw": (kh, kw),
    }
    y = conv_input_grad_op(xs, w2, **params).reshape(n, d, groups, kd, cog, *out[1:])
    sd, dd, od = st[0], dil[0], out[0]
    total: Tensor | None = None
    for i in range(kd):
        yi = y[:, :, :, i]  # (N, D, G, Co/G, OH, OW): input depth t lands at t*sd + i*dd - p
        if sd > 1:  # zeros between the input depths
            yi = _pad(yi[:, :, None], (0, 0) * 4 + (0, sd - 1)).reshape(n, d * sd, *yi.shape[2:])
        front = i * dd - pad[0]
        back = od - front - yi.shape[1]
        if front >= od or back >= od:  # this tap lands wholly in the cropped padding
            continue
        yi = _pad(yi, (0, 0) * 4 + (front, back))
        total = yi if total is None else total + yi
    if total is None:
        total = y[:, :1, :, 0].reshape(n, 1, groups, cog, *out[1:]) * 0.0
        total = _pad(total, (0, 0) * 4 + (0, od - 1))
    return total.reshape(n, od, groups * cog, *out[1:]).permute(0, 2, 1, 3, 4)


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """1-D transposed convolution, as ``torch.nn.functional.conv_transpose1d``: weight
    (C_in, C_out/groups, k); the gradient of conv1d with respect to its input.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.conv_transpose1d(ag.ones(1, 1, 2), ag.ones(1, 1, 2)).tolist()
        [[[1.0, 2.0, 1.0]]]
    """
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 1
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """2-D transposed convolution, as ``torch.nn.functional.conv_transpose2d``: weight
    (C_in, C_out/groups, kh, kw); one ``conv_input_grad`` node, so double backward works.

    Example:
        >>> import asyncgrad as ag
        >>> y = ag.nn.functional.conv_transpose2d(ag.ones(1, 1, 2, 2), ag.ones(1, 1, 2, 2))
        >>> y.tolist()
        [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 2
    )


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """3-D transposed convolution, as ``torch.nn.functional.conv_transpose3d``: weight
    (C_in, C_out/groups, kd, kh, kw).

    Example:
        >>> import asyncgrad as ag
        >>> x, w = ag.ones(1, 1, 1, 1, 2), ag.ones(1, 1, 1, 1, 2)
        >>> ag.nn.functional.conv_transpose3d(x, w).tolist()
        [[[[[1.0, 2.0, 1.0]]]]]
    """
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 3
    )


def convolution(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Tensor:
    """``torch.convolution``: the 1-, 2- or 3-D (transposed) convolution that weight's rank
    names."""
    n = weight.ndim - 2
    if n not in (1, 2, 3):
        raise RuntimeError(
            f"Expected 3D, 4D or 5D weight for convolution, but got weight of size "
            f"{_size(tuple(weight.shape))}"
        )
    if transposed:
        return _conv_transpose(
            input, weight, bias, stride, padding, output_padding, groups, dilation, n
        )
    return _conv(input, weight, bias, stride, padding, dilation, groups, n)


# ----- N-d pooling -----
def pool_geometry(
    input: Tensor,
    n: int,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
) -> tuple[Tensor, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], Any, Any]:
    """Checked batched input (N, C, *spatial) and the geometry of an n-d pool: kernel, stride,
    padding, dilation, the output sizes, and the padding as (before, after) per axis (after
    grows for ceil_mode's last window)."""
    k = _tuple(kernel_size, n, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride
    st = _tuple(s, n, "stride")
    pad = _tuple(padding, n, "padding")
    dil = _tuple(dilation, n, "dilation")
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
    if input.ndim not in (n + 1, n + 2) or 0 in tuple(input.shape)[input.ndim - n - 1 :]:
        raise RuntimeError(f"non-empty {n + 1}D or {n + 2}D (batch mode) tensor expected for input")
    x = input if input.ndim == n + 2 else input[None]
    sizes = tuple(x.shape[2:])
    out = []
    pads = []
    for size, kk, ss, p, d in zip(sizes, k, st, pad, dil, strict=True):
        span = size + 2 * p - d * (kk - 1) - 1
        o = (-(-span // ss) if ceil_mode else span // ss) + 1
        if ceil_mode and (o - 1) * ss >= size + p:  # the last window must start inside
            o -= 1
        out.append(o)
        pads.append((p, max(0, (o - 1) * ss + d * (kk - 1) + 1 - size - p)))
    if any(o <= 0 for o in out):
        raise RuntimeError(
            f"Given input size: ({'x'.join(map(str, (x.shape[1], *sizes)))}). Calculated output "
            f"size: ({'x'.join(map(str, (x.shape[1], *(max(o, 0) for o in out))))}). Output "
            "size is too small"
        )
    return x, k, st, pad, dil, tuple(out), tuple(pads)


def window_max(x: Tensor, windows: list[Any], unique: bool = False) -> tuple[Tensor, Any]:
    """The maximum of x (N, C, *spatial) over windows given per spatial axis a as an int array
    (Nb, Cb, O_a, K_a) of coordinates (Nb in {1, N}, Cb in {1, C}; -1: padding, never chosen),
    recorded as one gather node (max_pool2d's op, whose rule serves any rank); and the flat
    in-plane int64 index of each maximum, as torch's: the first maximum, the last NaN where a
    window has one, and the window's first element of the input where it holds only -inf (or
    padding)."""
    if x.shape[0] == 0:  # an empty batch: See _one_more
        w1 = [w[:1] for w in windows]
        got, index = window_max(_one_more(x), w1, unique)
        return got[:0], index[:0]
    xa = x._array
    mod = backend.namespace(xa)
    nb, c, *sizes = xa.shape
    nsp = len(windows)
    if any(w.min() < 0 for w in windows if w.size):  # padding reads a sentinel appended
        fill = -math.inf if xa.dtype.kind == "f" else mod.iinfo(xa.dtype).min
        src = mod.full((nb, c, *(s + 1 for s in sizes)), fill, dtype=xa.dtype)
        src[(slice(None), slice(None), *(slice(0, s) for s in sizes))] = xa
    else:
        src = xa
    rank = 2 + 2 * nsp
    grid: list[Any] = [
        mod.arange(nb).reshape((nb,) + (1,) * (rank - 1)),
        mod.arange(c).reshape((1, c) + (1,) * (rank - 2)),
    ]
    full = []
    for a, w in enumerate(windows):
        shape = [w.shape[0], w.shape[1]] + [1] * (2 * nsp)
        shape[2 + 2 * a], shape[3 + 2 * a] = w.shape[2], w.shape[3]
        grid.append(w.reshape(shape))
        full.append(mod.broadcast_to(w, (nb, c, *w.shape[2:])))
    outs = tuple(w.shape[2] for w in windows)
    ks = tuple(w.shape[3] for w in windows)
    perm = (0, 1, *range(2, rank, 2), *range(3, rank, 2))
    uni = _uniform_windows(mod, xa, windows) if src is xa else None
    geo = None
    has_nan = xa.dtype.kind == "f" and bool(mod.isnan(xa).any())
    if uni is None:
        win = src[tuple(grid)].transpose(perm).reshape(nb, c, *outs, -1)
        pos = win.argmax(axis=-1)
    else:
        win_k, geo = uni  # (K, N, C, *O): reductions over the first axis run elementwise
        win = mod.moveaxis(win_k, 0, -1)
        if has_nan:
            pos = win.argmax(axis=-1)
        else:  # the first k where the max is: K - max over k of (K - k) [win[k] == max]
            kk = win_k.shape[0]
            dt = mod.int8 if kk < 128 else mod.int32
            down = (kk - mod.arange(kk, dtype=dt)).reshape(kk, *(1,) * (win_k.ndim - 1))
            hit = (win_k == win_k.max(axis=0)) * down
            pos = kk - hit.max(axis=0).astype(mod.int64)
    if has_nan:  # the NaN search only where the input has a NaN
        nan = mod.isnan(win)
        last_nan = win.shape[-1] - 1 - nan[..., ::-1].argmax(axis=-1)
        pos = mod.where(nan.any(axis=-1), last_nan, pos)
    if geo is not None:  # uniform windows: the window's start plus the offset of its k-th
        index = _uniform_index(mod, geo, sizes, pos)
    else:
        # the window offset along each axis, then its coordinate
        coords: list[Any] = []
        rest = pos
        for a in range(nsp - 1, -1, -1):
            ka = rest % ks[a]
            rest = rest // ks[a]
            oa = mod.arange(outs[a]).reshape([outs[a] if i == 2 + a else 1 for i in range(2 + nsp)])
            nn = mod.arange(nb).reshape((nb,) + (1,) * (1 + nsp))
            cc = mod.arange(c).reshape((1, c) + (1,) * nsp)
            coords.insert(0, full[a][nn, cc, oa, ka])
        invalid = coords[0] < 0
        for co in coords[1:]:
            invalid = invalid | (co < 0)
        if bool(invalid.any()):  # only -inf and padding: torch keeps the first in-bounds one
            for a in range(nsp):
                first = mod.where(full[a] < 0, sizes[a], full[a]).min(axis=-1)  # (nb, c, O_a)
                first = first.reshape([nb, c] + [outs[a] if i == a else 1 for i in range(nsp)])
                coords[a] = mod.where(invalid, first, coords[a])
        index = coords[0]
        for a in range(1, nsp):
            index = index * sizes[a] + coords[a]
    index = index.astype(mod.int64)
    plane = math.prod(sizes)
    flat = (index + (mod.arange(nb * c) * plane).reshape(nb, c, *(1,) * nsp)).reshape(-1)
    vals = xa.reshape(-1)[flat].reshape(nb, c, *outs)
    params = {"index": flat, "in_shape": xa.shape, "unique": unique}  # unique: disjoint windows
    out = make(OPS["max_pool2d_with_indices"], vals, (x,), params)
    keeps_for_backward(out._grad_fn)  # torch's backward node saves the indices
    return out, index


def _uniform_index(mod: Any, geo: list[Any], sizes: list[int], pos: Any) -> Any:
    """The in-plane flat index of the element at window position ``pos`` (N, C, *O) for
    uniform windows (See _uniform_windows): each window's first element plus the k-th offset."""
    nsp = len(geo)
    step = [math.prod(sizes[a + 1 :]) for a in range(nsp)]
    start: Any = 0
    offset: Any = 0
    for a, (w0, s, d, o, k) in enumerate(geo):
        start = start + ((mod.arange(o) * s + w0) * step[a]).reshape(
            [o if i == a else 1 for i in range(nsp)]
        )
        offset = offset + (mod.arange(k) * (d * step[a])).reshape(
            [k if i == a else 1 for i in range(nsp)]
        )
    return start + offset.reshape(-1)[pos]


def _uniform_windows(mod: Any, xa: Any, windows: list[Any]) -> Any:
    """The windows (prod K, N, C, *O) of ``window_max`` copied from a strided view of ``xa``,
    and per axis (w0, s, d, O, K), where every axis's windows (1, 1, O, K) are ``w0 + o s + k d``
    inside the input (pools without padding, adaptive pools of a multiple of the output size),
    instead of gathering them with an index array per element; None otherwise."""
    geo = []
    for w in windows:
        if w.shape[0] != 1 or w.shape[1] != 1 or not w.size:
            return None
        o, k = w.shape[2], w.shape[3]
        w0 = int(w[0, 0, 0, 0])
        s = int(w[0, 0, 1, 0]) - w0 if o > 1 else 1
        d = int(w[0, 0, 0, 1]) - w0 if k > 1 else 1
        if w0 < 0 or s <= 0 or d <= 0:
            return None
        want = (mod.arange(o) * s).reshape(o, 1) + mod.arange(k) * d + w0
        if not bool((w[0, 0] == want).all()):
            return None
        geo.append((w0, s, d, o, k))
    base = xa[(slice(None), slice(None), *(slice(g[0], None) for g in geo))]
    st = base.strides
    nsp = len(geo)
    shape = (*(g[4] for g in geo), *xa.shape[:2], *(g[3] for g in geo))
    strides = (
        *(g[2] * st[2 + a] for a, g in enumerate(geo)),
        st[0],
        st[1],
        *(g[1] * st[2 + a] for a, g in enumerate(geo)),
    )
    view = mod.lib.stride_tricks.as_strided(base, shape, strides)
    return mod.ascontiguousarray(view).reshape(-1, *shape[nsp:]), geo


def pool_windows(mod: Any, size: int, o: int, k: int, s: int, p: int, d: int) -> Any:
    """The coordinates (1, 1, O, K) of a pool's windows along one axis; -1 outside the input."""
    w = (mod.arange(o) * s - p).reshape(o, 1) + mod.arange(k) * d
    return mod.where((w < 0) | (w >= size), -1, w).reshape(1, 1, o, k)


def max_pool_nd(
    input: Tensor,
    n: int,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    return_indices: bool,
) -> Any:
    """N-d max pooling over strided windows (one gather node), as torch's max_pool3d."""
    x, k, st, pad, dil, outs, _ = pool_geometry(
        input, n, kernel_size, stride, padding, dilation, ceil_mode
    )
    if x.shape[0] == 0:  # an empty batch: See _one_more
        args = (n, kernel_size, stride, padding, dilation, ceil_mode, True)
        got = max_pool_nd(_one_more(x), *args)
        return (got[0][:0], got[1][:0]) if return_indices else got[0][:0]
    mod = backend.namespace(x._array)
    sizes = x.shape[2:]
    wins = [pool_windows(mod, sizes[a], outs[a], k[a], st[a], pad[a], dil[a]) for a in range(n)]
    disjoint = all(s >= d * (kk - 1) + 1 for s, d, kk in zip(st, dil, k, strict=True))
    out, index = window_max(x, wins, disjoint)
    if input.ndim == n + 1:
        out, index = out[0], index[0]
    return (out, wrap(index)) if return_indices else out


# ----- im2col, col2im, max_unpool: indexing -----
def _patch_index(mod: Any, p: dict[str, Any]) -> tuple[Any, int, int]:
    """The flat positions (kh*kw*L,) in the padded (H + 2 ph) * (W + 2 pw) image of each
    patch element, ordered (kh, kw, OH, OW) as torch's im2col columns."""
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (
        p["image"], p["kernel"], p["dilation"], p["padding"], p["stride"],
    )  # fmt: skip
    hp, wp = h + 2 * ph, w + 2 * pw
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    rows = (mod.arange(kh) * dh).reshape(kh, 1, 1, 1) + (mod.arange(oh) * sh).reshape(1, 1, oh, 1)
    cols = (mod.arange(kw) * dw).reshape(1, kw, 1, 1) + (mod.arange(ow) * sw).reshape(1, 1, 1, ow)
    return (rows * wp + cols).reshape(-1), hp, wp


def im2col(x: Tensor, **p: Any) -> Tensor:
    """(N, C, H, W) -> (N, C*kh*kw, L): one gather (getitem) of the zero-padded image."""
    if x.shape[0] == 0:  # an empty batch: See _one_more
        return im2col(_one_more(x), **p)[:0]
    n, c = x.shape[:2]
    ph, pw = p["padding"]
    xpad = _pad(x, (pw, pw, ph, ph)) if ph or pw else x
    index, hp, wp = _patch_index(backend.namespace(x._array), p)
    cols = xpad.reshape(n, c, hp * wp)[:, :, index]
    return cols.reshape(n, c * p["kernel"][0] * p["kernel"][1], -1)


def col2im(cols: Tensor, **p: Any) -> Tensor:
    """(N, C*kh*kw, L) -> (N, C, H, W): the columns summed into the padded image at their
    positions (index_add_zeros), then the padding cropped."""
    if cols.shape[0] == 0:  # an empty batch: See _one_more
        return col2im(_one_more(cols), **p)[:0]
    n = cols.shape[0]
    (kh, kw), (h, w), (ph, pw) = p["kernel"], p["image"], p["padding"]
    c = cols.shape[1] // (kh * kw)
    index, hp, wp = _patch_index(backend.namespace(cols._array), p)
    flat = cols.reshape(n * c, -1)
    img = index_add_zeros(flat, (slice(None), index), (n * c, hp * wp)).reshape(n, c, hp, wp)
    return img[:, :, ph : ph + h, pw : pw + w] if ph or pw else img


def max_unpool_op(x: Tensor, index: Any, out_shape: tuple[int, ...]) -> Tensor:
    """Each value of x written at its flat ``index`` into zeros of ``out_shape`` (index_put:
    every value's gradient is the output gradient at its index, repeats included, as torch)."""
    xa = x._array
    zeros = wrap(backend.namespace(xa).zeros(math.prod(out_shape), dtype=xa.dtype))
    return _index_put(zeros, (index,), x.reshape(-1)).reshape(out_shape)
