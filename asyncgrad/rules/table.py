"""THE rule table: for each differentiable op, one vector-Jacobian product per input.

Each ``defvjp`` line names an op and gives one rule per input: ``rule(g, ans, *inputs, **params)``
where ``g`` is the gradient of the output, ``ans`` the output, then the op's inputs and its
parameters by name; ``None`` for an input that has no gradient. ``save=`` names what the rules
read. Longer formulas are the named helpers of ``formulas.py``. See NOTE [Rules are NumPy] in
``registry.py``.

# NOTE [Special values]
# Rules give torch's gradients at NaN, +-inf, -0 and ties (tests/autograd/test_special_values.py
# compares every op with torch). Where torch selects (``where``, ``masked_fill``, scatter), a
# rule selects too, with xp.where or masked: multiplying by a 0/1 mask turns an inf or NaN
# gradient into NaN where torch gives 0. Rules run with NumPy's floating-point warnings off
# (NOTE [Silent floating point] in asyncgrad/backend).
"""

from __future__ import annotations

import math
from typing import Any

from ..backend import is_basic_index, masked, masked_nonzero_into, mm, xp
from ..graph.node import ELEMENT_PASS, LARGE_ELEMENTS, Node, size_work
from .formulas import (
    bce_logits_grad_input,
    bce_logits_grad_target,
    cat_grads,
    conv,
    conv_bias_grad,
    conv_input_grad,
    conv_weight_grad,
    copy_to,
    count,
    crop_like,
    cross_entropy_grad,
    einsum_grad,
    expand,
    extreme_grad,
    gelu_grad,
    getitem_grad,
    in_range,
    index_grad,
    index_put_self_grad,
    keep,
    linear_grad_w,
    matmul_grad_x,
    matmul_grad_y,
    max_pool_grad,
    minmax_grad,
    nll_grad,
    norm_grad,
    pow_grad_base,
    pow_grad_exp,
    prod_grad,
    repeat_grad,
    reverse_cumsum,
    sign,
    silu_grad,
    softplus_grad,
    split_grad,
    stack_grads,
    unstack_grad,
    var_grad,
)
from .registry import OPS, defvjp, mark_heavy, set_costs

# ----- Binary arithmetic -----
defvjp("add", lambda g, ans, x, y: g, lambda g, ans, x, y: g)
defvjp("sub", lambda g, ans, x, y: g, lambda g, ans, x, y: -g)
defvjp("mul", lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x, save="x y")
defvjp(
    "div",
    lambda g, ans, x, y: g / y,
    lambda g, ans, x, y: -g * (x / y / y),  # d(x/y)/dy = -x/y^2, as torch groups it
    save="x y",
)
defvjp(
    "pow",
    lambda g, ans, x, y: pow_grad_base(g, x, y),
    lambda g, ans, x, y: pow_grad_exp(g, ans, x, y),
    save="ans x y",
)
defvjp(
    "remainder",  # x - floor(x / y) * y
    lambda g, ans, x, y: g,
    lambda g, ans, x, y: -g * xp.floor_divide(x, y),
    save="x y",
)
defvjp(
    "maximum",
    lambda g, ans, x, y: minmax_grad(g, x, y, x < y),
    lambda g, ans, x, y: minmax_grad(g, x, y, y < x),
    save="x y",
)
defvjp(
    "minimum",
    lambda g, ans, x, y: minmax_grad(g, x, y, x > y),
    lambda g, ans, x, y: minmax_grad(g, x, y, y > x),
    save="x y",
)
defvjp(
    "where",
    None,
    lambda g, ans, c, x, y: xp.where(c, g, 0.0),
    lambda g, ans, c, x, y: xp.where(c, 0.0, g),
    save="c",
)
_matmul = defvjp(
    "matmul",
    lambda g, ans, x, y: matmul_grad_x(g, x, y),
    lambda g, ans, x, y: matmul_grad_y(g, x, y),
    save="x y",
)


def _matmul_inner(x: Any, y: Any) -> int:
    if x is not None:
        return x.shape[-1]  # type: ignore[no-any-return]
    return y.shape[-2] if y.ndim > 1 else y.shape[0]  # type: ignore[no-any-return]


mark_heavy(_matmul, _matmul_inner)

# ----- Unary math -----
defvjp("neg", lambda g, ans, x: -g)
defvjp("exp", lambda g, ans, x: g * ans, save="ans")
defvjp("log", lambda g, ans, x: g / x, save="x")
defvjp("log1p", lambda g, ans, x: g / (x + 1.0), save="x")
defvjp("expm1", lambda g, ans, x: g * (ans + 1.0), save="ans")
defvjp("sqrt", lambda g, ans, x: g / (2.0 * ans), save="ans")
defvjp("rsqrt", lambda g, ans, x: -0.5 * g * (ans * ans * ans), save="ans")
defvjp("reciprocal", lambda g, ans, x: -g * (ans * ans), save="ans")
defvjp("sin", lambda g, ans, x: g * xp.cos(x), save="x")
defvjp("cos", lambda g, ans, x: -g * xp.sin(x), save="x")
defvjp("tan", lambda g, ans, x: g * (1.0 + ans * ans), save="ans")
defvjp("tanh", lambda g, ans, x: g * (1.0 - ans * ans), save="ans")
defvjp("sigmoid", lambda g, ans, x: g * (1.0 - ans) * ans, save="ans")
defvjp(  # ans is >= 0 or NaN
    "relu",
    lambda g, ans, x: masked(g, ans != 0),
    save="ans",
    into=lambda g, ans, x: masked_nonzero_into(g, ans),  # See NOTE [Gradients overwritten in place]
)
defvjp("abs", lambda g, ans, x: g * sign(x), save="x")
defvjp("sign", lambda g, ans, x: xp.zeros_like(g))
defvjp("erf", lambda g, ans, x: g * (2.0 / math.sqrt(math.pi)) * xp.exp(-x * x), save="x")
defvjp("gelu", lambda g, ans, x, *, approximate: gelu_grad(g, x, approximate), save="x")
defvjp("silu", lambda g, ans, x: silu_grad(g, x), save="x")
defvjp(
    "softplus",
    lambda g, ans, x, *, beta, threshold: softplus_grad(g, x, beta, threshold),
    save="x",
)
defvjp(
    "clamp",
    lambda g, ans, x, *, min, max: masked(g, in_range(x, min, max)),
    save="x",
)
defvjp(  # torch's clamp_backward_min_max: each input gets g where it is the result
    "clamp_tensor",
    lambda g, ans, x, lo, hi: masked(g, in_range(x, lo, hi)),
    lambda g, ans, x, lo, hi: masked(g, (x < lo) if hi is None else (x < lo) & (lo < hi)),
    lambda g, ans, x, lo, hi: masked(g, (x > hi) if lo is None else (x > hi) | (hi < lo)),
    save="x lo hi",
)

# ----- Reductions -----
defvjp("sum", lambda g, ans, x, *, dim, keepdim, in_shape: expand(g, in_shape, dim, keepdim))
defvjp(
    "mean",
    lambda g, ans, x, *, dim, keepdim, in_shape: (
        expand(g, in_shape, dim, keepdim) / count(in_shape, dim)
    ),
)
defvjp(
    "amax",
    lambda g, ans, x, *, dim, keepdim, in_shape, evenly: extreme_grad(
        g, ans, x, dim, keepdim, evenly
    ),
    save="ans x",
)
defvjp(
    "amin",
    lambda g, ans, x, *, dim, keepdim, in_shape, evenly: extreme_grad(
        g, ans, x, dim, keepdim, evenly
    ),
    save="ans x",
)
defvjp(
    "max_dim",
    lambda g, ans, x, *, dim, keepdim, indices, in_shape: index_grad(
        g, indices, in_shape, dim, keepdim
    ),
)
defvjp(
    "logsumexp",
    lambda g, ans, x, *, dim, keepdim, in_shape: (
        expand(g, in_shape, dim, keepdim) * xp.exp(x - keep(ans, dim, keepdim))
    ),
    save="ans x",
)

# ----- Shapes and views -----
defvjp("reshape", lambda g, ans, x, *, shape, in_shape: xp.reshape(g, in_shape))
defvjp("transpose", lambda g, ans, x, *, dim0, dim1: xp.swapaxes(g, dim0, dim1))
defvjp("permute", lambda g, ans, x, *, dims: xp.transpose(g, tuple(xp.argsort(dims))))
defvjp("expand", lambda g, ans, x, *, shape: g)  # sum_to after the rule undoes the expansion
defvjp("getitem", lambda g, ans, x, *, index, in_shape: getitem_grad(g, index, in_shape))
defvjp(
    "index_put",
    lambda g, ans, x, v, *, index: index_put_self_grad(g, index),
    lambda g, ans, x, v, *, index: g[index],
)
defvjp(
    "index_add_zeros",  # the backward of getitem, itself differentiable (for double backward)
    lambda g, ans, x, *, index, shape: g[index],
)
defvjp("cat", all_inputs=lambda g, ans, inputs, *, dim, sizes: split_grad(g, dim, sizes))
defvjp("stack", all_inputs=lambda g, ans, inputs, *, dim, n: unstack_grad(g, dim, n))
defvjp(
    "split",
    lambda g, ans, x, *, dim, sizes, in_shape: cat_grads(g, dim, sizes, in_shape),
    outputs=-1,
)
defvjp("unbind", lambda g, ans, x, *, dim, in_shape: stack_grads(g, dim, in_shape), outputs=-1)
defvjp("clone", lambda g, ans, x: g)
_to_copy = defvjp("to_copy", lambda g, ans, x, *, device: copy_to(g, device))  # between devices
_to_copy.node_cls._copies_to_host = True  # when ``device`` is the CPU: see Node
defvjp("cast", lambda g, ans, x: g)  # the rule's result is cast back to x's dtype by _fit
defvjp("copy", lambda g, ans, x, src: xp.zeros_like(g), lambda g, ans, x, src: g)
defvjp("fill", lambda g, ans, x, *, value: xp.zeros_like(g))

# ----- shape, indexing and random ops -----
# (narrow, select, flip, roll, gather, ... record getitem: See NOTE [Index ops are getitem])
defvjp("repeat", lambda g, ans, x, *, reps, in_shape: repeat_grad(g, reps, in_shape))

# ----- Neural-network functions -----
_linear = defvjp(
    "linear",  # y = x @ w.T + b
    lambda g, ans, x, w, b: mm(g, w),
    lambda g, ans, x, w, b: linear_grad_w(g, x),
    lambda g, ans, x, w, b: g,
    save="x w",
)


def _linear_inner(x: Any, w: Any) -> int:
    return (x if x is not None else w).shape[-1]  # type: ignore[no-any-return]


mark_heavy(_linear, _linear_inner)
defvjp(
    "softmax",
    lambda g, ans, x, *, dim: ans * (g - xp.sum(g * ans, axis=dim, keepdims=True)),
    save="ans",
)
defvjp(
    "log_softmax",
    lambda g, ans, x, *, dim: g - xp.exp(ans) * xp.sum(g, axis=dim, keepdims=True),
    save="ans",
)
defvjp(  # torch's binary_cross_entropy_with_logits_backward and its target's
    "binary_cross_entropy_with_logits",
    lambda g, ans, x, t, w, pw: bce_logits_grad_input(g, x, t, w, pw),
    lambda g, ans, x, t, w, pw: bce_logits_grad_target(g, x, w, pw),
    None,
    None,
    save="x t w pw",
)
defvjp(  # See NOTE [One cross entropy op] in asyncgrad/nn/functional_core.py
    "cross_entropy",
    lambda g, ans, x, *, target, mean, saved: cross_entropy_grad(g, x, target, mean, saved),
    save="x",
)
defvjp(
    "nll_loss",
    lambda g, ans, logp, *, target, weight, reduction, ignore_index, denom, all_valid, row_scale: (
        nll_grad(g, logp, target, weight, reduction, ignore_index, denom, all_valid, row_scale)
    ),
    save="logp",
)

# ----- var, std, prod, norm, cumsum; dot, outer, einsum; sort, topk -----
defvjp(
    "var",
    lambda g, ans, x, *, dim, keepdim, n, correction: var_grad(g, x, dim, keepdim, n, correction),
    save="x",
)
defvjp(
    "std",  # d std = d var / (2 std); 0 where the std is 0 (a constant slice), as torch's
    lambda g, ans, x, *, dim, keepdim, n, correction: var_grad(
        xp.where(ans == 0, 0.0, g / (2.0 * ans)), x, dim, keepdim, n, correction
    ),
    save="ans x",
)
defvjp("prod", lambda g, ans, x, *, dim, keepdim: prod_grad(g, ans, x, dim, keepdim), save="ans x")
defvjp(
    "norm",
    lambda g, ans, x, *, p, dim, keepdim: norm_grad(g, ans, x, p, dim, keepdim),
    save="ans x",
)
defvjp("cumsum", lambda g, ans, x, *, dim: reverse_cumsum(g, dim))  # sum over j >= i
defvjp("dot", lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x, save="x y")
defvjp(
    "outer", lambda g, ans, x, y: xp.matmul(g, y), lambda g, ans, x, y: xp.matmul(x, g), save="x y"
)
defvjp(
    "einsum",  # See NOTE [einsum as pairwise contractions] in asyncgrad/ops/linalg.py
    lambda g, ans, x, y, *, sx, sy, out, sizes: einsum_grad(g, y, out, sx, sy, sizes),
    lambda g, ans, x, y, *, sx, sy, out, sizes: einsum_grad(g, x, out, sy, sx, sizes),
    save="x y",
)
defvjp("sort", lambda g, ans, x, *, index, in_shape: getitem_grad(g, index, in_shape))
defvjp("topk", lambda g, ans, x, *, index, in_shape: getitem_grad(g, index, in_shape))

# ----- Convolution and pooling -----
# See NOTE [Convolution is three ops] in formulas.py; ``p`` is their shared parameter dict.
_conv = defvjp(
    "convolution",
    lambda g, ans, x, w, b, **p: conv_input_grad(g, w, **p),
    lambda g, ans, x, w, b, **p: conv_weight_grad(x, g, **p),
    lambda g, ans, x, w, b, **p: conv_bias_grad(g),
    save="x w",
)


def _conv_inner(x: Any, w: Any) -> int:
    # C/G * kh * kw multiply-adds per element of g; without w, the input's channels (a lower
    # bound: the kernel's size is not known here)
    return math.prod(w.shape[1:]) if w is not None else x.shape[1]


mark_heavy(_conv, _conv_inner)
_conv_input_grad = defvjp(
    "conv_input_grad",  # the transposed convolution gx = conv^T(gy, w), linear in gy and in w
    lambda g, ans, gy, w, **p: crop_like(conv(g, w, None, **p), gy),
    lambda g, ans, gy, w, **p: conv_weight_grad(g, gy, **p),
    save="gy w",
)
_conv_weight_grad = defvjp(
    "conv_weight_grad",  # gw = conv_weight_grad(x, gy), linear in x and in gy
    lambda g, ans, x, gy, **p: conv_input_grad(gy, g, **p),
    lambda g, ans, x, gy, **p: crop_like(conv(x, g, None, **p), gy),
    save="x gy",
)


def _conv_input_grad_inner(gy: Any, w: Any) -> int:
    # per element of gx: C_out * kh * kw (stride ignored); without w, gy's channels
    return w.shape[0] * math.prod(w.shape[2:]) if w is not None else gy.shape[1]  # type: ignore[no-any-return]


def _conv_weight_grad_inner(x: Any, gy: Any) -> int:
    # per element of gw: N * (the output's spatial size); without gy, the input's instead
    a = gy if gy is not None else x
    return a.shape[0] * math.prod(a.shape[2:])  # type: ignore[no-any-return]


mark_heavy(_conv_input_grad, _conv_input_grad_inner)
mark_heavy(_conv_weight_grad, _conv_weight_grad_inner)
_max_pool = defvjp(
    "max_pool2d_with_indices",
    lambda g, ans, x, *, index, in_shape, unique: max_pool_grad(g, index, in_shape, unique),
)
_max_pool.node_cls.__name__ = "MaxPool2DWithIndicesBackward0"  # torch's spelling of "2d"
_max_pool.node_cls.__qualname__ = _max_pool.node_cls.__name__

# ----- diagonal; ag.linalg: inv, det, slogdet, solve, cholesky, qr, svd, eigh -----
# The formulas are in linalg.py; the names are torch's (LinalgInvExBackward0, ...).
from .linalg import (  # noqa: E402
    cholesky_grad,
    det_grad,
    diagonal_grad,
    eigh_grad,
    inv_grad,
    logabsdet_grad,
    qr_grad,
    solve_grad_a,
    solve_grad_b,
    svd_grad,
)

defvjp(
    "diagonal",
    lambda g, ans, x, *, offset, dim1, dim2, in_shape: diagonal_grad(
        g, in_shape, offset, dim1, dim2
    ),
)
defvjp("linalg_inv_ex", lambda g, ans, a: inv_grad(g, ans), save="ans")
defvjp("linalg_det", lambda g, ans, a: det_grad(g, ans, a), save="ans a")
defvjp("linalg_slogdet", lambda g, ans, a: logabsdet_grad(g, a), save="a")
defvjp(
    "linalg_solve_ex",
    lambda g, ans, a, b: solve_grad_a(g, ans, a),
    lambda g, ans, a, b: solve_grad_b(g, a),
    save="ans a",
)
defvjp("linalg_cholesky_ex", lambda g, ans, a: cholesky_grad(g, ans), save="ans")
defvjp("linalg_qr", lambda g, ans, a, *, mode: qr_grad(g, ans, a, mode), save="ans a", outputs=-1)
defvjp(
    "linalg_svd",
    lambda g, ans, a, *, full_matrices: svd_grad(g, ans, full_matrices),
    save="ans",
    outputs=-1,
)
defvjp("linalg_eigh", lambda g, ans, a, *, uplo: eigh_grad(g, ans), save="ans", outputs=-1)

# ----- Work estimates (See NOTE [Work estimates] in asyncgrad/graph/node.py) -----
# Multiply-adds per element of the largest array a node reads or writes, in passes over the
# elements (P): about the arrays its rule makes, a transcendental function counting several
# (benchmarks/bench_large_nodes.py times each against its estimate). Ops whose rule returns the
# gradient or a view of it cost nothing; ops missing here count 2 P (FunctionNode._cost).
P = ELEMENT_PASS
_COSTS: dict[str, float] = {
    # the gradient itself, a view of it, or views of its parts
    "clone": 0, "reshape": 0, "transpose": 0, "permute": 0, "cat": 0, "stack": 0, "sum": 0,
    # a reduction where broadcasting undoes itself, else nothing
    "add": P / 2, "expand": P / 2,
    # about one pass
    "sub": P, "neg": P, "exp": P, "log": P, "sign": P, "fill": P, "copy": P, "cast": P,
    "to_copy": P, "split": P, "topk": P, "diagonal": P, "outer": P, "repeat": P, "remainder": P,
    "nll_loss": P, "index_put": P, "index_add_zeros": P, "max_pool2d_with_indices": P,
    "getitem": P,  # basic indexing; advanced indexing scatters (See _getitem_work)
    # a few passes
    "log1p": 2 * P, "expm1": 2 * P, "sqrt": 2 * P, "tan": 2 * P, "sigmoid": 2 * P,
    "unbind": 2 * P, "mean": 2 * P, "dot": 2 * P, "mul": 3 * P, "tanh": 3 * P,
    "relu": 3 * P, "reciprocal": 3 * P, "pow": 4 * P, "rsqrt": 4 * P, "clamp": 4 * P,
    "cross_entropy": 4 * P, "var": 4 * P, "std": 4 * P, "max_dim": 4 * P,
    "binary_cross_entropy_with_logits": 4 * P,
    "amax": 5 * P, "amin": 5 * P, "prod": 5 * P, "softmax": 5 * P, "abs": 6 * P,
    "norm": 6 * P, "logsumexp": 6 * P, "div": 7 * P, "log_softmax": 7 * P,
    # transcendental functions, selections, scans, sorts
    "erf": 8 * P, "clamp_tensor": 8 * P,
    "cumsum": 11 * P, "softplus": 11 * P, "silu": 12 * P, "where": 24 * P, "sin": 32 * P,
    "cos": 40 * P, "maximum": 44 * P, "minimum": 44 * P, "sort": 50 * P, "gelu": 58 * P,
}  # fmt: skip
# The gradient is smaller than the array the rule writes (reductions, indexing, pooling).
_SPECIAL = (
    "mean", "amax", "amin", "max_dim", "logsumexp", "var", "std", "prod", "norm", "dot",
    "getitem", "diagonal", "topk", "unbind", "split", "nll_loss", "cross_entropy", "einsum",
    "binary_cross_entropy_with_logits", "max_pool2d_with_indices",
)  # fmt: skip
# A decomposition's backward, per (matrix elements x its smaller side): a few matrix products,
# at LAPACK's pace.
_CUBIC: dict[str, float] = {
    "linalg_inv_ex": 2, "linalg_det": 4, "linalg_slogdet": 4, "linalg_eigh": 4, "linalg_svd": 5,
    "linalg_qr": 8, "linalg_solve_ex": 9, "linalg_cholesky_ex": 9,
}  # fmt: skip
set_costs(_COSTS, special=_SPECIAL, cubic=_CUBIC)


def _getitem_work(node: Node, grads: list[Any]) -> float:
    # Advanced indexing scatters with np.add.at, about 16 times the work of a basic index.
    work = size_work(node, grads)
    return work if is_basic_index(node._params["index"]) else 16 * work  # type: ignore[attr-defined]


def _parts_work(node: Node, grads: list[Any]) -> float:
    # split and unbind: their one input is the largest array, and there may be many outputs.
    e = node._next_edges[0]
    n = 0 if e is None else math.prod(e[0]._input_meta[e[1]][0])
    return 0.0 if n < LARGE_ELEMENTS else n * node._cost


def _einsum_work(node: Node, grads: list[Any]) -> float:
    # Each gradient is a contraction over every index, like a matmul's: one multiply-add per
    # point of the index space.
    e = node._next_edges
    wanted = (e[0] is not None) + (e[1] is not None)
    return wanted * math.prod(node._params["sizes"].values())  # type: ignore[attr-defined]


OPS["getitem"].node_cls._work = staticmethod(_getitem_work)
OPS["einsum"].node_cls._work = staticmethod(_einsum_work)
OPS["split"].node_cls._work = staticmethod(_parts_work)
OPS["unbind"].node_cls._work = staticmethod(_parts_work)
