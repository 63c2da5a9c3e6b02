"""The derivative rules of the activation, loss and layer ops of ag.nn.functional."""

from __future__ import annotations

import math
from typing import Any

from ..backend import is_array, xp
from .registry import defvjp

__all__: list[str] = []

# torch's EPSILON in binary_cross_entropy_backward: the denominator x (1 - x) is clamped to it,
# so a saturated probability (x = 0 or 1, as float32 sigmoids give) has a finite gradient. torch
# writes it as the float 1e-12f in every dtype; so does this.
_BCE_EPS = float(xp.float32(1e-12))


def _bce_grad_input(g: Any, x: Any, t: Any, w: Any) -> Any:
    # (x - t) / max(x (1 - x), eps), times weight
    r = g * (x - t) / xp.maximum((1.0 - x) * x, _BCE_EPS)
    return r if w is None else r * w


def _bce_grad_target(g: Any, x: Any, w: Any) -> Any:
    # -logit(x) = log(1 - x) - log(x), times weight (torch's binary_cross_entropy_target_backward)
    r = g * (xp.log1p(-x) - xp.log(x))
    return r if w is None else r * w


defvjp(  # torch's binary_cross_entropy_backward and binary_cross_entropy_target_backward
    "binary_cross_entropy",
    lambda g, ans, x, t, w: _bce_grad_input(g, x, t, w),
    lambda g, ans, x, t, w: _bce_grad_target(g, x, w),
    None,
    save="x t w",
)


# ----- smooth_l1_loss and huber_loss: one op each, the reduction inside (as torch's) -----
def _loss_norm(g: Any, d: Any, reduction: str) -> Any:
    # torch's norm: 1 / numel for "mean", else 1 (a 0-d g for a reduction, else elementwise)
    # (d.shape, not d.size: a Tensor's size is a method, under create_graph)
    return g / math.prod(d.shape) if reduction == "mean" else g


def _smooth_l1_grad(g: Any, x: Any, t: Any, reduction: str, beta: float) -> Any:
    # torch's smooth_l1_loss_backward: -norm g below -beta, norm g above beta, norm g d / beta
    # between; clip(d, -beta, beta) / beta is exactly -1 and 1 outside, and NaN at NaN.
    d = x - t
    gn = _loss_norm(g, d, reduction)
    return xp.clip(d, -beta, beta) * (gn if beta == 1.0 else gn / beta)


def _huber_grad(g: Any, x: Any, t: Any, reduction: str, delta: float) -> Any:
    # torch's huber_loss_backward: norm g times d clipped to [-delta, delta]
    d = x - t
    return xp.clip(d, -delta, delta) * _loss_norm(g, d, reduction)


defvjp(
    "smooth_l1_loss",
    lambda g, ans, x, t, *, reduction, beta: _smooth_l1_grad(g, x, t, reduction, beta),
    lambda g, ans, x, t, *, reduction, beta: -_smooth_l1_grad(g, x, t, reduction, beta),
    save="x t",
)
defvjp(
    "huber_loss",
    lambda g, ans, x, t, *, reduction, delta: _huber_grad(g, x, t, reduction, delta),
    lambda g, ans, x, t, *, reduction, delta: -_huber_grad(g, x, t, reduction, delta),
    save="x t",
)


# ----- hardswish: one op -----
def _hardswish_grad(g: Any, x: Any) -> Any:
    # torch's hardswish_backward: 0 at and below -3, g (x / 3 + 1 / 2) inside, g at and above 3
    # and at NaN (its scalar loop, which short tensors take; its vectorized loop gives NaN there).
    # On arrays, without NumPy's where (slow on a mixed mask): s = clip(x / 3, -1,
    # 1) is x / 3 inside and -1, 1 exactly at and beyond -3, 3 (x / 3 of the float below 3 rounds
    # below 1), and trunc(s) is 0 inside, so s + 1/2 - trunc(s) / 2 is torch's factor, 0 and 1
    # outside. A NaN in the product (x NaN, g NaN, or g infinite where the factor is 0) sends it
    # to the selecting form.
    if is_array(x) and is_array(g):
        f = x / 3.0
        xp.clip(f, -1.0, 1.0, out=f)
        t = xp.trunc(f)
        t *= 0.5
        f += 0.5
        f -= t
        f *= g
        if not f.size or not xp.isnan(xp.min(f)):
            return f
    return xp.where(x <= -3.0, 0.0, xp.where(x < 3.0, g * (x / 3.0 + 0.5), g))


defvjp("hardswish", lambda g, ans, x: _hardswish_grad(g, x), save="x")
