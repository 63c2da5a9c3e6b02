"""Convolution transposes, pooling, padding, upsampling and patch functions of
``ag.nn.functional``.

All are compositions of differentiable ops (their gradients, and gradients of those, come from
the ops' rules): the convolutions, max pools and patch functions are built in
asyncgrad/ops/conv.py.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..graph.grad_mode import no_grad
from ..ops._record import wrap
from ..ops.conv import (
    _one_more,
    _size,
    _tuple,
    avg_pool2d,
    col2im,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    im2col,
    max_pool2d,
    max_pool_nd,
    max_unpool_op,
    pool_geometry,
    window_max,
)

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d",
    "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d",
    "adaptive_max_pool3d_with_indices",
    "affine_grid",
    "avg_pool1d",
    "avg_pool3d",
    "channel_shuffle",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "fold",
    "fractional_max_pool2d",
    "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d",
    "fractional_max_pool3d_with_indices",
    "grid_sample",
    "interpolate",
    "local_response_norm",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d",
    "max_pool3d_with_indices",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "unfold",
    "upsample",
    "upsample_bilinear",
    "upsample_nearest",
]


_SCALAR_NAMES = {
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def _scalar_name(dt: Any) -> str:
    """torch's name of an array dtype in its 'not implemented for' messages."""
    return _SCALAR_NAMES.get(str(dt), str(dt))


# ----- max pooling -----
def max_pool1d_with_indices(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> tuple[Tensor, Tensor]:
    """1-D max pooling over (N, C, L) or (C, L) and the index of each maximum within L, as
    ``torch.nn.functional.max_pool1d_with_indices``: max_pool2d's node with height 1."""
    if input.ndim not in (2, 3) or input.shape[-1] == 0:
        raise RuntimeError(
            "max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size "
            f"for input, but got:{_size(tuple(input.shape))}"
        )
    k = _tuple(kernel_size, 1, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride
    st, pad, dil = _tuple(s, 1, "stride"), _tuple(padding, 1, "padding"), _tuple(dilation, 1, "d")
    out, idx = max_pool2d(
        input.unsqueeze(-2), (1, *k), (1, *st), (0, *pad), (1, *dil), ceil_mode, True
    )
    return out.squeeze(-2), idx.squeeze(-2)


def max_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """1-D max pooling, as ``torch.nn.functional.max_pool1d`` (NaN wins).

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.max_pool1d(ag.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
        [[[3.0, 2.0]]]
    """
    out, idx = max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    return (out, idx) if return_indices else out


def max_pool2d_with_indices(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> tuple[Tensor, Tensor]:
    """2-D max pooling and the flat index of each maximum in its (H * W) plane, as
    ``torch.nn.functional.max_pool2d_with_indices``."""
    out: tuple[Tensor, Tensor] = max_pool2d(
        input, kernel_size, stride, padding, dilation, ceil_mode, True
    )
    return out


def max_pool3d_with_indices(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> tuple[Tensor, Tensor]:
    """3-D max pooling and the flat index of each maximum in its (D * H * W) volume, as
    ``torch.nn.functional.max_pool3d_with_indices``."""
    out: tuple[Tensor, Tensor] = max_pool_nd(
        input, 3, kernel_size, stride, padding, dilation, ceil_mode, True
    )
    return out


def max_pool3d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """3-D max pooling over (N, C, D, H, W) or (C, D, H, W), as
    ``torch.nn.functional.max_pool3d`` (NaN wins; the index is torch's).

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.max_pool3d(ag.arange(8.0).reshape(1, 1, 2, 2, 2), 2).tolist()
        [[[[[7.0]]]]]
    """
    return max_pool_nd(input, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


# ----- average pooling -----
def avg_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """1-D average pooling over (N, C, L) or (C, L), as ``torch.nn.functional.avg_pool1d``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.avg_pool1d(ag.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
        [[[2.0, 1.0]]]
    """
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument "
            "#1 'self' (while checking arguments for avg_pool1d)"
        )
    k = _tuple(kernel_size, 1, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride
    st, pad = _tuple(s, 1, "stride"), _tuple(padding, 1, "padding")
    out = avg_pool2d(
        input.unsqueeze(-2), (1, *k), (1, *st), (0, *pad), ceil_mode, count_include_pad
    )
    return out.squeeze(-2)


def _pool_counts(
    mod: Any,
    sizes: Sequence[int],
    k: Sequence[int],
    st: Sequence[int],
    pad: Sequence[int],
    outs: Sequence[int],
    count_include_pad: bool,
) -> Any:
    """The number of elements torch divides each average-pooling window by: its size within
    the padded input (count_include_pad) or within the input; ceil_mode's extra cells never
    count."""
    total: Any = None
    n = len(sizes)
    for a, (size, kk, ss, p, o) in enumerate(zip(sizes, k, st, pad, outs, strict=True)):
        start = mod.arange(o) * ss - p
        end = mod.minimum(start + kk, size + p)
        if not count_include_pad:
            start, end = mod.maximum(start, 0), mod.minimum(end, size)
        c = (end - start).reshape([o if i == a else 1 for i in range(n)])
        total = c if total is None else total * c
    return total


def avg_pool3d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """3-D average pooling over (N, C, D, H, W) or (C, D, H, W), as
    ``torch.nn.functional.avg_pool3d``: window sums over (H, W), then over D, then one
    division.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.avg_pool3d(ag.arange(8.0).reshape(1, 1, 2, 2, 2), 2).tolist()
        [[[[[3.5]]]]]
    """
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    x, k, st, pad, _, outs, _ = pool_geometry(input, 3, kernel_size, stride, padding, 1, ceil_mode)
    n, c, d_, h, w = x.shape
    od, oh, ow = outs
    y = avg_pool2d(x.reshape(n, c * d_, h, w), k[1:], st[1:], pad[1:], ceil_mode, True, 1)
    y = avg_pool2d(
        y.reshape(n, c, d_, oh * ow), (k[0], 1), (st[0], 1), (pad[0], 0), ceil_mode, True, 1
    )
    y = y.reshape(n, c, od, oh, ow)
    if x._array.dtype.kind in "biu":  # integers: truncating division, as torch's C++
        mod = backend.namespace(x._array)
        sa = y._array.astype(mod.int64)
        d: Any = divisor_override
        if d is None:
            d = _pool_counts(mod, (d_, h, w), k, st, pad, outs, count_include_pad)
        q = mod.where(sa < 0, -(-sa // d), sa // d).astype(x._array.dtype)
        return wrap(q if input.ndim == 5 else q[0])
    if divisor_override is not None:
        y = y / divisor_override
    else:
        mod = backend.namespace(x._array)
        counts = _pool_counts(mod, (d_, h, w), k, st, pad, outs, count_include_pad)
        y = y * wrap((1.0 / counts).astype(x._array.dtype))
    return y if input.ndim == 5 else y[0]


def _lp_pool(input: Tensor, norm_type: float, pooled: Tensor, kernel: tuple[int, ...]) -> Tensor:
    """torch's lp_pool tail: (sign(avg) * relu(|avg|) * prod(kernel)) ** (1 / p)."""
    out = ops.mul(ops.sign(pooled), ops.relu(ops.abs(pooled)))
    return ops.pow(ops.mul(out, math.prod(kernel)), 1.0 / norm_type)


def lp_pool1d(
    input: Tensor,
    norm_type: float,
    kernel_size: int,
    stride: Any = None,
    ceil_mode: bool = False,
) -> Tensor:
    """1-D power-average pooling, as ``torch.nn.functional.lp_pool1d``: (sum x^p)^(1/p) per
    window."""
    k = _tuple(kernel_size, 1, "kernel_size")
    pooled = avg_pool1d(ops.pow(input, norm_type), k, stride, 0, ceil_mode)
    return _lp_pool(input, norm_type, pooled, k)


def lp_pool2d(
    input: Tensor,
    norm_type: float,
    kernel_size: Any,
    stride: Any = None,
    ceil_mode: bool = False,
) -> Tensor:
    """2-D power-average pooling, as ``torch.nn.functional.lp_pool2d``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.lp_pool2d(ag.full((1, 1, 2, 2), 2.0), 2, 2).tolist()
        [[[[4.0]]]]
    """
    k = _tuple(kernel_size, 2, "kernel_size")
    pooled = avg_pool2d(ops.pow(input, norm_type), k, stride, 0, ceil_mode)
    return _lp_pool(input, norm_type, pooled, k)


def lp_pool3d(
    input: Tensor,
    norm_type: float,
    kernel_size: Any,
    stride: Any = None,
    ceil_mode: bool = False,
) -> Tensor:
    """3-D power-average pooling, as ``torch.nn.functional.lp_pool3d``."""
    k = _tuple(kernel_size, 3, "kernel_size")
    pooled = avg_pool3d(ops.pow(input, norm_type), k, stride, 0, ceil_mode)
    return _lp_pool(input, norm_type, pooled, k)


# ----- adaptive pooling -----
def _adaptive_args(name: str, input: Tensor, output_size: Any, n: int, suffix: str) -> Any:
    """Checked batched input and output sizes of an adaptive pool (None keeps a size)."""
    if n > 1 and isinstance(output_size, (tuple, list)) and input.ndim <= len(output_size):
        # torch.nn.functional's own check of a sequence output_size, before the op's
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
    if input.ndim not in (n + 1, n + 2):
        if n == 1:
            raise RuntimeError(
                f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for "
                f"argument #1 'self' (while checking arguments for {name})"
            )
        raise RuntimeError(
            f"{name}(): Expected {n + 1}D or {n + 2}D tensor, but got{suffix} "
            f"{_size(tuple(input.shape))}"
        )
    x = input if input.ndim == n + 2 else input[None]
    sizes = tuple(x.shape[2:])
    wanted = (output_size,) * n if output_size is None or isinstance(output_size, int) else None
    if wanted is None:
        wanted = tuple(output_size)
        if len(wanted) == 1 and n > 1:
            wanted = wanted * n
        if len(wanted) != n:
            raise RuntimeError(f"{name}: output_size must be {n}")
    outs = tuple(s if o is None else int(o) for s, o in zip(sizes, wanted, strict=True))
    for d in range(1, x.ndim):
        if x.shape[d] == 0:
            raise RuntimeError(
                f"{name}(): Expected input to have non-zero size for non-batch dimensions, but "
                f"input has sizes {_size(tuple(input.shape))} with dimension "
                f"{d - (x.ndim - input.ndim)} being empty"
            )
    if any(o < 0 for o in outs):
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to 0")
    return x, sizes, outs


def _adaptive_bounds(mod: Any, size: int, out: int) -> tuple[Any, Any]:
    o = mod.arange(out)
    return (o * size) // out, -((-(o + 1) * size) // out)  # floor(o L / O), ceil((o + 1) L / O)


def _adaptive_avg(input: Tensor, output_size: Any, n: int) -> Tensor:
    name = f"adaptive_avg_pool{n}d"
    x, sizes, outs = _adaptive_args(name, input, output_size, n, "")
    xa = x._array
    if xa.dtype.kind not in "fc":
        raise NotImplementedError(
            f"\"adaptive_avg_pool{max(n, 2)}d\" not implemented for '{_scalar_name(xa.dtype)}'"
        )
    mod = backend.namespace(xa)
    out = x
    for a, (size, o) in enumerate(zip(sizes, outs, strict=True)):
        # the window means along axis a as one matrix product: (O, L) @ (..., L, rest)
        start, end = _adaptive_bounds(mod, size, o)
        pos = mod.arange(size)
        inside = (pos >= start.reshape(-1, 1)) & (pos < end.reshape(-1, 1))
        avg = wrap((inside / (end - start).reshape(-1, 1)).astype(xa.dtype))
        shape = tuple(out.shape)
        ax = 2 + a
        rest = math.prod(shape[ax + 1 :])
        out = ops.matmul(avg, out.reshape(*shape[:ax], size, rest))
        out = out.reshape(*shape[:ax], o, *shape[ax + 1 :])
    result: Tensor = out if input.ndim == n + 2 else out[0]
    return result


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """1-D adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool1d``: window
    i spans [floor(i L / O), ceil((i + 1) L / O)).

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.adaptive_avg_pool1d(ag.tensor([[[1.0, 2.0, 3.0]]]), 2).tolist()
        [[[1.5, 2.5]]]
    """
    return _adaptive_avg(input, output_size, 1)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """2-D adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool2d``."""
    return _adaptive_avg(input, output_size, 2)


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    """3-D adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool3d``."""
    return _adaptive_avg(input, output_size, 3)


def _adaptive_max(input: Tensor, output_size: Any, n: int) -> tuple[Tensor, Tensor]:
    name = f"adaptive_max_pool{n}d"
    x, sizes, outs = _adaptive_args(name, input, output_size, n, ":")
    mod = backend.namespace(x._array)
    wins = []
    for size, o in zip(sizes, outs, strict=True):
        start, end = _adaptive_bounds(mod, size, o)
        k = int((end - start).max()) if o else 1
        w = start.reshape(-1, 1) + mod.arange(k)
        wins.append(mod.minimum(w, (end - 1).reshape(-1, 1)).reshape(1, 1, o, k))
    out, index = window_max(x, wins)
    if input.ndim == n + 1:
        out, index = out[0], index[0]
    return out, wrap(index)


def adaptive_max_pool1d_with_indices(
    input: Tensor, output_size: Any, return_indices: bool = False
) -> tuple[Tensor, Tensor]:
    """1-D adaptive max pooling and the index of each maximum, as torch's."""
    return _adaptive_max(input, output_size, 1)


def adaptive_max_pool2d_with_indices(
    input: Tensor, output_size: Any, return_indices: bool = False
) -> tuple[Tensor, Tensor]:
    """2-D adaptive max pooling and the flat in-plane index of each maximum, as torch's."""
    return _adaptive_max(input, output_size, 2)


def adaptive_max_pool3d_with_indices(
    input: Tensor, output_size: Any, return_indices: bool = False
) -> tuple[Tensor, Tensor]:
    """3-D adaptive max pooling and the flat in-volume index of each maximum, as torch's."""
    return _adaptive_max(input, output_size, 3)


def adaptive_max_pool1d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """1-D adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool1d``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.adaptive_max_pool1d(ag.tensor([[[1.0, 3.0, 2.0]]]), 2).tolist()
        [[[3.0, 3.0]]]
    """
    out, idx = _adaptive_max(input, output_size, 1)
    return (out, idx) if return_indices else out


def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """2-D adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool2d``."""
    out, idx = _adaptive_max(input, output_size, 2)
    return (out, idx) if return_indices else out


def adaptive_max_pool3d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """3-D adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool3d``."""
    out, idx = _adaptive_max(input, output_size, 3)
    return (out, idx) if return_indices else out


# ----- fractional max pooling -----
def _fractional(
    input: Tensor,
    kernel_size: Any,
    output_size: Any,
    output_ratio: Any,
    samples: Tensor | None,
    n: int,
) -> tuple[Tensor, Tensor]:
    name = f"fractional_max_pool{n}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(
            f"{name}(): Expected {n + 1}D or {n + 2}D tensor, but got: {_size(tuple(input.shape))}"
        )
    k = _tuple(kernel_size, n, "kernel_size")
    x = input if input.ndim == n + 2 else input[None]
    sizes = tuple(x.shape[2:])
    if output_size is None:
        ratio = (output_ratio,) * n if isinstance(output_ratio, (int, float)) else output_ratio
        outs = tuple(int(s * r) for s, r in zip(sizes, ratio, strict=True))
    else:
        outs = _tuple(output_size, n, "output_size")
    if x.shape[0] == 0:  # an empty batch: one sample of zeros, then none
        got, idx = _fractional(_one_more(x), k, outs, None, None, n)
        return got[:0], idx[:0]
    xa = x._array
    nb, c = xa.shape[:2]
    if samples is None:
        samples = ops.rand(nb, c, n, dtype=x.dtype, device=x.device)
    ua = samples._array
    # torch's checks: more samples than the batch are allowed (the first ones are used), as for
    # an unbatched input (a batch of one) with the samples of a batch.
    if ua.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {ua.ndim}")
    if ua.shape[0] < nb:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if ua.shape[1] != c:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if ua.shape[2] != n:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {n}; got {ua.shape[2]}.")
    ua = ua[:nb]
    axes = ("height", "width") if n == 2 else ("time", "height", "width")
    for axis, s, o, kk in zip(axes, sizes, outs, k, strict=True):
        # torch's bounds: o + k - 1 <= s in 2-D, < s in 3-D
        if o + kk - 1 > s or (n == 3 and o + kk - 1 == s):
            where = name if n == 2 else f"{name}_out"
            raise RuntimeError(
                f"{where}(): pool {axis} {kk} too large relative to input {axis} {s}"
            )
    mod = backend.namespace(xa)
    ua = ua.astype(xa.dtype)
    # torch's samples: (w, h) for 2-D, (t, h, w) for 3-D
    which = (1, 0) if n == 2 else (0, 1, 2)
    wins = []
    for a, (s, o, kk) in enumerate(zip(sizes, outs, k, strict=True)):
        u = ua[:, :, which[a]].reshape(nb, c, 1)
        starts = mod.full((nb, c, o), s - kk, dtype=mod.int64)
        if o > 1:  # torch's interval sequence, in the input's precision
            alpha = xa.dtype.type(s - kk) / xa.dtype.type(o - 1)
            i = mod.arange(o - 1).astype(xa.dtype)
            starts[:, :, :-1] = ((i + u) * alpha).astype(mod.int64) - (u * alpha).astype(mod.int64)
        wins.append(starts.reshape(nb, c, o, 1) + mod.arange(kk))
    out, index = window_max(x, wins)
    if input.ndim == n + 1:
        out, index = out[0], index[0]
    return out, wrap(index)


def fractional_max_pool2d_with_indices(
    input: Tensor,
    kernel_size: Any,
    output_size: Any = None,
    output_ratio: Any = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """2-D fractional max pooling and the flat index of each maximum, as torch's."""
    return _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 2)


def fractional_max_pool2d(
    input: Tensor,
    kernel_size: Any,
    output_size: Any = None,
    output_ratio: Any = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> Any:
    """2-D fractional max pooling (Graham, 2014), as
    ``torch.nn.functional.fractional_max_pool2d``: pseudo-random window starts from
    ``_random_samples`` (N, C, 2) in [0, 1) (drawn from ag's generator when not given)."""
    out, idx = _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 2)
    return (out, idx) if return_indices else out


def fractional_max_pool3d_with_indices(
    input: Tensor,
    kernel_size: Any,
    output_size: Any = None,
    output_ratio: Any = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """3-D fractional max pooling and the flat index of each maximum, as torch's."""
    return _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 3)


def fractional_max_pool3d(
    input: Tensor,
    kernel_size: Any,
    output_size: Any = None,
    output_ratio: Any = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> Any:
    """3-D fractional max pooling, as ``torch.nn.functional.fractional_max_pool3d``."""
    out, idx = _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 3)
    return (out, idx) if return_indices else out


# ----- max_unpool -----
def _unpool(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    output_size: Any,
    n: int,
) -> Tensor:
    name = f"max_unpool{n}d"
    k = _tuple(kernel_size, n, "kernel_size")
    st = k if stride is None else _tuple(stride, n, "stride")
    pad = _tuple(padding, n, "padding")
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(
            f"{name}(): Expected {n + 1}D or {n + 2}D tensor, but got {_size(tuple(input.shape))}"
        )
    if not isinstance(indices, Tensor) or indices.dtype != dtypes.int64:
        raise RuntimeError(f"{name}(): elements in indices should be type int64")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(
            f"Expected shape of indices to be same as that of the input tensor "
            f"({_size(tuple(input.shape))}) but got indices tensor with shape: "
            f"{_size(tuple(indices.shape))}"
        )
    sizes = tuple(input.shape[-n:])
    default = [(s - 1) * ss + kk - 2 * p for s, ss, kk, p in zip(sizes, st, k, pad, strict=True)]
    if output_size is None:
        outs = default
    else:
        wanted = [int(v) for v in output_size]
        if len(wanted) == n + 2:
            wanted = wanted[2:]
        if len(wanted) != n:
            raise ValueError(
                f"output_size should be a sequence containing {n} or {n + 2} elements, but it "
                f"has a length of '{len(wanted)}'"
            )
        for d in range(n):
            lo, hi = default[d] - st[d], default[d] + st[d]
            if not lo < wanted[d] < hi:
                raise ValueError(
                    f'invalid output_size "{wanted}" (dim {d} must be between {lo} and {hi})'
                )
        outs = wanted
    x = input if input.ndim == n + 2 else input[None]
    ia = (indices if input.ndim == n + 2 else indices[None])._array
    mod = backend.namespace(ia)
    plane = math.prod(outs)
    nb, c = x.shape[:2]
    if ia.size and bool(((ia < 0) | (ia >= plane)).any()):
        bad = int(ia[(ia < 0) | (ia >= plane)].ravel()[0])
        raise RuntimeError(
            f"Found an invalid max index: {bad} (output volumes are of size "
            f"{'x'.join(map(str, outs))}"
        )
    flat = ia.reshape(nb * c, math.prod(ia.shape[2:])) + (mod.arange(nb * c) * plane).reshape(-1, 1)
    flat = flat.reshape(-1)
    out = max_unpool_op(x, flat, (nb, c, *outs))
    return out if input.ndim == n + 2 else out[0]


def max_unpool1d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    output_size: Any = None,
) -> Tensor:
    """The inverse of max_pool1d: each value written at its index, zeros elsewhere, as
    ``torch.nn.functional.max_unpool1d``."""
    return _unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    output_size: Any = None,
) -> Tensor:
    """The inverse of max_pool2d, as ``torch.nn.functional.max_unpool2d``.

    Example:
        >>> import asyncgrad as ag
        >>> F = ag.nn.functional
        >>> y, i = F.max_pool2d(ag.arange(4.0).reshape(1, 1, 2, 2), 2, return_indices=True)
        >>> F.max_unpool2d(y, i, 2).tolist()
        [[[[0.0, 0.0], [0.0, 3.0]]]]
    """
    return _unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    output_size: Any = None,
) -> Tensor:
    """The inverse of max_pool3d, as ``torch.nn.functional.max_unpool3d``."""
    return _unpool(input, indices, kernel_size, stride, padding, output_size, 3)


# ----- pixel and channel shuffles -----
def _check_at_least_3d(name: str, input: Tensor) -> None:
    if input.ndim < 3:
        raise RuntimeError(
            f"{name} expects input to have at least 3 dimensions, but got input with "
            f"{input.ndim} dimension(s)"
        )


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r), as ``torch.nn.functional.pixel_shuffle``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.pixel_shuffle(ag.arange(4.0).reshape(1, 4, 1, 1), 2).tolist()
        [[[[0.0, 1.0], [2.0, 3.0]]]]
    """
    _check_at_least_3d("pixel_shuffle", input)
    r = int(upscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the "
            f"square of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    m = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(m), m, m + 3, m + 1, m + 4, m + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r^2, H, W), as ``torch.nn.functional.pixel_unshuffle``."""
    _check_at_least_3d("pixel_unshuffle", input)
    r = int(downscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    for axis, size, d in (("height", h, -2), ("width", w, -1)):
        if size % r:
            raise RuntimeError(
                f"pixel_unshuffle expects {axis} to be divisible by downscale_factor, but "
                f"input.size({d})={size} is not divisible by {r}"
            )
    m = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(m), m, m + 2, m + 4, m + 1, m + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, g * k, *) -> the channels regrouped as (k, g), as
    ``torch.nn.functional.channel_shuffle`` (ShuffleNet)."""
    _check_at_least_3d("channel_shuffle", input)
    if groups <= 0:
        raise RuntimeError(
            f"Number of groups to divide channels in must be positive. Value of groups:{groups}"
        )
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups."
        )
    x = input.reshape(n, groups, c // groups, *rest).transpose(1, 2)
    return x.reshape(n, c, *rest)


# ----- unfold, fold -----
def _patch_args(
    kernel_size: Any, dilation: Any, padding: Any, stride: Any
) -> tuple[tuple[int, ...], ...]:
    k = _tuple(kernel_size, 2, "kernel_size")
    d = _tuple(dilation, 2, "dilation")
    p = _tuple(padding, 2, "padding")
    s = _tuple(stride, 2, "stride")
    for name, v, least in (
        ("kernel", k, 1),
        ("dilation", d, 1),
        ("padding", p, 0),
        ("stride", s, 1),
    ):
        if any(e < least for e in v):
            raise RuntimeError(
                f"{name} should be greater than {'or equal to ' if least == 0 else ''}zero, "
                f"but got {name}_height: {v[0]} {name}_width: {v[1]}"
            )
    return k, d, p, s


def _float_only(name: str, t: Tensor) -> None:
    if t._array.dtype.kind not in "fc":
        raise NotImplementedError(
            f"\"{name}\" not implemented for '{_scalar_name(t._array.dtype)}'"
        )


def unfold(
    input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
) -> Tensor:
    """Sliding local blocks of (N, C, H, W) (or (C, H, W)) as columns (N, C*kh*kw, L), as
    ``torch.nn.functional.unfold`` (im2col): one gather, whose gradient is a fold.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.unfold(ag.arange(4.0).reshape(1, 1, 2, 2), 1).tolist()
        [[[0.0, 1.0, 2.0, 3.0]]]
    """
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)"
        )
    k, d, p, s = _patch_args(kernel_size, dilation, padding, stride)
    x = input if input.ndim == 4 else input[None]
    _float_only("im2col_out_cpu", x)
    h, w = x.shape[2:]
    blocks = [
        (size + 2 * pp - dd * (kk - 1) - 1) // ss + 1
        for size, kk, dd, pp, ss in zip((h, w), k, d, p, s, strict=True)
    ]
    if any(b < 1 for b in blocks):
        raise RuntimeError(
            f"Given input with spatial size ({h}, {w}), kernel_size={k}, dilation={d}, "
            f"padding={p}, calculated shape of the array of sliding blocks as "
            f"({blocks[0]}, {blocks[1]}), but its components must be at least one."
        )
    out = im2col(x, kernel=k, dilation=d, padding=p, stride=s, image=(h, w))
    return out if input.ndim == 4 else out[0]


def fold(
    input: Tensor,
    output_size: Any,
    kernel_size: Any,
    dilation: Any = 1,
    padding: Any = 0,
    stride: Any = 1,
) -> Tensor:
    """Columns (N, C*kh*kw, L) (or (C*kh*kw, L)) summed back into (N, C, H, W), as
    ``torch.nn.functional.fold`` (col2im): one scatter-add, whose gradient is an ``unfold``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.functional.fold(ag.ones(1, 4, 4), (3, 3), 2).tolist()
        [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
            f"(got {input.ndim}D)"
        )
    k, d, p, s = _patch_args(kernel_size, dilation, padding, stride)
    hw = _tuple(output_size, 2, "output_size")
    x = input if input.ndim == 3 else input[None]
    _float_only("col2im_out_cpu", x)
    ck, length = x.shape[1:]
    if ck % (k[0] * k[1]):
        raise RuntimeError(
            "Expected size of input's dimension 1 to be divisible by the product of "
            f"kernel_size, but got input.size(1)={ck} and kernel_size={k}."
        )
    blocks = [
        (size + 2 * pp - dd * (kk - 1) - 1) // ss + 1
        for size, kk, dd, pp, ss in zip(hw, k, d, p, s, strict=True)
    ]
    if blocks[0] * blocks[1] != length or any(b < 1 for b in blocks):
        raise RuntimeError(
            f"Given output_size={hw}, kernel_size={k}, dilation={d}, padding={p}, stride={s}, "
            f"expected size of input's dimension 2 to match the calculated number of sliding "
            f"blocks {blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, but got "
            f"input.size(2)={length}."
        )
    out = col2im(x, kernel=k, dilation=d, padding=p, stride=s, image=hw)
    return out if input.ndim == 3 else out[0]


# ----- interpolate -----
_INTERP_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_INTERP_MODES = ("nearest", "nearest-exact", "area", *_INTERP_DIMS)
_INT_NAMES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "bool": "Bool"}


def interpolate(
    input: Tensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial dims of ``input`` (N, C, *spatial) as torch's ``F.interpolate``:
    ``mode`` "nearest", "nearest-exact", "area" (adaptive average pooling), "linear" (3-D
    input), "bilinear" or "bicubic" (4-D) or "trilinear" (5-D), with ``align_corners`` for the
    interpolating modes and ``antialias`` (bilinear and bicubic, 4-D). One separable pass per
    spatial dim, built from index_select and
    arithmetic with torch's source indices and weights (in its precision), so it is
    differentiable (twice as well).

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.tensor([[[1.0, 2.0]]])
        >>> ag.nn.functional.interpolate(x, scale_factor=2, mode="linear").tolist()
        [[[1.0, 1.25, 1.75, 2.0]]]
    """
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    else:
        align_corners = bool(align_corners)
    spatial = input.ndim - 2
    in_sizes = tuple(input.shape[2:])
    factors: list[float] | None = None
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != spatial:
                raise ValueError(
                    f"Input and output must have the same number of spatial dimensions, but got "
                    f"input with spatial dimensions of {list(in_sizes)} and output size of "
                    f"{size}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                    "output size in (o1, o2, ...,oK) format."
                )
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in size):
                raise TypeError(
                    "expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                    f"Tuple[int, int, int], but got size with types {[type(v) for v in size]}"
                )
            out_sizes = list(size)
        else:
            out_sizes = [int(size)] * spatial  # type: ignore[arg-type]
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != spatial:
                raise ValueError(
                    f"Input and scale_factor must have the same number of spatial dimensions, "
                    f"but got input with spatial dimensions of {list(in_sizes)} and "
                    f"scale_factor of shape {scale_factor}. Please provide input tensor in "
                    "(N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format."
                )
            factors = [float(f) for f in scale_factor]
        else:
            factors = [float(scale_factor)] * spatial  # type: ignore[arg-type]
        out_sizes = [int(n * f) for n, f in zip(in_sizes, factors, strict=True)]
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if recompute_scale_factor or mode == "area":
        factors = None  # the output size alone sets the scale
    if antialias:
        if not (mode in ("bilinear", "bicubic") and input.ndim == 4):
            raise ValueError(
                "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and "
                "requires a 4-D tensor as input"
            )
    if input.ndim not in (3, 4, 5) or mode not in _INTERP_MODES:
        raise NotImplementedError(
            "Input Error: Only 3D, 4D and 5D input Tensors supported"
            f" (got {input.ndim}D) for the modes: nearest | linear | bilinear | bicubic | "
            f"trilinear | lanczos | area | nearest-exact (got {mode})"
        )
    if mode in _INTERP_DIMS and _INTERP_DIMS[mode] != spatial:
        raise NotImplementedError(
            f"Got {input.ndim}D input, but {mode} mode needs {_INTERP_DIMS[mode] + 2}D input"
        )
    if any(n <= 0 for n in out_sizes) or any(n <= 0 for n in in_sizes):
        axes = ("D", "H", "W")[3 - spatial :]
        raise RuntimeError(
            "Input and output sizes should be greater than 0, but got input ("
            + ", ".join(f"{a}: {n}" for a, n in zip(axes, in_sizes, strict=True))
            + ") output ("
            + ", ".join(f"{a}: {n}" for a, n in zip(axes, out_sizes, strict=True))
            + ")"
        )
    if mode == "area":
        return _adaptive_avg(input, out_sizes, spatial)
    out = input
    kind = input._array.dtype.kind
    if kind in "biu" and mode not in ("nearest", "nearest-exact"):
        # torch interpolates uint8 images (bilinear, bicubic) in fixed point; here in float32,
        # rounded back (within 1 of torch's bilinear values)
        if str(input._array.dtype) != "uint8" or mode not in ("bilinear", "bicubic"):
            kernel = "cubic" if mode == "bicubic" else "linear"
            raise NotImplementedError(
                f'"compute_indices_weights_{kernel}" not implemented for '
                f"'{_INT_NAMES.get(str(input._array.dtype), str(input._array.dtype))}'"
            )
        with no_grad():
            y = interpolate(
                input.to(dtypes.float32),
                size,
                scale_factor,
                mode,
                align_corners,
                recompute_scale_factor,
                antialias,
            )
        mod = backend.namespace(y._array)
        return wrap(mod.clip(mod.rint(y._array), 0, 255).astype(input._array.dtype))
    for d in range(spatial):
        f = None if factors is None else factors[d]
        resize = _resize_dim_aa if antialias else _resize_dim
        out = resize(out, d + 2, in_sizes[d], out_sizes[d], f, mode, bool(align_corners))
    return out


def _resize_dim_aa(
    x: Tensor, dim: int, n_in: int, n_out: int, factor: float | None, mode: str, corners: bool
) -> Tensor:
    """Antialiased resizing along ``dim`` as torch's (and PIL's): each output averages the
    inputs under the filter (triangle, or Keys' cubic with a = -0.5) stretched by the scale
    when downsampling, the weights normalised; one matrix product (n_out, n_in)."""
    xa = x._array
    mod = backend.namespace(xa)
    dt = backend.np_namespace.dtype("float64" if xa.dtype.itemsize == 8 else "float32")
    if corners:
        scale = dt.type(n_in - 1) / dt.type(n_out - 1) if n_out > 1 else dt.type(0)
    else:
        scale = _scale(dt, n_in, n_out, factor)
    taps = 4 if mode == "bicubic" else 2
    support = dt.type(taps * 0.5 * scale if scale >= 1.0 else taps * 0.5)
    width = math.ceil(support) * 2 + 1
    center = (scale * (mod.arange(n_out).astype(dt) + dt.type(0.5))).astype(dt)
    lo = mod.maximum((center - support + dt.type(0.5)).astype(mod.int64), 0)
    size = mod.clip(
        mod.minimum((center + support + dt.type(0.5)).astype(mod.int64), n_in) - lo, 0, width
    )
    j = mod.arange(width)
    inv = dt.type(1.0 / scale) if scale >= 1.0 else dt.type(1.0)
    t = mod.abs(((j + lo.reshape(-1, 1)).astype(dt) - center.reshape(-1, 1) + dt.type(0.5)) * inv)
    if mode == "bicubic":
        a = -0.5
        w = mod.where(
            t < 1.0,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            mod.where(t < 2.0, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0),
        )
    else:
        w = mod.maximum(1.0 - t, 0.0)
    w = mod.where(j < size.reshape(-1, 1), w, 0.0).astype(dt)
    total = w.sum(axis=1, keepdims=True)
    w = mod.where(total != 0, w / mod.where(total != 0, total, 1), w)
    cols = mod.minimum(j + lo.reshape(-1, 1), n_in - 1)
    rows = mod.broadcast_to(mod.arange(n_out).reshape(-1, 1), cols.shape)
    weights = mod.zeros((n_out, n_in), dtype=dt)
    keep = j < size.reshape(-1, 1)
    weights[rows[keep], cols[keep]] = w[keep]
    out = ops.matmul(ops.transpose(x, dim, -1), wrap(weights.T.astype(xa.dtype)))
    return ops.transpose(out, dim, -1)


def _scale(dt: Any, n_in: int, n_out: int, factor: float | None) -> Any:
    """torch's compute_scales_value in precision ``dt``: 1 / scale_factor when one was given
    (and not recomputed), else in / out."""
    if factor is not None and factor > 0:
        return dt.type(1.0 / factor)
    return dt.type(n_in) / dt.type(n_out)


def _resize_dim(
    x: Tensor, dim: int, n_in: int, n_out: int, factor: float | None, mode: str, corners: bool
) -> Tensor:
    xa = x._array
    mod = backend.namespace(xa)
    i = mod.arange(n_out)

    def take(idx: Any) -> Tensor:
        return ops.index_select(x, dim, wrap(idx.astype(mod.int64)))

    def along(w: Any) -> Tensor:
        shape = [1] * x.ndim
        shape[dim] = n_out
        return wrap(w.astype(xa.dtype).reshape(shape))

    if mode in ("nearest", "nearest-exact"):  # in float32, as torch's nearest_idx
        f32 = backend.np_namespace.dtype("float32")
        scale = _scale(f32, n_in, n_out, factor)
        if mode == "nearest-exact":
            src = mod.floor(((i + 0.5) * float(scale)).astype(f32))
        elif n_out == n_in:
            src = i
        elif n_out == 2 * n_in:
            src = i >> 1
        else:
            src = mod.floor(i.astype(f32) * scale)
        return take(mod.minimum(src, n_in - 1))
    # opmath: float64 for float64 input, else float32
    ot = backend.np_namespace.dtype("float64" if xa.dtype.itemsize == 8 else "float32")
    if corners:
        scale = ot.type(n_in - 1) / ot.type(n_out - 1) if n_out > 1 else ot.type(0)
    else:
        scale = _scale(ot, n_in, n_out, factor)
    io = i.astype(ot)
    cubic = mode == "bicubic"
    src = scale * io if corners else scale * (io + ot.type(0.5)) - ot.type(0.5)
    if not cubic:
        if n_out == n_in:  # torch copies
            return take(i)
        src = mod.maximum(src, ot.type(0))
    lo = mod.minimum(mod.floor(src).astype(mod.int64), n_in - 1)
    t = mod.clip(src - lo, 0, 1).astype(ot)
    if cubic:  # A = -0.75, the taps clamped into the input
        a = -0.75

        def near(v: Any) -> Any:
            return ((a + 2) * v - (a + 3)) * v * v + 1

        def far(v: Any) -> Any:
            return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

        coeffs = (far(t + 1), near(t), near(1 - t), far(2 - t))
        out: Tensor | None = None
        for j, c in enumerate(coeffs):
            term = ops.mul(take(mod.clip(lo - 1 + j, 0, n_in - 1)), along(c))
            out = term if out is None else ops.add(out, term)
        assert out is not None
        return out
    hi = lo + (lo < n_in - 1)
    return ops.add(ops.mul(take(lo), along(1 - t)), ops.mul(take(hi), along(t)))


# ----- upsample (deprecated spellings of interpolate) -----


def upsample(
    input: Tensor,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """``interpolate`` under its old name; warns, as torch does."""
    warnings.warn(
        "`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead.",
        stacklevel=2,
    )
    out: Tensor = interpolate(input, size, scale_factor, mode, align_corners)
    return out


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """``interpolate(mode='nearest')`` under its old name; warns, as torch does."""
    warnings.warn(
        "`nn.functional.upsample_nearest` is deprecated. Use `nn.functional.interpolate` instead.",
        stacklevel=2,
    )
    out: Tensor = interpolate(input, size, scale_factor, mode="nearest")
    return out


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """``interpolate(mode='bilinear', align_corners=True)`` under its old name; warns, as
    torch does."""
    warnings.warn(
        "`nn.functional.upsample_bilinear` is deprecated. Use `nn.functional.interpolate` instead.",
        stacklevel=2,
    )
    out: Tensor = interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
    return out


# ----- grid_sample, affine_grid -----
_GRID_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_GRID_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
_ALIGN_WARNING = (
    "Default grid_sample and affine_grid behavior has changed to align_corners=False since "
    "1.3.0. Please specify align_corners=True if the old behavior is desired. See the "
    "documentation of grid_sample for details."
)


def _piecewise_linear(c: Tensor, value: Any, slope: Any) -> Tensor:
    """The tensor equal to ``value`` whose derivative in c is ``slope`` (arrays): a clipped or
    reflected coordinate, as torch differentiates them."""
    ca = c._array
    return ops.add(ops.mul(c, wrap(slope.astype(ca.dtype))), wrap(value - slope * ca))


def _clip(mod: Any, v: Any, size: int) -> tuple[Any, Any]:
    inside = (v > 0) & (v < size - 1)
    return mod.clip(v, 0, size - 1), inside.astype(v.dtype)


def _reflect(mod: Any, v: Any, twice_low: int, twice_high: int) -> tuple[Any, Any]:
    if twice_low == twice_high:
        return mod.zeros_like(v), mod.zeros_like(v)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    d = v - low
    a = mod.abs(d)
    extra = mod.fmod(a, span)
    flips = mod.floor(a / span)
    even = flips % 2 == 0
    value = mod.where(even, extra + low, span - extra + low)
    slope = mod.where(d < 0, -1.0, 1.0) * mod.where(even, 1.0, -1.0)
    return value, slope.astype(v.dtype)


def _padded_coordinate(c: Tensor, size: int, padding: int, corners: bool) -> Tensor:
    """torch's compute_coordinates: the source coordinate clipped (border) or reflected."""
    if padding == 0:
        return c
    mod = backend.namespace(c._array)
    value, slope = c._array, mod.ones_like(c._array)
    if padding == 2:
        value, slope = (
            _reflect(mod, value, 0, 2 * (size - 1))
            if corners
            else _reflect(mod, value, -1, 2 * size - 1)
        )
    value, inside = _clip(mod, value, size)
    return _piecewise_linear(c, value, slope * inside)


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """torch's bicubic coefficients (A = -0.75) at the four taps around fraction t."""
    a = -0.75

    def near(x: Tensor) -> Tensor:  # ((A + 2) x - (A + 3)) x^2 + 1, for |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: Tensor) -> Tensor:  # ((A x - 5A) x + 8A) x - 4A, for 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _gather_points(flat: Tensor, coords: list[Any], sizes: Sequence[int]) -> tuple[Tensor, Any]:
    """Values of flat (N, C, P) at integer coordinates (arrays (N, *out), one per axis) as
    (N, C, *out), and the mask (N, 1, *out) of the in-bounds points (zeros padding)."""
    mod = backend.namespace(coords[0])
    ok = None
    index = None
    for a, ca in enumerate(coords):
        inb = (ca >= 0) & (ca < sizes[a])
        ok = inb if ok is None else ok & inb
        cl = mod.clip(ca, 0, sizes[a] - 1)
        index = cl if index is None else index * sizes[a] + cl
    assert index is not None
    assert ok is not None
    n, c = flat.shape[:2]
    out_shape = tuple(index.shape[1:])
    q = math.prod(out_shape)
    idx = mod.broadcast_to(index.reshape(n, 1, q), (n, c, q)).astype(mod.int64)
    vals = ops.gather(flat, 2, wrap(mod.ascontiguousarray(idx))).reshape(n, c, *out_shape)
    return vals, ok.reshape(n, 1, *out_shape)


def _grid_sampler(
    input: Tensor, grid: Tensor, mode: int, padding_mode: int, align_corners: bool
) -> Tensor:
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise RuntimeError(
            "grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, "
            f"but got input with sizes {_size(tuple(input.shape))} and grid with sizes "
            f"{_size(tuple(grid.shape))}"
        )
    n = input.ndim - 2
    if grid.shape[-1] != n:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {n} in last dimension, but got grid "
            f"with sizes {_size(tuple(grid.shape))}"
        )
    if grid.shape[0] != input.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input "
            f"with sizes {_size(tuple(input.shape))} and grid with sizes "
            f"{_size(tuple(grid.shape))}"
        )
    if input.dtype != grid.dtype:
        raise RuntimeError(
            "grid_sampler(): expected input and grid to have same dtype, but input has "
            f"{input.dtype} and grid has {grid.dtype}"
        )
    if mode == 2 and n == 3:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input.")
    if mode not in (0, 1, 2) or padding_mode not in (0, 1, 2):
        raise RuntimeError("grid_sampler(): unknown interpolation or padding mode")
    nb, c, *sizes = input.shape
    flat = input.reshape(nb, c, math.prod(sizes))
    mod = backend.namespace(grid._array)
    coords = []
    for a, size in enumerate(sizes):  # grid's last axis is (x, y[, z]): width first
        g = grid[..., n - 1 - a]
        if align_corners:
            c_a = (g + 1) * ((size - 1) / 2)  # ((g + 1) / 2) * (size - 1)
        else:
            c_a = ((g + 1) * size - 1) / 2
        coords.append(c_a)
    if mode == 2:  # bicubic: the taps are padded one by one, as torch's get_value_bounded
        out: Tensor | None = None
        floors = [mod.floor(ca._array) for ca in coords]
        weights = [_cubic_weights(ca - wrap(f)) for ca, f in zip(coords, floors, strict=True)]
        for taps in itertools.product(range(4), repeat=n):
            pts = []
            for a, t in enumerate(taps):
                tap = floors[a] - 1 + t
                if padding_mode:
                    tap = _padded_coordinate(
                        wrap(tap), sizes[a], padding_mode, align_corners
                    )._array
                pts.append(tap.astype(mod.int64))
            vals, ok = _gather_points(flat, pts, sizes)
            w = weights[0][taps[0]]
            for a in range(1, n):
                w = w * weights[a][taps[a]]
            term = vals * (w * wrap(ok.reshape(w.shape).astype(w._array.dtype))).unsqueeze(1)
            out = term if out is None else out + term
        assert out is not None
        return out
    coords = [
        _padded_coordinate(ca, s, padding_mode, align_corners)
        for ca, s in zip(coords, sizes, strict=True)
    ]
    if mode == 1:  # nearest: round half to even, as torch's nearbyint
        pts = [mod.rint(ca._array).astype(mod.int64) for ca in coords]
        vals, ok = _gather_points(flat, pts, sizes)
        keep = ops.add(ops.mul(coords[0], 0.0), 1.0) * wrap(ok[:, 0].astype(grid._array.dtype))
        return vals * keep.unsqueeze(1)  # a zero gradient for the grid, as torch's
    lows = [mod.floor(ca._array) for ca in coords]
    fracs = [ca - wrap(lo) for ca, lo in zip(coords, lows, strict=True)]
    out = None
    for corner in itertools.product((0, 1), repeat=n):
        pts = [(lo + e).astype(mod.int64) for lo, e in zip(lows, corner, strict=True)]
        vals, ok = _gather_points(flat, pts, sizes)
        w = fracs[0] if corner[0] else 1 - fracs[0]
        for a in range(1, n):
            w = w * (fracs[a] if corner[a] else 1 - fracs[a])
        w = w * wrap(ok[:, 0].astype(w._array.dtype))
        term = vals * w.unsqueeze(1)
        out = term if out is None else out + term
    assert out is not None
    return out


def grid_sample(
    input: Tensor,
    grid: Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool | None = None,
) -> Tensor:
    """Sample input (N, C, H, W) (or (N, C, D, H, W)) at the normalised points of grid
    (N, Ho, Wo, 2) (or (..., 3)), as ``torch.nn.functional.grid_sample``: ``mode`` bilinear,
    nearest or bicubic (4-D only), ``padding_mode`` zeros, border or reflection.
    Differentiable in both input and grid (gathers and arithmetic).

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.arange(4.0).reshape(1, 1, 2, 2)
        >>> g = ag.zeros(1, 1, 1, 2)
        >>> ag.nn.functional.grid_sample(x, g, align_corners=True).tolist()
        [[[[1.5]]]]
    """
    if mode not in _GRID_MODES:
        raise ValueError(
            "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _GRID_PADDINGS:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
            f"'reflection', but got: '{padding_mode}'"
        )
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    return _grid_sampler(
        input, grid, _GRID_MODES[mode], _GRID_PADDINGS[padding_mode], bool(align_corners)
    )


def _affine_grid_generator(theta: Tensor, size: Sequence[int], align_corners: bool) -> Tensor:
    n = len(size) - 2
    spatial = [int(s) for s in size[2:]]
    mod = backend.namespace(theta._array)
    dt = theta._array.dtype
    axes = []
    for s in spatial:
        r = mod.linspace(-1.0, 1.0, s, dtype=dt) if s > 1 else mod.zeros(s, dtype=dt)
        if not align_corners and s > 1:
            r = r * dt.type((s - 1) / s)
        axes.append(r)
    shape = tuple(spatial)
    mesh = [  # per axis, in (D, H, W) order, broadcast over the others
        mod.broadcast_to(ax.reshape([s if i == a else 1 for i in range(n)]), shape)
        for a, (ax, s) in enumerate(zip(axes, spatial, strict=True))
    ]
    base = mod.stack([*mesh[::-1], mod.ones(shape, dtype=dt)], axis=-1)  # (x, y, z, 1)
    base_t = wrap(base.reshape(1, -1, n + 1))
    grid = ops.matmul(base_t, theta.transpose(1, 2))  # (N, prod(spatial), n)
    return grid.reshape(int(size[0]), *spatial, n)


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps theta
    (N, 2, 3) (or (N, 3, 4)), as ``torch.nn.functional.affine_grid``.

    Example:
        >>> import asyncgrad as ag
        >>> theta = ag.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
        >>> ag.nn.functional.affine_grid(theta, (1, 1, 2, 2), align_corners=True).tolist()
        [[[[-1.0, -1.0], [1.0, -1.0]], [[-1.0, 1.0], [1.0, 1.0]]]]
    """
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(s) for s in size]
    shape = list(theta.shape)
    if len(size) == 4:
        if theta.ndim != 3 or shape[-2] != 2 or shape[-1] != 3:
            raise ValueError(
                f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {size}. Got "
                f"{shape}."
            )
        spatial = size[-2:]
    elif len(size) == 5:
        if theta.ndim != 3 or shape[-2] != 3 or shape[-1] != 4:
            raise ValueError(
                f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {size}. Got "
                f"{shape}."
            )
        spatial = size[-3:]
    else:
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
            f"respectively. Got size {size}."
        )
    if align_corners and min(spatial) == 1:
        warnings.warn(
            "Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
            "align_corners=True. This is not an intended use case of affine_grid. See the "
            "documentation of affine_grid for details.",
            stacklevel=2,
        )
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    return _affine_grid_generator(theta, size, bool(align_corners))


# ----- local response normalisation -----
def local_response_norm(
    input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0
) -> Tensor:
    """x / (k + alpha * mean of x^2 over ``size`` neighbouring channels)^beta, as
    ``torch.nn.functional.local_response_norm``."""
    dim = input.ndim
    if dim < 3:
        raise ValueError(
            f"Expected 3D or higher dimensionality                          input (got {dim} "
            "dimensions)"
        )
    if input.numel() == 0:
        return input
    sq = ops.mul(input, input)
    n, c = input.shape[:2]
    div = sq.reshape(n, 1, c, -1)
    div = ops.pad(div, (0, 0, size // 2, (size - 1) // 2))
    div = avg_pool2d(div, (size, 1), stride=1).reshape(tuple(input.shape))
    div = ops.pow(ops.add(ops.mul(div, alpha), k), beta)
    return ops.div(input, div)


# ----- torch-level spellings (ag.conv1d, ag.max_pool1d, ...), exported by asyncgrad -----
def torch_max_pool(n: int) -> Any:
    """torch.max_pool{n}d: the tensor alone (stride=[] meaning the kernel size)."""

    def pool(
        input: Tensor,
        kernel_size: Any,
        stride: Any = (),
        padding: Any = 0,
        dilation: Any = 1,
        ceil_mode: bool = False,
    ) -> Tensor:
        fn = (max_pool1d, max_pool2d, max_pool3d)[n - 1]
        out: Tensor = fn(input, kernel_size, stride, padding, dilation, ceil_mode)
        return out

    pool.__name__ = pool.__qualname__ = f"max_pool{n}d"
    pool.__doc__ = f"``torch.max_pool{n}d``: ``ag.nn.functional.max_pool{n}d`` without indices."
    return pool


def torch_max_pool1d_with_indices(
    input: Tensor,
    kernel_size: Any,
    stride: Any = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """``torch.max_pool1d_with_indices``: the values and the indices."""
    return max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)


def torch_avg_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """``torch.avg_pool1d``."""
    return avg_pool1d(input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def torch_adaptive_max_pool1d(input: Tensor, output_size: Any) -> tuple[Tensor, Tensor]:
    """``torch.adaptive_max_pool1d``: the values and the indices."""
    return _adaptive_max(input, output_size, 1)


def constant_pad_nd(input: Tensor, pad: Sequence[int], value: Any = 0) -> Tensor:
    """``torch.constant_pad_nd``: F.pad in "constant" mode."""
    return ops.pad(input, pad, "constant", value)


def affine_grid_generator(theta: Tensor, size: Sequence[int], align_corners: bool) -> Tensor:
    """``torch.affine_grid_generator``: affine_grid without its argument checks."""
    return _affine_grid_generator(theta, size, bool(align_corners))


def grid_sampler(
    input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int, align_corners: bool
) -> Tensor:
    """``torch.grid_sampler``: grid_sample with torch's enums (mode 0 bilinear, 1 nearest,
    2 bicubic; padding 0 zeros, 1 border, 2 reflection)."""
    return _grid_sampler(input, grid, interpolation_mode, padding_mode, bool(align_corners))
