"""Hooks: their registry on a node or a leaf, removable handles, and the conversions between the
engine's gradients (arrays) and what a user's hook sees and returns (Tensors)."""

from __future__ import annotations

import inspect
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._tensor import Tensor

if TYPE_CHECKING:
    from .node import Node

__all__ = ["Hooks", "RemovableHandle"]

# Hook registration may happen on any thread (a hook registering another, a pool thread running a
# nested backward); the dicts below are only ever replaced or mutated under this lock, and the
# engine iterates over copies.
_lock = threading.Lock()


class Hooks:
    """The hooks of one node (or of one leaf tensor, for its AccumulateGrad)."""

    __slots__ = ("has_async", "post", "post_acc", "pre", "retains", "tensor_pre")

    def __init__(self) -> None:
        self.tensor_pre: dict[int, dict[int, Callable[..., Any]]] = {}
        self.retains: dict[int, weakref.ref[Tensor]] = {}
        self.pre: dict[int, Callable[..., Any]] = {}
        self.post: dict[int, Callable[..., Any]] = {}
        self.post_acc: dict[int, Callable[..., Any]] = {}
        self.has_async = False


def is_async_callable(fn: Callable[..., Any]) -> bool:
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
    def add(cls, hooks: Hooks, d: dict[int, Any], fn: Callable[..., Any]) -> RemovableHandle:
        # Any object registers, as in torch: one that is not callable fails with Python's
        # "object is not callable" when a backward calls it.
        with _lock:
            hid = next(cls._ids)
            d[hid] = fn
            if is_async_callable(fn):
                hooks.has_async = True
        return cls(d, hid)

    def remove(self) -> None:
        with _lock:
            self._dict.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def tensor_hooks_of(hooks: Hooks, nr: int) -> dict[int, Callable[..., Any]]:
    """The tensor-hook dict of output ``nr`` (made under the lock on first use)."""
    with _lock:
        d = hooks.tensor_pre.get(nr)
        if d is None:
            d = hooks.tensor_pre[nr] = {}
        return d


def add_retain(hooks: Hooks, nr: int, tensor: Tensor) -> None:
    with _lock:
        hooks.retains[nr] = weakref.ref(tensor)


def move_retain(t: Tensor, old: Node | None, old_nr: int) -> None:
    """``t``'s history has moved from output ``old_nr`` of ``old`` to its new grad_fn (an in-place
    op): if ``t`` retains its gradient, the new node now retains it and the old one no longer
    does, so ``t.grad`` is the gradient of its value after the op, once (as torch)."""
    m = t._meta
    if m is None or not m.retains_grad:
        return
    if old is not None and old._hooks is not None:
        retains = old._hooks.retains
        with _lock:
            ref = retains.get(old_nr)
            if ref is not None and ref() is t:
                del retains[old_nr]
    new = t._grad_fn
    if new is not None:
        add_retain(new._get_hooks(), t._output_nr, t)


# ----------------------------------------------------------------------------- engine side
def hook_name(fn: Any) -> str:
    return f"hook '{getattr(fn, '__qualname__', type(fn).__name__)}'"


def to_user(g: Any, create: bool) -> Any:
    """A gradient as a hook sees it: a Tensor (already one under ``create_graph``)."""
    if g is None or create:
        return g
    return Tensor._wrap(g)


def from_user(r: Any, node: Node, nr: int, what: str, create: bool) -> Any:
    """A hook's returned gradient for input ``nr`` of ``node``, checked and unwrapped."""
    if r is None:
        return None
    if not isinstance(r, Tensor):
        raise TypeError(
            f"{what} for input {nr} of {node.name()} must return a Tensor or None, "
            f"got {type(r).__name__}"
        )
    meta = node._input_meta[nr] if nr < len(node._input_meta) else None
    if meta is not None and tuple(r.shape) != tuple(meta[0]):
        raise RuntimeError(
            f"{what} has changed the size of value: {node.name()} input {nr} expects a gradient "
            f"of shape {tuple(meta[0])} but the hook returned shape {tuple(r.shape)}"
        )
    if meta is not None and r.dtype != meta[1]:
        raise RuntimeError(
            f"{what} has changed the type of value: {node.name()} input {nr} expects a "
            f"gradient of dtype {meta[1]} but the hook returned {r.dtype}"
        )
    return r if create else r._array


def post_from_user(g: Any, node: Node, i: int, create: bool) -> Any:
    """A post hook's returned gradient for output edge ``i`` of ``node``, checked and unwrapped."""
    if g is None:
        return None
    if not isinstance(g, Tensor):
        raise TypeError(f"a post hook of {node.name()} returned a {type(g).__name__}, not a Tensor")
    e = node._next_edges[i]
    if e is not None:
        shape = e[0]._input_meta[e[1]][0]
        if tuple(g.shape) != tuple(shape):
            raise RuntimeError(
                f"a post hook of {node.name()} has changed the size of value: gradient {i} must "
                f"have shape {tuple(shape)}, got {tuple(g.shape)}"
            )
    return g if create else g._array


# retain_grad may be reached by several graph tasks at once (threads running sync backward over
# one retained graph); the read-modify-write of `.grad` is atomic under this lock.
_retain_lock = threading.Lock()


def retain(t: Tensor, g: Any, create: bool) -> None:
    """Sum gradient ``g`` into the ``.grad`` of non-leaf ``t`` (``retain_grad``)."""
    with _retain_lock:
        old = t._grad
        if old is None:
            t._grad = g.clone() if create else Tensor._wrap(g.copy())
        else:
            t._grad = old + (g if create else Tensor._wrap(g))
