"""The derivative rules of the activation, loss and layer ops of ag.nn.functional."""

from __future__ import annotations

from typing import Any

from ..backend import xp
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
