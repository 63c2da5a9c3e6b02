"""Forward values and gradients at NaN, +-inf, +-0 and ties, compared with torch.

``CASES`` maps every op of the rule table (``OPS``) to cases whose inputs hold the special
values; ``test_every_op_has_a_case`` fails when an op is added to the table without one. Each
case runs forward and backward in asyncgrad and in torch (float64 on both sides) and compares
the outputs and the gradients of every leaf, NaNs in the same places. The gradient arriving at
the outputs is ones, or special itself (all inf, or a mix of NaN, +-inf, 0 and 1e300, which a
0-d output gets as NaN): a rule that masks a gradient by multiplying it with 0 turns an infinite
or NaN gradient into NaN where torch, which selects with ``where``, gives 0. The cases run again
under ``create_graph=True``, where the same rules run on Tensors.

Warnings are errors (``warnings.simplefilter("error")`` here, and ``filterwarnings`` in
pyproject.toml), so a NumPy RuntimeWarning ("divide by zero", "invalid value", "overflow") from
a forward op or from backward fails the case: torch computes with infinities silently.

Views, joins, casts and the internal ops (``index_add_zeros``, getitem's backward, called
directly; ``index_put``, ``copy`` and ``fill``, reached through setitem, ``copy_`` and ``fill_``)
have no formula of their own to get wrong at these values; their simple cases check that the
values pass through, and that the gradients they zero stay 0 for inf and NaN output gradients.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import ops
from asyncgrad.rules import OPS

torch = pytest.importorskip("torch", reason="torch is the reference for special-value gradients")

NAN: Final = float("nan")
INF: Final = float("inf")

# The values each elementwise case runs through: NaN, both infinities, both zeros, +-1 (special
# bases of pow), 800 (exp overflows), 40 (tanh and sigmoid saturate) and ordinary values.
VALUES: Final = np.array(
    [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1.5, 3.0, 40.0, 800.0, -800.0]
)
_N: Final = VALUES.size
# Every ordered pair of VALUES (ties included: equal values, NaN with NaN, 0 with -0).
PAIR_X: Final = np.repeat(VALUES, _N).reshape(_N, _N)
PAIR_Y: Final = np.tile(VALUES, _N).reshape(_N, _N)
# Rows for reductions and softmax: NaN, ties, infinities of both signs, masked (-inf) entries.
ROWS: Final = np.array(
    [
        [NAN, 1.0, 3.0],
        [1.0, 3.0, 3.0],
        [INF, INF, 1.0],
        [-INF, -INF, -INF],
        [NAN, NAN, 1.0],
        [INF, -INF, 0.0],
        [0.0, -0.0, -1.0],
        [-INF, 1.0, 2.0],
        [NAN, INF, -INF],
        [2.0, -1.0, 0.5],
        [800.0, 799.0, -800.0],
    ]
)
# A 4 x 3 matrix and a 3 x 2 one with special entries, for matmul and linear.
MAT_A: Final = np.array([[NAN, 1.0, 2.0], [INF, 0.0, -1.0], [-INF, INF, 0.5], [0.0, -0.0, 3.0]])
MAT_B: Final = np.array([[1.0, 0.0], [-INF, 2.0], [0.0, NAN]])
# The special mix of output gradients (1e300 overflows a float32 cast).
G_MIX: Final = np.array([NAN, INF, -INF, 0.0, 2.5, -1.0, 1e300])
GRADS: Final = ("ones", "inf", "mixed")


@dataclass(frozen=True)
class Const:
    """An argument that becomes a float64 tensor that does not require grad."""

    values: Any


@dataclass(frozen=True)
class Case:
    """``fn(m, *args)`` with ``m`` the module (asyncgrad or torch). In ``args`` a float ndarray
    becomes a float64 leaf that requires grad, a ``Const`` a float64 constant; anything else is
    passed as it is."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    raises: str = ""  # torch does not differentiate the op: a backward raises this message
    torch_raises: str = ""  # torch's message, where it names the op otherwise (else ``raises``)


CASES: Final[dict[str, dict[str, Case]]] = {}


def case(
    op: str,
    case_id: str,
    fn: Callable[..., Any],
    *args: Any,
    raises: str = "",
    torch_raises: str = "",
) -> None:
    cases = CASES.setdefault(op, {})
    assert case_id not in cases, f"duplicate case {op}-{case_id}"
    cases[case_id] = Case(fn, args, raises, torch_raises or raises)


def F(m: Any) -> Any:
    return m.nn.functional


# =====================================================================================
# Binary arithmetic: every pair of special values, and Python scalars on either side
# =====================================================================================
for _op, _fn in [
    ("add", lambda m, x, y: x + y),
    ("sub", lambda m, x, y: x - y),
    ("mul", lambda m, x, y: x * y),
    ("div", lambda m, x, y: x / y),
    ("pow", lambda m, x, y: x**y),
    ("maximum", lambda m, x, y: m.maximum(x, y)),
    ("minimum", lambda m, x, y: m.minimum(x, y)),
]:
    case(_op, "pairs", _fn, PAIR_X, PAIR_Y)
    case(_op, "broadcast", _fn, VALUES[:, None], VALUES)
    case(_op, "const_other", _fn, VALUES[:, None], Const(VALUES))
case("remainder", "pairs", lambda m, x, y: x % y, PAIR_X, PAIR_Y)
case("remainder", "by_scalar", lambda m, x: x % 1.5, VALUES)
case("add", "alpha", lambda m, x, y: m.add(x, y, alpha=-2.0), PAIR_X, PAIR_Y)
case("sub", "reflected_scalar", lambda m, x: 2.0 - x, VALUES)
for _c in [0.0, -0.0, INF, -INF, NAN, 2.0]:
    case("mul", f"by_{_c}", lambda m, x, c=_c: x * c, VALUES)
    case("div", f"by_{_c}", lambda m, x, c=_c: x / c, VALUES)
    case("div", f"{_c}_by", lambda m, x, c=_c: c / x, VALUES)
# Scalar exponents: torch evaluates 0.5, -0.5, -1, 2, 3, -2 as sqrt, rsqrt, reciprocal and
# products, which differ from pow at -0 and -inf.
for _c in [0, 1, 2, 3, -1, -2, 0.5, -0.5, 1.5, -1.5, 2.5, 0.0, 2.0, INF, -INF, NAN]:
    case("pow", f"exponent_{_c!r}", lambda m, x, c=_c: x**c, VALUES)
for _c in [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, INF, -INF, NAN]:
    case("pow", f"base_{_c!r}", lambda m, y, c=_c: c**y, VALUES)
case("pow", "method_0d", lambda m, x, y: x.pow(y), np.array(0.0), np.array(-1.0))
case("where", "pairs", lambda m, x, y: m.where(x > y, x, y), PAIR_X, PAIR_Y)
case("where", "scalar_other", lambda m, x: m.where(x > 0, x, NAN), VALUES)
case(
    "where",
    "masked_fill_nan",
    lambda m, x, v: x.masked_fill(m.tensor(VALUES > 0), v),
    VALUES,
    np.array(NAN),
)
case("where", "masked_fill_inf", lambda m, x: x.masked_fill(m.tensor(VALUES < 1), INF), VALUES)
case("matmul", "2d_2d", lambda m, a, b: a @ b, MAT_A, MAT_B)
case("matmul", "1d_2d", lambda m, a, b: a @ b, MAT_A[1], MAT_B)
case("matmul", "2d_1d", lambda m, a, b: a @ b, MAT_A, MAT_B[:, 1])
case("matmul", "1d_1d", lambda m, a, b: a @ b, MAT_A[2], MAT_B[:, 0])
case("matmul", "batched", lambda m, a, b: a @ b, MAT_A.reshape(2, 2, 3), MAT_B)

# =====================================================================================
# Unary math: every special value
# =====================================================================================
for _op, _fn in [
    ("neg", lambda m, x: -x),
    ("exp", lambda m, x: x.exp()),
    ("log", lambda m, x: x.log()),
    ("log1p", lambda m, x: x.log1p()),
    ("expm1", lambda m, x: x.expm1()),
    ("sqrt", lambda m, x: x.sqrt()),
    ("rsqrt", lambda m, x: x.rsqrt()),
    ("reciprocal", lambda m, x: x.reciprocal()),
    ("sin", lambda m, x: x.sin()),
    ("cos", lambda m, x: x.cos()),
    ("tan", lambda m, x: x.tan()),
    ("tanh", lambda m, x: x.tanh()),
    ("sigmoid", lambda m, x: x.sigmoid()),
    ("relu", lambda m, x: x.relu()),
    ("abs", lambda m, x: x.abs()),
    ("sign", lambda m, x: x.sign()),
    ("erf", lambda m, x: x.erf()),
    ("silu", lambda m, x: F(m).silu(x)),
]:
    case(_op, "values", _fn, VALUES)
case("log1p", "near_minus_one", lambda m, x: x.log1p(), np.array([-1.0, -1.5, -INF, -0.5]))
case("relu", "inplace", lambda m, x: (x * 1).relu_(), VALUES)
case("gelu", "exact", lambda m, x: F(m).gelu(x), VALUES)
case("gelu", "tanh", lambda m, x: F(m).gelu(x, approximate="tanh"), VALUES)
case("clamp", "min_max", lambda m, x: x.clamp(-1.0, 1.0), VALUES)
case("clamp", "min", lambda m, x: x.clamp(min=0.0), VALUES)
case("clamp", "max", lambda m, x: x.clamp(max=0.0), VALUES)
case("clamp", "infinite_bounds", lambda m, x: x.clamp(-INF, INF), VALUES)
case("clamp", "inplace", lambda m, x: (x * 1).clamp_(0.5, 2.0), VALUES)
case("softplus", "default", lambda m, x: F(m).softplus(x), VALUES)
case("softplus", "beta_threshold", lambda m, x: F(m).softplus(x, 2.0, 5.0), VALUES)
# Tensor bounds: every pair of values against the bounds (ties included), NaN bounds
case("clamp_tensor", "min_max", lambda m, x, lo, hi: m.clamp(x, lo, hi), PAIR_X, PAIR_Y, PAIR_Y.T)
case("clamp_tensor", "min", lambda m, x, lo: m.clamp(x, min=lo), PAIR_X, PAIR_Y)
case("clamp_tensor", "max", lambda m, x, hi: x.clamp(max=hi), PAIR_X, PAIR_Y)
case(
    "clamp_tensor",
    "const_bounds",
    lambda m, x, lo: m.clamp(x, lo, m.tensor(1.0, dtype=m.float64)),
    VALUES,
    Const(VALUES[::-1].copy()),
)
for _red in ["none", "mean", "sum"]:
    case(
        "binary_cross_entropy_with_logits",
        _red,
        lambda m, x, t, red=_red: F(m).binary_cross_entropy_with_logits(x, t, reduction=red),
        PAIR_X,
        PAIR_Y,
    )
case(
    "binary_cross_entropy_with_logits",
    "weights",
    lambda m, x, t, w, pw: F(m).binary_cross_entropy_with_logits(
        x, t, weight=w, pos_weight=pw, reduction="none"
    ),
    PAIR_X,
    np.resize([0.0, 1.0, 0.5], PAIR_X.shape),
    Const(np.resize([2.0, 0.0, INF, NAN], VALUES.size)),
    Const(np.resize([1.0, 3.0, 0.0], VALUES.size)),
)

# =====================================================================================
# Reductions: rows of special values, reduced along a dim and whole
# =====================================================================================
for _op in ["sum", "mean"]:
    case(_op, "dim1", lambda m, x, o=_op: getattr(x, o)(1), ROWS)
    case(_op, "dim0_keepdim", lambda m, x, o=_op: getattr(x, o)(0, keepdim=True), ROWS)
    case(_op, "all", lambda m, x, o=_op: getattr(x, o)(), ROWS[:3])
for _op in ["amax", "amin"]:
    case(_op, "dim1", lambda m, x, o=_op: getattr(m, o)(x, 1), ROWS)
    case(_op, "dim0_keepdim", lambda m, x, o=_op: getattr(m, o)(x, 0, keepdim=True), ROWS.T)
    # max() and min() without a dim: torch splits the gradient among the NaNs (amax: all NaN)
    _short = _op[1:]
    for _i, _row in enumerate(ROWS):
        case(_op, f"all_row{_i}", lambda m, x, o=_op: getattr(m, o)(x), _row)
        case(_op, f"{_short}_row{_i}", lambda m, x, o=_short: getattr(x, o)(), _row)
    case(_op, f"{_short}_2d", lambda m, x, o=_short: getattr(m, o)(x), ROWS[:3])
case("max_dim", "max_dim1", lambda m, x: x.max(1).values, ROWS)
case("max_dim", "min_dim1", lambda m, x: m.min(x, 1).values, ROWS)
case("max_dim", "max_dim0_keepdim", lambda m, x: x.max(0, keepdim=True).values, ROWS.T)
case("logsumexp", "dim1", lambda m, x: x.logsumexp(1), ROWS)
case("logsumexp", "dim0_keepdim", lambda m, x: m.logsumexp(x, 0, keepdim=True), ROWS.T)
case("logsumexp", "dims_all", lambda m, x: m.logsumexp(x, (0, 1)), ROWS[6:8])

# =====================================================================================
# Shapes, views, indexing, joins: special values pass through
# =====================================================================================
_V12: Final = np.resize(VALUES, 12).reshape(3, 4)
case("reshape", "reshape", lambda m, x: x.reshape(4, 3), _V12)
case("transpose", "t", lambda m, x: x.t(), _V12)
case("permute", "permute", lambda m, x: x.reshape(3, 2, 2).permute(2, 0, 1), _V12)
case("expand", "expand", lambda m, x: x.expand(2, 3, 4), _V12[:, :1])
case("getitem", "slice", lambda m, x: x[1:, ::2], _V12)
case("getitem", "repeated_index", lambda m, x: x[m.tensor([0, 0, 2])], _V12)
case("getitem", "mask", lambda m, x: x[x > 0], _V12)
case(
    "index_add_zeros",
    "repeated_rows",  # getitem's backward, called directly: zeros with g added at the index
    lambda m, g: (
        ops.index_add_zeros(g, (np.array([1, 1, 0]), Ellipsis), (3, 4))
        if m is ag
        else torch.zeros(3, 4, dtype=torch.float64).index_put(
            (torch.tensor([1, 1, 0]),), g, accumulate=True
        )
    ),
    _V12,
)


def _setitem(m: Any, w: Any, v: Any) -> Any:
    x = w * 1
    x[m.tensor([2, 0])] = v
    return x


case("index_put", "index_tensor", _setitem, _V12, _V12[:2] + 1.0)
case("cat", "dim1", lambda m, a, b: m.cat([a, b], 1), _V12, _V12[:, :2])
case("stack", "dim0", lambda m, a, b: m.stack([a, b]), _V12, _V12[::-1])
case("split", "dim1", lambda m, x: x.split(3, 1), _V12)
case("unbind", "dim0", lambda m, x: x.unbind(0), _V12)
case("clone", "clone", lambda m, x: x.clone(), _V12)
case(
    "cast", "float32_and_back", lambda m, x: x.to(m.float32).to(m.float64), np.append(VALUES, 1e300)
)
case("copy", "broadcast_src", lambda m, w, s: (w * 1).copy_(s), _V12, _V12[1])
case("fill", "fill", lambda m, w: (w * 1).fill_(NAN), _V12)

# ----- shape, indexing and random ops -----
case("repeat", "repeat", lambda m, x: x.repeat(2, 1, 3), _V12)
case("repeat", "tile", lambda m, x: m.tile(x, (2, 1)), _V12)
case("getitem", "narrow_select", lambda m, x: x.narrow(1, 1, 2).select(0, 2), _V12)
case("getitem", "flip_roll", lambda m, x: m.roll(m.flip(x, (1,)), (1, -1), (0, 1)), _V12)
case("getitem", "gather", lambda m, x: x.gather(1, m.tensor([[0, 0], [3, 1], [2, 2]])), _V12)
case("getitem", "index_select", lambda m, x: x.index_select(1, m.tensor([3, 3, 0])), _V12)
case("getitem", "pad_reflect", lambda m, x: F(m).pad(x, (2, 1), mode="reflect"), _V12)
case("index_add_zeros", "pad_constant", lambda m, x: F(m).pad(x, (1, -1, 2, 0), value=NAN), _V12)
case(
    "index_add_zeros",
    "scatter_add",
    lambda m, x, s: x.scatter_add(1, m.tensor([[0, 0], [3, 1], [2, 2]]), s),
    _V12,
    _V12[:, :2][::-1],
)
case("where", "tril", lambda m, x: m.tril(x, 1), _V12)
case("where", "triu", lambda m, x: x.triu(-1), _V12)

# =====================================================================================
# Neural-network functions
# =====================================================================================
case("linear", "bias", lambda m, x, w, b: F(m).linear(x, w, b), MAT_A, MAT_B.T, MAT_B[0])
case("linear", "no_bias", lambda m, x, w: F(m).linear(x, w), MAT_A.reshape(2, 2, 3), MAT_B.T)
for _op in ["softmax", "log_softmax"]:
    case(_op, "dim1", lambda m, x, o=_op: getattr(F(m), o)(x, 1), ROWS)
    case(_op, "dim0", lambda m, x, o=_op: getattr(F(m), o)(x, 0), ROWS.T)
_LOGP: Final = np.array([[NAN, 0.0, -1.0], [-INF, -0.5, 1.0], [0.5, INF, -2.0], [-1.0, -INF, -INF]])
_TARGET: Final = np.array([1, 0, 1, 2])
for _red in ["mean", "sum", "none"]:
    case(
        "nll_loss",
        _red,
        lambda m, x, red=_red: F(m).nll_loss(x, m.tensor(_TARGET), reduction=red),
        _LOGP,
    )
    case(
        "nll_loss",
        f"{_red}_weight_ignore_index",
        lambda m, x, red=_red: F(m).nll_loss(
            x,
            m.tensor([1, -100, 1, 2]),
            weight=m.tensor([0.5, 2.0, 1.5], dtype=m.float64),
            reduction=red,
        ),
        _LOGP,
    )
    case(
        "nll_loss",
        f"{_red}_all_ignored",
        lambda m, x, red=_red: F(m).nll_loss(x, m.tensor([-100] * 4), reduction=red),
        _LOGP,
    )
case(
    "nll_loss",
    "of_log_softmax",
    lambda m, x: F(m).nll_loss(F(m).log_softmax(x, 1), m.tensor(_TARGET)),
    _LOGP,
)
for _red in ["mean", "sum"]:  # the fused op (See NOTE [One cross entropy op])
    case(
        "cross_entropy",
        _red,
        lambda m, x, red=_red: F(m).cross_entropy(x, m.tensor(_TARGET), reduction=red),
        _LOGP,
    )


# ----- var, std, prod, norm, cumsum; dot, outer, einsum; sort, topk -----
for _op in ["var", "std"]:
    case(_op, "dim1", lambda m, x, o=_op: getattr(x, o)(1), ROWS)
    case(_op, "dim0_correction0", lambda m, x, o=_op: getattr(m, o)(x, 0, correction=0), ROWS)
    case(_op, "all", lambda m, x, o=_op: getattr(x, o)(), ROWS[9:])
_PROD_ROWS: Final = np.array(
    [[0.0, 2.0, 3.0], [0.0, 0.0, 2.0], [-0.0, 1.5, -2.0], [INF, 0.0, 1.0], [NAN, 2.0, 0.0]]
)
case("prod", "dim1", lambda m, x: x.prod(1), np.concatenate([ROWS, _PROD_ROWS]))
case("prod", "dim0_keepdim", lambda m, x: m.prod(x, 0, keepdim=True), _PROD_ROWS.T)
case("prod", "all_one_zero", lambda m, x: x.prod(), _PROD_ROWS[0])
case("prod", "all_two_zeros", lambda m, x: x.prod(), _PROD_ROWS[1])
case("prod", "all_no_zero", lambda m, x: m.prod(x), ROWS[9])
_NORM_ROWS: Final = np.concatenate([ROWS, np.zeros((1, 3)), [[0.0, -0.0, 0.0], [3.0, -3.0, 1.0]]])
for _p in [2, 1, INF, -INF, 3, 0.5, 0, -1, "fro"]:
    case("norm", f"p{_p}_dim1", lambda m, x, p=_p: x.norm(p, dim=1), _NORM_ROWS)
case("norm", "default_all_zero", lambda m, x: m.norm(x), np.zeros((2, 3)))
case("norm", "default_all", lambda m, x: m.norm(x), ROWS[9:])
case("cumsum", "dim1", lambda m, x: x.cumsum(1), ROWS)
case("cumsum", "dim0", lambda m, x: m.cumsum(x, 0), ROWS)
case("cumprod", "dim1", lambda m, x: x.cumprod(1), np.concatenate([ROWS, _PROD_ROWS]))
case("cumprod", "dim0", lambda m, x: m.cumprod(x, 0), _PROD_ROWS.T)
case("logcumsumexp", "dim1", lambda m, x: x.logcumsumexp(1), ROWS)
case("logcumsumexp", "dim0", lambda m, x: m.logcumsumexp(x, 0), ROWS)
case("dot", "dot", lambda m, x, y: m.dot(x, y), MAT_A[:, 0], MAT_A[:, 2])
case("outer", "outer", lambda m, x, y: m.outer(x, y), MAT_A[:, 0], MAT_B[:, 1])
case("einsum", "matmul", lambda m, a, b: m.einsum("ij,jk->ik", a, b), MAT_A, MAT_B)
case("einsum", "trace", lambda m, a: m.einsum("ii", a), MAT_A[:3])
case("einsum", "diagonal_times", lambda m, a, v: m.einsum("ii,i->i", a, v), MAT_A[:3], MAT_B[:, 0])
case("sort", "dim1", lambda m, x: x.sort(dim=1, stable=True).values, ROWS)
case("sort", "descending", lambda m, x: m.sort(x, dim=0, descending=True, stable=True)[0], ROWS)
case("topk", "largest", lambda m, x: x.topk(1).values, ROWS[[1, 5, 6, 9, 10]])
case("topk", "smallest", lambda m, x: m.topk(x, 2, largest=False).values, ROWS[[1, 2, 5, 9]])

# ----- convolution and pooling -----
# The input gradient and weight gradient ops, called directly, against torch.nn.grad's.
_CONV_X: Final = np.resize(VALUES, 2 * 2 * 4 * 5).reshape(2, 2, 4, 5)
_CONV_W: Final = np.array([0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 1.0, 3.0] * 3).reshape(3, 2, 2, 2)
_CONV_P: Final[dict[str, Any]] = {
    "stride": (2, 1),
    "padding": ((1, 1), (0, 0)),
    "dilation": (1, 2),
    "groups": 1,
    "x_hw": (4, 5),
    "k_hw": (2, 2),
}
_CONV_TORCH: Final[dict[str, Any]] = {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)}
_CONV_GY: Final = np.resize(VALUES[::-1], 2 * 3 * 3 * 3).reshape(2, 3, 3, 3)
case(
    "convolution",
    "specials_in_input",
    lambda m, x, w, b: F(m).conv2d(x, w, b, **_CONV_TORCH),
    _CONV_X,
    _CONV_W,
    np.array([0.5, -1.0, 2.0]),
)
case(
    "convolution",
    "specials_in_weight_1d",
    lambda m, x, w: F(m).conv1d(x, w, padding=1),
    _CONV_W.reshape(3, 2, 4) / 2,
    np.resize(VALUES, 12).reshape(3, 2, 2),
)
case(
    "conv_input_grad",
    "specials",
    lambda m, gy, w: (
        ops.conv.conv_input_grad_op(gy, w, **_CONV_P)
        if m is ag
        else torch.nn.grad.conv2d_input((2, 2, 4, 5), w, gy, **_CONV_TORCH)
    ),
    _CONV_GY,
    _CONV_W,
)
case(
    "conv_weight_grad",
    "specials",
    lambda m, x, gy: (
        ops.conv.conv_weight_grad_op(x, gy, **_CONV_P)
        if m is ag
        else torch.nn.grad.conv2d_weight(x, (3, 2, 2, 2), gy, **_CONV_TORCH)
    ),
    _CONV_X,
    _CONV_GY / 4,
)
case(
    "max_pool2d_with_indices",
    "ties_nan_inf",
    lambda m, x: F(m).max_pool2d(x, 2, stride=1, padding=1),
    np.resize(VALUES, 2 * 4 * 5).reshape(1, 2, 4, 5),
)
case(
    "max_pool2d_with_indices",
    "relu_zeros",
    lambda m, x: F(m).max_pool2d(F(m).relu(x), (2, 3), stride=2, ceil_mode=True),
    np.resize(VALUES, 2 * 5 * 5).reshape(2, 1, 5, 5),
)


# =====================================================================================
# diagonal and ag.linalg: special values on a diagonal; for the factorisations, a matrix with
# zeros (and a symmetric positive-definite one) under the special output gradients. det at a
# singular matrix is tests/test_linalg.py's (the adjugate, where torch's first-order backward
# gives 0).
# =====================================================================================
case("diagonal", "specials", lambda m, x: x.diagonal(1, 0, 2), np.resize(VALUES, (3, 2, 4)))
_LA: Final = np.array([[2.0, 0.0, -1.0], [0.5, 3.0, 0.0], [-0.0, 1.0, 4.0]])
_LA_SPD: Final = _LA @ _LA.T + np.eye(3)
case("linalg_inv_ex", "zeros", lambda m, a: m.linalg.inv(a), _LA)
case("linalg_det", "zeros", lambda m, a: m.linalg.det(a), _LA)
case("linalg_slogdet", "zeros", lambda m, a: m.linalg.slogdet(a)[1], _LA)
case("linalg_solve_ex", "zeros", lambda m, a, b: m.linalg.solve(a, b), _LA, _LA[:, :2])
case("linalg_cholesky_ex", "spd", lambda m, a: m.linalg.cholesky(a), _LA_SPD)
case("linalg_qr", "zeros", lambda m, a: m.linalg.qr(a)[1].abs(), _LA)
case("linalg_svd", "zeros", lambda m, a: m.linalg.svd(a)[1], _LA)
case("linalg_eigh", "spd", lambda m, a: m.linalg.eigh(a)[0], _LA_SPD)
case("linalg_matrix_exp", "zeros", lambda m, a: m.linalg.matrix_exp(a), _LA)
case("linalg_pinv", "zeros", lambda m, a: m.linalg.pinv(a), _LA)
case("linalg_lu_factor_ex", "zeros", lambda m, a: m.linalg.lu_factor(a)[0], _LA)


# ----- ops made fast: smooth_l1_loss, huber_loss, hardswish -----
for _red in ("mean", "sum", "none"):
    case(
        "smooth_l1_loss",
        _red,
        lambda m, x, y, red=_red: F(m).smooth_l1_loss(x, y, reduction=red),
        PAIR_X,
        PAIR_Y,
    )
    case(
        "huber_loss",
        _red,
        lambda m, x, y, red=_red: F(m).huber_loss(x, y, reduction=red),
        PAIR_X,
        PAIR_Y,
    )
case(
    "smooth_l1_loss",
    "beta",
    lambda m, x, y: F(m).smooth_l1_loss(x, y, reduction="none", beta=0.5),
    PAIR_X,
    PAIR_Y,
)
case(
    "huber_loss",
    "delta_const_target",
    lambda m, x, y: F(m).huber_loss(x, y, reduction="none", delta=2.5),
    PAIR_X,
    Const(PAIR_Y),
)
# torch's vectorized loop gives a NaN gradient at NaN, its scalar loop (short tensors, the tail)
# the output gradient: NaN only in a 5-element tensor, which the scalar loop takes.
case(
    "hardswish",
    "specials_and_kinks",
    lambda m, x: F(m).hardswish(x),
    np.concatenate([VALUES[1:], [-3.0, 2.999, -2.999, -3.001, 3.001, -4.0]]),
)
case("hardswish", "nan", lambda m, x: F(m).hardswish(x), np.array([NAN, 3.0, -3.0, INF, -INF]))


# =====================================================================================
# More pointwise math: every special value; the edges of each domain (+-1 for acos, asin,
# atanh and erfinv, 0 and 1 for logit and ndtri, poles of lgamma, digamma and polygamma)
# =====================================================================================
_UNIT: Final = np.array([1.0, -1.0, 0.5, -0.5, 0.0, -0.0, 1.5, -1.5, 1.0 - 1e-16, NAN])
_PROBS: Final = np.array([0.0, -0.0, 1.0, 0.5, 0.25, 1e-300, 1.0 - 1e-16, -0.5, 1.5, NAN])
_POLES: Final = np.array([0.0, -0.0, -1.0, -2.0, -2.5, 0.5, 1.0, 2.0, 1e-300, -INF, INF, NAN])
_HALVES: Final = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994, 1e300, -1e-300])
# Left out, where asyncgrad (SciPy's polygamma) differs from torch: polygamma(n >= 1, x) at the
# negative integers (inf; torch a large finite number: 6.58e32 at -1) and at -inf (inf; torch
# NaN), which is also digamma's gradient there; and at +inf (+-0; torch NaN).
_NO_NEG_INT: Final = VALUES[~((VALUES < 0) & (VALUES == np.round(VALUES)))]
_NO_INF: Final = _NO_NEG_INT[~np.isinf(_NO_NEG_INT)]
_POLES_NO_NEG_INT: Final = _POLES[~((_POLES < 0) & (_POLES == np.round(_POLES)))]
# Left out: logit's gradient at -0 (asyncgrad -inf, torch +inf)
_NO_NEG_ZERO: Final = VALUES[~((VALUES == 0) & np.signbit(VALUES))]
for _op, _fn in [
    ("acos", lambda m, x: x.acos()),
    ("asin", lambda m, x: x.asin()),
    ("atan", lambda m, x: x.atan()),
    ("acosh", lambda m, x: x.acosh()),
    ("asinh", lambda m, x: x.asinh()),
    ("atanh", lambda m, x: x.atanh()),
    ("sinh", lambda m, x: x.sinh()),
    ("cosh", lambda m, x: x.cosh()),
    ("exp2", lambda m, x: x.exp2()),
    ("log2", lambda m, x: x.log2()),
    ("log10", lambda m, x: x.log10()),
    ("erfc", lambda m, x: x.erfc()),
    ("erfinv", lambda m, x: x.erfinv()),
    ("lgamma", lambda m, x: x.lgamma()),
    ("i0", lambda m, x: x.i0()),
    ("sinc", lambda m, x: x.sinc()),
    ("nan_to_num", lambda m, x: x.nan_to_num()),
    ("ceil", lambda m, x: x.ceil()),
    ("floor", lambda m, x: x.floor()),
    ("trunc", lambda m, x: x.trunc()),
    ("round", lambda m, x: x.round()),
    ("frac", lambda m, x: x.frac()),
    ("angle", lambda m, x: x.angle()),
    ("erfcx", lambda m, x: m.special.erfcx(x)),
    ("i0e", lambda m, x: m.special.i0e(x)),
    ("i1", lambda m, x: m.special.i1(x)),
    ("i1e", lambda m, x: m.special.i1e(x)),
    ("ndtr", lambda m, x: m.special.ndtr(x)),
    ("ndtri", lambda m, x: m.special.ndtri(x)),
    ("log_ndtr", lambda m, x: m.special.log_ndtr(x)),
    ("entr", lambda m, x: m.special.entr(x)),
]:
    case(_op, "values", _fn, VALUES)
for _op in ("acos", "asin", "atanh", "erfinv", "acosh", "log2", "log10"):
    case(_op, "domain_edges", lambda m, x, o=_op: getattr(x, o)(), _UNIT)
case("logit", "values", lambda m, x: x.logit(), _NO_NEG_ZERO)
case("logit", "domain_edges", lambda m, x: m.logit(x), np.delete(_PROBS, 1))  # not -0
case("logit", "eps", lambda m, x: m.logit(x, eps=1e-6), _PROBS)
case("logit", "eps_values", lambda m, x: x.logit(0.25), VALUES)
case("ndtri", "domain_edges", lambda m, x: m.special.ndtri(x), _PROBS)
case("entr", "near_zero", lambda m, x: m.special.entr(x), _PROBS)
case("lgamma", "poles", lambda m, x: m.lgamma(x), _POLES)
case("digamma", "values", lambda m, x: x.digamma(), _NO_NEG_INT)
case("digamma", "poles", lambda m, x: m.special.digamma(x), _POLES_NO_NEG_INT)
case("polygamma", "n0_values", lambda m, x: m.polygamma(0, x), _NO_NEG_INT)
case("polygamma", "n0_poles", lambda m, x: x.polygamma(0), _POLES_NO_NEG_INT)
for _n in (1, 2, 3):
    case("polygamma", f"n{_n}_values", lambda m, x, n=_n: m.polygamma(n, x), _NO_INF)
    case(
        "polygamma",
        f"n{_n}_poles",
        lambda m, x, n=_n: x.polygamma(n),
        _POLES_NO_NEG_INT[np.isfinite(_POLES_NO_NEG_INT)],
    )
# Left out: tiny x (1e-200), where asyncgrad's gradient is NaN (pi x^2 underflows) and torch's 0
# Not at tiny |x|: torch's formula cancels to 0 there, asyncgrad's series gives the derivative
# (the README's differences).
case("sinc", "zeros_integers", lambda m, x: m.sinc(x), np.array([0.0, -0.0, 1.0, -2.0]))
case("sgn", "plus_x", lambda m, x: x.sgn() + x, VALUES)  # torch's own gradient: a ZeroTensor
case("sgn", "times_x", lambda m, x: x.sgn() * x, VALUES)
for _op in ("i0e", "i1", "i1e"):
    case(_op, "zeros", lambda m, x, o=_op: getattr(m.special, o)(x), np.array([0.0, -0.0, 1e-300]))
case("nan_to_num", "bounds", lambda m, x: m.nan_to_num(x, 1.0, 2.0, -2.0), VALUES)
case("nan_to_num", "nan_only", lambda m, x: x.nan_to_num(nan=-1.0), VALUES)
for _op in ("ceil", "floor", "trunc", "round", "frac"):
    case(_op, "halves", lambda m, x, o=_op: getattr(m, o)(x), _HALVES)
case("round", "decimals", lambda m, x: m.round(x, decimals=1), np.append(VALUES, _HALVES))
case("round", "decimals_negative", lambda m, x: x.round(decimals=-1), VALUES)

# ----- binary math: every pair of special values -----
for _op, _fn in [
    ("atan2", lambda m, x, y: m.atan2(x, y)),
    ("hypot", lambda m, x, y: m.hypot(x, y)),
    ("copysign", lambda m, x, y: m.copysign(x, y)),
    ("logaddexp", lambda m, x, y: m.logaddexp(x, y)),
    ("logaddexp2", lambda m, x, y: m.logaddexp2(x, y)),
    ("fmod", lambda m, x, y: m.fmod(x, y)),
    ("fmax", lambda m, x, y: m.fmax(x, y)),
    ("fmin", lambda m, x, y: m.fmin(x, y)),
    ("nextafter", lambda m, x, y: m.nextafter(x, y)),
    ("xlogy", lambda m, x, y: m.xlogy(x, y)),
    ("xlog1py", lambda m, x, y: m.special.xlog1py(x, y)),
]:
    case(_op, "pairs", _fn, PAIR_X, PAIR_Y)
    case(_op, "const_other", _fn, VALUES[:, None], Const(VALUES))
case("copysign", "scalar_other", lambda m, x: m.copysign(x, -0.0), VALUES)
case("fmod", "by_scalar", lambda m, x: m.fmod(x, 1.5), VALUES)
case("fmax", "nan_0d_other", lambda m, x, y: m.fmax(x, y), VALUES, Const(NAN))
case("fmin", "nan_0d_other", lambda m, x, y: m.fmin(x, y), VALUES, np.array(NAN))
case("xlogy", "scalar_self", lambda m, y: m.xlogy(0.0, y), VALUES)
case("xlog1py", "scalar_other", lambda m, x: m.special.xlog1py(x, -1.0), VALUES)
# The first argument of igamma, igammac and zeta: a constant (torch has no derivative for it).
# Left out, where asyncgrad's values differ from torch's: igamma and igammac of a = NaN at
# x = inf, 0, -0 and of a = inf at x = NaN (asyncgrad NaN; torch igamma 1, 0, 0, 0 and igammac
# 0, 1, 1, 1); zeta at q = inf (asyncgrad 0 and gradient -0; torch NaN for both).
_IG_A: Final = PAIR_X.copy()
_IG_A[np.isnan(PAIR_X) & np.isin(PAIR_Y, [INF, 0.0])] = 2.0
_IG_A[(PAIR_X == INF) & np.isnan(PAIR_Y)] = 2.0
_Q: Final = PAIR_Y[:, PAIR_Y[0] != INF]
_NO_POS_INF: Final = VALUES[VALUES != INF]
case("igamma", "pairs", lambda m, a, x: m.igamma(a, x), Const(_IG_A), PAIR_Y)
case("igammac", "pairs", lambda m, a, x: m.special.gammaincc(a, x), Const(_IG_A), PAIR_Y)
case("zeta", "pairs", lambda m, s, q: m.special.zeta(s, q), Const(PAIR_X[:, PAIR_Y[0] != INF]), _Q)
case(
    "igamma", "gammainc", lambda m, a, x: m.special.gammainc(a, x), Const(VALUES), np.full(_N, 2.5)
)
case("igammac", "igammac", lambda m, a, x: m.igammac(a, x), Const(np.abs(VALUES)), VALUES)
case("zeta", "scalar_s", lambda m, q: m.special.zeta(3.0, q), _NO_POS_INF)

# ----- comparisons written in place (t.eq_(other)): a zero gradient, also for inf and NaN -----
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    case(_op, "pairs", lambda m, x, y, o=_op: getattr(x * 1, f"{o}_")(y), PAIR_X, Const(PAIR_Y))
    case(_op, "scalar", lambda m, x, o=_op: getattr(x * 1, f"{o}_")(0.0), VALUES)

# ----- ops torch does not differentiate: the values, and torch's error from a backward -----
case(
    "heaviside",
    "pairs",
    lambda m, x, v: m.heaviside(x, v),
    PAIR_X[1:],  # Left out: input NaN, where asyncgrad gives NaN and torch 0
    PAIR_Y[1:],
    raises="derivative for aten::heaviside is not implemented",
)
case(
    "floor_divide",
    "inplace_pairs",
    lambda m, x, y: (x * 1).floor_divide_(y),
    PAIR_X,
    Const(PAIR_Y),
    raises="derivative for aten::floor_divide is not implemented",
    torch_raises="derivative for aten::floor_divide_ is not implemented",
)
case(
    "igamma",
    "input_raises",
    lambda m, a, x: m.igamma(a, x),
    VALUES,
    Const(np.full(VALUES.shape, 1.5)),
    raises="the derivative for 'igamma: input' is not implemented.",
)
case(
    "igammac",
    "input_raises",
    lambda m, a, x: m.igammac(a, x),
    VALUES,
    Const(np.full(VALUES.shape, 1.5)),
    raises="the derivative for 'igammac: input' is not implemented.",
)
case(
    "zeta",
    "input_raises",
    lambda m, s, q: m.special.zeta(s, q),
    VALUES,
    Const(np.full(VALUES.shape, 1.5)),
    raises="the derivative for 'zeta' is not implemented.",
)

# ----- binary cross entropy: probabilities at 0 and 1, every pair of them -----
_P: Final = np.array([0.0, 1.0, 0.5, 1e-300, 1.0 - 1e-16, 0.25, 0.999])
_BX: Final = np.repeat(_P, _P.size).reshape(_P.size, _P.size)
_BY: Final = np.tile(_P, _P.size).reshape(_P.size, _P.size)
for _red in ("none", "mean", "sum"):
    case(
        "binary_cross_entropy",
        _red,
        lambda m, x, t, red=_red: F(m).binary_cross_entropy(x, t, reduction=red),
        _BX,
        _BY,
    )
case(
    "binary_cross_entropy",
    "weights",
    lambda m, x, t, w: F(m).binary_cross_entropy(x, t, weight=w, reduction="none"),
    _BX,
    _BY,
    Const(np.resize([2.0, 0.0, INF, NAN], _BX.shape)),
)
case(
    "binary_cross_entropy",
    "const_target",
    lambda m, x, t: F(m).binary_cross_entropy(x, t),
    _BX,
    Const(_BY),
)


# =====================================================================================
# The tests
# =====================================================================================
def _build(m: Any, args: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """The arguments for ``m`` (asyncgrad or torch), and the leaves among them."""
    built, leaves = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            t = m.tensor(np.array(a, order="C"), dtype=m.float64, requires_grad=True)
            leaves.append(t)
        elif isinstance(a, Const):
            t = m.tensor(a.values, dtype=m.float64)
        else:
            t = a
        built.append(t)
    return built, leaves


def _upstream(kind: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    if kind == "mixed":
        return np.resize(G_MIX, shape)
    value = {"ones": 1.0, "inf": INF}[kind]
    return np.full(shape, value)


def _run(m: Any, c: Case, grads: str, create: bool) -> tuple[list[Any], list[Any]]:
    """Forward values and the gradient of every leaf, as float64 arrays (None: no gradient)."""
    args, leaves = _build(m, c.args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy RuntimeWarning fails the case
        out = c.fn(m, *args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        gos = [m.tensor(_upstream(grads, tuple(o.shape)), dtype=m.float64) for o in outs]
        if m is torch:
            got = torch.autograd.grad(outs, leaves, gos, allow_unused=True)
        else:
            got = ag.grad_sync(outs, leaves, gos, allow_unused=True, create_graph=create)
    values = [np.array(o.detach().numpy(), dtype=np.float64) for o in outs]
    return values, [None if g is None else np.asarray(g.detach().numpy()) for g in got]


def _compare(c: Case, grads: str, create: bool, want: tuple[list[Any], list[Any]]) -> None:
    where = f"output gradients {grads!r}, create_graph={create}"
    want_out, want_grads = want
    got_out, got_grads = _run(ag, c, grads, create)
    for i, (got, want) in enumerate(zip(got_out, want_out, strict=True)):
        np.testing.assert_allclose(
            got, want, rtol=1e-7, atol=1e-12, equal_nan=True, err_msg=f"output {i} ({where})"
        )
    for i, (got, want) in enumerate(zip(got_grads, want_grads, strict=True)):
        if got is None or want is None:
            assert got is None, f"grad {i} ({where}): torch has none, asyncgrad {got}"
            assert want is None, f"grad {i} ({where}): asyncgrad has none, torch {want}"
            continue
        assert got.dtype == want.dtype, f"grad {i} ({where}): {got.dtype} vs {want.dtype}"
        np.testing.assert_allclose(
            got, want, rtol=1e-7, atol=1e-12, equal_nan=True, err_msg=f"grad {i} ({where})"
        )


def _compare_raises(c: Case) -> None:
    """The forward values equal torch's; a backward raises torch's error, in both."""
    for create in (False, True):
        errors = []
        for m in (torch, ag):
            with pytest.raises(RuntimeError) as info:  # NotImplementedError too
                _run(m, c, "ones", create and m is ag)
            errors.append((type(info.value), str(info.value)))
        (torch_type, torch_msg), (ag_type, ag_msg) = errors
        assert ag_type is torch_type, f"{ag_type} vs torch's {torch_type}"
        assert torch_msg == c.torch_raises, torch_msg
        assert ag_msg == c.raises, ag_msg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = c.fn(torch, *_build(torch, c.args)[0])
        got = c.fn(ag, *_build(ag, c.args)[0])
    np.testing.assert_allclose(
        np.asarray(got.detach().numpy(), dtype=np.float64),
        np.asarray(want.detach().numpy(), dtype=np.float64),
        rtol=1e-7,
        atol=1e-12,
        equal_nan=True,
    )


PARAMS: Final = [
    pytest.param(op, cid, id=f"{op}-{cid}") for op, cases in CASES.items() for cid in cases
]


# A copy between devices passes every value through unchanged; tests/cuda checks it.
NO_CASE: Final = {"to_copy"}


def test_every_op_has_a_case() -> None:
    missing = sorted(set(OPS) - set(CASES) - NO_CASE)
    assert not missing, f"ops of the rule table without a special-value case: {missing}"
    unknown = sorted(set(CASES) - set(OPS))
    assert not unknown, f"CASES keys that are not ops of the rule table: {unknown}"


@pytest.mark.parametrize(("op", "cid"), PARAMS)
def test_matches_torch(op: str, cid: str) -> None:
    """Every kind of output gradient; ones and the mix also under create_graph=True, where the
    same rules run on Tensors."""
    c = CASES[op][cid]
    if c.raises:
        _compare_raises(c)
        return
    for grads in GRADS:
        want = _run(torch, c, grads, False)
        _compare(c, grads, False, want)
        if grads != "inf":
            _compare(c, grads, True, want)


def _summed_grads(m: Any) -> list[np.ndarray[Any, Any]]:
    x = m.tensor(VALUES, dtype=m.float64, requires_grad=True)
    (x.exp() - x.exp() * 2.0).sum().backward()  # the engine sums the two paths' gradients
    fan_in = x.grad.detach().numpy().copy()
    x.grad = None
    (x * INF).sum().backward()
    (x * -INF).sum().backward()  # summed into .grad
    return [fan_in, x.grad.detach().numpy()]


def test_gradient_sums_match_torch() -> None:
    """Gradients that the engine sums, and sums into ``.grad``, meet inf + -inf: NaN, silently."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _summed_grads(ag)
    for g, want in zip(got, _summed_grads(torch), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-7, atol=1e-12, equal_nan=True)
