"""Graph objects: Node, Edge, AccumulateGrad, GraphRoot, saved tensors and hook handles."""

from __future__ import annotations

import inspect
import itertools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

from ..backend import CPU, quiet_fp, restore_fp

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = [
    "AccumulateGrad",
    "Edge",
    "GraphRoot",
    "Node",
    "RemovableHandle",
    "SavedTensor",
]

_sequence = itertools.count()
_next_sequence_nr = _sequence.__next__

# AccumulateGrad nodes take the largest sequence number so they run as soon as they are ready,
# which frees the gradient buffers early (as in PyTorch).
ACCUMULATE_SEQUENCE_NR: Final = (1 << 63) - 1


class Edge(NamedTuple):
    """A gradient edge: input ``input_nr`` of the backward node ``node``."""

    node: Node
    input_nr: int


class _Hooks:
    """The hooks of one node (or of one leaf tensor, for its AccumulateGrad)."""

    __slots__ = ("has_async", "post", "post_acc", "pre", "retains", "tensor_pre")

    def __init__(self) -> None:
        self.tensor_pre: dict[int, dict[int, Callable[..., Any]]] = {}
        self.retains: dict[int, weakref.ref[Any]] = {}
        self.pre: dict[int, Callable[..., Any]] = {}
        self.post: dict[int, Callable[..., Any]] = {}
        self.post_acc: dict[int, Callable[..., Any]] = {}
        self.has_async = False


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    call = type(fn).__call__ if not inspect.isfunction(fn) else None
    return inspect.iscoroutinefunction(fn) or (
        call is not None and inspect.iscoroutinefunction(call)
    )


class RemovableHandle:
    """Returned by every ``register_*hook``; ``remove()`` unregisters the hook."""

    __slots__ = ("_dict", "id")
    _ids = itertools.count()

    def __init__(self, d: dict[int, Any], hid: int) -> None:
        self._dict = d
        self.id = hid

    @classmethod
    def add(cls, hooks: _Hooks, d: dict[int, Any], fn: Callable[..., Any]) -> RemovableHandle:
        if not callable(fn):
            raise TypeError(f"hook must be callable, got {type(fn).__name__}")
        hid = next(cls._ids)
        d[hid] = fn
        if _is_async_callable(fn):
            hooks.has_async = True
        return cls(d, hid)

    def remove(self) -> None:
        self._dict.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class Node:
    """A backward function in the graph.

    ``_next_edges[i]`` is where the gradient for the forward input ``i`` goes (``None`` if that
    input needs no gradient). ``_input_meta[j]`` is ``(shape, dtype)`` of forward output ``j``:
    the gradient arriving at backward input ``j`` must match it.
    """

    __slots__ = (
        "__weakref__",
        "_device",
        "_hooks",
        "_input_meta",
        "_metadata",
        "_next_edges",
        "_sequence_nr",
        "_topological_nr",
    )

    # Whether ``apply`` may return an awaitable (custom Functions with an ``async def backward``).
    _async_apply = False

    _next_edges: list[Edge | None]
    _input_meta: tuple[tuple[tuple[int, ...], Any], ...]

    def _init_node(self, edges: list[Edge | None], sequence_nr: int | None = None) -> None:
        self._next_edges = edges
        topo = 0
        for e in edges:
            if e is not None:
                t = e[0]._topological_nr
                if t >= topo:
                    topo = t + 1
        self._topological_nr = topo
        self._sequence_nr = _next_sequence_nr() if sequence_nr is None else sequence_nr
        self._hooks = None
        self._metadata = None

    # ------------------------------------------------------------------ public surface
    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        return tuple((None, 0) if e is None else (e[0], e[1]) for e in self._next_edges)

    @property
    def sequence_nr(self) -> int:
        return self._sequence_nr

    @property
    def topological_nr(self) -> int:
        return self._topological_nr

    @property
    def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    @property
    def input_metadata(self) -> tuple[tuple[tuple[int, ...], Any, Any], ...]:
        """``(shape, dtype, device)`` of each gradient this node receives (its forward outputs)."""
        return tuple((shape, dtype, self._device) for shape, dtype in self._input_meta)

    @property
    def num_inputs(self) -> int:
        return len(self._input_meta)

    @property
    def num_outputs(self) -> int:
        return len(self._next_edges)

    def _get_hooks(self) -> _Hooks:
        h = self._hooks
        if h is None:
            h = self._hooks = _Hooks()
        return h

    def register_hook(self, fn: Callable[..., Any]) -> RemovableHandle:
        """Register ``fn(grad_inputs, grad_outputs)``, run after this node; it may return new
        grad_inputs."""
        h = self._get_hooks()
        return RemovableHandle.add(h, h.post, fn)

    def register_prehook(self, fn: Callable[..., Any]) -> RemovableHandle:
        """Register ``fn(grad_outputs)``, run before this node; may return new grad_outputs."""
        h = self._get_hooks()
        return RemovableHandle.add(h, h.pre, fn)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    def __call__(self, *grad_outputs: Any) -> Any:
        """Apply this backward function directly to gradients (Tensors), outside any engine."""
        from ..tensor import Tensor
        from .grad_mode import _grad_enabled

        create = _grad_enabled.get()
        grads = [
            None if g is None else (g if create else g._array) if isinstance(g, Tensor) else g
            for g in grad_outputs
        ]
        out = self.apply(grads, None, create)
        if inspect.isawaitable(out):
            raise RuntimeError(f"{self.name()} has an async backward; use the engine to run it")
        res = tuple(
            None if g is None else (g if isinstance(g, Tensor) else Tensor._wrap(g)) for g in out
        )
        return res[0] if len(res) == 1 else res

    # ------------------------------------------------------------------ engine interface
    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        raise NotImplementedError

    def release_variables(self) -> None:
        pass

    def _may_release(self) -> None:
        self.release_variables()


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
        self.tensor = None if is_output else tensor

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
        from ..tensor import Tensor

        self.check(node)
        if self.tensor is not None:
            return self.tensor
        t = Tensor._wrap(self.array)
        t._vc = self.vc
        t._grad_fn = node
        t._output_nr = output_nr
        return t


_FREED: Final = ("freed",)
_NO_EDGES: Final[list[Edge | None]] = []


def raise_freed(node: Node) -> None:
    raise RuntimeError(
        f"Trying to backward through the graph a second time (or directly access saved tensors "
        f"after they have already been freed) in {node.name()}. Saved intermediate values of the "
        "graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True "
        "if you need to backward through the graph a second time or if you need to access saved "
        "tensors after calling backward."
    )


def _calibrate_sole_refcount() -> int:
    box: list[Any] = [np.empty(1)]
    g = box[0]
    box[0] = None
    return sys.getrefcount(g)


# The reference count an array has when the only reference left is the local in
# AccumulateGrad.apply (measured with the same code shape, so it holds across Python versions).
_SOLE_REFCOUNT: Final = _calibrate_sole_refcount()


class AccumulateGrad(Node):
    """The sink of a leaf tensor: sums every gradient that reaches it into ``variable.grad``.

    # NOTE [Accumulator lifetime]
    # The leaf holds its AccumulateGrad strongly and the node holds the leaf weakly (PyTorch has
    # it the other way round). A parameter then keeps one accumulator for its whole life instead
    # of building a new one for every graph, and no reference cycle forms between the two. A
    # gradient that reaches the accumulator of a leaf nobody holds any more is dropped.
    """

    __slots__ = ("_lock", "_var_ref")

    def __init__(self, variable: Tensor) -> None:
        arr = variable._array
        self._init_node(_NO_EDGES, ACCUMULATE_SEQUENCE_NR)
        self._var_ref = weakref.ref(variable)
        self._input_meta = ((arr.shape, arr.dtype),)
        self._device = CPU if type(arr) is np.ndarray else variable.device
        self._lock = threading.Lock()

    @property
    def variable(self) -> Tensor | None:
        """The leaf this node accumulates into (None once that tensor has been freed)."""
        return self._var_ref()

    # A leaf's tensor hooks live on the tensor (they must work whichever graph reaches it), so
    # the engine reads them through this property.
    @property  # type: ignore[override]
    def _hooks(self) -> _Hooks | None:
        var = self._var_ref()
        m = None if var is None else var._meta
        return None if m is None else m.hooks

    @_hooks.setter
    def _hooks(self, value: Any) -> None:
        pass

    def _get_hooks(self) -> _Hooks:
        var = self._var_ref()
        if var is None:
            raise RuntimeError("the leaf tensor of this AccumulateGrad has been freed")
        m = var._get_meta()
        if m.hooks is None:
            m.hooks = _Hooks()
        return m.hooks  # type: ignore[no-any-return]

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        from ..tensor import Tensor

        g = grads[0]
        grads[0] = None
        var = self._var_ref()
        if g is None or var is None:
            return ()
        if g.shape != var.shape:
            raise RuntimeError(
                f"AccumulateGrad got a gradient of shape {tuple(g.shape)} for a leaf of shape "
                f"{tuple(var.shape)}"
            )
        with self._lock:
            old = var._grad
            if create:
                # See NOTE [Rules are NumPy]: g is a Tensor carrying its own graph.
                if g.dtype != var.dtype:
                    g = g.to(var.dtype)
                new = g.clone() if old is None else old + g
                var._grad = new
            else:
                if isinstance(g, np.generic):  # a 0-d result of a rule: make it an array
                    g = np.array(g)
                if g.dtype != var.dtype:
                    g = g.astype(var.dtype)
                elif old is None and not (
                    type(g) is np.ndarray
                    and g.base is None
                    and g.flags.c_contiguous
                    and sys.getrefcount(g) <= _SOLE_REFCOUNT
                ):
                    # Someone else still holds this array (another edge, a hook, the caller's
                    # `gradient`): copy, so that `.grad` never aliases memory it doesn't own.
                    g = g.copy()
                if old is None:
                    var._grad = Tensor._wrap(g)
                    return ()
                token = quiet_fp()  # See NOTE [Silent floating point]: inf + -inf is NaN
                try:
                    if old.requires_grad:
                        var._grad = Tensor._wrap(np.asarray(old._array + g))
                    else:
                        np.add(old._array, g, out=old._array)
                        old._vc[0] += 1
                finally:
                    restore_fp(token)
        return ()

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"


class GraphRoot(Node):
    """The entry node when backward starts from several roots: it emits their gradients."""

    __slots__ = ("grads",)

    def __init__(self, edges: list[Edge | None], grads: list[Any]) -> None:
        from ..backend import CPU

        self._init_node(edges)
        self.grads = grads
        self._input_meta = ()
        self._device = CPU

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        return self.grads
