"""ag.nn.functional: neural-network functions built from asyncgrad ops."""

from __future__ import annotations

from ..ops import (
    cross_entropy,
    gelu,
    linear,
    log_softmax,
    mse_loss,
    nll_loss,
    relu,
    sigmoid,
    silu,
    softmax,
    tanh,
)

__all__ = [
    "cross_entropy",
    "gelu",
    "linear",
    "log_softmax",
    "mse_loss",
    "nll_loss",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "tanh",
]
