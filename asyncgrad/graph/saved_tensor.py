"""SavedTensor: a value a node keeps for its backward, checked against the tensor's version."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NoReturn

from .._tensor import Tensor

if TYPE_CHECKING:
    from .node import Node

__all__ = ["FREED", "SavedTensor", "raise_freed"]

# What a node's saved values become once a backward without retain_graph has run it.
FREED: Final = ("freed",)


# NOTE [Saved tensor versions]
# A node saves the version of each input it needs at backward time; reading it back compares with
# the live version counter (shared with views), so an in-place change in between is an error that
# names the node and both versions rather than a silently wrong gradient.
class SavedTensor:
    __slots__ = ("array", "is_output", "tensor", "vc", "version")

    def __init__(self, tensor: Tensor, is_output: bool) -> None:
        self.array = tensor._array
        self.vc = tensor._vc
        self.version = tensor._vc[0]
        self.is_output = is_output
        # An output is saved without its grad_fn (the node would keep itself alive through it);
        # it is rebuilt on unpack for create_graph.
        self.tensor: Tensor | None = None if is_output else tensor

    def check(self, node: Node) -> None:
        if self.vc[0] != self.version:
            what = "output" if self.is_output else "input"
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{self.array.dtype} {list(self.array.shape)}], which is an "
                f"{what} of {node.name()}, is at version {self.vc[0]}; expected version "
                f"{self.version} instead. Hint: the operation that modified it ran after "
                f"{node.name()} saved it; clone() the tensor before modifying it in place."
            )

    def unpack(self, node: Node, output_nr: int = 0) -> Tensor:
        self.check(node)
        saved = self.tensor
        if saved is not None:
            if saved._array is self.array:
                return saved
            return self._rebound(saved)
        t = Tensor._wrap(self.array)
        t._vc = self.vc
        t._grad_fn = node
        t._output_nr = output_nr
        return t

    def _rebound(self, saved: Tensor) -> Tensor:
        # The input has been given a new array since it was saved (an optimizer step that found
        # the array shared, See NOTE [Serving while training] in asyncgrad/optim/optimizers.py):
        # a tensor over the saved array, at the saved version, with the input's gradient edge,
        # so that gradients computed from it still reach the input (its AccumulateGrad for a
        # leaf).
        t = Tensor._wrap(self.array)
        t._vc = self.vc
        edge = saved._edge()
        if edge is not None:
            if saved._grad_fn is None:
                t._requires_grad = True
                t._get_meta().grad_accumulator = edge[0]  # type: ignore[assignment]
            else:
                t._grad_fn, t._output_nr = edge
        return t


def raise_freed(node: Node) -> NoReturn:
    raise RuntimeError(
        f"Trying to backward through the graph a second time (or directly access saved tensors "
        f"after they have already been freed) in {node.name()}. Saved intermediate values of the "
        "graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True "
        "if you need to backward through the graph a second time or if you need to access saved "
        "tensors after calling backward."
    )


def unpack_saved(s: Any, node: Node, create: bool) -> Any:
    """A saved value as a rule reads it: an array (a Tensor under create_graph); a tuple of them
    for the outputs of a multi-output op; a constant as it is."""
    t = type(s)
    if t is SavedTensor:
        if s.vc[0] != s.version:
            s.check(node)
        return s.unpack(node) if create else s.array
    if t is tuple:
        for x in s:
            if x.vc[0] != x.version:
                x.check(node)
        if create:
            return tuple(x.unpack(node, i) for i, x in enumerate(s))
        return tuple(x.array for x in s)
    return s
