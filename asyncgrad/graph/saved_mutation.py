"""Saved tensors that may be changed in place: what ``allow_mutation_on_saved_tensors`` keeps."""

from __future__ import annotations

from contextvars import ContextVar

from .._tensor import Tensor

__all__ = ["MutationContext", "before_write", "mutation_context"]

# NOTE [Mutation on saved tensors]
# Inside ``allow_mutation_on_saved_tensors`` a tensor saved for backward may be changed in place
# and the backward still sees the value it had when it was saved, as torch's. The block is a
# saved_tensors_hooks pair over a MutationContext (per task, as every hook):
# * pack: the node keeps a key; the context keeps a tensor over the array saved, sharing its
#   version counter, filed under that counter. The counter is shared by a tensor, its base and
#   every view of them, so a write through any of them finds every tensor saved from that array.
# * before_write: every in-place op calls it before it writes (ops/inplace.py). The tensors
#   filed under the written tensor's counter are copied first, and the keys unpack to the
#   copies. A write through another view of the same base is seen too (torch's misses it, and
#   its backward then reads the new values).
# * unpack: the copy where there is one, else the tensor saved. Once the block has closed the
#   context is emptied and an unpack raises, as torch's (AssertionError there too).
# What a write bypasses (an optimizer's step gives a parameter a new array, leaving the saved
# one as it was) needs no copy.


class _Key:
    """What a node keeps for a tensor saved inside the block."""

    __slots__ = ()


class MutationContext:
    """The tensors saved inside one ``allow_mutation_on_saved_tensors`` block."""

    def __init__(self) -> None:
        self.original: dict[_Key, Tensor] = {}
        self.cloned: dict[_Key, Tensor] = {}
        # id(version counter) -> the keys saved from arrays that share it (the counter is kept
        # alive by the tensors in ``original``, so its id is its own while it is listed).
        self.by_counter: dict[int, list[_Key]] = {}
        self.closed = False

    def pack(self, t: Tensor) -> _Key:
        key = _Key()
        held = Tensor._wrap(t._array)
        held._vc = t._vc
        self.original[key] = held
        self.by_counter.setdefault(id(t._vc), []).append(key)
        return key

    def unpack(self, key: _Key) -> Tensor:
        if self.closed:
            raise AssertionError(
                "Trying to backward outside of the 'allow_mutation_on_saved_tensors' context "
                "in which the graph was originally recorded."
            )
        t = self.cloned.get(key)
        return self.original[key] if t is None else t

    def before_write(self, t: Tensor) -> None:
        keys = self.by_counter.pop(id(t._vc), None)
        if keys is None:
            return
        for key in keys:
            held = self.original[key]
            copy = Tensor._wrap(held._array.copy())
            self.cloned[key] = copy

    def close(self) -> None:
        self.closed = True
        self.original.clear()
        self.cloned.clear()
        self.by_counter.clear()


mutation_context: ContextVar[MutationContext | None] = ContextVar(
    "asyncgrad_mutation_on_saved", default=None
)
_used = False  # set once a block has opened: until then in-place ops skip the lookup


def opened() -> None:
    global _used
    _used = True


def before_write(t: Tensor) -> None:
    """Called by every in-place op before it writes ``t``."""
    if _used:
        ctx = mutation_context.get()
        if ctx is not None:
            ctx.before_write(t)
