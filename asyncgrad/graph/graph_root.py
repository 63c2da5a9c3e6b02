"""GraphRoot: the entry node when backward starts from several roots."""

from __future__ import annotations

from typing import Any

from ..backend import CPU
from .node import Edge, Node

__all__ = ["GraphRoot"]


class GraphRoot(Node):
    """Emits the root gradients along the roots' edges."""

    __slots__ = ("__weakref__", "grads")  # See NOTE [Weak references to nodes]

    def __init__(self, edges: list[Edge | None], grads: list[Any]) -> None:
        self._init_node(edges)
        self.grads = grads
        self._input_meta = ()
        self._device = CPU

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        return self.grads
