"""ag.nn: modules and parameters."""

from __future__ import annotations

from . import functional
from .modules import (
    GELU,
    Dropout,
    Embedding,
    IncompatibleKeys,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    Parameter,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)

__all__ = [
    "GELU",
    "Dropout",
    "Embedding",
    "IncompatibleKeys",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleList",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "functional",
]

# ----- convolution, pooling -----
from .modules import AvgPool2d, Conv1d, Conv2d, MaxPool2d

__all__ += ["AvgPool2d", "Conv1d", "Conv2d", "MaxPool2d"]
