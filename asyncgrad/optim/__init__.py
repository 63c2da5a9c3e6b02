"""ag.optim: SGD (momentum, nesterov, weight decay), Adam and AdamW."""

from __future__ import annotations

from .optimizers import SGD, Adam, AdamW, Optimizer

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]
