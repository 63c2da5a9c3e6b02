"""Gradients at NaN, +-inf, +-0 and ties of the functions that are no single op of the rule table
(compositions in ``nn.functional`` and elsewhere), compared with torch.

``test_special_values.py`` checks every op of the rule table; a function built from several ops
can still differ from torch's single node at a special value (a ``clamp`` inside softplus turned
its gradient at NaN into 0; torch's is NaN). The cases here run through the same machinery
(``_run``/``_compare`` of that file: float64 on both sides, ones, inf and a NaN/inf mix as output
gradients, again under create_graph, NaNs in the same places, NumPy warnings as errors).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pytest

from .test_special_values import GRADS, INF, NAN, ROWS, VALUES, Case, Const, _compare, _run

torch = pytest.importorskip("torch", reason="torch is the reference for special-value gradients")


def F(m: Any) -> Any:
    return m.nn.functional


_V12: Final = np.resize(VALUES, 12).reshape(3, 4)
_POOL: Final = np.resize(VALUES, 2 * 4 * 6).reshape(1, 2, 4, 6)
_TARGET01: Final = np.resize(np.array([0.0, 1.0, 0.5, 1.0]), VALUES.size)
_PROBS: Final = np.array(
    [[0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
)
_LOGITS: Final = np.array(
    [[NAN, 1.0, 3.0], [INF, 0.0, 1.0], [-INF, 1.0, 2.0], [1.0, 1.0, 1.0], [800.0, 0.0, -800.0]]
)

CASES: Final[dict[str, Case]] = {}


def case(name: str, fn: Any, *args: Any) -> None:
    assert name not in CASES, name
    CASES[name] = Case(fn, args)


# ----- softplus: one node in torch (SoftplusBackward0), NaN in, NaN gradient out
case("softplus", lambda m, x: F(m).softplus(x), VALUES)
case("softplus_beta2_threshold5", lambda m, x: F(m).softplus(x, 2.0, 5.0), VALUES)
case("softplus_beta_half_threshold1", lambda m, x: F(m).softplus(x, 0.5, 1.0), VALUES)
case("softplus_at_threshold", lambda m, x: F(m).softplus(x), np.array([20.0, 19.999, 20.001]))
case("softplus_negative_beta", lambda m, x: F(m).softplus(x, -1.0), VALUES)

# ----- losses built from ops
case("mse_loss", lambda m, x, t: F(m).mse_loss(x, t), VALUES, Const(VALUES[::-1].copy()))
case("mse_loss_sum", lambda m, x, t: F(m).mse_loss(x, t, reduction="sum"), VALUES, VALUES[::-1])
case("mse_loss_none", lambda m, x, t: F(m).mse_loss(x, t, reduction="none"), VALUES, VALUES[::-1])
case("l1_loss", lambda m, x, t: F(m).l1_loss(x, t), VALUES, Const(VALUES[::-1].copy()))
case("l1_loss_ties", lambda m, x, t: F(m).l1_loss(x, t, reduction="none"), VALUES, VALUES)
case(
    "bce_with_logits",
    lambda m, x, t: F(m).binary_cross_entropy_with_logits(x, t, reduction="none"),
    VALUES,
    Const(_TARGET01),
)
case(
    "bce_with_logits_pos_weight",
    lambda m, x, t: F(m).binary_cross_entropy_with_logits(
        x, t, pos_weight=m.tensor([2.0], dtype=m.float64)
    ),
    VALUES,
    Const(_TARGET01),
)
case(
    "cross_entropy_probs",
    lambda m, x, p: F(m).cross_entropy(x, p),
    _LOGITS,
    Const(_PROBS),
)
case(
    "cross_entropy_label_smoothing",
    lambda m, x: F(m).cross_entropy(x, m.tensor([0, 1, 2, 1, 0]), label_smoothing=0.1),
    _LOGITS,
)

# ----- normalisation, attention, pooling
case("layer_norm", lambda m, x: F(m).layer_norm(x, (3,)), ROWS)
case(
    "layer_norm_affine",
    lambda m, x, w, b: F(m).layer_norm(x, (3,), w, b),
    ROWS,
    np.array([1.0, 0.0, -2.0]),
    np.array([0.5, NAN, 0.0]),
)
case(
    "scaled_dot_product_attention",
    lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v),
    _V12[None],
    _V12[None, :, ::-1].copy(),
    _V12[None] / 2,
)
case(
    "scaled_dot_product_attention_causal",
    lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, is_causal=True),
    _V12[None],
    _V12[None] * 0.5,
    _V12[None],
)
case("avg_pool2d", lambda m, x: F(m).avg_pool2d(x, 2), _POOL)
case("avg_pool2d_padded", lambda m, x: F(m).avg_pool2d(x, 3, stride=2, padding=1), _POOL)
case("embedding", lambda m, w: F(m).embedding(m.tensor([[0, 2], [2, 2]]), w), _V12)
case("dropout_eval", lambda m, x: F(m).dropout(x, 0.5, training=False), VALUES)

# ----- clamp with tensor bounds (maximum/minimum), ties with the bounds
case(
    "clamp_tensor_bounds",
    lambda m, x, lo, hi: m.clamp(x, lo, hi),
    VALUES,
    Const(np.resize([-1.0, 0.0, NAN], VALUES.size)),
    Const(np.resize([1.0, 0.0, INF], VALUES.size)),
)
case("clamp_at_bounds", lambda m, x: x.clamp(0.0, 1.0), np.array([0.0, -0.0, 1.0, 0.5, NAN]))
case("relu_at_zero", lambda m, x: F(m).relu(x), np.array([0.0, -0.0, NAN]))


@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name: str) -> None:
    c = CASES[name]
    for grads in GRADS:
        want = _run(torch, c, grads, False)
        _compare(c, grads, False, want)
        if grads != "inf":
            _compare(c, grads, True, want)
