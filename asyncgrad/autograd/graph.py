"""``ag.autograd.graph``: the graph objects as users see them (``t.grad_fn`` is a ``Node``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from typing import Any, NamedTuple

from .._tensor import Tensor
from ..engine.reentrant import current_graph_task
from ..graph import saved_mutation
from ..graph.accumulate_grad import AccumulateGrad
from ..graph.graph_root import GraphRoot
from ..graph.hooks import RemovableHandle
from ..graph.node import Edge, Node
from ..graph.saved_mutation import MutationContext, mutation_context
from ..graph.saved_tensor import SavedTensor, pop_hooks, push_hooks

__all__ = [
    "AccumulateGrad",
    "Edge",
    "GradientEdge",
    "GraphRoot",
    "Node",
    "RemovableHandle",
    "SavedTensor",
    "allow_mutation_on_saved_tensors",
    "disable_saved_tensors_hooks",
    "register_multi_grad_hook",
    "save_on_cpu",
    "saved_tensors_hooks",
]


# ----- saved-tensor hooks and multi-grad hooks -----
class saved_tensors_hooks:
    """Pack every tensor saved for backward with ``pack_hook`` and unpack it with
    ``unpack_hook`` when backward reads it, inside this block (in the current task or thread, and
    tasks created inside it).

    ``pack_hook(tensor) -> Any`` runs when an op (or a custom Function's ``save_for_backward``)
    saves a tensor; the node keeps only what it returns. ``unpack_hook(packed) -> Tensor`` runs
    each time backward reads the value and must give a tensor with the saved one's shape, dtype
    and contents. Nested blocks: only the innermost pair applies. Ops that the hooks run save
    nothing through them. The hooks must not modify their argument in place.

    Example (offload saved tensors to compressed bytes): see examples/saved_tensors_offload.py.
    """

    def __init__(self, pack_hook: Callable[[Tensor], Any], unpack_hook: Callable[[Any], Tensor]):
        for name, fn in (("pack_hook", pack_hook), ("unpack_hook", unpack_hook)):
            if not callable(fn):
                raise TypeError(f"saved_tensors_hooks: {name} must be callable, got {fn!r}")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> saved_tensors_hooks:
        why = _hooks_disabled.get()
        if why is not None:
            raise RuntimeError(why)
        push_hooks((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc: object) -> None:
        # The innermost open block's pair goes, as torch's stack (See NOTE [Saved tensor
        # hooks] in asyncgrad/graph/saved_tensor.py).
        pop_hooks()


# The reason given by the innermost open disable_saved_tensors_hooks block, if any.
_hooks_disabled: ContextVar[str | None] = ContextVar("asyncgrad_hooks_disabled", default=None)


class disable_saved_tensors_hooks:
    """Inside this block, opening a saved_tensors_hooks block (save_on_cpu, a non-reentrant
    checkpoint, allow_mutation_on_saved_tensors) raises RuntimeError(error_message), as torch's.
    Blocks already open stay in force."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message
        self._tokens: list[Token[str | None]] = []

    def __enter__(self) -> disable_saved_tensors_hooks:
        self._tokens.append(_hooks_disabled.set(self.error_message))
        return self

    def __exit__(self, *exc: object) -> None:
        _hooks_disabled.reset(self._tokens.pop())


class allow_mutation_on_saved_tensors:
    """Inside this block, tensors saved for backward may be changed in place: the backward
    computes with the values they had when they were saved, as torch's (See NOTE [Mutation on
    saved tensors] in asyncgrad/graph/saved_mutation.py). A backward of a graph recorded inside
    must run inside too. Blocks cannot be nested."""

    def __init__(self) -> None:
        self._open: list[tuple[MutationContext, Token[MutationContext | None]]] = []

    def __enter__(self) -> MutationContext:
        if mutation_context.get() is not None:
            raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
        why = _hooks_disabled.get()
        if why is not None:
            raise RuntimeError(why)
        ctx = MutationContext()
        saved_mutation.opened()
        self._open.append((ctx, mutation_context.set(ctx)))
        push_hooks((ctx.pack, ctx.unpack))
        return ctx

    def __exit__(self, *exc: object) -> None:
        ctx, tok = self._open.pop()
        pop_hooks()
        mutation_context.reset(tok)
        ctx.close()


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are kept on the CPU and moved back to their device for backward.

    ``pin_memory`` is accepted for torch's signature; NumPy arrays are not pinned.
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(t: Tensor) -> tuple[Any, Tensor]:
            return t.device, t.detach().cpu()

        def unpack(packed: tuple[Any, Tensor]) -> Tensor:
            device, t = packed
            return t.to(device)

        super().__init__(pack, unpack)
        self.pin_memory = pin_memory
        self.device_type = device_type


class _MultiHandle(RemovableHandle):
    """Removes every tensor hook of one register_multi_grad_hook call."""

    __slots__ = ("_handles",)

    def __init__(self, handles: list[RemovableHandle]) -> None:
        self._handles = handles

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def _node_of(t: Tensor) -> Node | None:
    e = t._edge()
    return None if e is None else e[0]


def register_multi_grad_hook(
    tensors: Sequence[Tensor], fn: Callable[..., Any], *, mode: str = "all"
) -> RemovableHandle:
    """Call ``fn`` once per backward pass from the gradients of several tensors.

    ``mode="all"``: ``fn(grads)`` after the gradients of every tensor that this pass reaches
    are computed, with ``grads`` a tuple holding None for the tensors it does not reach.
    ``mode="any"``: ``fn(grad)`` with the first gradient computed among ``tensors``, once per
    pass. Returns a handle whose ``remove()`` unregisters it.
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = tuple(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"tensors[{i}] must be a Tensor, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(
                f"register_multi_grad_hook: tensors[{i}] does not require grad, so no gradient "
                "will be computed for it"
            )
    lock = threading.Lock()
    # Per graph task (keyed by its id while it runs): the gradients so far, and the positions
    # still expected (None until the first hook of that pass has looked).
    state: dict[int, list[Any]] = {}

    def expected(gt: Any) -> set[int]:
        deps = gt.dependencies
        info = gt.exec_info
        out = set()
        for i, t in enumerate(tensors):
            n = _node_of(t)
            if n is not None and n in deps and (info is None or n in info):
                out.add(i)
        return out

    def make_hook(i: int) -> Callable[[Tensor], None]:
        def hook(grad: Tensor) -> None:
            gt = current_graph_task.get()
            key = id(gt)
            with lock:
                st = state.get(key)
                if st is None:
                    st = state[key] = [[None] * len(tensors), None, False]
                    if gt is not None:
                        gt.add_callback(lambda: _forget(key))
                grads, waiting, fired = st
                if mode == "any":
                    if fired:
                        return
                    st[2] = True
                    call: tuple[Any, ...] | None = (grad,)
                else:
                    if waiting is None:
                        waiting = st[1] = expected(gt) if gt is not None else set()
                    grads[i] = grad
                    waiting.discard(i)
                    call = None
                    if not waiting and not fired:
                        st[2] = True
                        call = (tuple(grads),)
            if call is not None:
                fn(*call)

        return hook

    def _forget(key: int) -> None:
        with lock:
            state.pop(key, None)

    return _MultiHandle([t.register_hook(make_hook(i)) for i, t in enumerate(tensors)])


# ----- get_gradient_edge -----
class GradientEdge(NamedTuple):
    """Where a tensor's gradient enters the backward graph: input ``output_nr`` of ``node``
    (its ``grad_fn``, or a leaf's AccumulateGrad). Equal to the ``Edge`` with the same fields."""

    node: Node
    output_nr: int


def get_gradient_edge(tensor: Tensor) -> GradientEdge:
    """The gradient edge of ``tensor`` (which must require grad), as torch's: it names the
    tensor's place in the graph without keeping the tensor alive."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"get_gradient_edge() expects a Tensor, got {type(tensor).__name__}")
    e = tensor._edge() if tensor.requires_grad else None
    if e is None:
        raise RuntimeError(
            "It is not possible to get the gradient edge for a Tensor that does not require "
            "gradients"
        )
    return GradientEdge(e[0], e[1])


__all__ += ["get_gradient_edge"]
