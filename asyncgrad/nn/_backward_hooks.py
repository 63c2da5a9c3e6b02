"""Module full backward hooks: ``register_full_backward_hook`` and ``_pre_hook``.

NOTE [Module backward hooks]
As torch, a call of a module with backward hooks passes its positional tensor arguments through
one identity Function before ``forward`` and its tensor outputs through another after it. In the
backward pass the outputs' node runs first: it calls the pre-hooks with ``grad_output`` (one
entry per output, None where none came or the output is not a tensor that requires grad), which
may replace it. The inputs' node runs once every
gradient with respect to the inputs is known: it calls the hooks with ``grad_input`` (one entry
per positional argument, None for non-tensors) and that ``grad_output``; a hook may return a
replacement ``grad_input``. When no input requires grad there is no inputs' node, so the hooks
run at the outputs' node with ``grad_input`` all None (and may not replace it), with torch's
warning. Each call of the module has its own pair of nodes and its own state, so every
forward's backward calls each hook once. Hooks may be ``async def`` (or return an awaitable) when
the call registered an async one: the identity Functions then have async backwards, which the
engine awaits like any other async node.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

from .. import ops
from .._tensor import Tensor
from ..autograd.function import Function
from ..graph.grad_mode import is_grad_enabled
from ..graph.hooks import is_async_callable

__all__ = ["call_with_backward_hooks"]


class _CallState:
    """What one call of a module shares between its two identity nodes."""

    __slots__ = (
        "constant_inputs",
        "grad_outputs",
        "hooks",
        "input_pos",
        "module",
        "n_args",
        "n_outputs",
        "output_pos",
        "pre_hooks",
    )

    def __init__(
        self,
        module: Any,
        hooks: list[Callable[..., Any]],
        pre_hooks: list[Callable[..., Any]],
        n_args: int,
    ) -> None:
        self.module = module
        self.hooks = hooks
        self.pre_hooks = pre_hooks
        self.n_args = n_args
        self.input_pos: list[int] | None = None  # positions of the hooked inputs, once set
        self.grad_outputs: tuple[Any, ...] = ()
        self.n_outputs = 0
        self.output_pos: list[int] = []  # positions of the outputs that require grad
        # Shape, dtype and device of the tensor inputs that do not require grad (which do not
        # pass through the inputs' node), by position.
        self.constant_inputs: dict[int, tuple[Any, Any, Any]] = {}

    def _name(self) -> str:
        return type(self.module).__name__


async def _resolve(res: Any) -> Any:
    return await res if inspect.isawaitable(res) else res


def _check_len(what: str, res: Any, n: int) -> tuple[Any, ...]:
    """``res`` as a tuple of ``n`` gradients (``what``: "pre hook" or "hook")."""
    out = _as_tuple(res)
    if len(out) != n:
        grads = "grad_output" if what == "pre hook" else "grad_input"
        raise RuntimeError(
            f"Backward {what} returned an invalid number of {grads}, got {len(out)}, but "
            f"expected {n}"
        )
    return out


# Each step is written once as a generator that yields the hooks' results and is sent them back
# resolved: the sync Functions drive it directly, the async ones await what it yields.
def _on_outputs(state: _CallState, grads: tuple[Any, ...]) -> Any:
    full: list[Any] = [None] * state.n_outputs
    for p, g in zip(state.output_pos, grads, strict=True):
        full[p] = g
    go = tuple(full)
    for hook in state.pre_hooks:
        res = yield hook(state.module, go)
        if res is not None:
            go = _check_len("pre hook", res, len(go))
    state.grad_outputs = go
    if state.input_pos is None and state.hooks:
        warnings.warn(
            "Full backward hook is firing when gradients are computed with respect to module "
            "outputs since no inputs require gradients. See the documentation of "
            "Module.register_full_backward_hook for more details.",
            UserWarning,
            stacklevel=2,
        )
        gi = (None,) * state.n_args
        for hook in state.hooks:
            res = yield hook(state.module, gi, go)
            if res is not None and any(r is not None for r in _as_tuple(res)):
                raise RuntimeError(
                    "Backward hook for Modules where no input requires gradient should always "
                    f"return None or None for all gradients ({state._name()})."
                )
        state.grad_outputs = ()
    return tuple(go[p] for p in state.output_pos)


def _on_inputs(state: _CallState, grads: tuple[Any, ...]) -> Any:
    pos = state.input_pos
    assert pos is not None
    full: list[Any] = [None] * state.n_args
    for p, g in zip(pos, grads, strict=True):
        full[p] = g
    for p, (shape, dtype, device) in state.constant_inputs.items():
        full[p] = ops.zeros(shape, dtype=dtype, device=device)  # as torch: zeros for these
    gi = tuple(full)
    go = state.grad_outputs
    for hook in state.hooks:
        res = yield hook(state.module, gi, go)
        if res is not None:
            gi = _check_len("hook", res, state.n_args)
    state.grad_outputs = ()
    return tuple(gi[p] for p in pos)


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _drive(gen: Any) -> Any:
    try:
        res = gen.send(None)
        while True:
            if inspect.isawaitable(res):
                if inspect.iscoroutine(res):
                    res.close()
                raise TypeError(
                    "a module backward hook returned an awaitable, but it is not an `async def`: "
                    "declare it `async def` so that the engine awaits it"
                )
            res = gen.send(res)
    except StopIteration as stop:
        return stop.value


async def _adrive(gen: Any) -> Any:
    try:
        res = gen.send(None)
        while True:
            res = gen.send(await _resolve(res))
    except StopIteration as stop:
        return stop.value


def _hook_function(is_async: bool) -> type[Function]:
    """The identity Function whose backward runs one stage of the hooks (``_on_outputs`` or
    ``_on_inputs``, passed to ``apply``); named as torch's, so that grad_fn reads
    ``BackwardHookFunctionBackward``."""

    def forward(ctx: Any, stage: Any, state: _CallState, *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.stage = stage
        ctx.state = state
        ctx.set_materialize_grads(False)  # None, not zeros, for a gradient that did not come
        return tensors

    def backward(ctx: Any, *grads: Any) -> Any:
        return (None, None, *_drive(ctx.stage(ctx.state, grads)))

    async def abackward(ctx: Any, *grads: Any) -> Any:
        return (None, None, *await _adrive(ctx.stage(ctx.state, grads)))

    ns = {
        "forward": staticmethod(forward),
        "backward": staticmethod(abackward if is_async else backward),
    }
    return type("BackwardHookFunction", (Function,), ns)


_SYNC = _hook_function(is_async=False)
_ASYNC = _hook_function(is_async=True)


def call_with_backward_hooks(
    module: Any,
    forward: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    hooks: list[Callable[..., Any]],
    pre_hooks: list[Callable[..., Any]],
    after_forward: Callable[[tuple[Any, ...], Any], Any],
) -> Any:
    """Run ``forward(*args, **kwargs)`` and ``after_forward`` (the forward hooks) with the
    backward hooks set up around them (See NOTE [Module backward hooks])."""
    if not is_grad_enabled():
        return after_forward(args, forward(*args, **kwargs))
    fn = _ASYNC if any(is_async_callable(h) for h in (*hooks, *pre_hooks)) else _SYNC
    state = _CallState(module, hooks, pre_hooks, len(args))
    pos = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    if pos:
        state.input_pos = pos
        state.constant_inputs = {
            i: (tuple(a.shape), a.dtype, a.device)
            for i, a in enumerate(args)
            if isinstance(a, Tensor) and not a.requires_grad
        }
        hooked = fn.apply(_on_inputs, state, *(args[i] for i in pos))
        new_args = list(args)
        for i, t in zip(pos, hooked, strict=True):
            new_args[i] = t
        args = tuple(new_args)
    out = after_forward(args, forward(*args, **kwargs))
    if isinstance(out, Tensor):
        outs: list[Any] = [out]
    elif isinstance(out, tuple):
        outs = list(out)
    else:
        # As torch: a warning, and the hooks are not called (nor the input side's above).
        warnings.warn(
            "For backward hooks to be called, module output should be a Tensor or a tuple of "
            f"Tensors but received {type(out)} ({type(module).__name__}'s forward)",
            UserWarning,
            stacklevel=3,
        )
        state.hooks = []
        return out
    # As torch: grad_output has an entry per output, None where it is not a tensor that
    # requires grad (those do not pass through the node).
    opos = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
    if not opos:
        return out
    state.n_outputs = len(outs)
    state.output_pos = opos
    hooked = fn.apply(_on_outputs, state, *(outs[i] for i in opos))
    for i, t in zip(opos, hooked, strict=True):
        outs[i] = t
    if isinstance(out, Tensor):
        return outs[0]
    return type(out)(*outs) if hasattr(out, "_fields") else tuple(outs)
