"""The derivative rules of the convolution, pooling, padding and upsampling ops.

NOTE [Patches are two ops]
``im2col`` (F.unfold) and ``col2im`` (F.fold) are each other's transpose, so each one's rule is
the other; under create_graph the rules get Tensors and call the recording functions that
asyncgrad/ops/conv.py puts in ``SPATIAL_OPS`` (as formulas.CONV_OPS does for the convolution).
They share one parameter dict: ``kernel``, ``dilation``, ``padding``, ``stride`` (pairs) and
``image`` (the image's height and width). ``max_unpool`` writes each value at its index; its
gradient reads the gradient back at the indices.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from .formulas import max_pool_grad
from .registry import defvjp

__all__: list[str] = []

SPATIAL_OPS: dict[str, Any] = {}


def _geometry(p: dict[str, Any]) -> tuple[int, int]:
    """The number of window positions along the height and width."""
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (
        p["image"],
        p["kernel"],
        p["dilation"],
        p["padding"],
        p["stride"],
    )
    return (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1


def im2col_array(x: Any, **p: Any) -> Any:
    """(N, C, H, W) -> (N, C*kh*kw, L): each window position's patch as a column."""
    mod = backend.namespace(x)
    n, c, h, w = x.shape
    ph, pw = p["padding"]
    if ph or pw:
        xpad = mod.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype)
        xpad[:, :, ph : ph + h, pw : pw + w] = x
        x = xpad
    kh, kw = p["kernel"]
    win = backend.windows(x, p["kernel"], p["stride"], p["dilation"])  # (N, C, kh, kw, OH, OW)
    oh, ow = win.shape[-2:]
    return mod.array(win, copy=True).reshape(n, c * kh * kw, oh * ow)


def col2im_array(cols: Any, **p: Any) -> Any:
    """(N, C*kh*kw, L) -> (N, C, H, W): the columns summed back into the image, one strided
    accumulation per kernel offset (kh*kw of them)."""
    mod = backend.namespace(cols)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = p["kernel"], p["dilation"], p["padding"], p["stride"]
    h, w = p["image"]
    oh, ow = _geometry(p)
    n = cols.shape[0]
    c = cols.shape[1] // (kh * kw)
    cols = cols.reshape(n, c, kh, kw, oh, ow)
    out = mod.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[
                :,
                :,
                i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                j * dw : j * dw + sw * (ow - 1) + 1 : sw,
            ] += cols[:, :, i, j]
    return out[:, :, ph : ph + h, pw : pw + w] if ph or pw else out


def im2col(x: Any, **p: Any) -> Any:
    return SPATIAL_OPS["im2col"](x, **p) if isinstance(x, Tensor) else im2col_array(x, **p)


def col2im(cols: Any, **p: Any) -> Any:
    return SPATIAL_OPS["col2im"](cols, **p) if isinstance(cols, Tensor) else col2im_array(cols, **p)


def _unpool_grad(g: Any, index: Any, in_shape: tuple[int, ...]) -> Any:
    return g.reshape(-1)[index].reshape(in_shape)


_im2col = defvjp("im2col", lambda g, ans, x, **p: col2im(g, **p))
_im2col.node_cls.__name__ = _im2col.node_cls.__qualname__ = "Im2ColBackward0"
_col2im = defvjp("col2im", lambda g, ans, x, **p: im2col(g, **p))
_col2im.node_cls.__name__ = _col2im.node_cls.__qualname__ = "Col2ImBackward0"
defvjp(
    "max_unpool",
    lambda g, ans, x, *, index, in_shape, out_shape: _unpool_grad(g, index, in_shape),
)

# The N-d max pools gather the window maxima as max_pool2d does (table.py): each names its node.
for _name, _node in (
    ("max_pool1d_with_indices", "MaxPool1DWithIndicesBackward0"),
    ("max_pool3d_with_indices", "MaxPool3DWithIndicesBackward0"),
    ("adaptive_max_pool2d", "AdaptiveMaxPool2DBackward0"),
    ("adaptive_max_pool3d", "AdaptiveMaxPool3DBackward0"),
    ("fractional_max_pool2d", "FractionalMaxPool2DBackward0"),
    ("fractional_max_pool3d", "FractionalMaxPool3DBackward0"),
):
    _op = defvjp(
        _name,
        lambda g, ans, x, *, index, in_shape, unique: max_pool_grad(g, index, in_shape, unique),
    )
    _op.node_cls.__name__ = _op.node_cls.__qualname__ = _node
