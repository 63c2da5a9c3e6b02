"""ag.optim: SGD (momentum, nesterov, weight decay) and Adam."""

from __future__ import annotations

from .optimizers import SGD, Adam, Optimizer

__all__ = ["SGD", "Adam", "Optimizer"]
