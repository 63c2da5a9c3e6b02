"""SavedTensor: a value a node keeps for its backward, checked against the tensor's version."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .._tensor import Tensor
from .accumulate_grad import AccumulateGrad

if TYPE_CHECKING:
    from .node import Node

__all__ = [
    "FREED",
    "HookedSavedTensor",
    "SavedTensor",
    "hooks_used",
    "raise_detached",
    "raise_freed",
    "saved_hooks",
    "version_counter_of",
]

# What a node's saved values become once a backward without retain_graph has run it; found by
# identity. Typed as a tuple of any length: compiled code would unbox a fixed-length one and box
# a new tuple, and ``is FREED`` would fail there (See NOTE [Compiled modules] in _build.py).
FREED: Final[tuple[str, ...]] = ("freed",)


# NOTE [Saved tensor versions]
# A node saves the version of each input it needs at backward time; reading it back compares with
# the live version counter (shared with views), so an in-place change in between is an error that
# names the node and both versions rather than a silently wrong gradient.
class SavedTensor:
    __slots__ = ("array", "is_output", "tensor", "vc", "version")

    def __init__(self, tensor: Tensor, is_output: bool, array: Any = None) -> None:
        # ``array``: the array the op read from ``tensor`` (an input), which an optimizer step
        # may have replaced since (See NOTE [Serving while training] in optim/optimizers.py).
        vc = tensor._vc  # read before the array: See version_counter_of
        if array is None:
            self.array = tensor._array
        else:
            self.array = array
            if tensor._array is array:
                m = tensor._meta
                published = None if m is None else m.published
                if published is not None:
                    # A step published an array for this tensor: its newest pair, or a search.
                    first = published[0]
                    vc = first[1] if first[0] == id(array) else version_counter_of(tensor, array)
                # else: no step ever published for it, so the counter read first is the array's
            else:
                vc = version_counter_of(tensor, array)
        self.vc = vc
        self.version = vc[0]
        self.is_output = is_output
        # An output is saved without its grad_fn (the node would keep itself alive through it);
        # it is rebuilt on unpack for create_graph.
        self.tensor: Tensor | None = None if is_output else tensor
        if _hooks_used:  # See NOTE [Saved tensor hooks]
            hooks = saved_hooks.get()
            if hooks is not None:
                _pack(self, tensor, hooks)

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
            if saved._grad_fn is None and not saved._requires_grad and _had_grad_fn(self, node):
                raise_detached()
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
                t._get_meta().grad_edge = edge  # type: ignore[assignment]
            else:
                t._grad_fn, t._output_nr = edge
        return t


def version_counter_of(tensor: Tensor, array: Any) -> list[int]:
    """The version counter that goes with ``array``, which an op read from ``tensor`` when it
    started: the tensor's own while ``array`` is still its array, else the one an optimizer step
    published ``array`` with (See NOTE [Serving while training] in optim/optimizers.py).

    A step publishes in this order: the pair (id of the new array, its counter) first, in a new
    tuple of the tensor's ``published`` pairs, then the array, then the counter. Read in the
    opposite order, with the tuple read again last, the pair found is consistent whichever
    moment another thread's step comes at.
    """
    while True:
        m = tensor._meta
        published = None if m is None else m.published
        if published is not None:
            key = id(array)  # ``array`` is alive (the caller holds it): its id is its own
            for i, vc in published:
                if i == key:
                    return vc
        vc = tensor._vc
        current = tensor._array
        if tensor._meta is m and (m is None or m.published is published):
            if current is array:
                return vc
            steps = len(published) if published is not None else 0
            raise RuntimeError(
                f"a tensor of shape {list(array.shape)} was given a new array while an "
                f"operation read it (by at least {steps} optimizer steps, or `.data =`, or "
                "`module.to()`): the version of the array that operation read is no longer known"
            )


# NOTE [Saved tensor hooks]
# Under ``ag.autograd.graph.saved_tensors_hooks(pack, unpack)`` every tensor a node saves goes
# through ``pack`` when it is saved, and the node keeps only what ``pack`` returned; the backward
# gets ``unpack(packed)`` instead of the array. The hooks live in a context variable (per task
# and thread, like grad modes); only the innermost pair applies, as in torch. Saving is on the
# hot path of every op, so the context variable is read only once some block has been opened
# in the process (``_hooks_used``, a module global that stays set: a task created inside a block
# inherits the hooks and may outlive it, so a count of open blocks would not do): a program that
# never uses hooks pays one global load and test per save. A hooked save then changes its
# object's class to HookedSavedTensor (same layout, no slots added), whose ``array`` is a
# property that unpacks: the rules and the engine read ``saved.array`` as before and never learn
# about hooks. It keeps no reference to the tensor or its array (that is the point of
# offloading), only its version counter, shape and dtype for the in-place check, and the
# gradient edge to give the unpacked tensor under create_graph. As in torch, the tensor a
# backward unpacks has the version counter of what ``unpack`` returned, and a tensor saved with
# no place in the graph unpacks to that very object. Its version is checked only while it is the
# saved tensor's own (the hook kept the tensor itself): where ``unpack`` gives a copy made at
# save time, an in-place change of the original since changes nothing it returns (torch checks
# neither case).
#
# The blocks open form a stack, as torch's: the context variable holds the tuple of the open
# blocks' pairs (None when there is none), an exit pops the top whichever block it belongs to,
# and a block opened or closed by user code inside a backward (an unpack hook, See NOTE [User
# code in a backward leaves no state] in local_state.py) is undone when that code returns.
HookPair = tuple[Callable[[Tensor], Any], Callable[[Any], Any]]
saved_hooks: ContextVar[tuple[HookPair, ...] | None] = ContextVar(
    "asyncgrad_saved_tensors_hooks", default=None
)
_hooks_used = False


def hooks_used() -> None:
    """Called by every saved_tensors_hooks block as it opens: from then on saves look up the
    context variable."""
    global _hooks_used
    _hooks_used = True


def push_hooks(pair: HookPair) -> None:
    """Open a saved_tensors_hooks block: ``pair`` applies until the matching pop."""
    hooks_used()
    stack = saved_hooks.get()
    saved_hooks.set((pair,) if stack is None else (*stack, pair))


def pop_hooks() -> None:
    """Close the innermost open block (none open: nothing to close)."""
    stack = saved_hooks.get()
    if stack is not None:
        saved_hooks.set(stack[:-1] or None)


# The slots' descriptors: HookedSavedTensor's ``array`` property hides the slot, whose storage
# then holds the _Packed record.
_array_slot: Final[Any] = SavedTensor.__dict__["array"]
_tensor_slot: Final[Any] = SavedTensor.__dict__["tensor"]


class _Packed:
    """What a hooked SavedTensor keeps instead of the array."""

    __slots__ = ("edge", "meta", "packed", "unpack_hook")

    def __init__(self, packed: Any, unpack_hook: Callable[[Any], Any], meta: Any, edge: Any):
        self.packed = packed
        self.unpack_hook = unpack_hook
        self.meta = meta
        self.edge = edge


def _pack(st: SavedTensor, tensor: Tensor, hooks: tuple[HookPair, ...]) -> None:
    pack_hook, unpack_hook = hooks[-1]
    arr = st.array
    if st.is_output:
        # The output has no grad_fn yet (it is being recorded): the hook gets a tensor over its
        # data, which it may keep without keeping the node alive.
        arg = Tensor._wrap(arr)
        arg._vc = tensor._vc
        edge = None
    else:
        arg = tensor
        edge = tensor._edge() if (tensor._requires_grad or tensor._grad_fn is not None) else None
    # Ops run by the hook itself save nothing through it (no recursion).
    tok = saved_hooks.set(None)
    try:
        packed = pack_hook(arg)
    finally:
        saved_hooks.reset(tok)
    _array_slot.__set__(st, _Packed(packed, unpack_hook, (arr.shape, arr.dtype), edge))
    _tensor_slot.__set__(st, None)
    st.__class__ = HookedSavedTensor


class HookedSavedTensor(SavedTensor):
    """A SavedTensor saved under saved_tensors_hooks (See NOTE [Saved tensor hooks])."""

    __slots__ = ()

    def _unpacked(self) -> Tensor:
        p: _Packed = _array_slot.__get__(self)
        hooks = saved_hooks.get()
        try:
            t = p.unpack_hook(p.packed)
        finally:  # See NOTE [User code in a backward leaves no state] in local_state.py
            if saved_hooks.get() is not hooks:
                saved_hooks.set(hooks)
        if not isinstance(t, Tensor):
            raise TypeError(
                "Output of saved tensor unpack_hook expected to be a Tensor but got result of "
                f"type {type(t).__name__}"
            )
        shape, dtype = p.meta
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            raise RuntimeError(
                f"saved tensor unpack_hook returned a tensor of shape {tuple(t.shape)} and dtype "
                f"{t.dtype}; the saved tensor had shape {tuple(shape)} and dtype {dtype}"
            )
        return t

    @property
    def array(self) -> Any:
        return self._unpacked()._array

    def check(self, node: Node) -> None:
        if self.vc[0] != self.version:
            if self._unpacked()._vc is not self.vc:
                return  # the hook's own copy, which the change did not reach
            shape, dtype = _array_slot.__get__(self).meta
            what = "output" if self.is_output else "input"
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{dtype} {list(shape)}], which is an {what} of "
                f"{node.name()}, is at version {self.vc[0]}; expected version {self.version} "
                f"instead. Hint: the operation that modified it ran after {node.name()} saved "
                "it; clone() the tensor before modifying it in place."
            )

    def unpack(self, node: Node, output_nr: int = 0) -> Tensor:
        self.check(node)
        p: _Packed = _array_slot.__get__(self)
        u = self._unpacked()
        if p.edge is None and not self.is_output:
            # A tensor saved without a place in the graph: what unpack returned, as it is (as
            # torch), so a backward sees the very object when unpack gives it back.
            return u
        t = Tensor._wrap(u._array)
        # The version counter of what unpack returned (as torch): changing the unpacked value in
        # place changes that tensor, not the one that was saved (unless unpack returned it).
        t._vc = u._vc
        if self.is_output:
            t._grad_fn = node
            t._output_nr = output_nr
        elif p.edge is not None:
            fn, nr = p.edge
            if type(fn) is not AccumulateGrad:
                t._grad_fn, t._output_nr = fn, nr
            else:  # a leaf's AccumulateGrad: gradients through t still reach the leaf
                t._requires_grad = True
                t._get_meta().grad_edge = p.edge
        return t


# NOTE [Saved tensors detached in place]
# A non-leaf saved for backward and then detached in place (``detach_()``) has lost its place in
# the graph, so a backward that needs it as a Tensor (create_graph, or a custom Function's
# ``ctx.saved_tensors``) raises torch's error rather than differentiating it as a constant (a
# wrong higher-order gradient). It is checked where the saved tensor is unpacked; a backward
# without create_graph reads the saved array only and computes the gradient from the value it
# had, unchecked (the check costs nothing on that path). Whether the tensor had a grad_fn when it
# was saved: for an op's node, its edge for that input (saved value p is input p - 1, See _SAVES
# in asyncgrad/ops/_record.py); a custom Function records it when saving.
def _had_grad_fn(st: SavedTensor, node: Node) -> bool:
    saved = getattr(node, "_saved", None)
    if type(saved) is not list and type(saved) is not tuple:
        return False
    edges = node._next_edges
    for p, s in enumerate(saved):
        if s is st:
            e = edges[p - 1] if 1 <= p <= len(edges) else None
            return e is not None and type(e[0]) is not AccumulateGrad
    return False


def raise_detached() -> NoReturn:
    raise RuntimeError(
        "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_()."
        "This is not supported, please use out-of-place `.detach()` instead"
    )


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
    if t is SavedTensor or t is HookedSavedTensor:
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
