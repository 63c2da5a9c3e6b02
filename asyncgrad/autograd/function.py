"""Custom differentiable functions: Function, its ctx, and once_differentiable."""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any

from .. import backend
from .._tensor import Tensor
from ..graph.anomaly_mode import anomaly_mode, forward_metadata
from ..graph.grad_mode import _grad_enabled, no_grad
from ..graph.hooks import move_retain
from ..graph.local_state import call_user
from ..graph.node import Edge, Node, outputs_meta
from ..graph.saved_tensor import FREED as _FREED
from ..graph.saved_tensor import SavedTensor, raise_detached, raise_freed
from ..rules import sum_to

__all__ = ["DelayedError", "Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` passed to a custom Function's forward/setup_context and backward."""

    def __init__(self) -> None:
        self._to_save: tuple[Any, ...] = ()
        self._saved: Any = None
        # Per saved tensor: whether it had a grad_fn when saved (See NOTE [Saved tensors detached
        # in place]).
        self._saved_had_fn: tuple[bool, ...] = ()
        self._node_ref: weakref.ref[BackwardCFunction] | None = None
        self._dirty: tuple[Tensor, ...] = ()
        self._non_differentiable: tuple[Tensor, ...] = ()
        self.materialize_grads = True
        self.needs_input_grad: tuple[bool, ...] = ()

    # The node holds its ctx; the ctx refers back to it weakly, so that a graph dropped without
    # backward (or after a failed one) is freed by reference counting, not only by the cyclic
    # collector (see tests/engine/test_leaks.py).
    @property
    def _node(self) -> BackwardCFunction | None:
        ref = self._node_ref
        return None if ref is None else ref()

    @_node.setter
    def _node(self, node: BackwardCFunction | None) -> None:
        self._node_ref = None if node is None else weakref.ref(node)

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save tensors, but argument {i} is of type "
                    f"{type(t).__name__}"
                )
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        node = self._node
        if self._saved is _FREED:
            assert node is not None
            raise_freed(node)
        if self._saved is None:
            return tuple(self._to_save)
        if self._saved is _CLEARED:
            raise RuntimeError(
                "saved_tensors can only be accessed once when clear_saved_tensors_on_access=True "
                "is set on the autograd.Function. Either access saved_tensors only once, or set "
                "clear_saved_tensors_on_access=False."
            )
        out: list[Tensor | None] = []
        for s, had_fn in zip(self._saved, self._saved_had_fn, strict=True):
            if s is None:
                out.append(None)
            elif isinstance(s, SavedTensor):
                assert node is not None
                t = s.tensor
                if had_fn and t is not None and t._grad_fn is None and not t._requires_grad:
                    raise_detached()  # See NOTE [Saved tensors detached in place]
                out.append(s.unpack(node))
            else:
                out.append(s)
        if node is not None and node._fn_cls.clear_saved_tensors_on_access:
            # The caller's tensors are the last references: dropping them frees the memory.
            self._saved = _CLEARED
        return tuple(out)

    def mark_dirty(self, *tensors: Tensor) -> None:
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class BackwardCFunction(Node):
    """Backward node of a custom Function; ``Function.apply`` subclasses it per Function."""

    # See NOTE [Weak references to nodes]
    __slots__ = ("__weakref__", "_ctx", "_fn_cls", "_in_meta", "_outputs")

    _ctx: FunctionCtx
    _fn_cls: type[Function]
    _in_meta: tuple[tuple[tuple[int, ...], Any] | None, ...]
    # When the forward returned non-tensor values too: how many values it returned, and the
    # position of each tensor among them (the node's inputs are the tensors' gradients, and the
    # backward gets None for the others, as in torch). None when all are tensors.
    _outputs: tuple[int, tuple[int, ...]] | None

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        ctx = self._ctx
        if ctx._saved is _FREED:
            raise_freed(self)
        user = []
        for g, meta in zip(grads, self._input_meta, strict=False):
            if g is None:
                user.append(
                    Tensor._wrap(backend.zeros(meta[0], meta[1], self._device))
                    if ctx.materialize_grads
                    else None
                )
            else:
                user.append(g if create else Tensor._wrap(g))
        layout = self._outputs
        if layout is not None:
            spread: list[Any] = [None] * layout[0]
            for pos, g in zip(layout[1], user, strict=True):
                spread[pos] = g
            user = spread
        # See NOTE [User code in a backward leaves no state].
        res = call_user(self._fn_cls.backward, ctx, *user)
        if inspect.isawaitable(res):
            if not self._async_apply:
                if inspect.iscoroutine(res):
                    res.close()
                raise TypeError(
                    f"{self._fn_cls.__name__}.backward returned an awaitable, but it is not an "
                    "`async def`: declare it `async def backward(ctx, ...)` so the engine awaits it"
                )
            return self._finish_async(res, create)
        return self._check(res, create)

    async def _finish_async(self, aw: Any, create: bool) -> list[Any]:
        return self._check(await aw, create)

    def _check(self, res: Any, create: bool) -> list[Any]:
        if not isinstance(res, tuple):
            res = (res,)
        n = len(self._next_edges)
        if len(res) > n and all(r is None for r in res[n:]):
            res = res[:n]
        if len(res) != n:
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients "
                f"(expected {n}, got {len(res)})"
            )
        out: list[Any] = []
        for i, (g, meta) in enumerate(zip(res, self._in_meta, strict=False)):
            if g is None or self._next_edges[i] is None:
                out.append(None)
                continue
            if not isinstance(g, Tensor):
                raise TypeError(
                    f"function {self.name()} returned a {type(g).__name__} as gradient {i}; "
                    "expected a Tensor or None"
                )
            assert meta is not None  # an edge exists, so the input required grad
            shape, dtype = meta
            if tuple(g.shape) != tuple(shape):
                try:
                    if backend.broadcast_shapes(tuple(g.shape), tuple(shape)) != tuple(g.shape):
                        raise ValueError
                    g = sum_to(g, tuple(shape))
                except ValueError:
                    raise RuntimeError(
                        f"Function {self.name()} returned an invalid gradient at index {i} - got "
                        f"{list(g.shape)} but expected shape compatible with {list(shape)}"
                    ) from None
            if g.dtype != dtype:
                g = g.to(dtype)
            out.append(g if create else g._array)
        return out

    def release_variables(self) -> None:
        if self._ctx._saved is not None:
            self._ctx._saved = _FREED

    def releasable(self) -> Any:
        return self._ctx._saved


class _FunctionMeta(type):
    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> None:
        super().__init__(name, bases, ns)
        backward = ns.get("backward")
        is_async = backward is not None and inspect.iscoroutinefunction(
            getattr(backward, "__func__", backward)
        )
        cls._backward_cls = type(
            f"{name}Backward",
            (BackwardCFunction,),
            {
                "__slots__": (),
                "_async_apply": is_async,
                "_special": is_async,
                # An async backward runs on the loop (See NOTE [Work estimates]).
                **({"_work": None} if is_async else {}),
            },
        )


class Function(metaclass=_FunctionMeta):
    """Base class of custom differentiable operations.

    Subclasses define ``forward(ctx, *args)`` (or ``forward(*args)`` plus
    ``setup_context(ctx, inputs, output)``) and ``backward(ctx, *grad_outputs)``, which may be
    ``async def`` and may itself run a backward (reentrant). Call with ``MyFn.apply(*args)``.

    Example:
        >>> import asyncgrad as ag
        >>> class Square(ag.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x
        ...     @staticmethod
        ...     def backward(ctx, g):
        ...         (x,) = ctx.saved_tensors
        ...         return 2 * x * g
        >>> x = ag.tensor([3.0], requires_grad=True)
        >>> Square.apply(x).sum().backward()
        >>> x.grad
        tensor([6.])
    """

    _backward_cls: type[BackwardCFunction]
    _forward_signature: inspect.Signature
    # torch's: after the first read of ``ctx.saved_tensors`` the node keeps none of them (so they
    # are freed as soon as the backward drops them); a second read, in this backward or a later
    # one (retain_graph), raises.
    clear_saved_tensors_on_access: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "Custom Functions are used through their apply() classmethod, not instantiated: "
            f"call {type(self).__name__}.apply(...)"
        )

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("You must implement the forward function for custom Function.")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
        return _NO_SETUP

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        ctx = FunctionCtx()
        uses_setup = cls.setup_context is not Function.setup_context
        if uses_setup:
            # As torch: forward, setup_context and needs_input_grad see the arguments bound to
            # forward's signature, defaults included.
            sig = cls.__dict__.get("_forward_signature")
            if sig is None:
                sig = inspect.signature(cls.forward)
                cls._forward_signature = sig
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            if uses_setup:
                output = cls.forward(*args, **kwargs)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if uses_setup:
            cls.setup_context(ctx, args, output)
        is_tuple = isinstance(output, tuple)
        outs = list(output) if is_tuple else [output]
        record = _grad_enabled.get() and any(ctx.needs_input_grad)
        dirty_ids = {id(t) for t in ctx._dirty}
        for i, o in enumerate(outs):
            if isinstance(o, Tensor) and any(o is a for a in args) and id(o) not in dirty_ids:
                # An input returned as is becomes a new tensor (sharing storage) with this node.
                alias = Tensor._wrap(o._array)
                alias._vc = o._vc
                outs[i] = alias
        for t in ctx._dirty:
            t._vc[0] += 1
        if not record:
            ctx._saved = None
            return tuple(outs) if is_tuple else outs[0]
        edges: list[Edge | None] = []
        in_meta: list[Any] = []
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad:
                edges.append(a._edge())
                in_meta.append((a.shape, a.dtype))
            else:
                edges.append(None)
                in_meta.append(None)
        node = cls._backward_cls()
        node._init_node(edges)
        if anomaly_mode():  # See NOTE [Anomaly mode is a context variable]
            node._metadata = forward_metadata()
        node._ctx = ctx
        node._fn_cls = cls
        node._in_meta = tuple(in_meta)
        non_diff = {id(t) for t in ctx._non_differentiable}
        tensor_outs = [o for o in outs if isinstance(o, Tensor)]
        node._outputs = (
            None
            if len(tensor_outs) == len(outs)
            else (len(outs), tuple(i for i, o in enumerate(outs) if isinstance(o, Tensor)))
        )
        node._input_meta = outputs_meta(tuple((o.shape, o.dtype) for o in tensor_outs))
        node._set_device(tensor_outs[0].device if tensor_outs else None)
        for nr, o in enumerate(tensor_outs):
            if id(o) in non_diff or o.dtype.kind not in "fc":
                continue
            if id(o) in dirty_ids:
                if o._grad_fn is None and o._requires_grad:
                    raise RuntimeError(
                        "a leaf Variable that requires grad has been used in an in-place operation."
                    )
            old, old_nr = o._grad_fn, o._output_nr
            o._grad_fn = node
            o._output_nr = nr
            if id(o) in dirty_ids:
                move_retain(o, old, old_nr)
        # An output this node made differentiable is saved without its grad_fn (it would keep
        # the node alive); any other tensor (a non-differentiable output too) as it is.
        out_ids = {id(o) for o in tensor_outs if o._grad_fn is node}
        ctx._saved = [None if t is None else SavedTensor(t, id(t) in out_ids) for t in ctx._to_save]
        ctx._saved_had_fn = tuple(
            t is not None and id(t) not in out_ids and t._grad_fn is not None for t in ctx._to_save
        )
        ctx._to_save = ()
        ctx._node = node
        return tuple(outs) if is_tuple else outs[0]


_NO_SETUP = object()
# What ctx._saved becomes once read, under clear_saved_tensors_on_access.
_CLEARED: Any = ("cleared",)


def once_differentiable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a ``backward`` that is not itself differentiable: it runs under ``no_grad``.

    Under ``create_graph`` its results (when a gradient it got requires grad) get a grad_fn that
    raises if a later backward reaches it, as in torch, instead of silently counting as
    constants.
    """

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(ctx: Any, *args: Any) -> Any:
            with no_grad():
                out = await fn(ctx, *args)
            return _delay_error(out, args)

        return awrapper

    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        with no_grad():
            out = fn(ctx, *args)
        return _delay_error(out, args)

    return wrapper


_ONCE_MESSAGE = "trying to differentiate twice a function that was marked with @once_differentiable"


class DelayedError(Node):
    """The grad_fn of what a ``once_differentiable`` backward returned under create_graph: it
    raises when a backward reaches it."""

    __slots__ = ("__weakref__", "_message")  # See NOTE [Weak references to nodes]

    _message: str

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> Any:
        raise RuntimeError(self._message)


def _delay_error(out: Any, args: tuple[Any, ...]) -> Any:
    # torch's rule: only when recording, and when one of the gradients the backward got requires
    # grad (whether it used them is not known).
    if not _grad_enabled.get() or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        return out
    outs = out if isinstance(out, tuple) else (out,)
    tensors = [o for o in outs if isinstance(o, Tensor)]
    if not tensors:
        return out
    node = DelayedError()
    node._init_node([None] * len(tensors))
    node._message = _ONCE_MESSAGE
    node._input_meta = tuple((t.shape, t.dtype) for t in tensors)
    node._set_device(tensors[0].device)
    res: list[Any] = []
    nr = 0
    for o in outs:
        if isinstance(o, Tensor):
            alias = Tensor._wrap(o._array)
            alias._vc = o._vc
            alias._grad_fn = node
            alias._output_nr = nr
            nr += 1
            o = alias
        res.append(o)
    return tuple(res) if isinstance(out, tuple) else res[0]
