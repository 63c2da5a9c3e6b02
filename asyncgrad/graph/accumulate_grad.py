"""AccumulateGrad: the sink node of a leaf tensor, summing gradients into its ``.grad``."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, Final

from .. import backend
from .._tensor import SAME_DTYPE, Tensor
from .hooks import Hooks
from .node import ACCUMULATE_SEQUENCE_NR, ELEMENT_PASS, Edge, Node, one_output_meta, size_work

__all__ = ["AccumulateGrad"]

_NO_EDGES: Final[list[Edge | None]] = []
_meta_lock = threading.Lock()

# NOTE [Accumulation locks]
# Graph tasks on several threads may reach one leaf at once (tests/engine/test_threads.py), so
# reading, summing and writing `.grad` happens under a lock. A lock per accumulator would be one
# more object per leaf for the cyclic garbage collector to scan (a served request's input is a
# new leaf), so accumulators share a fixed set of locks, picked by address. Two leaves on one
# lock only wait for each other's sum; no code runs under the lock that could take another.
_LOCKS: Final = tuple(threading.Lock() for _ in range(64))


def _accumulate_work(node: Node, grads: list[Any]) -> float:
    """AccumulateGrad's work estimate (See NOTE [Work estimates] in node.py): a pass over the
    gradient where it copies or adds it, none where it will take the array over."""
    n = size_work(node, grads)
    g = grads[0]
    var = node._var_ref()  # type: ignore[attr-defined]
    if not n or g is None or var is None:
        return 0.0
    if (
        var._grad is None
        and type(g) is backend.ndarray
        and g.base is None
        and g.flags.c_contiguous
        and g.dtype == var.dtype
    ):
        return 0.0  # most likely a fresh array, which apply takes without a copy
    # Under grad() the node only hands the gradient over (the engine does not call apply), but
    # the estimate cannot tell: a large leaf's may then pay a hand-off for nothing.
    return n


class AccumulateGrad(Node):
    """The sink of a leaf tensor: sums every gradient that reaches it into ``variable.grad``.

    # NOTE [Accumulator lifetime]
    # The leaf holds its AccumulateGrad strongly and the node holds the leaf weakly (PyTorch has
    # it the other way round). A parameter then keeps one accumulator for its whole life instead
    # of building a new one for every graph, and no reference cycle forms between the two. A
    # gradient that reaches the accumulator of a leaf nobody holds any more is dropped.
    """

    __slots__ = ("__weakref__", "_var_ref")  # See NOTE [Weak references to nodes]

    _cost: ClassVar[float] = ELEMENT_PASS
    _work: ClassVar[Callable[[Node, list[Any]], float] | None] = staticmethod(_accumulate_work)

    def __init__(self, variable: Tensor) -> None:
        arr = variable._array
        self._init_node(_NO_EDGES, ACCUMULATE_SEQUENCE_NR)
        self._var_ref = weakref.ref(variable)
        # See NOTE [Leaf hooks]: the leaf's hooks, if it has some already.
        m = variable._meta
        self._hooks = None if m is None else m.hooks
        self._input_meta = one_output_meta(arr.shape, arr.dtype)
        self._set_device(variable.device)

    @staticmethod
    def edge_of(variable: Tensor) -> Any:
        """The leaf's gradient edge ``(accumulator, 0)``, made once and then kept for the
        tensor's life (See NOTE [Accumulator lifetime]). Typed Any: a compiled function would
        return a fixed-length tuple type as a new tuple, and every node that consumes the leaf
        must share this one (See NOTE [Compiled modules] in asyncgrad/_build.py)."""
        m = variable._get_meta()
        e = m.grad_edge
        if e is None:
            with _meta_lock:
                e = m.grad_edge
                if e is None:
                    e = m.grad_edge = (AccumulateGrad(variable), 0)
        return e

    @property
    def variable(self) -> Tensor | None:
        """The leaf this node accumulates into (None once that tensor has been freed)."""
        return self._var_ref()

    def _get_hooks(self) -> Hooks:
        var = self._var_ref()
        if var is None:
            raise RuntimeError("the leaf tensor of this AccumulateGrad has been freed")
        return leaf_hooks(var)

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
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
        want = var.dtype
        m = var._meta
        if m is not None and m.grad_dtype is not SAME_DTYPE:  # See Tensor.grad_dtype
            want = g.dtype if m.grad_dtype is None else m.grad_dtype
        with _LOCKS[id(self) >> 4 & 63]:  # See NOTE [Accumulation locks]
            old = var._grad
            if create:
                # See NOTE [Rules are NumPy]: g is a Tensor carrying its own graph.
                if g.dtype != want:
                    g = g.to(want)
                var._grad = g.clone() if old is None else old + g
            else:
                if g.dtype != want:
                    g = g.astype(want)
                elif old is None and not backend.can_steal(g):
                    # Someone else still holds this array (another edge, a hook, the caller's
                    # `gradient`): copy, so that `.grad` never aliases memory it doesn't own.
                    g = g.copy()
                if old is None:
                    var._grad = Tensor._wrap(g)
                elif old.requires_grad:
                    var._grad = Tensor._wrap(backend.ensure_array(old._array + g))
                else:
                    backend.add_into(old._array, g)
                    old._vc[0] += 1
        return ()

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"


# NOTE [Leaf hooks]
# A leaf's tensor hooks live on the tensor: they must run whichever graph reaches the leaf, and
# a leaf keeps one accumulator for its life (See NOTE [Accumulator lifetime]) that may be made
# before or after its first hook. The engine reads every node's hooks from ``_hooks``, so the
# accumulator holds the same Hooks object as its leaf: ``AccumulateGrad.__init__`` takes the
# leaf's, and ``leaf_hooks`` gives the accumulator the ones it makes, both under ``_meta_lock``.
# (A property reading the leaf's hooks would do the same in Python, but compiled code reads the
# field of a native class directly and would never run it: See NOTE [Compiled modules] in
# asyncgrad/_build.py.) A tensor unpacked from a saved leaf shares the leaf's gradient edge
# (graph/saved_tensor.py) but keeps hooks of its own: the accumulator keeps its leaf's.


def leaf_hooks(variable: Tensor) -> Hooks:
    """The hooks of a leaf tensor (kept on the tensor, made on first use; See NOTE [Leaf
    hooks])."""
    m = variable._get_meta()
    h = m.hooks
    if h is None:
        with _meta_lock:
            h = m.hooks
            if h is None:
                h = m.hooks = Hooks()
                e = m.grad_edge
                if e is not None and e[0]._var_ref() is variable:
                    e[0]._hooks = h
    return h
