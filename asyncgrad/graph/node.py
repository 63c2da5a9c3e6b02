"""Node and Edge: the backward graph's functions and the gradient edges that join them."""

from __future__ import annotations

import inspect
import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._tensor import Tensor
from ..backend import current_stream, quiet_fp, restore_fp
from .grad_mode import _grad_enabled
from .hooks import Hooks, RemovableHandle

if TYPE_CHECKING:
    from ..backend import Device

__all__ = ["ACCUMULATE_SEQUENCE_NR", "Edge", "Node"]

_sequence = itertools.count()
_next_sequence_nr = _sequence.__next__

# AccumulateGrad nodes take the largest sequence number so they run as soon as they are ready,
# which frees the gradient buffers early (as in PyTorch).
ACCUMULATE_SEQUENCE_NR: Final = (1 << 63) - 1

_hooks_lock = threading.Lock()


# NOTE [Shared input metadata]
# A node keeps ``_input_meta``, ``((shape, dtype),)`` for a one-output op: two tuples over the
# array's own shape tuple. Built afresh per node they are three container objects that the
# cyclic collector counts as new (its young generation runs after every 700 of them, net) and
# scans until it untracks them, one level per collection: under a burst of requests, about a
# third of what each forward graph gave the collector. Nodes therefore share one such tuple per
# shape, made for the dtype that shape last came with: the table ops' recording looks it up by
# the shape (ops/_record.py, _attach), without a call and without hashing the dtype, which costs
# NumPy more than building the tuples. A program that mixes dtypes at one shape gets a fresh
# tuple per change of dtype (correct, as before), and one whose shapes keep changing (a growing
# sequence) empties the table once it holds META_SHAPES_MAX shapes: in place, as recording holds
# the table's bound ``get``.
META_SHAPES_MAX: Final = 1024
metas: Final[dict[tuple[int, ...], tuple[tuple[tuple[int, ...], Any]]]] = {}


def one_output_meta(shape: tuple[int, ...], dtype: Any) -> tuple[tuple[tuple[int, ...], Any]]:
    """The ``_input_meta`` of a node whose one output has ``shape`` and ``dtype``, shared with
    the other nodes of that shape and dtype (See NOTE [Shared input metadata])."""
    m = metas.get(shape)
    if m is None or m[0][1] is not dtype:
        if len(metas) >= META_SHAPES_MAX:
            metas.clear()
        m = metas[shape] = ((shape, dtype),)
    return m


class Edge(NamedTuple):
    """A gradient edge: input ``input_nr`` of the backward node ``node``."""

    node: Node
    input_nr: int


class Node:
    """A backward function in the graph.

    ``_next_edges[i]`` is where the gradient for the forward input ``i`` goes (``None`` if that
    input needs no gradient). ``_input_meta[j]`` is ``(shape, dtype)`` of forward output ``j``:
    the gradient arriving at backward input ``j`` must match it, on device ``_device``.
    """

    __slots__ = (
        "__weakref__",
        "_device",
        "_hooks",
        "_input_meta",
        "_metadata",
        "_next_edges",
        "_sequence_nr",
        "_stream",
        "_topological_nr",
    )

    # Whether ``apply`` may return an awaitable (custom Functions with an ``async def backward``).
    _async_apply = False
    # For nodes whose work can be large (matmuls): an estimate of the multiply-adds ``apply``
    # would do with these gradients (See NOTE [Large nodes] in asyncgrad/engine/worker.py).
    _work: Callable[[Node, list[Any]], float] | None = None
    # Whether the device worker must look closer before running the node inline: set when
    # ``_async_apply`` is or ``_work`` is given, so a plain node costs the worker one check.
    _special = False
    # Whether ``apply`` copies a CUDA gradient to the host (the backward of a copy to a CUDA
    # device, when its ``device`` parameter is the CPU): See NOTE [Host reads wait off the loop].
    _copies_to_host = False

    _next_edges: list[Edge | None]
    _input_meta: tuple[tuple[tuple[int, ...], Any], ...]
    _device: Device | None
    _hooks: Hooks | None
    _metadata: dict[str, Any] | None
    _sequence_nr: int
    _topological_nr: int
    # The stream the forward ran on, set (and read) only for nodes on a CUDA device: See NOTE
    # [Streams in the graph].
    _stream: Any

    def _init_node(self, edges: list[Edge | None], sequence_nr: int | None = None) -> None:
        # ops/_record.py (_attach) sets these same fields inline for the nodes of table ops, the
        # hot path of recording: keep the two in step.
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

    def _set_device(self, device: Device | None) -> None:
        """Run on ``device``, and on a CUDA device on its current stream (See NOTE [Streams in
        the graph])."""
        self._device = device
        if device is not None and device.type == "cuda":
            self._stream = current_stream(device)

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

    def _get_hooks(self) -> Hooks:
        h = self._hooks
        if h is None:
            with _hooks_lock:
                h = self._hooks
                if h is None:
                    h = self._hooks = Hooks()
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
        n = len(self._input_meta)
        if len(grad_outputs) != n:
            raise TypeError(f"expected {n} arguments, got {len(grad_outputs)} instead")
        create = _grad_enabled.get()
        grads = [
            None if g is None else (g if create else g._array) if isinstance(g, Tensor) else g
            for g in grad_outputs
        ]
        token = quiet_fp()  # See NOTE [Silent floating point]
        try:
            out = self.apply(grads, None, create)
        finally:
            restore_fp(token)
        if inspect.isawaitable(out):
            raise RuntimeError(f"{self.name()} has an async backward; use the engine to run it")
        res = tuple(
            None if g is None else (g if isinstance(g, Tensor) else Tensor._wrap(g)) for g in out
        )
        return res[0] if len(res) == 1 else res

    # ------------------------------------------------------------------ engine interface
    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        """Compute the gradients for ``_next_edges`` from ``grads`` (one per forward output).

        ``needed[i]`` False: edge ``i`` leads to no requested input (``grad()``/``inputs=``), so
        its gradient may be skipped. ``create``: record the computation (Tensors in and out).
        """
        raise NotImplementedError

    def release_variables(self) -> None:
        """Free what this node saved for backward (after a backward without retain_graph)."""

    def releasable(self) -> Any:
        """What ``release_variables`` drops (None: nothing), for the engine to keep until the
        GPU has run this node's kernels (See NOTE [Deferred frees] in
        asyncgrad/backend/cuda.py)."""
        return None
