"""CopySlices: the backward of an in-place op on a view, and the view replay it shares with ops."""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from .node import Edge, Node, one_output_meta

__all__ = ["CopySlices", "ViewChain", "replay_view"]

# How a view was made from its base: ("reshape", {"shape"}), ("transpose", {"dim0", "dim1"}),
# ("permute", {"dims"}), ("expand", {"shape"}), ("diagonal", {"offset", "dim1", "dim2"}) or
# ("getitem", {"index"}), outermost last.
ViewChain = tuple[tuple[str, dict[str, Any]], ...]


def replay_view(x: Any, chain: ViewChain) -> Any:
    """Apply the view ops of ``chain`` to ``x``: a Tensor (recording, under grad mode) or an
    array. See NOTE [View grad_fn regeneration]."""
    if isinstance(x, Tensor):
        for name, p in chain:
            if name == "reshape":
                x = x.reshape(p["shape"])
            elif name == "transpose":
                x = x.transpose(p["dim0"], p["dim1"])
            elif name == "permute":
                x = x.permute(p["dims"])
            elif name == "expand":
                x = x.expand(p["shape"])
            elif name == "diagonal":
                x = x.diagonal(p["offset"], p["dim1"], p["dim2"])
            else:
                x = x[p["index"]]
        return x
    for name, p in chain:
        if name == "reshape":
            x = x.reshape(p["shape"])
        elif name == "transpose":
            x = x.swapaxes(p["dim0"], p["dim1"])
        elif name == "permute":
            x = x.transpose(p["dims"])
        elif name == "expand":
            x = backend.namespace(x).broadcast_to(x, p["shape"])
        elif name == "diagonal":
            x = backend.diagonal_view(x, p["offset"], p["dim1"], p["dim2"])
        else:
            x = x[p["index"]]
    return x


class CopySlices(Node):
    """Backward of an in-place op on a view: routes the view's part of the base's gradient
    through the op's own backward ``fn`` and passes the rest of the base's gradient through."""

    __slots__ = ("__weakref__", "_chain", "_fn")  # See NOTE [Weak references to nodes]

    def __init__(self, base_edge: Edge | None, chain: ViewChain, fn: Node, base: Tensor) -> None:
        edges: list[Edge | None] = [base_edge]
        edges.extend(fn._next_edges[1:])
        self._init_node(edges)
        self._chain = chain
        self._fn = fn
        self._input_meta = one_output_meta(base.shape, base.dtype)
        self._set_device(base.device)

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> list[Any]:
        g = grads[0]
        if g is None:
            return [None] * len(self._next_edges)
        res = g.clone() if create else g.copy()
        region = replay_view(res, self._chain)
        piece = region.clone() if create else region.copy()
        sub = self._fn.apply([piece], None, create)
        g0 = sub[0]
        if create:
            if g0 is None:
                region.zero_()
            else:
                region.copy_(g0)
        else:
            region[...] = 0 if g0 is None else g0
        return [res, *sub[1:]]

    def release_variables(self) -> None:
        self._fn.release_variables()

    def releasable(self) -> Any:
        return self._fn.releasable()
