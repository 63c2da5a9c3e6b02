"""One backward pass as its caller asked for it: the value the engine's entry points pass on.

NOTE [One pass, one value]
``ag.grad`` and ``backward`` (asyncgrad/autograd/api.py) check their arguments and turn them
into a ``BackwardPass``; the engine's entry points (``execute``, ``execute_sync``, a pass moved
to a pool loop or thread, one run under trio) hand that one value on, and ``build`` reads it
once to make the GraphTask and its preparation. It is immutable, so no step on the way can
change what another step sees. The preparation holds the roots and their gradients until it
has run; the entry points drop their own reference to the pass once the GraphTask is built, so
an awaited pass keeps no argument list alive (See NOTE [Fewer objects for the collector] in
asyncgrad/ops/_record.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # a type only: importing it would put this module on the graph's import cycle
    from ..graph.node import Edge

__all__ = ["BackwardPass"]


class BackwardPass(NamedTuple):
    """What one backward pass differentiates, and how (See NOTE [One pass, one value])."""

    roots: Sequence[Edge]  # the edges it starts from: the outputs' grad_fn and output number
    root_grads: Sequence[Any]  # the gradient of each root
    outputs: Sequence[Edge] | None  # ag.grad's inputs, whose gradients it returns; else None
    accumulate: bool  # into the .grad of the leaves it reaches (backward), or not (grad)
    keep_graph: bool  # retain_graph
    create_graph: bool  # record the backward itself
    priority: int  # larger runs first where passes compete for a device
