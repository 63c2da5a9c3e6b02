"""InputBuffer: the gradients arriving at one node, summed per input slot."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import quiet_fp, restore_fp


class InputBuffer(list):  # type: ignore[type-arg]
    """A list of gradients (one per backward input of a node) that remembers which slots hold
    arrays it created itself: only those may be summed into in place. Any other array may be
    shared with another edge, a hook or the caller."""

    __slots__ = ("owned",)

    def __init__(self, n: int) -> None:
        super().__init__([None] * n)
        self.owned = 0


def accumulate(buf: InputBuffer, nr: int, g: Any, create: bool) -> None:
    if g is None:
        return
    old = buf[nr]
    if old is None:
        buf[nr] = g
    elif create:
        buf[nr] = old + g  # Tensors: records the sum so double backward sees it
    else:
        token = quiet_fp()  # See NOTE [Silent floating point]: inf + -inf is NaN, silently
        try:
            if buf.owned >> nr & 1 and old.shape == np.broadcast_shapes(old.shape, g.shape):
                np.add(old, g, out=old, casting="unsafe")
                return
            r = old + g
        finally:
            restore_fp(token)
        if isinstance(r, np.generic):  # 0-d operands give a NumPy scalar: keep an array
            r = np.asarray(r)
        buf[nr] = r
        buf.owned |= 1 << nr
