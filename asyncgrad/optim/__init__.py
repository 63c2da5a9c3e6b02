"""ag.optim: SGD (momentum, nesterov, weight decay), Adam and AdamW; lr_scheduler."""

from __future__ import annotations

from . import lr_scheduler
from .optimizers import SGD, Adam, AdamW, Optimizer

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]
