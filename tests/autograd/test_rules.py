"""Every rule of the derivative table, checked by finite differences to first and second order.

``CASES`` maps an op name of ``OPS`` (or of a composite function built from table ops, such as
``cross_entropy``) to the cases that exercise it. ``test_every_rule_has_a_case`` fails when a
rule is added to the table without a case here.

Inputs stay away from the points where an op is not differentiable (relu and abs at 0, ties of
max/min/amax, clamp at its bounds): central differences straddle the kink there and disagree
with any one-sided choice. The tie conventions are checked in closed form in
``test_closed_form.py`` instead.
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F
from asyncgrad import ops
from asyncgrad.autograd import gradcheck, gradgradcheck
from asyncgrad.rules import OPS

from ..cuda.conftest import assert_close

Rng = np.random.Generator
Maker = Callable[[Rng], tuple[Any, ...]]


@dataclass(frozen=True)
class Case:
    """``fn(*make(rng))`` must have a correct first and second derivative."""

    fn: Callable[..., Any]
    make: Maker
    eps: float = 1e-6
    atol: float = 1e-5
    rtol: float = 1e-3
    xfail_second: str = ""  # a known bug that breaks gradgradcheck only: the reason
    f32: bool = True  # float32 inputs give float32 outputs and gradients
    cuda: int = 0  # how many CUDA devices it needs
    raises: str = ""  # torch does not differentiate the op: its backward raises this message


# ----- input builders (float64 leaves; each case gets its own seeded generator) -----
def randn(rng: Rng, *shape: int) -> ag.Tensor:
    return ag.tensor(rng.standard_normal(shape), dtype=ag.float64, requires_grad=True)


def uniform(rng: Rng, *shape: int, lo: float, hi: float) -> ag.Tensor:
    return ag.tensor(rng.uniform(lo, hi, shape), dtype=ag.float64, requires_grad=True)


def pos(rng: Rng, *shape: int) -> ag.Tensor:
    """Positive, away from 0 (log, sqrt, pow with a real exponent)."""
    return uniform(rng, *shape, lo=0.5, hi=2.0)


def away(rng: Rng, *shape: int) -> ag.Tensor:
    """Either sign but |x| >= 0.2: clear of the kinks of relu, abs and sign at 0."""
    mag = rng.uniform(0.2, 1.5, shape)
    return ag.tensor(mag * rng.choice([-1.0, 1.0], shape), dtype=ag.float64, requires_grad=True)


def distinct(rng: Rng, *shape: int) -> ag.Tensor:
    """Values at least 0.04 apart for up to 30 elements, and jittered so that two such
    tensors share no value either: no ties for max/min/amax/maximum/minimum."""
    n = int(np.prod(shape))
    grid = rng.permutation(np.linspace(-1.5, 1.5, max(n, 1)))[:n]
    vals = grid + rng.uniform(-0.03, 0.03, n)
    return ag.tensor(vals.reshape(shape), dtype=ag.float64, requires_grad=True)


def const(rng: Rng, *shape: int) -> ag.Tensor:
    """A float64 tensor that does not require grad."""
    return ag.tensor(rng.standard_normal(shape), dtype=ag.float64)


def idx(*values: Any) -> ag.Tensor:
    return ag.tensor(list(values), dtype=ag.int64)


def mask(*values: Any) -> ag.Tensor:
    return ag.tensor(values, dtype=ag.bool)


CASES: Final[dict[str, dict[str, Case]]] = {}
# A float32 leg loses digits: differences with a larger step, compared more loosely.
_CAST_TOL: Final[dict[str, Any]] = {"eps": 1e-3, "atol": 1e-4, "rtol": 1e-3, "f32": False}


def case(op: str, case_id: str, fn: Callable[..., Any], make: Maker, **kw: Any) -> None:
    cases = CASES.setdefault(op, {})
    assert case_id not in cases, f"duplicate case {op}-{case_id}"
    cases[case_id] = Case(fn, make, **kw)


# =====================================================================================
# Binary arithmetic
# =====================================================================================
case("add", "same_shape", ag.add, lambda r: (randn(r, 2, 3), randn(r, 2, 3)))
case("add", "broadcast_3x1_4", ag.add, lambda r: (randn(r, 3, 1), randn(r, 4)))
case("add", "0d_plus_2x3", ag.add, lambda r: (randn(r), randn(r, 2, 3)))
case("add", "alpha", lambda x, y: ag.add(x, y, alpha=-2.5), lambda r: (randn(r, 3), randn(r, 3)))
case("add", "python_scalar_reflected", lambda x: 2.0 + x, lambda r: (randn(r, 3),))
case("add", "const_tensor_other", lambda x, c: x + c, lambda r: (randn(r, 2, 1), const(r, 3)))
case("sub", "broadcast", ag.sub, lambda r: (randn(r, 2, 1), randn(r, 1, 3)))
case("sub", "reflected_scalar", lambda x: 2 - x, lambda r: (randn(r, 4),))
case("sub", "alpha", lambda x, y: x.sub(y, alpha=3), lambda r: (randn(r, 3), randn(r, 3)))
case("sub", "0d_0d", ag.sub, lambda r: (randn(r), randn(r)))
case("mul", "same_shape", ag.mul, lambda r: (randn(r, 2, 3), randn(r, 2, 3)))
case("mul", "broadcast_2x1x3_2x1", ag.mul, lambda r: (randn(r, 2, 1, 3), randn(r, 2, 1)))
case("mul", "0d_times_vector", ag.mul, lambda r: (randn(r), randn(r, 4)))
case("mul", "square_same_input", lambda x: x * x, lambda r: (randn(r, 3),))
case(
    "mul",
    "numpy_array_reflected",
    lambda x: np.arange(1.0, 4.0) * x,  # a float64 array: the result is float64, as in torch
    lambda r: (randn(r, 3),),
    f32=False,
)
case("div", "same_shape", ag.div, lambda r: (randn(r, 2, 3), away(r, 2, 3)))
case("div", "broadcast", ag.div, lambda r: (randn(r, 3, 1), away(r, 2)))
case("div", "reflected_scalar", lambda x: 1.5 / x, lambda r: (away(r, 4),))
case("div", "by_0d", ag.div, lambda r: (randn(r, 2, 2), away(r)))
case("pow", "tensor_exponent", ag.pow, lambda r: (pos(r, 2, 3), randn(r, 2, 3)))
case("pow", "tensor_exponent_broadcast", ag.pow, lambda r: (pos(r, 3, 1), randn(r, 2)))
case("pow", "scalar_exponent_int", lambda x: x**3, lambda r: (randn(r, 4),))
case("pow", "scalar_exponent_float", lambda x: x**2.5, lambda r: (pos(r, 4),))
case("pow", "scalar_exponent_negative", lambda x: x ** (-2), lambda r: (away(r, 4),))
case("pow", "scalar_exponent_zero", lambda x: x**0 * x, lambda r: (randn(r, 3),))
case("pow", "scalar_base_reflected", lambda y: 2.0**y, lambda r: (randn(r, 4),))
case("pow", "operator_both_tensors", lambda b, y: b**y, lambda r: (pos(r, 3), randn(r, 3)))
case("pow", "method_0d", lambda x, y: x.pow(y), lambda r: (pos(r), randn(r)))
case(
    "remainder",
    "mixed_signs",  # x / y stays away from integers, where remainder jumps
    lambda x, y: x % y,
    lambda r: (
        ag.tensor([[0.3, 1.7, -2.2], [2.9, -0.45, 1.15]], dtype=ag.float64, requires_grad=True),
        ag.tensor([[0.7, 0.9, 1.3], [1.1, 0.8, -0.6]], dtype=ag.float64, requires_grad=True),
    ),
)
case("remainder", "scalar_divisor", lambda x: ag.remainder(x, 0.75), lambda r: (distinct(r, 4),))
case("maximum", "same_shape", ag.maximum, lambda r: (distinct(r, 2, 3), distinct(r, 2, 3)))
case("maximum", "broadcast", ag.maximum, lambda r: (distinct(r, 3, 1), distinct(r, 4)))
case(
    "maximum",
    "clamp_tensor_min",
    lambda x, lo: x.clamp(min=lo),
    lambda r: (distinct(r, 5), distinct(r, 5)),
)
case("minimum", "same_shape", ag.minimum, lambda r: (distinct(r, 2, 3), distinct(r, 2, 3)))
case("minimum", "broadcast_0d", ag.minimum, lambda r: (distinct(r, 5), distinct(r)))
case(
    "minimum",
    "clamp_tensor_max",
    lambda x, hi: x.clamp(max=hi),
    lambda r: (distinct(r, 5), distinct(r, 5)),
)
case(
    "where",
    "same_shape",
    lambda x, y: ag.where(mask([True, False, True], [False, False, True]), x, y),
    lambda r: (randn(r, 2, 3), randn(r, 2, 3)),
)
case(
    "where",
    "broadcast_cond_and_inputs",
    lambda x, y: ag.where(mask([True], [False], [True]), x, y),
    lambda r: (randn(r, 1, 4), randn(r, 3, 1)),
)
case(
    "where",
    "0d_other",
    lambda x, y: ag.where(mask(True, False, True, False), x, y),
    lambda r: (randn(r, 4), randn(r)),
)
case("where", "scalar_other", lambda x: ag.where(x > 0, x, 0.5), lambda r: (away(r, 2, 3),))
case(
    "where",
    "masked_fill_tensor_value",
    lambda x, v: x.masked_fill(mask(True, False, True), v),
    lambda r: (randn(r, 3), randn(r)),
)
case(
    "where",
    "masked_fill",
    lambda x: x.masked_fill(mask([[True, False, False], [False, True, False]]), 3.0),
    lambda r: (randn(r, 2, 3),),
)
case(
    "where",
    "masked_fill_inplace",
    lambda w: (w * 1).masked_fill_(mask(False, True, True, False), -1.0),
    lambda r: (randn(r, 4),),
)

# ----- matmul: every pairing of 1-D, 2-D and batched operands -----
for _id, _xs, _ys in [
    ("2d_2d", (2, 3), (3, 4)),
    ("1d_1d", (4,), (4,)),
    ("1d_2d", (3,), (3, 2)),
    ("2d_1d", (2, 3), (3,)),
    ("3d_1d", (2, 2, 3), (3,)),
    ("1d_3d", (3,), (2, 3, 2)),
    ("3d_2d", (2, 2, 3), (3, 2)),
    ("2d_3d", (2, 3), (2, 3, 2)),
    ("batched_3d_3d", (2, 2, 3), (2, 3, 2)),
    ("batch_broadcast_4d_3d", (2, 1, 2, 2), (3, 2, 2)),
    ("batch_broadcast_1_vs_2", (1, 2, 3), (2, 3, 2)),
]:
    case("matmul", _id, ag.matmul, lambda r, xs=_xs, ys=_ys: (randn(r, *xs), randn(r, *ys)))
case("matmul", "operator_const_rhs", lambda x, c: x @ c, lambda r: (randn(r, 2, 3), const(r, 3, 2)))
case("matmul", "mm", ag.mm, lambda r: (randn(r, 2, 3), randn(r, 3, 2)))
case("matmul", "bmm", ag.bmm, lambda r: (randn(r, 2, 2, 3), randn(r, 2, 3, 2)))

# =====================================================================================
# Unary math
# =====================================================================================
for _op, _label, _fn, _mk in [
    ("neg", "neg", ag.neg, randn),
    ("neg", "operator", lambda x: -x, randn),
    ("exp", "exp", ag.exp, randn),
    ("log", "log", ag.log, pos),
    ("log1p", "log1p", ag.log1p, lambda r, *s: uniform(r, *s, lo=-0.5, hi=2.0)),
    ("expm1", "expm1", ag.expm1, randn),
    ("sqrt", "sqrt", ag.sqrt, pos),
    ("rsqrt", "rsqrt", ag.rsqrt, pos),
    ("reciprocal", "reciprocal", ag.reciprocal, away),
    ("sin", "sin", ag.sin, randn),
    ("cos", "cos", ag.cos, randn),
    ("tan", "tan", ag.tan, lambda r, *s: uniform(r, *s, lo=-1.0, hi=1.0)),
    ("tanh", "tanh", ag.tanh, randn),
    ("sigmoid", "sigmoid", ag.sigmoid, randn),
    ("relu", "relu", ag.relu, away),
    ("relu", "functional", F.relu, away),
    ("abs", "abs", ag.abs, away),
    ("abs", "builtin", abs, away),
    ("sign", "times_x", lambda x: ag.sign(x) * x, away),
    ("erf", "erf", ag.erf, randn),
    ("silu", "silu", ag.silu, randn),
    ("silu", "functional", F.silu, randn),
]:
    case(_op, f"{_label}_2x3", _fn, lambda r, mk=_mk: (mk(r, 2, 3),))
    case(_op, f"{_label}_0d", _fn, lambda r, mk=_mk: (mk(r),))
case("sign", "alone", ag.sign, lambda r: (away(r, 4),))
case("sigmoid", "large_magnitude", ag.sigmoid, lambda r: (uniform(r, 4, lo=-8.0, hi=8.0),))
case("gelu", "exact", ag.gelu, lambda r: (randn(r, 2, 3),))
case("gelu", "exact_functional_0d", F.gelu, lambda r: (randn(r),))
case("gelu", "tanh", lambda x: ag.gelu(x, approximate="tanh"), lambda r: (randn(r, 2, 3),))
case("gelu", "tanh_0d", lambda x: F.gelu(x, approximate="tanh"), lambda r: (randn(r),))
# clamp: inputs in [-1.5, 1.5] with the bounds at +-0.75 but never within 0.05 of an input
_CLAMP_VALUES: Final = np.array([-1.4, -0.9, -0.6, -0.1, 0.3, 0.7, 0.85, 1.3])


def _clampable_leaf(rng: Rng) -> tuple[ag.Tensor]:
    vals = rng.permutation(_CLAMP_VALUES).reshape(2, 4)
    return (ag.tensor(vals, dtype=ag.float64, requires_grad=True),)


case("softplus", "default", F.softplus, lambda r: (randn(r, 2, 3),))
case("softplus", "beta_threshold", lambda x: F.softplus(x, 2.0, 1.0), lambda r: (away(r, 2, 3),))
case(
    "clamp_tensor",
    "tensor_bounds",  # every input clear of the others: no ties
    lambda x, lo, hi: ag.clamp(x, lo, hi),
    lambda r: (
        _clampable_leaf(r)[0],
        ag.tensor([[-0.75, -0.5, -1.0, 0.1]] * 2, dtype=ag.float64, requires_grad=True),
        ag.tensor([0.75, 0.5, 1.0, 0.8], dtype=ag.float64, requires_grad=True),
    ),
)
case(
    "clamp_tensor",
    "only_min_0d",
    lambda x, lo: ag.clamp(x, min=lo),
    lambda r: (_clampable_leaf(r)[0], ag.tensor(0.5, dtype=ag.float64, requires_grad=True)),
)
case(
    "clamp_tensor",
    "only_max",
    lambda x, hi: x.clamp(max=hi),
    lambda r: (
        _clampable_leaf(r)[0],
        ag.tensor([0.75, 0.5, 1.0, 0.8], dtype=ag.float64, requires_grad=True),
    ),
)
case(
    "binary_cross_entropy_with_logits",
    "input_and_target",
    lambda x, t: F.binary_cross_entropy_with_logits(x, t),
    lambda r: (randn(r, 2, 3), uniform(r, 2, 3, lo=0.0, hi=1.0)),
)
case(
    "binary_cross_entropy_with_logits",
    "weight_pos_weight_sum",
    lambda x, t: F.binary_cross_entropy_with_logits(
        x,
        t,
        weight=ag.tensor([0.5, 2.0, 1.0], dtype=ag.float64),
        pos_weight=ag.tensor([3.0, 0.5, 1.0], dtype=ag.float64),
        reduction="sum",
    ),
    lambda r: (randn(r, 2, 3), uniform(r, 2, 3, lo=0.0, hi=1.0)),
)
case("clamp", "min_and_max", lambda x: ag.clamp(x, -0.75, 0.75), _clampable_leaf)
case("clamp", "only_min", lambda x: x.clamp(min=-0.75), _clampable_leaf)
case("clamp", "only_max", lambda x: x.clamp(max=0.75), _clampable_leaf)
case("clamp", "clip_alias", lambda x: x.clip(-0.75, 0.75), _clampable_leaf)
case("clamp", "inplace", lambda w: (w * 1).clamp_(-0.75, 0.75), _clampable_leaf)
case(
    "clamp",
    "inplace_on_view",
    lambda w: _inplace_row(w, lambda v: v.clamp_(max=0.75)),
    _clampable_leaf,
)
case("relu", "inplace", lambda w: (w * 1).relu_(), lambda r: (away(r, 2, 3),))


def _inplace_row(w: ag.Tensor, op: Callable[[ag.Tensor], Any]) -> ag.Tensor:
    """``w * 1`` with ``op`` applied in place to its row 1 (a view): a CopySlices graph."""
    x = w * 1
    op(x[1])
    return x


# =====================================================================================
# Reductions
# =====================================================================================
for _op, _fn in [("sum", ag.sum), ("mean", ag.mean)]:
    case(_op, "all", _fn, lambda r: (randn(r, 2, 3),))
    case(_op, "0d", _fn, lambda r: (randn(r),))
    case(_op, "0d_dim0", lambda x, f=_fn: f(x, 0), lambda r: (randn(r),))
    case(_op, "dim1", lambda x, f=_fn: f(x, 1), lambda r: (randn(r, 2, 3),))
    case(
        _op,
        "dim_neg1_keepdim",
        lambda x, f=_fn: f(x, -1, keepdim=True),
        lambda r: (randn(r, 2, 3),),
    )
    case(_op, "dims_tuple_neg", lambda x, f=_fn: f(x, (0, -1)), lambda r: (randn(r, 2, 2, 3),))
    case(
        _op,
        "dims_tuple_keepdim",
        lambda x, f=_fn: f(x, (2, 0), keepdim=True),
        lambda r: (randn(r, 2, 2, 3),),
    )
case("sum", "method_dim_kw", lambda x: x.sum(dim=0), lambda r: (randn(r, 3, 2),))
case(
    "sum",
    "dtype_kw",
    lambda x: x.float().sum(dtype=ag.float64),
    lambda r: (randn(r, 3),),
    **_CAST_TOL,
)
case("mean", "method", lambda x: x.mean(dim=1, keepdim=False), lambda r: (randn(r, 3, 2),))
for _op, _fn in [("amax", ag.amax), ("amin", ag.amin)]:
    case(_op, "all", _fn, lambda r: (distinct(r, 2, 3),))
    case(_op, "0d", _fn, lambda r: (distinct(r),))
    case(_op, "dim0", lambda x, f=_fn: f(x, 0), lambda r: (distinct(r, 3, 2),))
    case(
        _op,
        "dim_neg1_keepdim",
        lambda x, f=_fn: f(x, -1, keepdim=True),
        lambda r: (distinct(r, 3, 2),),
    )
    case(_op, "dims_tuple", lambda x, f=_fn: f(x, (0, 2)), lambda r: (distinct(r, 2, 2, 3),))
case("amax", "max_no_dim", ag.max, lambda r: (distinct(r, 2, 3),))
case("amin", "min_no_dim_method", lambda x: x.min(), lambda r: (distinct(r, 2, 3),))
case("max_dim", "max_dim1_values", lambda x: ag.max(x, 1).values, lambda r: (distinct(r, 2, 3),))
case("max_dim", "max_dim0_tuple_index", lambda x: x.max(dim=0)[0], lambda r: (distinct(r, 3, 2),))
case(
    "max_dim",
    "max_neg_dim_keepdim",
    lambda x: x.max(dim=-1, keepdim=True).values,
    lambda r: (distinct(r, 2, 3),),
)
case("max_dim", "max_3d_middle", lambda x: x.max(1).values, lambda r: (distinct(r, 2, 3, 2),))
case("max_dim", "min_dim0", lambda x: ag.min(x, 0).values, lambda r: (distinct(r, 3, 2),))
case(
    "max_dim",
    "min_neg_dim_keepdim",
    lambda x: x.min(dim=-2, keepdim=True).values,
    lambda r: (distinct(r, 3, 2),),
)
case("max_dim", "1d", lambda x: x.max(0).values, lambda r: (distinct(r, 5),))
case("logsumexp", "dim1", lambda x: ag.logsumexp(x, 1), lambda r: (randn(r, 2, 3),))
case(
    "logsumexp",
    "dim_neg1_keepdim",
    lambda x: x.logsumexp(-1, keepdim=True),
    lambda r: (randn(r, 2, 3),),
)
case("logsumexp", "dims_tuple", lambda x: ag.logsumexp(x, (0, 2)), lambda r: (randn(r, 2, 2, 3),))
case("logsumexp", "1d", lambda x: ag.logsumexp(x, 0), lambda r: (randn(r, 5),))
case(
    "logsumexp",
    "large_values",
    lambda x: ag.logsumexp(x * 100, 1),
    lambda r: (randn(r, 2, 3),),
    atol=1e-4,
)

# =====================================================================================
# Shapes and views
# =====================================================================================
case("reshape", "reshape", lambda x: x.reshape(3, 2), lambda r: (randn(r, 2, 3),))
case("reshape", "reshape_infer", lambda x: ag.reshape(x, (-1,)), lambda r: (randn(r, 2, 3),))
case("reshape", "view", lambda x: x.view(3, 1, 2), lambda r: (randn(r, 2, 3),))
case(
    "reshape",
    "view_of_nonleaf_twice",
    lambda x: (x * 2).view(6).view(2, 3) * x,
    lambda r: (randn(r, 2, 3),),
)
case("reshape", "0d_to_1", lambda x: x.reshape(1), lambda r: (randn(r),))
case("reshape", "to_0d", lambda x: x.reshape(()), lambda r: (randn(r, 1, 1),))
case("reshape", "flatten", lambda x: x.flatten(), lambda r: (randn(r, 2, 2, 3),))
case("reshape", "flatten_middle", lambda x: ag.flatten(x, 1, 2), lambda r: (randn(r, 2, 2, 3),))
case("reshape", "unflatten", lambda x: x.unflatten(1, (2, 2)), lambda r: (randn(r, 3, 4),))
case("reshape", "squeeze_all", lambda x: x.squeeze(), lambda r: (randn(r, 1, 3, 1),))
case("reshape", "squeeze_neg_dim", lambda x: ag.squeeze(x, -1), lambda r: (randn(r, 1, 3, 1),))
case("reshape", "unsqueeze_neg", lambda x: x.unsqueeze(-1), lambda r: (randn(r, 2, 3),))
case("reshape", "unsqueeze_0d", lambda x: ag.unsqueeze(x, 0), lambda r: (randn(r),))
case("transpose", "2d", lambda x: x.transpose(0, 1), lambda r: (randn(r, 2, 3),))
case("transpose", "neg_dims_3d", lambda x: ag.transpose(x, -1, -3), lambda r: (randn(r, 2, 3, 2),))
case("transpose", "t", lambda x: x.t(), lambda r: (randn(r, 2, 3),))
case("transpose", "mT", lambda x: x.mT, lambda r: (randn(r, 2, 2, 3),))
case(
    "transpose", "swapaxes_then_op", lambda x: x.swapaxes(0, 2) * 2, lambda r: (randn(r, 3, 1, 2),)
)
case("permute", "3d", lambda x: x.permute(2, 0, 1), lambda r: (randn(r, 2, 3, 2),))
case(
    "permute", "neg_dims_tuple", lambda x: ag.permute(x, (-1, 0, 1)), lambda r: (randn(r, 2, 3, 2),)
)
case("permute", "T", lambda x: x.T, lambda r: (randn(r, 2, 3),))
case("permute", "t_of_1d", lambda x: x.t(), lambda r: (randn(r, 3),))
case("expand", "new_leading_dims", lambda x: x.expand(2, 3, 4), lambda r: (randn(r, 3, 1),))
case("expand", "minus_one", lambda x: x.expand(-1, 4), lambda r: (randn(r, 3, 1),))
case(
    "expand",
    "expand_as",
    lambda x, y: x.expand_as(y) * y,
    lambda r: (randn(r, 1, 3), randn(r, 2, 3)),
)
case("expand", "broadcast_to_0d", lambda x: ag.broadcast_to(x, (2, 3)), lambda r: (randn(r),))

# ----- indexing -----
for _id, _index in [
    ("int", 1),
    ("neg_int", -1),
    ("two_ints_0d", (1, 2)),
    ("slice", slice(1, 3)),
    ("step_slice", (slice(None), slice(None, None, 2))),
    ("none_ellipsis", (None, Ellipsis, 1)),
    ("ellipsis_none_last", (Ellipsis, None)),
    ("int_slice_none", (0, slice(1, None), None)),
    ("index_tensor", idx(2, 0)),
    ("repeated_indices", idx(1, 1, 2, 1)),
    ("index_list", [0, 2, 2]),
    ("negative_index_tensor", idx(-1, 0)),
    ("bool_mask_rows", mask(True, False, True)),
    (
        "bool_mask_2d",
        mask([True, False, True, False], [False, True, True, False], [True, True, False, False]),
    ),
    ("advanced_and_slice", (slice(None), idx(3, 0, 3))),
    ("two_index_tensors", (idx(0, 2, 2), idx(1, 1, 3))),
    ("index_tensor_2d", idx([0, 1], [1, 1])),
]:
    case("getitem", _id, lambda x, i=_index: x[i], lambda r: (randn(r, 3, 4),))
case("getitem", "0d_bool_true", lambda x: x[True], lambda r: (randn(r, 3),))
case("getitem", "0d_input_none", lambda x: x[None], lambda r: (randn(r),))
case("getitem", "0d_input_ellipsis", lambda x: x[...] * x, lambda r: (randn(r),))
case("getitem", "0d_index_tensor", lambda x: x[ag.tensor(1)], lambda r: (randn(r, 3, 2),))
case("getitem", "advanced_twice", lambda x: x[idx(0, 0)][:, idx(1, 1)], lambda r: (randn(r, 2, 3),))
case("getitem", "mask_from_values", lambda x: x[x > 0] * 2, lambda r: (away(r, 2, 3),))
case(
    "getitem",
    "iterate_rows",
    lambda x: ag.stack([row * (i + 1) for i, row in enumerate(x)]),
    lambda r: (randn(r, 3, 2),),
)
# index_add_zeros is getitem's backward, differentiable for double backward; called directly here
_IAZ_INDEX: Final = (np.array([1, 1, 0]), Ellipsis)
case(
    "index_add_zeros",
    "repeated_rows",
    lambda g: ops.index_add_zeros(g, _IAZ_INDEX, (3, 2)),
    lambda r: (randn(r, 3, 2),),
)
case(
    "index_add_zeros",
    "basic_slice",
    lambda g: ops.index_add_zeros(g, (slice(1, 3), Ellipsis), (4,)),
    lambda r: (randn(r, 2),),
)


def _setitem(index: Any) -> Callable[[ag.Tensor, ag.Tensor], ag.Tensor]:
    def fn(w: ag.Tensor, v: ag.Tensor) -> ag.Tensor:
        x = w * 1
        x[index] = v
        return x

    return fn


case("index_put", "index_tensor", _setitem(idx(2, 0)), lambda r: (randn(r, 3, 2), randn(r, 2, 2)))
case("index_put", "broadcast_value", _setitem(idx(0, 2)), lambda r: (randn(r, 3, 2), randn(r, 2)))
case(
    "index_put",
    "bool_mask_0d_value",
    _setitem(mask(True, False, True)),
    lambda r: (randn(r, 3), randn(r)),
)
case(
    "index_put",
    "two_index_tensors",
    _setitem((idx(0, 2), idx(1, 0))),
    lambda r: (randn(r, 3, 2), randn(r, 2)),
)
case(
    "index_put",
    "slice_and_index",
    _setitem((slice(None), idx(1))),
    lambda r: (randn(r, 3, 2), randn(r, 3, 1)),
)

# ----- joining and splitting -----
case("cat", "dim0", lambda a, b: ag.cat([a, b]), lambda r: (randn(r, 2, 3), randn(r, 1, 3)))
case(
    "cat",
    "dim1_three",
    lambda a, b, c: ag.cat([a, b, c], 1),
    lambda r: (randn(r, 2, 1), randn(r, 2, 3), randn(r, 2, 2)),
)
case(
    "cat",
    "dim_neg1",
    lambda a, b: ag.cat((a, b), dim=-1),
    lambda r: (randn(r, 2, 2), randn(r, 2, 1)),
)
case("cat", "with_const", lambda a, c: ag.cat([c, a, c]), lambda r: (randn(r, 2), const(r, 3)))
case("cat", "same_input_twice", lambda a: ag.cat([a, a * a]), lambda r: (randn(r, 3),))
case("stack", "dim0", lambda a, b: ag.stack([a, b]), lambda r: (randn(r, 2, 3), randn(r, 2, 3)))
case(
    "stack",
    "dim1",
    lambda a, b, c: ag.stack([a, b, c], 1),
    lambda r: (randn(r, 2), randn(r, 2), randn(r, 2)),
)
case(
    "stack",
    "dim_neg1",
    lambda a, b: ag.stack((a, b), dim=-1),
    lambda r: (randn(r, 2, 2), randn(r, 2, 2)),
)
case("stack", "0d", lambda a, b: ag.stack([a, b]), lambda r: (randn(r), randn(r)))
case("split", "uneven_int", lambda x: x.split(2), lambda r: (randn(r, 5, 2),))
case("split", "sizes_dim1", lambda x: ag.split(x, [1, 3], dim=1), lambda r: (randn(r, 2, 4),))
case("split", "neg_dim", lambda x: x.split(2, dim=-1), lambda r: (randn(r, 2, 3),))
case("split", "only_some_used", lambda x: x.split([2, 1, 2])[2] * 3, lambda r: (randn(r, 5),))
case("split", "chunk_uneven", lambda x: x.chunk(3, 1), lambda r: (randn(r, 2, 5),))
case(
    "split",
    "parts_recombined",
    lambda x: ag.cat([p * (i + 1) for i, p in enumerate(x.split(1))]),
    lambda r: (randn(r, 3),),
)
case("unbind", "dim0", lambda x: x.unbind(), lambda r: (randn(r, 3, 2),))
case("unbind", "dim1", lambda x: ag.unbind(x, 1), lambda r: (randn(r, 2, 3),))
case("unbind", "neg_dim", lambda x: x.unbind(-1), lambda r: (randn(r, 2, 2),))
case("unbind", "one_used", lambda x: x.unbind(1)[1].exp(), lambda r: (randn(r, 2, 3),))
case(
    "split",
    "inplace_on_a_part",
    lambda w: _inplace_part(w, lambda x: x.split(2)[1]),
    lambda r: (randn(r, 5),),
)
case(
    "unbind",
    "inplace_on_a_part",
    lambda w: _inplace_part(w, lambda x: x.unbind()[1]),
    lambda r: (randn(r, 3, 2),),
)
case(
    "permute",
    "inplace_on_view",
    lambda w: _inplace_part(w, lambda x: x.permute(1, 0)[0]),
    lambda r: (randn(r, 2, 3),),
)
case(
    "transpose",
    "inplace_on_view",
    lambda w: _inplace_part(w, lambda x: x.t()[1:]),
    lambda r: (randn(r, 3, 2),),
)
case(
    "reshape",
    "inplace_on_view",
    lambda w: _inplace_part(w, lambda x: x.view(3, 2)[:, 0]),
    lambda r: (randn(r, 6),),
)


def _inplace_part(w: ag.Tensor, part: Callable[[ag.Tensor], ag.Tensor]) -> ag.Tensor:
    """``w * 1`` with ``part`` of it (a view) scaled, then shifted by ``w[0] ** 2``, in place."""
    x = w * 1
    p = part(x)
    p.mul_(2.5)
    p.add_(w.reshape(-1)[0] ** 2)
    return x


case("clone", "clone", lambda x: x.clone(), lambda r: (randn(r, 2, 3),))
case(
    "to_copy",
    "cpu_cuda_cpu",
    lambda x: (x.to("cuda") * 2).cpu(),
    lambda r: (randn(r, 2, 3),),
    cuda=1,
)
case(
    "to_copy",
    "between_devices",
    lambda x: (x.cuda(0).to("cuda:1").sin() * x.cuda(0).to("cuda:1")).cpu(),
    lambda r: (randn(r, 3),),
    cuda=2,
)
case("clone", "contiguous_of_transpose", lambda x: x.t().contiguous(), lambda r: (randn(r, 2, 3),))
case("clone", "contiguous_noop", lambda x: x.contiguous() * 2, lambda r: (randn(r, 2, 3),))
case(
    "cast",
    "to_float32_and_back",
    lambda x: x.to(ag.float32).to(ag.float64),
    lambda r: (randn(r, 2, 3),),
    **_CAST_TOL,
)
case(
    "cast",
    "float_double_methods",
    lambda x: (x.float() * 2).double(),
    lambda r: (randn(r, 3),),
    **_CAST_TOL,
)
case(
    "cast",
    "to_dtype_kw_type_as",
    lambda x, y: x.to(dtype=ag.float32).type_as(y) * y,
    lambda r: (randn(r, 3), randn(r, 3)),
    **_CAST_TOL,
)


def _copy_into(w: ag.Tensor, src: ag.Tensor) -> ag.Tensor:
    return (w * 1).copy_(src)


def _copy_into_view(w: ag.Tensor, src: ag.Tensor) -> ag.Tensor:
    x = w * 2
    x[:, 1:3].copy_(src)
    return x


def _setitem_basic(w: ag.Tensor, v: ag.Tensor) -> ag.Tensor:
    x = w.sin()
    x[..., 0] = v
    return x * w


def _fill(w: ag.Tensor) -> ag.Tensor:
    x = w * w
    x[1].fill_(2.0)
    x[0, :1].zero_()
    return x


case("copy", "same_shape", _copy_into, lambda r: (randn(r, 2, 3), randn(r, 2, 3)))
case("copy", "broadcast_src", _copy_into, lambda r: (randn(r, 2, 3), randn(r, 3)))
case("copy", "into_view", _copy_into_view, lambda r: (randn(r, 2, 4), randn(r, 2, 2)))
case("copy", "setitem_ellipsis_int", _setitem_basic, lambda r: (randn(r, 2, 3), randn(r, 2)))
case("copy", "const_src", lambda w, c: (w * 1).copy_(c) * w, lambda r: (randn(r, 3), const(r, 3)))
case("fill", "fill_whole", lambda w: (w * 1).fill_(1.5) * w, lambda r: (randn(r, 3),))
case("fill", "fill_and_zero_views", _fill, lambda r: (randn(r, 2, 3),))
case(
    "fill",
    "fill_tensor_value",
    lambda w, v: (w * 1).fill_(v) * w,
    lambda r: (randn(r, 3), randn(r)),
)

# ----- shape, indexing and random ops -----
# narrow, select, flip, roll, gather, index_select and pad (reflect, replicate,
# circular) record getitem; scatter_add and constant pad record index_add_zeros; tril, triu and
# masked_fill record where (See NOTE [Index ops are getitem] in asyncgrad/ops/index.py).
_GATHER_INDEX: Final = idx([0, 2], [1, 1], [3, 0])
_SCATTER_INDEX: Final = idx([0, 1, 0], [2, 2, 2])


def _scatter_add_(w: ag.Tensor, s: ag.Tensor) -> ag.Tensor:
    x = w * 1
    x.scatter_add_(0, _SCATTER_INDEX, s)
    return x * w


def _masked_fill_view(w: ag.Tensor) -> ag.Tensor:
    x = w * 1
    x.narrow(1, 1, 2).masked_fill_(x.narrow(1, 1, 2) > 0, 0.5)
    return x * w


for _id, _fn, _shape in [
    ("narrow", lambda x: x.narrow(1, 1, 2) * 2, (3, 4)),
    ("narrow_neg_start", lambda x: ag.narrow(x, -1, -3, 2), (2, 4)),
    ("select", lambda x: x.select(1, -1), (3, 4)),
    ("select_of_narrow", lambda x: ag.select(x.narrow(0, 1, 2), 0, 1), (3, 4)),
    ("flip", lambda x: ag.flip(x, (0, -1)), (3, 4)),
    ("flip_method", lambda x: x.flip(1), (3, 4)),
    ("roll", lambda x: ag.roll(x, (1, -2), (0, 1)), (3, 4)),
    ("roll_flat", lambda x: x.roll(5), (3, 4)),
    ("gather", lambda x: ag.gather(x, 1, _GATHER_INDEX), (3, 4)),
    ("gather_dim0", lambda x: x.gather(0, _GATHER_INDEX), (4, 3)),
    ("index_select", lambda x: ag.index_select(x, 1, idx(3, 0, 3)), (2, 4)),
    ("pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect"), (2, 4)),
    ("pad_replicate_2d", lambda x: F.pad(x, (1, 2, 2, 0), mode="replicate"), (1, 3, 2)),
    ("pad_circular_crop", lambda x: F.pad(x, (2, -1), mode="circular"), (2, 4)),
]:
    case("getitem", _id, _fn, lambda r, s=_shape: (randn(r, *s),))
case("repeat", "leading_dim", lambda x: x.repeat(2, 1, 3), lambda r: (randn(r, 2, 3),))
case("repeat", "0d", lambda x: x.repeat(3), lambda r: (randn(r),))
case("repeat", "no_reps_0d", lambda x: x.repeat(()) * x, lambda r: (randn(r),))
case("repeat", "zero_copies", lambda x: ag.cat([x.repeat(0, 1), x]), lambda r: (randn(r, 2, 3),))
case("repeat", "tile", lambda x: ag.tile(x, (2,)), lambda r: (randn(r, 2, 3),))
case(
    "index_add_zeros",
    "scatter_add",
    lambda x, s: ag.scatter_add(x, 0, _SCATTER_INDEX, s),
    lambda r: (randn(r, 3, 4), randn(r, 2, 3)),
)
case(
    "index_add_zeros",
    "scatter_add_src_larger",
    lambda x, s: x.scatter_add(1, _GATHER_INDEX, s),
    lambda r: (randn(r, 3, 4), randn(r, 3, 3)),
)
case("index_add_zeros", "scatter_add_", _scatter_add_, lambda r: (randn(r, 3, 4), randn(r, 2, 3)))
case("index_add_zeros", "pad_constant", lambda x: F.pad(x, (1, 2)), lambda r: (randn(r, 2, 3),))
case(
    "index_add_zeros",
    "pad_constant_value_crop",
    lambda x: F.pad(x, (1, -1, -1, 2), value=0.5),
    lambda r: (randn(r, 3, 3),),
)
case("where", "tril", lambda x: ag.tril(x, 1), lambda r: (randn(r, 3, 4),))
case("where", "triu_batched", lambda x: x.triu(-1), lambda r: (randn(r, 2, 3, 3),))
case(
    "where",
    "masked_fill_function",
    lambda x: ag.masked_fill(x, x > 0, 2.0),
    lambda r: (away(r, 2, 3),),
)
case("where", "masked_fill_narrow_view", _masked_fill_view, lambda r: (away(r, 2, 4),))

# =====================================================================================
# Neural-network functions
# =====================================================================================
case("linear", "2d_bias", F.linear, lambda r: (randn(r, 2, 3), randn(r, 4, 3), randn(r, 4)))
case("linear", "2d_no_bias", F.linear, lambda r: (randn(r, 2, 3), randn(r, 2, 3)))
case("linear", "3d_bias", F.linear, lambda r: (randn(r, 2, 2, 3), randn(r, 2, 3), randn(r, 2)))
case("linear", "3d_no_bias", F.linear, lambda r: (randn(r, 2, 2, 2), randn(r, 3, 2)))
case("linear", "1d_input_bias", F.linear, lambda r: (randn(r, 3), randn(r, 2, 3), randn(r, 2)))
case(
    "linear",
    "const_weight",
    lambda x, b, w: F.linear(x, w, b),
    lambda r: (randn(r, 2, 3), randn(r, 2), const(r, 2, 3)),
)
for _op, _fn in [("softmax", F.softmax), ("log_softmax", F.log_softmax)]:
    case(_op, "dim1", lambda x, f=_fn: f(x, 1), lambda r: (randn(r, 2, 3),))
    case(_op, "dim0", lambda x, f=_fn: f(x, 0), lambda r: (randn(r, 3, 2),))
    case(_op, "dim_neg1_3d", lambda x, f=_fn: f(x, -1), lambda r: (randn(r, 2, 2, 3),))
    case(_op, "dim1_3d", lambda x, f=_fn: f(x, dim=1), lambda r: (randn(r, 2, 3, 2),))
    case(_op, "1d", lambda x, f=_fn: f(x, 0), lambda r: (randn(r, 4),))
    case(_op, "method", lambda x, n=_op: getattr(x, n)(-1) * x, lambda r: (randn(r, 2, 3),))

_T4: Final = idx(0, 2, 1, 2)
_T4_IGN: Final = idx(0, -100, 1, 2)
_T4_IGN1: Final = idx(0, 1, 1, 2)
_W3: Final = ag.tensor([0.5, 2.0, 1.5], dtype=ag.float64)


def _logp(rng: Rng, *shape: int) -> tuple[ag.Tensor]:
    return (randn(rng, *shape),)


def _lsm(x: ag.Tensor) -> ag.Tensor:
    return F.log_softmax(x, 1)


for _red in ["mean", "sum", "none"]:
    case(
        "nll_loss",
        f"{_red}",
        lambda x, red=_red: F.nll_loss(x, _T4, reduction=red),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "nll_loss",
        f"{_red}_weight",
        lambda x, red=_red: F.nll_loss(x, _T4, weight=_W3, reduction=red),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "nll_loss",
        f"{_red}_ignore_index_default",
        lambda x, red=_red: F.nll_loss(x, _T4_IGN, reduction=red),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "nll_loss",
        f"{_red}_ignore_index_1_weight",
        lambda x, red=_red: F.nll_loss(x, _T4_IGN1, weight=_W3, ignore_index=1, reduction=red),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "cross_entropy",
        f"{_red}",
        lambda x, red=_red: F.cross_entropy(x, _T4, reduction=red),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "cross_entropy",
        f"{_red}_weight_ignore_index",
        lambda x, red=_red: F.cross_entropy(x, _T4_IGN, weight=_W3, reduction=red),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "cross_entropy",
        f"{_red}_label_smoothing",
        lambda x, red=_red: F.cross_entropy(x, _T4, reduction=red, label_smoothing=0.2),
        lambda r: _logp(r, 4, 3),
    )
    case(
        "cross_entropy",
        f"{_red}_label_smoothing_weight_ignore_index",
        lambda x, red=_red: F.cross_entropy(
            x, _T4_IGN1, weight=_W3, ignore_index=1, reduction=red, label_smoothing=0.3
        ),
        lambda r: _logp(r, 4, 3),
        f32=False,  # the float64 weight promotes the smoothing term (torch would refuse it)
    )
case("nll_loss", "of_log_softmax", lambda x: F.nll_loss(_lsm(x), _T4), lambda r: _logp(r, 4, 3))
case(
    "nll_loss",
    "1d_single_sample",
    lambda x: F.nll_loss(x, idx(1).reshape(())),
    lambda r: _logp(r, 3),
)
case(
    "nll_loss",
    "3d_spatial",
    lambda x: F.nll_loss(x, idx([0, 2], [1, 1]), reduction="sum"),
    lambda r: _logp(r, 2, 3, 2),
)
case(
    "cross_entropy",
    "1d_single_sample",
    lambda x: F.cross_entropy(x, idx(2).reshape(())),
    lambda r: _logp(r, 3),
)
case(
    "cross_entropy",
    "3d_spatial_label_smoothing",
    lambda x: F.cross_entropy(x, idx([0, 2], [1, 1]), label_smoothing=0.1),
    lambda r: _logp(r, 2, 3, 2),
)
case("mse_loss", "mean", lambda x, y: F.mse_loss(x, y), lambda r: (randn(r, 2, 3), randn(r, 2, 3)))
case(
    "mse_loss",
    "sum_const_target",
    lambda x, y: F.mse_loss(x, y, reduction="sum"),
    lambda r: (randn(r, 4), const(r, 4)),
)
case(
    "mse_loss",
    "none",
    lambda x, y: F.mse_loss(x, y, reduction="none"),
    lambda r: (randn(r, 3), randn(r, 3)),
)


# ----- var, std, prod, norm, cumsum; dot, outer, einsum; sort, topk -----
for _op, _fn in [("var", ag.var), ("std", ag.std)]:
    case(_op, "all", _fn, lambda r: (randn(r, 2, 3),))
    case(_op, "dim1", lambda x, f=_fn: f(x, 1), lambda r: (randn(r, 2, 3),))
    case(
        _op,
        "dims_tuple_keepdim",
        lambda x, f=_fn: f(x, (0, 2), keepdim=True),
        lambda r: (randn(r, 2, 2, 3),),
    )
    case(_op, "correction0", lambda x, f=_fn: f(x, -1, correction=0), lambda r: (randn(r, 3, 4),))
    case(_op, "unbiased_false", lambda x, f=_fn: f(x, 0, False), lambda r: (randn(r, 3, 2),))
    case(
        _op,
        "method_correction2",
        lambda x, n=_op: getattr(x, n)(correction=2),
        lambda r: (randn(r, 5),),
    )
case("prod", "all", ag.prod, lambda r: (away(r, 2, 3),))
case("prod", "dim1", lambda x: ag.prod(x, 1), lambda r: (away(r, 2, 3),))
case("prod", "neg_dim_keepdim", lambda x: x.prod(-2, keepdim=True), lambda r: (away(r, 3, 2, 2),))
case("prod", "0d", ag.prod, lambda r: (away(r),))
_ZEROS: Final = np.array([[0.0, 0.7, -1.3, 1.1], [0.0, 0.0, 0.9, 1.2], [0.8, -0.6, 1.4, 0.5]])
case(
    "prod",
    "zeros_dim1",  # rows with one zero, two zeros, none
    lambda x: x.prod(1),
    lambda r: (ag.tensor(_ZEROS, dtype=ag.float64, requires_grad=True),),
)
case(
    "prod",
    "one_zero_all",
    ag.prod,
    lambda r: (
        ag.tensor(_ZEROS[:, 2:] + np.eye(3, 2) * -0.9, dtype=ag.float64, requires_grad=True),
    ),
)
for _label, _p in [
    ("default", None),
    ("p1", 1),
    ("p3", 3),
    ("p1_5", 1.5),
    ("inf", float("inf")),
    ("neg_inf", -float("inf")),
    ("p0_5", 0.5),
    ("fro", "fro"),
]:
    if _p is None:
        case("norm", _label, ag.norm, lambda r: (away(r, 2, 3),))
        continue
    case("norm", _label, lambda x, p=_p: ag.norm(x, p), lambda r: (distinct(r, 2, 3),))
    case("norm", f"{_label}_dim1", lambda x, p=_p: x.norm(p, dim=1), lambda r: (distinct(r, 2, 3),))
case(
    "norm",
    "dims_keepdim",
    lambda x: x.norm(dim=(0, 2), keepdim=True),
    lambda r: (randn(r, 2, 2, 3),),
)
case("cumsum", "dim0", lambda x: ag.cumsum(x, 0), lambda r: (randn(r, 3, 2),))
case("cumsum", "neg_dim", lambda x: x.cumsum(-1), lambda r: (randn(r, 2, 4),))
case("cumsum", "0d", lambda x: x.cumsum(0), lambda r: (randn(r),))
case("cumsum", "squared", lambda x: x.cumsum(1) ** 2, lambda r: (randn(r, 2, 3),))
case("cumprod", "dim1", lambda x: ag.cumprod(x, 1), lambda r: (randn(r, 2, 4),))
case("cumprod", "0d", lambda x: x.cumprod(0), lambda r: (randn(r),))
case(
    "cumprod",
    "zeros_dim1",
    lambda x: x.cumprod(1),
    lambda r: (ag.tensor(_ZEROS, dtype=ag.float64, requires_grad=True),),
)
case("logcumsumexp", "dim1", lambda x: ag.logcumsumexp(x, 1), lambda r: (randn(r, 2, 4),))
case("logcumsumexp", "neg_dim", lambda x: x.logcumsumexp(-2), lambda r: (randn(r, 3, 2),))
case("dot", "dot", ag.dot, lambda r: (randn(r, 4), randn(r, 4)))
case("dot", "method_const", lambda x, c: x.dot(c), lambda r: (randn(r, 3), const(r, 3)))
case("outer", "outer", ag.outer, lambda r: (randn(r, 3), randn(r, 2)))
case("outer", "method_squared", lambda x, y: x.outer(y) ** 2, lambda r: (randn(r, 2), randn(r, 3)))
for _id, _eq, _shapes in [
    ("matmul", "ij,jk->ik", [(2, 3), (3, 4)]),
    ("implicit_output", "ij,jk", [(2, 3), (3, 2)]),
    ("trace", "ii", [(3, 3)]),
    ("diagonal", "ii->i", [(3, 3)]),
    ("transpose", "ij->ji", [(2, 3)]),
    ("sum_only_in_x", "ij,j->i", [(2, 3), (3,)]),
    ("batched_ellipsis", "...ij,...jk->...ik", [(2, 2, 3), (2, 3, 2)]),
    ("ellipsis_broadcast", "...i,...i->...", [(2, 3), (3,)]),
    ("size1_broadcast", "ij,ij->ij", [(1, 3), (2, 3)]),
    ("three_operands", "ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
    ("outer_three", "i,j,k->ijk", [(2,), (3,), (2,)]),
    ("diag_times_vector", "ii,i->", [(3, 3), (3,)]),
    ("repeated_in_both", "iij,jj->ij", [(2, 2, 3), (3, 3)]),
    ("bilinear_same_operand", "i,ij,j->", [(3,), (3, 3), (3,)]),
    ("uppercase_list", "Ab,bC->AC", [(2, 2), (2, 3)]),
]:
    case(
        "einsum",
        _id,
        lambda *xs, eq=_eq: ag.einsum(eq, *xs),
        lambda r, shapes=_shapes: tuple(randn(r, *s) for s in shapes),
    )
case(
    "einsum",
    "operand_list",
    lambda x, y: ag.einsum("i,i", [x, y]),
    lambda r: (randn(r, 3), randn(r, 3)),
)
case(
    "einsum", "same_tensor_twice", lambda x: ag.einsum("ij,ij->", x, x), lambda r: (randn(r, 2, 3),)
)
case("sort", "dim1", lambda x: x.sort(1).values, lambda r: (distinct(r, 2, 3),))
case(
    "sort",
    "descending_dim0",
    lambda x: ag.sort(x, 0, descending=True)[0],
    lambda r: (distinct(r, 3, 2),),
)
case(
    "sort",
    "1d_times_weights",
    lambda x: x.sort().values * ag.arange(4.0),
    lambda r: (distinct(r, 4),),
)
case("sort", "0d", lambda x: x.sort().values, lambda r: (distinct(r),))
case("topk", "largest", lambda x: x.topk(2).values, lambda r: (distinct(r, 2, 4),))
case(
    "topk",
    "smallest_dim0",
    lambda x: ag.topk(x, 2, dim=0, largest=False)[0],
    lambda r: (distinct(r, 3, 2),),
)
case(
    "topk",
    "unsorted_squared",
    lambda x: x.topk(3, sorted=False).values ** 2,
    lambda r: (distinct(r, 5),),
)


# ----- convolution and pooling -----
def _conv_params(
    stride: tuple[int, int] = (1, 1),
    padding: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0)),
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    x_hw: tuple[int, int] = (5, 4),
    k_hw: tuple[int, int] = (2, 3),
) -> dict[str, Any]:
    """The parameters the three conv ops share (See NOTE [Convolution is three ops])."""
    return {
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
        "x_hw": x_hw,
        "k_hw": k_hw,
    }


_CONV_P: Final = _conv_params(stride=(2, 1), padding=((1, 0), (1, 2)), dilation=(1, 2), groups=2)
case(
    "convolution",
    "2d_bias",
    lambda x, w, b: F.conv2d(x, w, b),
    lambda r: (randn(r, 2, 2, 4, 4), randn(r, 3, 2, 2, 2), randn(r, 3)),
)
case(
    "convolution",
    "2d_stride_padding_non_square",
    lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 0)),
    lambda r: (randn(r, 1, 2, 5, 4), randn(r, 2, 2, 3, 2)),
)
case(
    "convolution",
    "2d_dilation_groups_same",
    lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=(1, 2), groups=2),
    lambda r: (randn(r, 2, 4, 3, 5), randn(r, 4, 2, 2, 2), randn(r, 4)),
)
case(
    "convolution",
    "2d_unbatched_const_weight",
    lambda x, w: F.conv2d(x, w, padding=1),
    lambda r: (randn(r, 2, 3, 3), const(r, 2, 2, 2, 2)),
)
case(
    "convolution",
    "1d_stride_dilation_groups",
    lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
    lambda r: (randn(r, 2, 4, 7), randn(r, 2, 2, 2), randn(r, 2)),
)
case(
    "convolution",
    "avg_pool2d_padding_ceil_mode",
    lambda x: F.avg_pool2d(x, (3, 2), stride=2, padding=1, ceil_mode=True),
    lambda r: (randn(r, 2, 2, 5, 4),),
)
case(
    "convolution",
    "avg_pool2d_exclude_pad",
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
    lambda r: (randn(r, 1, 2, 5, 5),),
)
case(
    "conv_input_grad",
    "strided_padded_groups",
    lambda gy, w: ops.conv.conv_input_grad_op(gy, w, **_CONV_P),
    lambda r: (randn(r, 2, 4, 3, 3), randn(r, 4, 2, 2, 3)),
)
case(
    "conv_input_grad",
    "1d",
    lambda gy, w: ops.conv.conv_input_grad_op(
        gy, w, **_conv_params(stride=(1, 2), x_hw=(1, 6), k_hw=(1, 2))
    ),
    lambda r: (randn(r, 2, 3, 3), randn(r, 3, 2, 2)),
)
case(
    "conv_weight_grad",
    "strided_padded_groups",
    lambda x, gy: ops.conv.conv_weight_grad_op(x, gy, **_CONV_P),
    lambda r: (randn(r, 2, 4, 5, 4), randn(r, 2, 4, 3, 3)),
)
case(
    "conv_weight_grad",
    "1d",
    lambda x, gy: ops.conv.conv_weight_grad_op(
        x, gy, **_conv_params(stride=(1, 2), x_hw=(1, 6), k_hw=(1, 2))
    ),
    lambda r: (randn(r, 2, 3, 6), randn(r, 2, 3, 3)),
)
case(
    "max_pool2d_with_indices",
    "kernel_2",
    lambda x: F.max_pool2d(x, 2),
    lambda r: (distinct(r, 1, 2, 4, 4),),
)
case(
    "max_pool2d_with_indices",
    "overlapping_padded_ceil_mode",
    lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
    lambda r: (distinct(r, 1, 1, 6, 5),),
)
case(
    "max_pool2d_with_indices",
    "dilation_unbatched",
    lambda x: F.max_pool2d(x, (2, 2), stride=1, dilation=(2, 1)),
    lambda r: (distinct(r, 1, 5, 4),),
)


# =====================================================================================
# diagonal; ag.linalg (losses of Q, U, V that do not depend on their signs)
# =====================================================================================
def square(rng: Rng, *batch: int, n: int = 3) -> ag.Tensor:
    """Square matrices well away from singular."""
    a = rng.standard_normal((*batch, n, n)) + 3.0 * np.eye(n)
    return ag.tensor(a, dtype=ag.float64, requires_grad=True)


case("diagonal", "offset_dims", lambda x: x.diagonal(1, 0, 2), lambda r: (randn(r, 3, 2, 4),))
case("diagonal", "below_reversed", lambda x: ag.diagonal(x, -1, 1, 0), lambda r: (randn(r, 4, 3),))
case("linalg_inv_ex", "batched", ag.linalg.inv, lambda r: (square(r, 2),))
case("linalg_det", "batched", ag.linalg.det, lambda r: (square(r, 2),))
case("linalg_slogdet", "logabsdet", lambda a: ag.linalg.slogdet(a)[1], lambda r: (square(r, 2),))
case("linalg_solve_ex", "matrix", ag.linalg.solve, lambda r: (square(r, 2), randn(r, 2, 3, 2)))
case("linalg_solve_ex", "vector", ag.linalg.solve, lambda r: (square(r, 2), randn(r, 3)))
case(
    "linalg_cholesky_ex",
    "of_a_gram_matrix",
    lambda a: ag.linalg.cholesky(a @ a.mT),
    lambda r: (square(r, 2),),
)
case(
    "linalg_qr",
    "tall",
    lambda a: (lambda q, r: (q @ q.mT, r.abs()))(*ag.linalg.qr(a)),
    lambda r: (randn(r, 2, 4, 3),),
)
case(
    "linalg_qr",
    "wide",
    lambda a: (lambda q, r: (q @ q.mT, r.abs()))(*ag.linalg.qr(a)),
    lambda r: (randn(r, 3, 5),),
)
case(
    "linalg_svd",
    "tall",
    lambda a: (lambda u, s, vh: (u @ u.mT, s, vh.mT @ vh))(*ag.linalg.svd(a, False)),
    lambda r: (randn(r, 2, 4, 3),),
)
case(
    "linalg_svd",
    "wide",
    lambda a: (lambda u, s, vh: (u @ u.mT, s, vh.mT @ vh))(*ag.linalg.svd(a, False)),
    lambda r: (randn(r, 3, 5),),
)
case(
    "linalg_eigh",
    "symmetrised",
    lambda a: (lambda lam, v: (lam, v * v))(*ag.linalg.eigh(a + a.mT)),
    lambda r: (randn(r, 2, 3, 3),),
)
case("linalg_matrix_exp", "batched", ag.linalg.matrix_exp, lambda r: (randn(r, 2, 3, 3),))
case("linalg_matrix_exp", "squarings", ag.linalg.matrix_exp, lambda r: (square(r),))
case("linalg_pinv", "tall", ag.linalg.pinv, lambda r: (randn(r, 2, 4, 3),))
case("linalg_pinv", "wide", ag.linalg.pinv, lambda r: (randn(r, 3, 5),))
case(
    "linalg_lu_factor_ex",
    "square",
    lambda a: ag.linalg.lu_factor(a)[0],
    lambda r: (randn(r, 2, 3, 3),),
)
case(
    "linalg_lu_factor_ex",
    "wide",
    lambda a: ag.linalg.lu_factor(a)[0],
    lambda r: (randn(r, 3, 5),),
)
case(
    "linalg_lu_factor_ex",
    "tall",
    lambda a: ag.linalg.lu_factor(a)[0],
    lambda r: (randn(r, 5, 3),),
)


# ----- ops made fast: smooth_l1_loss, huber_loss, hardswish -----
for _red in ("mean", "sum", "none"):
    case(
        "smooth_l1_loss",
        _red,
        lambda x, t, red=_red: F.smooth_l1_loss(x, t, reduction=red),
        lambda r: (randn(r, 3, 4), randn(r, 3, 4)),
    )
    case(
        "huber_loss",
        _red,
        lambda x, t, red=_red: F.huber_loss(x, t, reduction=red, delta=0.7),
        lambda r: (randn(r, 3, 4), randn(r, 3, 4)),
    )
case(
    "smooth_l1_loss",
    "beta",
    lambda x, t: F.smooth_l1_loss(x, t, beta=0.5),
    lambda r: (randn(r, 3, 4), randn(r, 3, 4)),
)
case(
    "huber_loss",
    "constant_target",
    lambda x, t: F.huber_loss(x, t, delta=2.0),
    lambda r: (randn(r, 2, 5), const(r, 2, 5)),
)
case(
    "hardswish",
    "both_sides_of_the_kinks",
    lambda x: F.hardswish(x),
    lambda r: (uniform(r, 3, 5, lo=-4.5, hi=4.5),),
)
case(
    "hardswish",
    "inplace",
    lambda x: F.hardswish(x * 1.0, inplace=True),
    lambda r: (uniform(r, 2, 6, lo=-4.5, hi=4.5),),
)


# =====================================================================================
# More pointwise math: inverse trigonometric and hyperbolic functions, exponentials and
# logarithms, torch.special's functions, rounding, signs and comparisons
# =====================================================================================
def _open_unit(rng: Rng, *shape: int) -> ag.Tensor:
    """In (-0.9, 0.9): inside the domains of acos, asin, atanh and erfinv."""
    return uniform(rng, *shape, lo=-0.9, hi=0.9)


def _prob(rng: Rng, *shape: int) -> ag.Tensor:
    """In (0.05, 0.95): inside the domains of logit and ndtri."""
    return uniform(rng, *shape, lo=0.05, hi=0.95)


def _off_grid(rng: Rng, *shape: int) -> ag.Tensor:
    """An integer in [-3, 3] plus 0.1 to 0.4: clear of the jumps of ceil, floor, trunc and round
    (at integers and half-integers) and of frac."""
    whole = rng.integers(-3, 4, shape)
    return ag.tensor(whole + rng.uniform(0.1, 0.4, shape), dtype=ag.float64, requires_grad=True)


def _pos_const(rng: Rng, *shape: int, lo: float = 0.5, hi: float = 3.0) -> ag.Tensor:
    """A positive float64 tensor that does not require grad (the first argument of igamma,
    igammac and zeta, whose derivative torch does not implement)."""
    return ag.tensor(rng.uniform(lo, hi, shape), dtype=ag.float64)


for _op, _fn, _mk in [
    ("acos", ag.acos, _open_unit),
    ("asin", ag.asin, _open_unit),
    ("atan", ag.atan, randn),
    ("acosh", ag.acosh, lambda r, *s: uniform(r, *s, lo=1.2, hi=3.0)),
    ("asinh", ag.asinh, randn),
    ("atanh", ag.atanh, _open_unit),
    ("sinh", ag.sinh, randn),
    ("cosh", ag.cosh, randn),
    ("exp2", ag.exp2, randn),
    ("log2", ag.log2, pos),
    ("log10", ag.log10, pos),
    ("erfc", ag.erfc, randn),
    ("erfinv", ag.erfinv, _open_unit),
    ("lgamma", ag.lgamma, pos),
    ("digamma", ag.digamma, pos),
    ("i0", ag.i0, randn),
    ("sinc", ag.sinc, randn),
    ("logit", ag.logit, _prob),
    ("nan_to_num", ag.nan_to_num, randn),
    ("frac", ag.frac, _off_grid),
    ("erfcx", ag.special.erfcx, randn),
    ("i0e", ag.special.i0e, away),  # sgn(x) in the derivative: clear of 0
    ("i1", ag.special.i1, randn),
    ("i1e", ag.special.i1e, away),
    ("ndtr", ag.special.ndtr, randn),
    ("ndtri", ag.special.ndtri, _prob),
    ("log_ndtr", ag.special.log_ndtr, randn),
    ("entr", ag.special.entr, pos),
]:
    case(_op, "2x3", _fn, lambda r, mk=_mk: (mk(r, 2, 3),))
    case(_op, "0d", _fn, lambda r, mk=_mk: (mk(r),))
case("acos", "method", lambda x: x.acos() * x, lambda r: (_open_unit(r, 4),))
case(
    "sinc",
    "at_and_near_zero",  # the series near 0: the second derivative at 0 is -pi^2 / 3
    ag.sinc,
    lambda r: (ag.tensor([0.0, 2e-4, -5e-4, 0.5, -1.5], dtype=ag.float64, requires_grad=True),),
)
case("asin", "arcsin_alias", ag.arcsin, lambda r: (_open_unit(r, 4),))
case("atanh", "arctanh_method", lambda x: x.arctanh(), lambda r: (_open_unit(r, 4),))
case("lgamma", "negative_non_integer", ag.lgamma, lambda r: (uniform(r, 4, lo=-2.9, hi=-2.1),))
case("lgamma", "gammaln", ag.special.gammaln, lambda r: (pos(r, 3),))
case("digamma", "psi_negative", ag.special.psi, lambda r: (uniform(r, 4, lo=-0.9, hi=-0.1),))
case("erfc", "large", ag.special.erfc, lambda r: (uniform(r, 4, lo=1.0, hi=4.0),))
case(
    "i1",
    "at_zero",
    ag.special.i1,
    lambda r: (ag.tensor([0.0, 1.0], dtype=ag.float64, requires_grad=True),),
)
case("logit", "eps_inside", lambda x: ag.logit(x, eps=0.02), lambda r: (_prob(r, 2, 3),))
case(
    "logit",
    "eps_clipped",  # below eps and above 1 - eps the derivative is 0
    lambda x: ag.logit(x, eps=0.2) * x,
    lambda r: (ag.tensor([0.05, 0.1, 0.5, 0.9, 0.95], dtype=ag.float64, requires_grad=True),),
)
case(
    "nan_to_num",
    "with_bounds",
    lambda x: ag.nan_to_num(x, 0.0, 1.0, -1.0) * x,
    lambda r: (randn(r, 4),),
)
for _n in (0, 1, 2, 3):
    case("polygamma", f"n{_n}", lambda x, n=_n: ag.polygamma(n, x), lambda r: (pos(r, 2, 3),))
case("polygamma", "method_0d", lambda x: x.polygamma(1), lambda r: (pos(r),))
case("polygamma", "special", lambda x: ag.special.polygamma(2, x), lambda r: (pos(r, 3),))

# ----- binary math -----
for _op, _fn, _mx, _my in [
    ("atan2", ag.atan2, away, away),
    ("hypot", ag.hypot, away, away),
    ("copysign", ag.copysign, away, away),  # d/dother is 0
    ("logaddexp", ag.logaddexp, randn, randn),
    ("logaddexp2", ag.logaddexp2, randn, randn),
    ("fmax", ag.fmax, distinct, distinct),
    ("fmin", ag.fmin, distinct, distinct),
    ("nextafter", ag.nextafter, distinct, distinct),  # d/dinput 1 where input != other
    ("xlogy", ag.xlogy, randn, pos),
    ("xlog1py", ag.special.xlog1py, randn, lambda r, *s: uniform(r, *s, lo=-0.5, hi=2.0)),
]:
    case(_op, "same_shape", _fn, lambda r, mx=_mx, my=_my: (mx(r, 2, 3), my(r, 2, 3)))
    case(_op, "broadcast", _fn, lambda r, mx=_mx, my=_my: (mx(r, 3, 1), my(r, 2)))
case(
    "atan2",
    "method_scalar_other",
    lambda y: y.atan2(ag.tensor(-0.5, dtype=ag.float64)),
    lambda r: (away(r, 4),),
    f32=False,
)
case("hypot", "const_other", ag.hypot, lambda r: (away(r, 3), const(r, 3)))
case("copysign", "scalar_other", lambda x: ag.copysign(x, -1.0), lambda r: (away(r, 4),))
case(
    "logaddexp",
    "large_values",
    lambda x, y: ag.logaddexp(x * 50, y * 50),
    lambda r: (randn(r, 3), randn(r, 3)),
    atol=1e-4,
)
case("fmax", "scalar_other", lambda x: ag.fmax(x, 0.1), lambda r: (distinct(r, 5),))
case("fmin", "const_other", ag.fmin, lambda r: (distinct(r, 5), const(r, 5) * 0.1 + 3.0))
case(
    "nextafter",
    "scalar_like_other",
    lambda x: ag.nextafter(x, ag.zeros_like(x)) * x,
    lambda r: (away(r, 4),),
)
case("xlogy", "scalar_self", lambda y: ag.xlogy(2.0, y), lambda r: (pos(r, 3),))
case("xlogy", "zero_self", lambda x, y: ag.xlogy(x * 0, y) + x, lambda r: (randn(r, 3), pos(r, 3)))
case("xlog1py", "scalar_other", lambda x: ag.special.xlog1py(x, 0.5), lambda r: (randn(r, 3),))
case(
    "fmod",
    "mixed_signs",  # x / y stays away from integers, where fmod jumps
    ag.fmod,
    lambda r: (
        ag.tensor([[0.3, 1.7, -2.2], [2.9, -0.45, 1.15]], dtype=ag.float64, requires_grad=True),
        ag.tensor([[0.7, 0.9, 1.3], [1.1, 0.8, -0.6]], dtype=ag.float64, requires_grad=True),
    ),
)
case("fmod", "scalar_divisor", lambda x: ag.fmod(x, 0.75), lambda r: (distinct(r, 4),))
# The first argument of igamma, igammac and zeta has no derivative in torch: a constant here
for _op, _label, _fn, _lo in [
    ("igamma", "same_shape", ag.igamma, 0.5),
    ("igammac", "same_shape", ag.igammac, 0.5),
    ("igamma", "gammainc", ag.special.gammainc, 0.5),
    ("igammac", "gammaincc", ag.special.gammaincc, 0.5),
    ("zeta", "same_shape", ag.special.zeta, 1.5),  # zeta(s, q) with s > 1
]:
    case(
        _op,
        _label,
        _fn,
        lambda r, lo=_lo: (_pos_const(r, 2, 3, lo=lo, hi=4.0), pos(r, 2, 3)),
    )
case("igamma", "broadcast_other", ag.igamma, lambda r: (_pos_const(r, 3, 1), pos(r, 2)))
case("zeta", "scalar_s", lambda q: ag.special.zeta(3.0, q), lambda r: (pos(r, 3),))

# ----- rounding, signs: a zero derivative (times x, so the second order is not all zero) -----
for _op, _fn, _mk in [
    ("ceil", ag.ceil, _off_grid),
    ("floor", ag.floor, _off_grid),
    ("trunc", ag.trunc, _off_grid),
    ("round", ag.round, _off_grid),
    ("sgn", ag.sgn, away),
    ("angle", ag.angle, away),
]:
    case(_op, "times_x", lambda x, f=_fn: f(x) * x, lambda r, mk=_mk: (mk(r, 2, 3),))
    case(_op, "alone_0d", _fn, lambda r, mk=_mk: (mk(r),))
case("round", "decimals", lambda x: ag.round(x * 0.1, decimals=1) * x, lambda r: (_off_grid(r, 4),))
case("trunc", "fix_alias", lambda x: ag.fix(x) * x, lambda r: (_off_grid(r, 4),))
case("ceil", "method", lambda x: x.ceil() + x, lambda r: (_off_grid(r, 3),))
case("floor", "method_inplace", lambda w: (w * 1).floor_() * w, lambda r: (_off_grid(r, 3),))

# ----- comparisons written in place (t.eq_(other)), a zero derivative -----
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    case(
        _op,
        "scalar_times_x",
        lambda w, o=_op: getattr(w * 1, f"{o}_")(0.1) * w,
        lambda r: (distinct(r, 2, 3),),
    )
    case(
        _op,
        "const_tensor_other",
        lambda w, c, o=_op: getattr(w * 1, f"{o}_")(c),
        lambda r: (distinct(r, 4), const(r, 4)),
    )

# ----- ops torch does not differentiate: a backward raises torch's error -----
case(
    "heaviside",
    "input",
    ag.heaviside,
    lambda r: (away(r, 3), ag.tensor(0.5, dtype=ag.float64)),
    raises="derivative for aten::heaviside is not implemented",
)
case(
    "heaviside",
    "values",
    lambda x, v: ag.heaviside(x, v),
    lambda r: (const(r, 3), randn(r, 3)),
    raises="derivative for aten::heaviside is not implemented",
)
case(
    "floor_divide",
    "inplace",
    lambda w: (w * 1).floor_divide_(0.75),
    lambda r: (away(r, 3),),
    raises="derivative for aten::floor_divide is not implemented",
)
case(
    "igamma",
    "input_raises",
    ag.igamma,
    lambda r: (pos(r, 3), _pos_const(r, 3)),
    raises="the derivative for 'igamma: input' is not implemented",
)
case(
    "zeta",
    "input_raises",
    ag.special.zeta,
    lambda r: (uniform(r, 3, lo=1.5, hi=3.0), _pos_const(r, 3)),
    raises="the derivative for 'zeta' is not implemented",
)

# ----- binary cross entropy -----
case(
    "binary_cross_entropy",
    "input_and_target",
    lambda x, t: F.binary_cross_entropy(x, t),
    lambda r: (uniform(r, 2, 3, lo=0.05, hi=0.95), uniform(r, 2, 3, lo=0.0, hi=1.0)),
)
case(
    "binary_cross_entropy",
    "weight_sum",
    lambda x, t: F.binary_cross_entropy(
        x, t, weight=ag.tensor([0.5, 2.0, 1.0], dtype=ag.float64), reduction="sum"
    ),
    lambda r: (uniform(r, 2, 3, lo=0.05, hi=0.95), uniform(r, 2, 3, lo=0.0, hi=1.0)),
    f32=False,  # the float64 weight promotes the loss
)
case(
    "binary_cross_entropy",
    "none_const_target",
    lambda x, t: F.binary_cross_entropy(x, t, reduction="none"),
    lambda r: (uniform(r, 4, lo=0.05, hi=0.95), _pos_const(r, 4, lo=0.0, hi=1.0)),
)


# =====================================================================================
# The tests
# =====================================================================================
def _marks(c: Case, second: bool = False) -> list[pytest.MarkDecorator]:
    marks = []
    if c.cuda and ag.cuda.device_count() < c.cuda:
        why = f"needs {c.cuda} CUDA device(s), {ag.cuda.device_count()} available"
        marks.append(pytest.mark.skip(reason=why))
    if second and c.xfail_second:
        marks.append(pytest.mark.xfail(strict=True, reason=c.xfail_second))
    return marks


PARAMS: Final = [
    pytest.param(op, cid, id=f"{op}-{cid}", marks=_marks(c))
    for op, cases in CASES.items()
    for cid, c in cases.items()
]
PARAMS_SECOND: Final = [
    pytest.param(op, cid, id=f"{op}-{cid}", marks=_marks(c, second=True))
    for op, cases in CASES.items()
    for cid, c in cases.items()
]
COMPOSITES: Final = {"cross_entropy", "mse_loss"}


def _inputs(op: str, cid: str) -> tuple[Case, tuple[Any, ...]]:
    c = CASES[op][cid]
    rng = np.random.default_rng(zlib.crc32(f"{op}-{cid}".encode()))
    return c, c.make(rng)


def test_every_rule_has_a_case() -> None:
    missing = sorted(set(OPS) - set(CASES))
    assert not missing, f"rules without a gradcheck case in CASES: {missing}"
    unknown = sorted(set(CASES) - set(OPS) - COMPOSITES)
    assert not unknown, f"CASES keys that are neither rules nor known composites: {unknown}"


def _assert_backward_raises(c: Case, inputs: tuple[Any, ...], create_graph: bool = False) -> None:
    """The case's backward raises torch's error (an op torch does not differentiate)."""
    out = c.fn(*inputs)
    leaves = [x for x in inputs if isinstance(x, ag.Tensor) and x.requires_grad]
    with pytest.raises(RuntimeError, match=re.escape(c.raises)):  # NotImplementedError too
        ag.grad_sync(out.sum(), leaves, create_graph=create_graph)


@pytest.mark.parametrize(("op", "cid"), PARAMS)
def test_gradcheck(op: str, cid: str) -> None:
    c, inputs = _inputs(op, cid)
    if c.raises:
        _assert_backward_raises(c, inputs)
        return
    assert gradcheck(c.fn, inputs, eps=c.eps, atol=c.atol, rtol=c.rtol)


@pytest.mark.parametrize(("op", "cid"), PARAMS_SECOND)
def test_gradgradcheck(op: str, cid: str) -> None:
    c, inputs = _inputs(op, cid)
    if c.raises:
        _assert_backward_raises(c, inputs, create_graph=True)
        return
    assert gradgradcheck(c.fn, inputs, eps=c.eps, atol=c.atol, rtol=c.rtol)


@pytest.mark.parametrize(("op", "cid"), [p for p in PARAMS if CASES[p.values[0]][p.values[1]].f32])
def test_float32_stays_float32(op: str, cid: str) -> None:
    c, inputs = _inputs(op, cid)
    inputs = tuple(
        ag.tensor(x.array, dtype=ag.float32, requires_grad=x.requires_grad)
        if isinstance(x, ag.Tensor)
        else x
        for x in inputs
    )
    out = c.fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert [o.dtype for o in outs] == [ag.float32] * len(outs)
    leaves = [x for x in inputs if isinstance(x, ag.Tensor) and x.requires_grad]
    if c.raises:
        _assert_backward_raises(c, inputs)
        return
    total = outs[0].sum()
    for o in outs[1:]:
        total = total + o.sum()
    grads = ag.grad_sync(total, leaves, allow_unused=True)
    assert [g.dtype for g in grads if g is not None] == [ag.float32] * sum(
        g is not None for g in grads
    )


# ----- the same on a CUDA device (simulated by default: see tests/conftest.py) -----
def _on_cuda(x: Any) -> Any:
    if isinstance(x, ag.Tensor):
        return x.detach().to("cuda").requires_grad_(x.requires_grad)
    return x


def _values_and_grads(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> list[np.ndarray]:
    out = fn(*inputs)
    outs = list(out) if isinstance(out, tuple) else [out]
    leaves = [x for x in inputs if isinstance(x, ag.Tensor) and x.requires_grad]
    rng = np.random.default_rng(99)
    gos = [ag.tensor(rng.standard_normal(o.shape), dtype=o.dtype, device=o.device) for o in outs]
    grads = ag.grad_sync(outs, leaves, gos, allow_unused=True)
    return [o.detach().cpu().numpy() for o in outs] + [
        np.full(1, np.nan) if g is None else g.cpu().numpy() for g in grads
    ]


@pytest.mark.cuda
@pytest.mark.parametrize(("op", "cid"), PARAMS)
def test_same_on_cuda(op: str, cid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case's values and gradients on a CUDA device equal the CPU's."""
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    c, inputs = _inputs(op, cid)
    if c.cuda:
        pytest.skip("moves between devices itself")
    if (op, cid) == ("index_add_zeros", "repeated_rows"):
        pytest.skip("calls the internal op with a host index (getitem passes a device one)")
    if c.raises:
        with ag.device("cuda"):
            _assert_backward_raises(c, tuple(_on_cuda(x) for x in inputs))
        return
    if (op, cid) == ("mul", "numpy_array_reflected"):
        with ag.device("cuda"), pytest.raises(RuntimeError, match="cpu and cuda:0"):
            c.fn(*(_on_cuda(x) for x in inputs))
        return
    want = _values_and_grads(c.fn, inputs)
    this = sys.modules[__name__]
    for name, value in list(vars(this).items()):
        if isinstance(value, ag.Tensor) and value.device == ag.device("cpu"):
            monkeypatch.setattr(this, name, value.to("cuda"))  # the cases' shared constants
    with ag.device("cuda"):  # constants the case makes go there too
        got = _values_and_grads(c.fn, tuple(_on_cuda(x) for x in inputs))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype, f"result {i}: {g.dtype} on cuda, {w.dtype} on cpu"
        # Wider on a real GPU: NOTE [Tolerances on a GPU] in tests/cuda/conftest.py.
        assert_close(g, w, rtol=1e-12, atol=1e-14, err_msg=f"result {i}")
