"""Node and Edge: the backward graph's functions and the gradient edges that join them."""

from __future__ import annotations

import inspect
import itertools
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

from .._build import mypyc_attr
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
#
# The table holds, and one_output_meta returns, tuples of one ``(shape, dtype)``, typed as tuples
# of any length: compiled code would otherwise unbox a fixed-length tuple and box a new one, and
# the sharing would be lost (See NOTE [Compiled modules] in asyncgrad/_build.py).
META_SHAPES_MAX: Final = 1024
Meta = tuple[tuple[tuple[int, ...], Any], ...]
metas: Final[dict[tuple[int, ...], Meta]] = {}


def one_output_meta(shape: tuple[int, ...], dtype: Any) -> Meta:
    """The ``_input_meta`` of a node whose one output has ``shape`` and ``dtype``, shared with
    the other nodes of that shape and dtype (See NOTE [Shared input metadata])."""
    m = metas.get(shape)
    if m is None or m[0][1] is not dtype:
        if len(metas) >= META_SHAPES_MAX:
            metas.clear()
        # A LargeMeta for a large shape (See NOTE [Work estimates]).
        m = metas[shape] = outputs_meta(((shape, dtype),))
    return m


# NOTE [Work estimates]
# The engine moves a CPU node whose work is large off the event loop (See NOTE [Large nodes] in
# asyncgrad/engine/worker.py), so every node has an estimate of its work: ``_work(node, grads)``,
# in multiply-adds, the unit of the matmul estimate. Matmul, linear and convolution keep their
# exact count (``mark_heavy`` in asyncgrad/rules/registry.py) and the linear algebra
# decompositions a cubic one; every other node does about ``_cost`` multiply-adds' worth of
# work per element of the largest array it reads or writes (its gradients in and out, read
# from the shapes, so a Tensor gradient under create_graph needs no array). ``_cost`` is set
# per op (the table at the end of asyncgrad/rules/table.py) in units of ``ELEMENT_PASS``: one
# pass over an array's elements costs about as long as 8 multiply-adds of a single-threaded
# matmul (benchmarks/bench_large_nodes.py measures both). A node under ``LARGE_ELEMENTS``
# elements is estimated at 0 and never leaves the loop: its work is tens of microseconds, less
# than the hand-off.
#
# Asking every node for its estimate would cost the worker a call per node, most of them tiny.
# Instead the shared metadata of a large shape is a ``LargeMeta`` (a tuple like any other, made
# once per shape, see NOTE [Shared input metadata]), and the worker asks for the estimate only
# where the node's gradient has such a shape or its class is ``_special``: matmul-like ops and
# decompositions, whose work is large at modest sizes, and the ops whose gradient is smaller
# than what their backward writes (reductions, indexing, pooling), whose outputs may be small.
ELEMENT_PASS: Final = 8.0
LARGE_ELEMENTS: Final = 1 << 16


@mypyc_attr(native_class=False)  # a tuple subclass (See NOTE [Compiled modules] in _build.py)
class LargeMeta(tuple[tuple[tuple[int, ...], Any], ...]):
    """The ``_input_meta`` of a node with an output of at least ``LARGE_ELEMENTS`` elements
    (See NOTE [Work estimates])."""

    __slots__ = ()


def outputs_meta(
    items: tuple[tuple[tuple[int, ...], Any], ...],
) -> tuple[tuple[tuple[int, ...], Any], ...]:
    """The ``_input_meta`` for outputs of these ``(shape, dtype)``: a ``LargeMeta`` when one of
    them is large (See NOTE [Work estimates])."""
    for shape, _ in items:
        if math.prod(shape) >= LARGE_ELEMENTS:
            return LargeMeta(items)
    return items


def largest_shape(node: Node) -> tuple[int, ...]:
    """The shape of the largest gradient ``node`` receives or computes."""
    n = -1
    largest: tuple[int, ...] = ()
    for shape, _ in node._input_meta:
        if math.prod(shape) > n:
            n, largest = math.prod(shape), shape
    for e in node._next_edges:
        if e is not None:
            shape = e[0]._input_meta[e[1]][0]
            if math.prod(shape) > n:
                n, largest = math.prod(shape), shape
    return largest


def size_work(node: Node, grads: list[Any]) -> float:
    """The work estimate of most nodes: ``_cost`` per element of the largest array the node
    reads or writes, 0 under ``LARGE_ELEMENTS`` (See NOTE [Work estimates])."""
    n = math.prod(largest_shape(node))
    return 0.0 if n < LARGE_ELEMENTS else n * node._cost


# NOTE [Weak references to nodes]
# Nodes take weak references, as torch's do: a custom Function's context holds its node weakly,
# and leak checks hold graphs weakly. Node itself names no ``__weakref__``: where it is compiled
# its objects could not take weak references safely (See NOTE [Compiled modules] in
# asyncgrad/_build.py). Every concrete node class is a Python class that names ``__weakref__``
# in its own ``__slots__`` (the table ops' through ``TableNode``, asyncgrad/rules/registry.py),
# the same in both builds; ``tests/engine/test_compiled_traps.py`` checks each one.
@mypyc_attr(allow_interpreted_subclasses=True)
class Node:
    """A backward function in the graph.

    ``_next_edges[i]`` is where the gradient for the forward input ``i`` goes (``None`` if that
    input needs no gradient). ``_input_meta[j]`` is ``(shape, dtype)`` of forward output ``j``:
    the gradient arriving at backward input ``j`` must match it, on device ``_device``.
    """

    __slots__ = (  # no __weakref__: See NOTE [Weak references to nodes]
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
    # The class-level flags are ClassVars: set per op class (rules/table.py), and read from the
    # node's class by compiled code too (See NOTE [Compiled modules] in asyncgrad/_build.py).
    _async_apply: ClassVar[bool] = False
    # An estimate of the multiply-adds ``apply`` would do with these gradients (See NOTE [Work
    # estimates]); None for nodes that must run on the loop (an ``async def backward``).
    _work: ClassVar[Callable[[Node, list[Any]], float] | None] = staticmethod(size_work)
    # Multiply-adds per element for ``size_work``: by default two passes over the arrays.
    _cost: ClassVar[float] = 2 * ELEMENT_PASS
    # Whether the device worker must look closer before running the node inline: set when
    # ``_async_apply`` is, or when the node's work may be large while its gradient's shape is
    # not (See NOTE [Work estimates]), so a plain node costs the worker one check.
    _special: ClassVar[bool] = False
    # Whether ``apply`` copies a CUDA gradient to the host (the backward of a copy to a CUDA
    # device, when its ``device`` parameter is the CPU): See NOTE [Host reads wait off the loop].
    _copies_to_host: ClassVar[bool] = False

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


# After Node: a compiled module builds the field types of a NamedTuple from the classes, which
# must exist by then (See NOTE [Compiled modules] in asyncgrad/_build.py).
class Edge(NamedTuple):
    """A gradient edge: input ``input_nr`` of the backward node ``node``."""

    node: Node
    input_nr: int
