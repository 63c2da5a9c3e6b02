"""InputBuffer: the gradients arriving at one node, and ``add``, the one place they are summed."""

from __future__ import annotations

from typing import Any

from .. import backend
from .._build import mypyc_attr
from ..backend import cuda


# A list subclass cannot be a compiled (native) class: it stays a Python class in the compiled
# build too (See NOTE [Compiled modules] in asyncgrad/_build.py).
@mypyc_attr(native_class=False)
class InputBuffer(list[Any]):
    """A list of gradients (one per backward input of a node) that remembers which slots hold
    arrays it created itself: only those may be summed into in place. Any other array may be
    shared with another edge, a hook or the caller."""

    __slots__ = ("cross", "owned")

    def __init__(self, n: int) -> None:
        super().__init__([None] * n)
        self.owned = 0
        # Whether a gradient in it was made on another CUDA stream than its node's: the node's
        # worker then keeps the arrays until the node's kernels have used them (See NOTE
        # [Deferred frees] in asyncgrad/backend/cuda.py).
        self.cross = False


def add(buf: list[Any], nr: int, g: Any, create: bool, on: tuple[Any, int] | None = None) -> None:
    """Sum gradient ``g`` into slot ``nr`` of ``buf``.

    NOTE [Gradient values]
    A gradient in the engine is an array on the receiving node's device (``numpy.ndarray`` on the
    CPU, never a NumPy scalar), or ``None`` for "no gradient". Under ``create_graph`` it is a
    Tensor instead, so that the sum is recorded for double backward.

    ``on``: the consumer's ``(stream, device index)`` when ``g`` was made on another stream (See
    NOTE [Streams in the graph]); the sum then runs there, with that device current (the
    producer's may be another: CuPy launches on the current device).
    """
    if g is None:
        return
    if on is not None:
        if type(buf) is InputBuffer:
            buf.cross = True
        old = buf[nr]
        if old is not None:
            stream, idx = on
            dev = -1 if cuda.single_device() else cuda.use_device(idx)
            prev = cuda.use_stream(stream, idx)
            try:
                add(buf, nr, g, create)
                # The sum reads both on the consumer's stream; either may come from another
                # stream (See NOTE [Deferred frees] in asyncgrad/backend/cuda.py).
                cuda.free_after(stream, idx, (old, g))
            finally:
                cuda.use_stream(prev, idx)
                if dev >= 0:
                    cuda.use_device(dev)
            return
    old = buf[nr]
    if old is None:
        buf[nr] = g
    elif create:
        buf[nr] = old + g  # Tensors: records the sum so double backward sees it
    elif (
        type(buf) is InputBuffer
        and buf.owned >> nr & 1
        and old.shape == backend.broadcast_shapes(old.shape, g.shape)
    ):
        backend.add_into(old, g)
    else:
        buf[nr] = backend.ensure_array(old + g)
        if type(buf) is InputBuffer:
            buf.owned |= 1 << nr
