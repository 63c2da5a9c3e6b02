"""ag.nn: modules and parameters."""

from __future__ import annotations

from . import functional, init, utils
from .modules import (
    GELU,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    IncompatibleKeys,
    L1Loss,
    LayerNorm,
    Linear,
    Module,
    ModuleDict,
    ModuleList,
    MSELoss,
    MultiheadAttention,
    NLLLoss,
    Parameter,
    ReLU,
    RemovableHandle,
    Sequential,
    Sigmoid,
    Tanh,
)

__all__ = [
    "GELU",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "Identity",
    "IncompatibleKeys",
    "L1Loss",
    "LayerNorm",
    "Linear",
    "MSELoss",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "RemovableHandle",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "functional",
    "init",
    "utils",
]

# ----- convolution, pooling -----
from .modules import AvgPool2d, Conv1d, Conv2d, MaxPool2d

__all__ += ["AvgPool2d", "Conv1d", "Conv2d", "MaxPool2d"]
