"""The longer formulas of the rule table, named (the role of PyTorch's FunctionsManual.cpp)."""

from __future__ import annotations

import math
from typing import Any, Final

from .. import backend
from .._tensor import Tensor
from ..backend import kernels, mm, xp

SQRT_2: Final = math.sqrt(2.0)
SQRT_2_OVER_PI: Final = math.sqrt(2.0 / math.pi)
INV_SQRT_2PI: Final = 1.0 / math.sqrt(2.0 * math.pi)


def pow_scalar(a: Any, e: Any) -> Any:
    """``a ** e`` as torch computes it: for a float ``a`` and a Python number ``e`` in 2, 3, -2,
    0.5, -0.5, -1, as products, sqrt, rsqrt and reciprocal, which differ from pow at -0 and -inf
    (``(-inf) ** 0.5`` is NaN, ``(-0.0) ** -0.5`` is -inf). Arrays or Tensors (create_graph)."""
    if type(e) in (int, float) and getattr(a, "dtype", None) is not None and a.dtype.kind == "f":
        if e == 2:
            return a * a
        if e == 3:
            return a * a * a
        if e == 0.5:
            return xp.sqrt(a)
        if e == -0.5:
            return 1.0 / xp.sqrt(a)
        if e == -1:
            return 1.0 / a
        if e == -2:
            return 1.0 / (a * a)
    return xp.power(a, e)


def copy_to(g: Any, device: Any) -> Any:
    """``g`` on ``device``: the gradient of a copy between devices (under ``create_graph`` a
    Tensor, whose copy is recorded)."""
    if isinstance(g, Tensor):
        return g.to(device)
    return backend.to_device(g, device)


def pow_grad_base(g: Any, x: Any, y: Any) -> Any:
    # d(x^y)/dx = y * x^(y-1); 0 where y == 0 (also where x is 0, inf or NaN)
    if isinstance(y, (int, float, backend.number)):
        if y == 0:
            return xp.zeros_like(g)
        return g * (y * pow_scalar(x, y - 1))  # x^(y-1) as torch evaluates it
    return xp.where(y == 0, 0.0, g * (y * x ** (y - 1.0)))


def pow_grad_exp(g: Any, ans: Any, x: Any, y: Any) -> Any:
    # d(x^y)/dy = x^y log(x); torch takes 0 where x == 0 and y >= 0 (else -inf or NaN there)
    if isinstance(x, (int, float, backend.number)):
        if x != 0:
            return g * (ans * xp.log(x))
        zero = y >= 0
    else:
        zero = (x == 0) & (y >= 0)
    return g * xp.where(zero, 0.0, ans * xp.log(x))


def minmax_grad(g: Any, x: Any, y: Any, loses: Any) -> Any:
    # torch: g, halved at ties, and 0 where the input loses. Where either is NaN (the result is
    # NaN), neither loses: both inputs get g.
    return xp.where(loses, 0.0, xp.where(x == y, g * 0.5, g))


def sign(x: Any) -> Any:
    # torch's sign: 0 at NaN (NumPy's is NaN)
    return xp.where(xp.isnan(x), 0.0, xp.sign(x))


def matmul_grad_x(g: Any, x: Any, y: Any) -> Any:
    if y.ndim == 1:
        if x.ndim == 1:
            return g * y
        return xp.expand_dims(g, -1) * y  # (..., n, 1) * (k,)  outer product per row
    if x.ndim == 1:
        # (..., m) @ (..., m, k)^T -> (..., k), summed over batch by _fit
        return xp.squeeze(xp.matmul(xp.expand_dims(g, -2), xp.swapaxes(y, -1, -2)), -2)
    return mm(g, y.T) if y.ndim == 2 else xp.matmul(g, xp.swapaxes(y, -1, -2))


def matmul_grad_y(g: Any, x: Any, y: Any) -> Any:
    if x.ndim == 1:
        if y.ndim == 1:
            return g * x
        return xp.expand_dims(x, -1) * xp.expand_dims(g, -2)  # (k, 1) * (..., 1, m)
    if y.ndim == 1:
        # x^T @ g: (..., k, n) @ (..., n, 1) -> (..., k)
        return xp.squeeze(xp.matmul(xp.swapaxes(x, -1, -2), xp.expand_dims(g, -1)), -1)
    return mm(x.T, g) if x.ndim == 2 else xp.matmul(xp.swapaxes(x, -1, -2), g)


def linear_grad_w(g: Any, x: Any) -> Any:
    # g^T x; for batched x the batch axes are summed by _fit. g.T is BLAS's fastest 2-D layout.
    if g.ndim == 2:
        return mm(g.T, x)
    return xp.matmul(xp.swapaxes(g, -1, -2), x)


def gelu_grad(g: Any, x: Any, approximate: str) -> Any:
    if approximate == "tanh":
        # y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
        u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        t = xp.tanh(u)
        du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
    # y = x Phi(x): dy/dx = Phi(x) + x phi(x)
    cdf = 0.5 * (1.0 + erf(x / SQRT_2))
    pdf = INV_SQRT_2PI * xp.exp(-0.5 * x * x)
    return g * (cdf + x * pdf)


def silu_grad(g: Any, x: Any) -> Any:
    s = 0.5 + 0.5 * xp.tanh(0.5 * x)  # sigmoid(x), without exp(-x) overflowing for x << 0
    return g * s * (1.0 + x * (1.0 - s))


def softplus_grad(g: Any, x: Any, beta: float, threshold: float) -> Any:
    # torch's softplus_backward: g where beta x > threshold, else g * sigmoid(beta x), as
    # z / (z + 1) with z = exp(beta x): NaN at a NaN x (a comparison with NaN is false), 0 at
    # -inf. z reads min(beta x, threshold), so that the branch where() drops stays finite (and
    # its derivative too, under create_graph).
    bx = x * beta if beta != 1 else x
    z = xp.exp(xp.minimum(bx, threshold))
    return xp.where(bx > threshold, g, g * (z / (z + 1.0)))


def log_sigmoid(x: Any) -> Any:
    return xp.minimum(x, 0.0) - xp.log1p(xp.exp(-xp.abs(x)))


def bce_logits_grad_input(g: Any, x: Any, t: Any, w: Any, pw: Any) -> Any:
    # (sigmoid(x) - t) g; with pos_weight ((pw t + 1 - t) sigmoid(x) - pw t) g; times weight
    s = 0.5 + 0.5 * xp.tanh(0.5 * x)  # sigmoid(x), without exp(-x) overflowing for x << 0
    if pw is None:
        r = (s - t) * g
    else:
        pt = pw * t
        r = ((pt + 1.0 - t) * s - pt) * g
    return r if w is None else r * w


def bce_logits_grad_target(g: Any, x: Any, w: Any, pw: Any) -> Any:
    # -x g; with pos_weight (log_sigmoid(-x) - pw log_sigmoid(x)) g; times weight
    r = -x * g if pw is None else (log_sigmoid(-x) - pw * log_sigmoid(x)) * g
    return r if w is None else r * w


def in_range(x: Any, lo: Any, hi: Any) -> Any:
    if lo is None:
        return x <= hi
    if hi is None:
        return x >= lo
    return (x >= lo) & (x <= hi)


def norm_dims(dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    return tuple(d % ndim if ndim else 0 for d in dim)


def keep(r: Any, dim: Any, keepdim: bool) -> Any:
    """Reinsert the reduced axes (size 1) of a reduction result, so it broadcasts against x."""
    if keepdim:
        return r
    nd = r.ndim + (len(dim) if dim is not None else 0)
    if dim is None:
        return r
    axes = sorted(norm_dims(dim, nd))
    return xp.expand_dims(r, tuple(axes))


def expand(g: Any, shape: tuple[int, ...], dim: Any, keepdim: bool) -> Any:
    if dim is None:
        return backend.broadcast_to(g, shape)  # g has one element (keepdim or not)
    if not keepdim:
        g = xp.expand_dims(g, tuple(sorted(norm_dims(dim, len(shape)))))
    return backend.broadcast_to(g, shape)


def count(shape: tuple[int, ...], dim: Any) -> float:
    n = 1
    for d in norm_dims(dim, len(shape)):
        n *= shape[d]
    return float(n)


def extreme_grad(g: Any, ans: Any, x: Any, dim: Any, keepdim: bool, evenly: bool) -> Any:
    # The gradient is shared evenly among the positions that attain the max (min). Where the
    # result is NaN no position equals it, and 0 * (g / 0) makes the whole slice NaN: torch's
    # amax and amin. torch's max() and min() without a dim (``evenly``) share it among the NaNs.
    if dim is None:
        a = xp.reshape(ans, (1,) * x.ndim)
        gs = xp.reshape(g, (1,) * x.ndim)
        if evenly:
            mask = (x == a) | (xp.isnan(x) & xp.isnan(a))
            return xp.where(mask, gs / xp.sum(mask), 0.0)
        mask = x == a
        return mask * (gs / xp.sum(mask))
    mask = x == keep(ans, dim, keepdim)
    count = xp.sum(mask, axis=dim, keepdims=True)
    return mask * (keep(g, dim, keepdim) / count)


def index_grad(g: Any, indices: Any, shape: tuple[int, ...], dim: int, keepdim: bool) -> Any:
    # max/min along dim with indices: the gradient goes to the selected position only.
    d = dim % len(shape)
    idx = indices if keepdim else xp.expand_dims(indices, d)
    rng = (
        backend.namespace(_device_array(indices))
        .arange(shape[d])
        .reshape((-1,) + (1,) * (len(shape) - d - 1))
    )
    onehot = rng == idx
    return xp.where(onehot, keep(g, (d,), keepdim), 0.0)


def erf(x: Any) -> Any:
    return x.erf() if isinstance(x, Tensor) else backend.erf(x)


def getitem_grad(g: Any, index: Any, shape: tuple[int, ...]) -> Any:
    # Zeros of the input's shape with g added at index (repeated indices add up).
    if isinstance(g, Tensor):
        return g._index_add_zeros(index, shape)  # recorded, for double backward
    return backend.index_add_zeros(g, index, shape)


def index_put_self_grad(g: Any, index: Any) -> Any:
    # g with zeros where index_put wrote.
    mask = backend.namespace(_device_array(g)).ones(g.shape, dtype=bool)
    mask[index] = False
    return xp.where(mask, g, 0)  # not g * mask: inf * 0 is NaN


def split_grad(g: Any, dim: int, sizes: list[int | None]) -> list[Any]:
    """Pieces of ``g`` along ``dim`` of ``sizes``; a size None (a legacy empty 1-D input that
    cat skipped) gets an empty (0,) array."""
    out = []
    start = 0
    for s in sizes:
        if s is None:
            out.append(g.reshape(-1)[:0])
            continue
        sl = [slice(None)] * g.ndim
        sl[dim] = slice(start, start + s)
        out.append(g[tuple(sl)])
        start += s
    return out


def unstack_grad(g: Any, dim: int, n: int) -> list[Any]:
    lead = (slice(None),) * dim
    return [g[(*lead, i)] for i in range(n)]


def cat_grads(gs: list[Any], dim: int, sizes: list[int], shape: tuple[int, ...]) -> Any:
    parts = []
    for g, s in zip(gs, sizes, strict=False):
        if g is None:
            piece_shape = list(shape)
            piece_shape[dim] = s
            parts.append(zeros_for(gs, tuple(piece_shape)))
        else:
            parts.append(g)
    return xp.concatenate(parts, axis=dim)


def stack_grads(gs: list[Any], dim: int, shape: tuple[int, ...]) -> Any:
    piece = shape[:dim] + shape[dim + 1 :]
    return xp.stack([zeros_for(gs, piece) if g is None else g for g in gs], axis=dim)


def zeros_for(gs: list[Any], shape: tuple[int, ...]) -> Any:
    ref = next(g for g in gs if g is not None)
    return xp.zeros_like(ref, shape=shape)


def cross_entropy_grad(g: Any, x: Any, target: Any, mean: bool, saved: tuple[Any, ...]) -> Any:
    # See NOTE [One cross entropy op] in asyncgrad/nn/functional_core.py:
    # dz = scale * coef * (softmax(z) - onehot(t)), scale = g / W (mean) or g (sum).
    if len(saved) == 2:  # on a device: the kernels' rows and totals
        if backend.is_device_array(g) and backend.is_device_array(x):
            return kernels.cross_entropy_backward(g, x, target, saved, mean)
        rows, totals = saved
        coef = xp.expand_dims(rows[2], 1)
        weight = totals[1]
        scale = g / weight if mean else g * xp.where(xp.isnan(weight), weight, 1.0)
    else:  # on the CPU: every target a class, no weight
        n = x.shape[0]
        coef = None
        scale = g / n if mean else g
        if type(x) is backend.ndarray and type(g) is backend.ndarray:
            dz = xp.exp(x - saved[0])
            dz *= scale
            dz[xp.arange(n), target] -= scale
            return dz
    # Under create_graph (Tensors): differentiable in the logits.
    ns = backend.namespace(target)
    onehot = ns.arange(x.shape[1]).reshape(1, -1) == ns.expand_dims(target, 1)
    # softmax is the same for any shift of a row: by the saved log-sum-exp, a constant here.
    e = xp.exp(x - (saved[0] if coef is None else rows[0][:, None]))
    factor = scale if coef is None else backend.masked(coef * scale, coef != 0)
    return (e / xp.sum(e, axis=1, keepdims=True) - onehot) * factor


def nll_grad(
    g: Any,
    logp: Any,
    target: Any,
    weight: Any,
    reduction: str,
    ignore_index: int,
    denom: float,
    all_valid: bool,
    row_scale: Any = None,
) -> Any:
    # loss_i = -w[t_i] * logp[i, t_i]; grad wrt logp is -w[t_i] on the target column, else 0
    # (also where g is inf or NaN, and in the rows of ignored targets).
    if row_scale is not None:  # on a device: See NOTE [Class indices on a device]
        ns = backend.namespace(target)
        coef = g * row_scale
        if backend.is_device_array(logp) and backend.is_device_array(coef):
            out = ns.zeros_like(logp)
            out[ns.arange(target.shape[0]), target] = coef
            return out
        onehot = ns.arange(logp.shape[1]).reshape(1, -1) == ns.expand_dims(target, 1)
        return xp.where(onehot, xp.expand_dims(coef, 1), 0.0)  # under create_graph
    if all_valid and type(logp) is backend.ndarray:
        out = xp.zeros_like(logp)
        out[backend.namespace(target).arange(target.shape[0]), target] = -(g / denom)
        return out
    n_cls = logp.shape[1]
    tgt = target
    shape = [1] * logp.ndim
    shape[1] = n_cls
    onehot = backend.namespace(tgt).arange(n_cls).reshape(shape) == xp.expand_dims(tgt, 1)
    onehot &= xp.expand_dims(tgt != ignore_index, 1)
    coef = xp.where(tgt == ignore_index, 0.0, 1.0)
    if weight is not None:
        coef = coef * weight[xp.where(tgt == ignore_index, 0, tgt)]
    coef = coef.astype(logp.dtype)
    if reduction == "none":
        scale = xp.expand_dims(g * coef, 1)
    else:
        gs = g if reduction == "sum" else g / denom
        scale = xp.expand_dims(coef, 1) * xp.reshape(gs, (1,) * logp.ndim)
    return xp.where(onehot, -scale, 0.0)


# ----- shape, indexing and random ops -----
def repeat_grad(g: Any, reps: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    # The output is ``reps[d]`` copies of x along each dimension d: split each output dimension
    # into (copy, position) and add the copies up.
    inter: list[int] = []
    for r, n in zip(reps, shape, strict=True):
        inter += [r, n]
    return xp.sum(xp.reshape(g, tuple(inter)), axis=tuple(range(0, 2 * len(reps), 2)))


# ----- var, std, prod, norm, cumsum, einsum -----
def _device_array(a: Any) -> Any:
    """The array behind ``a`` (a Tensor under create_graph): for allocating on its device."""
    return a._array if isinstance(a, Tensor) else a


def var_grad(g: Any, x: Any, dim: Any, keepdim: bool, n: int, correction: float) -> Any:
    # d var / dx = 2 (x - mean) / (N - correction); inf past the last degree of freedom (torch).
    dof = n - correction
    scale = 2.0 / dof if dof != 0 else math.inf
    gk = keep(g, dim, keepdim)
    return (gk * scale) * (x - xp.mean(x, axis=dim, keepdims=True))


def prod_grad(g: Any, ans: Any, x: Any, dim: int | None, keepdim: bool) -> Any:
    # d prod / dx_i = the product of the other elements: ans / x_i where no element is 0 (as
    # torch), else computed without dividing, so that one zero gets the product of the rest and
    # several zeros give 0 everywhere. On a CUDA device the case is picked on the device.
    shape = x.shape
    if dim is None:
        x = xp.reshape(x, (-1,))
        gk = xp.reshape(g, (1,))
        ak = xp.reshape(ans, (1,))
        d = 0
    else:
        gk = keep(g, (dim,), keepdim)
        ak = keep(ans, (dim,), keepdim)
        d = dim
    if backend.is_device_array(_device_array(x)):
        return xp.reshape(_prod_grad_on_device(gk, ak, x, d, dim is None), shape)
    zeros = int((_device_array(x) == 0).sum())
    if not zeros:
        return xp.reshape(gk * (ak / x), shape)
    if dim is None and zeros > 1:
        return xp.zeros_like(xp.reshape(x, shape))  # torch: 0 without multiplying by g
    return xp.reshape(gk * _prod_of_others(x, d), shape)


def _prod_grad_on_device(gk: Any, ak: Any, x: Any, d: int, flat: bool) -> Any:
    """prod_grad's three cases without reading the device: each is computed and the right one
    picked by a condition that stays on the device (counting the zeros on the host would block
    the loop in an awaited backward). The products of the others (exclusive cumulative products,
    exact with zeros) serve where ``x`` holds a zero, anywhere in it as in torch; ``ans / x``,
    torch's formula, where it holds none; and with ``dim=None`` several zeros give 0."""
    zero = _device_array(x) == 0
    mod = backend.namespace(zero)
    none = mod.logical_not(zero.any())
    # The quotient's branch divides by 1 where x is 0: where() drops it there, and under
    # create_graph its derivative stays finite.
    quotient = gk * (ak / xp.where(zero, 1.0, x))
    out = xp.where(none, quotient, gk * _prod_of_others(x, d))
    if flat:
        out = xp.where(zero.sum() > 1, 0.0, out)  # torch: 0 without multiplying by g
    return out


def _prod_of_others(x: Any, d: int) -> Any:
    n = x.shape[d]
    if isinstance(x, Tensor):
        # Differentiable again: the products over rows of x with the diagonal set to 1 (n x n
        # per slice; only under create_graph, only when x holds a zero).
        arr = x._array
        shape = [1] * (x.ndim + 1)
        shape[d] = shape[d + 1] = n
        eye = backend.namespace(arr).eye(n, dtype=bool).reshape(shape)
        return xp.prod(xp.where(eye, 1.0, xp.expand_dims(x, d)), axis=d + 1)
    # Exclusive cumulative products from the left and from the right.
    lead = (slice(None),) * d
    one = xp.ones_like(x[(*lead, slice(0, 1))])
    left = xp.concatenate([one, xp.cumprod(x[(*lead, slice(0, n - 1))], axis=d)], axis=d)
    rev = (*lead, slice(None, None, -1))
    right = xp.cumprod(x[rev], axis=d)[rev]
    right = xp.concatenate([right[(*lead, slice(1, n))], one], axis=d)
    return left * right


def norm_grad(g: Any, ans: Any, x: Any, p: float, dim: Any, keepdim: bool) -> Any:
    # torch's norm_backward: g times a factor that is 0 where the norm is 0 (so an infinite g
    # gives NaN there, as in torch); no gradient for p = 0.
    if p == 0.0:
        return None
    gk = keep(g, dim, keepdim)
    nk = keep(ans, dim, keepdim)
    if p == 1.0:
        return sign(x) * gk
    zero = nk == 0
    safe = xp.where(zero, 1.0, nk)
    if p == 2.0:
        return gk * xp.where(zero, 0.0, x / safe)
    if math.isinf(p):
        # shared evenly among the elements whose |x| is the max (min); a product with the 0/1
        # mask, as torch's (NaN for an infinite g elsewhere)
        hit = xp.abs(x) == nk
        count = xp.sum(hit, axis=dim, keepdims=True)
        return sign(x) * hit * (gk / xp.maximum(count, 1))
    scaled = sign(x) * xp.abs(x) ** (p - 1.0)
    if p < 1.0:  # |x|^(p-1) is inf at 0; the norm's power is inf where the norm is 0
        return xp.where(x == 0, 0.0, scaled) * (gk / nk ** (p - 1.0))
    return scaled * xp.where(zero, 0.0, gk / safe ** (p - 1.0))


def reverse_cumsum(g: Any, dim: int | None) -> Any:
    if dim is None:  # a 0-d input
        return g
    rev = (slice(None),) * dim + (slice(None, None, -1),)
    return xp.cumsum(g[rev], axis=dim)[rev]


# Past this many multiply-adds of the naive loop, einsum goes through NumPy's (CuPy's) optimised
# path, which contracts with BLAS: 9x faster for attention scores (8, 4, 64, 32) x (8, 4, 64, 32)
# on one core; below it the path search costs more than it saves.
EINSUM_OPTIMIZE_ABOVE: Final = 1 << 14


def einsum_call(equation: str, *operands: Any) -> Any:
    """``xp.einsum`` of an explicit equation (arrays, or Tensors under create_graph)."""
    if len(operands) > 1:
        sizes: dict[str, int] = {}
        for t, a in zip(equation.partition("->")[0].split(","), operands, strict=True):
            sizes.update(zip(t, a.shape, strict=True))
        if math.prod(sizes.values()) > EINSUM_OPTIMIZE_ABOVE and not any(
            isinstance(a, Tensor) for a in operands
        ):
            return xp.einsum(equation, *operands, optimize=True)
    return xp.einsum(equation, *operands)


def einsum_grad(
    g: Any, other: Any, out: str, target: str, other_subs: str | None, sizes: dict[str, int]
) -> Any:
    # The gradient of one operand of ``einsum(f"{target},{other_subs}->{out}")``: the einsum of
    # g and the other operand with the target's subscripts as output. An index that only the
    # target has (summed away) comes back through a vector of ones; an index repeated in the
    # target (a diagonal) is computed once and placed on the diagonal, zeros elsewhere (as
    # torch's diagonal backward: not a product with an identity, which turns inf into NaN).
    operands = [g]
    subs = [out]
    if other is not None:
        operands.append(other)
        subs.append(other_subs or "")
    ref = _device_array(g)
    mod = backend.namespace(ref)
    have = set(out) | set(other_subs or "")
    for c in dict.fromkeys(target):
        if c not in have:
            operands.append(mod.ones(sizes[c], dtype=ref.dtype))
            subs.append(c)
    first = "".join(dict.fromkeys(target))
    r = einsum_call(",".join(subs) + "->" + first, *operands)
    if first == target:
        return r
    nd = len(target)
    repeats = [k for k in range(nd) if target.index(target[k]) != k]
    mask: Any = None
    for k in repeats:
        f = target.index(target[k])
        n = sizes[target[k]]
        shape = [1] * nd
        shape[f] = shape[k] = n
        eye = mod.eye(n, dtype=bool).reshape(shape)
        mask = eye if mask is None else mask & eye
    return xp.where(mask, xp.expand_dims(r, tuple(repeats)), 0.0)


# ----- Convolution and pooling -----
# NOTE [Convolution is three ops]
# conv(x, w, b) (op ``convolution``), its gradient with respect to x (a transposed convolution,
# ``conv_input_grad``) and its gradient with respect to w (``conv_weight_grad``) are each an op of
# the table, and the rules of each are written with the three, so gradients of gradients are
# convolutions too (gradgradcheck runs on all three). They share one parameter dict: ``stride`` and
# ``dilation`` (pairs), ``padding`` ((top, bottom), (left, right)), ``groups``, ``x_hw`` (the
# input's height and width, which conv_input_grad produces) and ``k_hw`` (the kernel's, which
# conv_weight_grad produces). A 1-D convolution is the 2-D one with height 1 (``_as_2d``): the ops
# keep the shapes they were given. Under create_graph the rules get Tensors and must record ops,
# which live in a layer above this one: asyncgrad/ops/conv.py puts its recording functions in
# ``CONV_OPS``.
CONV_OPS: dict[str, Any] = {}


def _as_2d(a: Any) -> Any:
    return a if a.ndim == 4 else a[:, :, None, :]


def _back_to(a: Any, ndim: int) -> Any:
    return a if ndim == 4 else a[:, :, 0, :]


def _padded(x: Any, padding: Any) -> Any:
    """x (N, C, H, W) zero-padded by ((top, bottom), (left, right))."""
    n, c, h, w = x.shape
    (pt, pb), (pl, pr) = padding
    if pt or pb or pl or pr:
        xpad = backend.namespace(x).zeros((n, c, h + pt + pb, w + pl + pr), dtype=x.dtype)
        xpad[:, :, pt : pt + h, pl : pl + w] = x
        return xpad
    return x


def _conv_cols(
    x: Any, k_hw: tuple[int, int], groups: int, stride: Any, padding: Any, dilation: Any
) -> Any:
    """im2col of x (N, C, H, W): (N, G, C/G*kh*kw, OH*OW), and (OH, OW)."""
    n = x.shape[0]
    x = _padded(x, padding)
    win = backend.windows(x, k_hw, stride, dilation)  # (N, C, kh, kw, OH, OW), a view
    oh, ow = win.shape[-2:]
    return win.reshape(n, groups, -1, oh * ow), (oh, ow)


def conv_array(x: Any, w: Any, b: Any, *, groups: int, k_hw: Any, **p: Any) -> Any:
    """The convolution of arrays: one batched matmul (G, O/G, K) @ (N, G, K, L) over im2col."""
    x4, w4 = _as_2d(x), _as_2d(w)
    cols, (oh, ow) = _conv_cols(x4, k_hw, groups, p["stride"], p["padding"], p["dilation"])
    o = w4.shape[0]
    y = w4.reshape(groups, o // groups, -1) @ cols  # (N, G, O/G, OH*OW)
    y = y.reshape(x4.shape[0], o, oh, ow)
    if b is not None:
        y += b.reshape(1, o, 1, 1)
    return _back_to(y, x.ndim)


def conv_input_grad_array(gy: Any, w: Any, *, groups: int, x_hw: Any, **p: Any) -> Any:
    """The transposed convolution: w^T @ gy per group, then col2im as one strided
    accumulation per kernel offset (kh*kw of them, no loop over pixels)."""
    g4, w4 = _as_2d(gy), _as_2d(w)
    n, o, oh, ow = g4.shape
    _, cg, kh, kw = w4.shape
    (sh, sw), (dh, dw) = p["stride"], p["dilation"]
    (pt, pb), (pl, pr) = p["padding"]
    h, wd = x_hw
    eh, ew = (kh - 1) * dh, (kw - 1) * dw
    if (sh, sw) == (1, 1) and groups == 1 and max(pt, pb) <= eh and max(pl, pr) <= ew:
        # stride 1: the full correlation of gy with the flipped kernel, channels swapped (one
        # im2col and one product, no accumulation per kernel offset)
        wf = backend.namespace(w4).ascontiguousarray(xp.swapaxes(w4, 0, 1)[:, :, ::-1, ::-1])
        pads = ((eh - pt, eh - pb), (ew - pl, ew - pr))
        dx = conv_array(g4, wf, None, groups=1, k_hw=(kh, kw), stride=(1, 1), padding=pads,
                        dilation=(dh, dw))  # fmt: skip
        return _back_to(dx, gy.ndim)
    wt = xp.swapaxes(w4.reshape(groups, o // groups, -1), -1, -2)  # (G, K, O/G)
    cols = wt @ g4.reshape(n, groups, o // groups, oh * ow)  # (N, G, K, L)
    cols = cols.reshape(n, groups * cg, kh, kw, oh, ow)
    dx = backend.namespace(cols).zeros((n, groups * cg, h + pt + pb, wd + pl + pr), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            dx[
                :,
                :,
                i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                j * dw : j * dw + sw * (ow - 1) + 1 : sw,
            ] += cols[:, :, i, j]
    if pt or pb or pl or pr:
        dx = dx[:, :, pt : pt + h, pl : pl + wd]
    return _back_to(dx, gy.ndim)


def conv_weight_grad_array(x: Any, gy: Any, *, groups: int, k_hw: Any, **p: Any) -> Any:
    """The gradient of a convolution's weight: gy @ im2col(x)^T per group, summed over the
    batch."""
    x4, g4 = _as_2d(x), _as_2d(gy)
    gh, gw_ = g4.shape[2:]
    n, o = g4.shape[:2]
    if groups == 1:  # one product over the batch and the positions together
        x4 = _padded(x4, p["padding"])
        win = backend.windows(x4, k_hw, p["stride"], p["dilation"])  # (N, C, kh, kw, OH, OW)
        # x may be a transposed convolution's output grown by output_padding: its windows past
        # gy's extent did not produce any of gy.
        win = win[..., :gh, :gw_]
        mod = backend.namespace(x4)
        cols = mod.ascontiguousarray(mod.moveaxis(win, 0, 3)).reshape(
            -1, n * math.prod(win.shape[-2:])
        )
        gt = mod.ascontiguousarray(mod.swapaxes(g4, 0, 1)).reshape(o, -1)
        gw = xp.swapaxes(cols @ xp.swapaxes(gt, 0, 1), 0, 1).reshape(o, -1, *k_hw)
        return _back_to(gw, x.ndim)
    cols, (oh, ow) = _conv_cols(x4, k_hw, groups, p["stride"], p["padding"], p["dilation"])
    if (oh, ow) != (gh, gw_):  # as above: the windows past gy's extent
        cols = cols.reshape(*cols.shape[:3], oh, ow)[..., :gh, :gw_]
        cols = cols.reshape(*cols.shape[:3], gh * gw_)
    gw = g4.reshape(n, groups, o // groups, -1) @ xp.swapaxes(cols, -1, -2)  # (N, G, O/G, K)
    gw = gw.sum(axis=0).reshape(o, -1, *k_hw)
    return _back_to(gw, x.ndim)


def _recorded(*args: Any) -> bool:
    return any(isinstance(a, Tensor) for a in args)


def conv(x: Any, w: Any, b: Any, **p: Any) -> Any:
    if _recorded(x, w, b):
        return CONV_OPS["conv"](x, w, b, **p)
    return conv_array(x, w, b, **p)


def conv_input_grad(gy: Any, w: Any, **p: Any) -> Any:
    if _recorded(gy, w):
        return CONV_OPS["conv_input_grad"](gy, w, **p)
    return conv_input_grad_array(gy, w, **p)


def conv_weight_grad(x: Any, gy: Any, **p: Any) -> Any:
    if _recorded(x, gy):
        return CONV_OPS["conv_weight_grad"](x, gy, **p)
    return conv_weight_grad_array(x, gy, **p)


def crop_like(a: Any, ref: Any) -> Any:
    """``a`` cut to ``ref``'s spatial extent: a convolution over a transposed convolution's
    output, which output_padding made longer than its input, reaches past that input's extent,
    and those positions came from no element of it."""
    if a.shape[2:] == ref.shape[2:]:
        return a
    return a[(slice(None), slice(None), *(slice(0, n) for n in ref.shape[2:]))]


def conv_bias_grad(gy: Any) -> Any:
    return xp.sum(gy, axis=(0, *range(2, gy.ndim)))


def max_pool_grad(g: Any, index: Any, in_shape: tuple[int, ...], unique: bool) -> Any:
    # max_pool2d picks x.reshape(-1)[index]: its gradient adds g at index (windows that overlap
    # may pick one element several times; ``unique`` when they cannot).
    n = math.prod(in_shape)
    if isinstance(g, Tensor):
        return xp.reshape(g.reshape(-1)._index_add_zeros((index,), (n,)), in_shape)
    flat = g.reshape(-1)
    if unique:
        z = backend.namespace(g).zeros(n, dtype=g.dtype)
        z[index] = flat
    else:
        z = backend.index_add_zeros(flat, (index,), (n,))
    return z.reshape(in_shape)
