"""``ag.autograd.graph``: the graph objects as users see them (``t.grad_fn`` is a ``Node``)."""

from __future__ import annotations

from ..graph.accumulate_grad import AccumulateGrad
from ..graph.graph_root import GraphRoot
from ..graph.hooks import RemovableHandle
from ..graph.node import Edge, Node
from ..graph.saved_tensor import SavedTensor

GradientEdge = Edge

__all__ = [
    "AccumulateGrad",
    "Edge",
    "GradientEdge",
    "GraphRoot",
    "Node",
    "RemovableHandle",
    "SavedTensor",
]
