"""Activation checkpointing, as ``torch.utils.checkpoint``: ``checkpoint(fn, *args)`` keeps no
activation of ``fn`` for backward and recomputes them when backward needs them. (The module is
also callable as that function: ``ag.utils.checkpoint(fn, *args)``.)

# NOTE [Two checkpoints]
# Reentrant (``use_reentrant=True``, the default as in torch): ``fn`` runs under no_grad inside
# a custom Function; its backward runs ``fn`` again with grad on detached copies of the inputs
# and runs a nested backward through that graph (awaited when the outer pass is, on the engine's
# reentrant machinery). Gradients of parameters used inside ``fn`` are accumulated by that nested
# pass into their ``.grad``, so this form serves ``backward()`` but not ``grad()``, as in torch.
# Non-reentrant: ``fn`` runs with grad on, under saved-tensor hooks whose pack returns a handle
# (its position among the region's saves) and keeps nothing; the first unpack in a backward pass
# runs ``fn`` once again under hooks that collect the tensors it saves, in the same order, and
# every unpack in that pass then takes its own, once (a second unpack of one save in a pass is a
# CheckpointError, as in torch; another pass, with retain_graph, recomputes again). It works
# with ``grad()``, ``inputs=``, and higher order, and the graph is the usual one between the
# region's inputs and outputs.
# Both restore the default generator's state for the recomputation (``preserve_rng_state``), so
# dropout draws the same mask: the states of its generators (CPU and each CUDA device's, through
# RandomState.get_state: a CUDA generator cannot be deep-copied) are saved when the forward starts
# and set back for the recomputation only (another thread drawing meanwhile would see them).
# Early stop (non-reentrant, on unless ``set_checkpoint_early_stop(False)`` was in force when the
# forward ran, as in torch): the recomputation stops as soon as it has saved as many tensors as
# the forward did, so what ``fn`` does after its last save does not run again.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._tensor import Tensor
from ..autograd.api import backward as _backward
from ..autograd.function import Function
from ..autograd.graph import saved_tensors_hooks
from ..engine.reentrant import current_graph_task
from ..graph.grad_mode import enable_grad, inference_mode, no_grad
from ..ops.creation import default_generator

__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential", "set_checkpoint_early_stop"]

# Whether non-reentrant checkpoints made from now on stop their recomputation early (See NOTE
# [Two checkpoints]); set with set_checkpoint_early_stop, per thread as torch's global is.
_early_stop = threading.local()


@contextmanager
def set_checkpoint_early_stop(enable: bool) -> Iterator[None]:
    """Within the block, non-reentrant checkpoints stop recomputing once they have the tensors
    backward needs (``True``, the default) or run their function to its end (``False``). It
    applies to checkpoints whose forward runs in the block, wherever their backward runs."""
    prev = getattr(_early_stop, "on", True)
    _early_stop.on = bool(enable)
    try:
        yield
    finally:
        _early_stop.on = prev


class _StopRecomputation(Exception):
    """Raised inside a recomputation once it has every tensor it needs (early stop)."""


# The default generator's states: its CPU generator's and each CUDA device's it has drawn on.
_RngSnapshot = tuple[Any, dict[Any, Any]]


def _rng_snapshot() -> _RngSnapshot:
    # Each generator's get_state(), not a deep copy: CuPy's generator holds a lock, which cannot
    # be copied, and keeps its state on the device (See backend.RandomState).
    g = default_generator
    return g._rng.get_state(), {dev: rng.get_state() for dev, rng in g._devices.items()}


@contextmanager
def _rng_restored(snapshot: _RngSnapshot | None) -> Iterator[None]:
    if snapshot is None:
        yield
        return
    g = default_generator
    rng, devices = g._rng, g._devices
    cpu_state, device_states = snapshot
    now = _rng_snapshot()
    # A device first drawn on inside the region gets a fresh generator (from the seed), as the
    # forward did; the others go back to their states at the snapshot.
    g._devices = {dev: r for dev, r in devices.items() if dev in device_states}
    rng.set_state(cpu_state)
    for dev, r in g._devices.items():
        r.set_state(device_states[dev])
    try:
        yield
    finally:
        g._devices = devices
        rng.set_state(now[0])
        for dev, state in now[1].items():
            devices[dev].set_state(state)


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)


class _CheckpointFunction(Function):
    @staticmethod
    def forward(ctx: Any, run_function: Callable[..., Any], preserve: bool, *args: Any) -> Any:
        ctx.run_function = run_function
        ctx.rng = _rng_snapshot() if preserve else None
        ctx.tensor_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.args = [None if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        with no_grad():
            return run_function(*args)

    @staticmethod
    async def backward(ctx: Any, *grads: Any) -> Any:
        gt = current_graph_task.get()
        if gt is not None and gt.exec_info is not None:
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or "
                "passing an `inputs` parameter to .backward(). To resolve this error, you can "
                "either set use_reentrant=False, or call .backward() without passing the "
                "`inputs` argument."
            )
        args = list(ctx.args)
        inputs: list[Tensor] = []
        for pos, t in zip(ctx.tensor_pos, ctx.saved_tensors, strict=True):
            d = t.detach()
            d.requires_grad_(t.requires_grad)
            args[pos] = d
            inputs.append(d)
        with _rng_restored(ctx.rng), inference_mode(False), enable_grad():
            outputs = _as_tuple(ctx.run_function(*args))
        outs: list[Tensor] = []
        gs: list[Tensor] = []
        for o, g in zip(outputs, grads, strict=False):
            if isinstance(o, Tensor) and o.requires_grad:
                outs.append(o)
                gs.append(g)
        if not outs:
            raise RuntimeError(
                "none of output has requires_grad=True, this checkpoint() is not necessary"
            )
        await _backward(outs, gs)
        return (None, None, *(d.grad if isinstance(d, Tensor) else None for d in args))


def _metadata(t: Tensor) -> tuple[Any, Any, Any]:
    return tuple(t.shape), t.dtype, t.device


def _describe(meta: tuple[Any, Any, Any]) -> str:
    shape, dtype, device = meta
    return f"{{'shape': {list(shape)}, 'dtype': {dtype}, 'device': {device}}}"


class CheckpointError(RuntimeError):
    """A non-reentrant checkpoint's recomputation does not match its forward, or a saved
    tensor was unpacked twice in one backward (torch's class)."""


_USED: Any = object()  # a save already unpacked in that backward


class _Frame:
    """One non-reentrant region: its function and inputs, and the recomputed saves.

    Each backward pass that reaches the region recomputes it once, and each save may be
    unpacked once per pass, as in torch: ``recomputed`` maps a running graph task's id to it
    (held, so the id stays its own) and what its recomputation saved, position by position
    (``_USED`` once unpacked); the entry goes when the pass ends.
    """

    def __init__(self, fn: Callable[..., Any], args: Any, kwargs: Any, rng: Any) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.rng = rng
        self.count = 0  # tensors saved by the forward
        self.meta: list[tuple[Any, Any, Any]] = []  # their shapes, dtypes and devices
        self.check = True  # determinism_check="default"
        self.recompute_ctx: Any = contextlib.nullcontext()
        self.recomputed: dict[int, tuple[Any, dict[int, Any]]] = {}
        self.lock = threading.Lock()
        self.early_stop = getattr(_early_stop, "on", True)

    def pack(self, t: Tensor) -> tuple[_Frame, int]:
        i = self.count
        self.count += 1
        self.meta.append(_metadata(t))
        return self, i

    def recompute(self) -> dict[int, Any]:
        got: dict[int, Any] = {}

        def pack(t: Tensor) -> None:
            # A tensor that needs no grad is kept as it is: its backward gets the very object
            # the forward saved (an input, a constant), as torch does.
            got[len(got)] = t.detach() if t.requires_grad else t
            if early and len(got) == self.count:
                raise _StopRecomputation

        def unpack(_: None) -> Tensor:
            raise RuntimeError("checkpoint: the recomputation's graph is not for backward")

        early = self.early_stop
        try:
            with (
                _rng_restored(self.rng),
                inference_mode(False),
                enable_grad(),
                saved_tensors_hooks(pack, unpack),
                self.recompute_ctx,
            ):
                self.fn(*self.args, **self.kwargs)
        except _StopRecomputation:
            pass
        if len(got) != self.count:
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the "
                "original forward and recomputation.\n"
                f"Number of tensors saved during forward: {self.count}\n"
                f"Number of tensors saved during recomputation: {len(got)}"
            )
        if self.check:
            wrong = [
                f"tensor at position {i}:\n"
                f"saved metadata: {_describe(self.meta[i])}\n"
                f"recomputed metadata: {_describe(_metadata(t))}\n"
                for i, t in got.items()
                if _metadata(t) != self.meta[i]
            ]
            if wrong:
                raise CheckpointError(
                    "torch.utils.checkpoint: Recomputed values for the following tensors have "
                    "different metadata than during the forward pass.\n" + "".join(wrong)
                )
        return got

    def forget(self, key: int) -> None:
        with self.lock:
            self.recomputed.pop(key, None)

    @staticmethod
    def unpack(handle: tuple[_Frame, int]) -> Tensor:
        frame, i = handle
        gt = current_graph_task.get()
        if gt is None:  # read outside a backward: recomputed for this read alone
            t: Tensor = frame.recompute()[i]
            return t
        key = id(gt)
        with frame.lock:
            entry = frame.recomputed.get(key)
            if entry is None:
                entry = frame.recomputed[key] = (gt, frame.recompute())
                gt.add_callback(functools.partial(frame.forget, key))
            saves = entry[1]
            t = saves[i]
            if t is _USED:
                raise CheckpointError(
                    "torch.utils.checkpoint: Unpack is being triggered for a tensor that was "
                    "already unpacked once. If you are calling ctx.saved_tensors in backward, "
                    "make sure to do so only once. Otherwise please open an issue with details "
                    "on your use case."
                )
            saves[i] = _USED
        return t


def _no_contexts() -> tuple[Any, Any]:
    return contextlib.nullcontext(), contextlib.nullcontext()


def checkpoint(
    function: Callable[..., Any],
    *args: Any,
    use_reentrant: bool | None = None,
    preserve_rng_state: bool = True,
    context_fn: Callable[[], tuple[Any, Any]] = _no_contexts,
    determinism_check: str = "default",
    debug: bool = False,
    **kwargs: Any,
) -> Any:
    """Run ``function(*args, **kwargs)`` keeping none of its activations for backward; they are
    recomputed when backward reaches the region (See NOTE [Two checkpoints]).

    Gradients equal those without checkpointing. ``use_reentrant`` (default True, as torch):
    recompute inside a nested backward, for ``backward()`` only; False: recompute through
    saved-tensor hooks, which also serves ``grad()`` and higher order, and allows keyword
    arguments. ``preserve_rng_state``: the recomputation draws the same random numbers
    (dropout) as the forward did. Non-reentrant only: ``context_fn()`` gives two context
    managers, the forward's and the recomputation's; ``determinism_check="default"`` checks
    that each recomputed saved tensor has the shape, dtype and device the forward's had
    (``"none"``: not checked); ``debug`` is accepted (torch's adds a trace of the ops to a
    failed check's message, asyncgrad's message names the tensor's position).

    Example:
        >>> import asyncgrad as ag
        >>> lin = ag.nn.Linear(4, 4)
        >>> x = ag.randn(2, 4, requires_grad=True)
        >>> y = ag.utils.checkpoint.checkpoint(lambda t: lin(t).relu(), x, use_reentrant=False)
        >>> y.sum().backward()
    """
    if use_reentrant is None:
        use_reentrant = True
    if use_reentrant is not True and use_reentrant is not False:
        raise TypeError(f"use_reentrant must be True, False or None, got {use_reentrant!r}")
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if determinism_check not in ("default", "none"):
        raise ValueError(
            f"determinism_check should be one of ['default', 'none'], but got {determinism_check}"
        )
    if use_reentrant and (context_fn is not _no_contexts or debug):
        raise ValueError(
            "Passing `context_fn` or `debug` is only supported when use_reentrant=False."
        )
    if debug and context_fn is not _no_contexts:
        raise ValueError("debug=True is incompatible with non-default context_fn")
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn(
                "None of the inputs have requires_grad=True. Gradients will be None",
                stacklevel=2,
            )
        return _CheckpointFunction.apply(function, bool(preserve_rng_state), *args)
    forward_ctx, recompute_ctx = context_fn()
    frame = _Frame(function, args, kwargs, _rng_snapshot() if preserve_rng_state else None)
    frame.recompute_ctx = recompute_ctx
    frame.check = determinism_check == "default"
    with saved_tensors_hooks(frame.pack, _Frame.unpack), forward_ctx:
        return function(*args, **kwargs)


def checkpoint_sequential(
    functions: Any,
    segments: int,
    input: Any,
    use_reentrant: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Run the modules or functions of ``functions`` (a Sequential or a list) one after another
    on ``input``, in ``segments`` parts of ``len(functions) // segments`` each: every part but
    the last under ``checkpoint``, the last (with what is left over) as usual.
    ``preserve_rng_state`` may be given as a keyword, as to ``checkpoint``."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    children = getattr(functions, "children", None)  # a Sequential: its modules, in order
    functions = list(children() if callable(children) else functions)

    def run(start: int, end: int) -> Callable[[Any], Any]:
        def forward(x: Any) -> Any:
            for j in range(start, end + 1):
                x = functions[j](x)
            return x

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(
            run(start, end), input, use_reentrant=use_reentrant, preserve_rng_state=preserve
        )
    return run(end + 1, len(functions) - 1)(input)


class _CallableModule(types.ModuleType):
    """This module, as ``ag.utils.checkpoint``: a module holding ``checkpoint`` as torch's, that
    may also be called as the function (``ag.utils.checkpoint(fn, *args)``), as this package
    documented it before it was a module."""

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return checkpoint(function, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
