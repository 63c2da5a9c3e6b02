"""The graph the engine runs: nodes, edges, hooks, saved tensors, accumulators and grad modes.

Imports only the backend, dtypes and Tensor (See NOTE [Layers] in asyncgrad/__init__.py).
"""

from __future__ import annotations

from .accumulate_grad import AccumulateGrad
from .copy_slices import CopySlices
from .graph_root import GraphRoot
from .hooks import Hooks, RemovableHandle
from .node import Edge, Node
from .saved_tensor import SavedTensor

__all__ = [
    "AccumulateGrad",
    "CopySlices",
    "Edge",
    "GraphRoot",
    "Hooks",
    "Node",
    "RemovableHandle",
    "SavedTensor",
]
