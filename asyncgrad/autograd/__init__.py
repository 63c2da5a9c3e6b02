"""backward() and grad(): check and normalise arguments, then call the engine.

Coroutines are the primary API (``await ag.grad(...)``); ``*_sync`` twins and ``Tensor.backward``
run the same graph task on the calling thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import backend, engine
from .._tensor import Tensor
from ..engine import queue_callback
from ..graph.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from ..graph.node import Edge, Node
from . import graph

__all__ = [
    "Function",
    "backward",
    "backward_sync",
    "enable_grad",
    "engine",
    "grad",
    "grad_sync",
    "gradcheck",
    "gradgradcheck",
    "graph",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "once_differentiable",
    "queue_callback",
    "set_grad_enabled",
]


def _tensors(x: Any, what: str) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        out = list(x)
        for i, t in enumerate(out):
            if not isinstance(t, Tensor):
                raise TypeError(f"{what}[{i}] must be a Tensor, got {type(t).__name__}")
        return out
    raise TypeError(f"{what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}")


def _make_grads(
    outputs: list[Tensor], grads: Any, create_graph: bool, what: str
) -> tuple[list[Edge], list[Any]]:
    if grads is None:
        grads = [None] * len(outputs)
    elif isinstance(grads, Tensor):
        grads = [grads]
    else:
        grads = list(grads)
    if len(grads) != len(outputs):
        raise RuntimeError(
            f"got {len(grads)} {what} for {len(outputs)} outputs: they must match in number"
        )
    roots: list[Edge] = []
    values: list[Any] = []
    for i, (out, g) in enumerate(zip(outputs, grads, strict=False)):
        e = out._edge()
        if e is None:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        if g is None:
            if out._array.size != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs (output {i} has shape "
                    f"{tuple(out.shape)}); pass a gradient of that shape"
                )
            if out._array.dtype.kind not in "fc":
                raise RuntimeError(
                    f"grad can be implicitly created only for real scalar outputs but got "
                    f"{out._array.dtype}"
                )
            arr = backend.namespace(out._array).ones_like(out._array)
            values.append(Tensor._wrap(arr) if create_graph else arr)
        else:
            if not isinstance(g, Tensor):
                if isinstance(g, (int, float)):
                    g = Tensor._wrap(backend.namespace(out._array).full_like(out._array, g))
                else:
                    raise TypeError(f"{what}[{i}] must be a Tensor or None, got {type(g).__name__}")
            if g.shape != out.shape:
                raise RuntimeError(
                    f"Mismatch in shape: {what}[{i}] has a shape of {tuple(g.shape)} and "
                    f"output[{i}] has a shape of {tuple(out.shape)}."
                )
            if g.device != out.device:
                raise RuntimeError(
                    f"invalid gradient at index {i} - expected device {out.device} but got "
                    f"{g.device}"
                )
            if g.dtype != out.dtype:
                if g.dtype.kind not in "fc":
                    raise RuntimeError(
                        f"invalid gradient at index {i} - expected a floating dtype like "
                        f"{out.dtype} but got {g.dtype}"
                    )
                g = g.to(out.dtype)
            values.append(g if create_graph else g._array)
        roots.append(e)
    return roots, values


def _input_edges(inputs: list[Tensor], for_backward: bool) -> list[Edge]:
    edges = []
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(
                f"One of the differentiated Tensors (inputs[{i}], shape {tuple(t.shape)}) does not "
                "require grad"
            )
        if for_backward and not t.is_leaf:
            t.retain_grad()
        e = t._edge()
        assert e is not None
        edges.append(e)
    return edges


def _prepare_grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any,
    retain_graph: bool | None,
    create_graph: bool,
    allow_unused: bool | None,
    materialize_grads: bool,
    is_grads_batched: bool,
) -> tuple[Any, ...]:
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True is not supported")
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
            "allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    outs = _tensors(outputs, "outputs")
    ins = _tensors(inputs, "inputs")
    if not ins:
        raise RuntimeError("grad requires non-empty inputs.")
    roots, values = _make_grads(outs, grad_outputs, create_graph, "grad_outputs")
    edges = _input_edges(ins, False)
    keep = create_graph if retain_graph is None else retain_graph
    return ins, roots, values, edges, keep, allow_unused


def _finish_grad(
    captured: list[Any], ins: list[Tensor], allow_unused: bool, materialize: bool, create: bool
) -> tuple[Tensor | None, ...]:
    res: list[Tensor | None] = []
    for i, (g, t) in enumerate(zip(captured, ins, strict=False)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors (inputs[{i}], shape {tuple(t.shape)}) "
                    "appears to not have been used in the graph. Set allow_unused=True if this is "
                    "the desired behavior."
                )
            zeros = backend.namespace(t._array).zeros_like(t._array)
            res.append(Tensor._wrap(zeros) if materialize else None)
        elif create:
            res.append(g)
        else:
            res.append(Tensor._wrap(g))
    return tuple(res)


async def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
    priority: int = 0,
) -> tuple[Tensor | None, ...]:
    """Gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``.

    Args:
        outputs: tensor(s) to differentiate.
        inputs: tensor(s) to differentiate with respect to.
        grad_outputs: the vector of the vector-Jacobian product, one per output (``None`` for a
            scalar output means 1).
        retain_graph: keep saved tensors for another backward (default: ``create_graph``).
        create_graph: record the backward itself, for higher-order derivatives.
        allow_unused: return ``None`` for an input not reached instead of raising.
        materialize_grads: return zeros for unreached inputs (implies ``allow_unused``).
        priority: when several backward passes compete for a device, larger runs first.

    Returns:
        A tuple with one gradient (or ``None``) per input.

    Raises:
        RuntimeError: an output that does not require grad, a non-scalar output without
            ``grad_outputs``, an input not reached (without ``allow_unused``), or an error
            raised by a node (re-raised with the node named).

    Example:
        >>> import asyncio, asyncgrad as ag
        >>> x = ag.tensor([1.0, 2.0], requires_grad=True)
        >>> asyncio.run(ag.grad((x * x).sum(), x))
        (tensor([2., 4.]),)
    """
    ins, roots, values, edges, keep, allow = _prepare_grad(
        outputs,
        inputs,
        grad_outputs,
        retain_graph,
        create_graph,
        allow_unused,
        materialize_grads,
        is_grads_batched,
    )
    captured = await engine.execute(
        roots,
        values,
        keep_graph=keep,
        create_graph=create_graph,
        outputs=edges,
        accumulate=False,
        priority=priority,
    )
    return _finish_grad(captured, ins, allow, materialize_grads, create_graph)


def grad_sync(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
    priority: int = 0,
) -> tuple[Tensor | None, ...]:
    """Blocking twin of :func:`grad`: runs on the calling thread (inside a running loop too)."""
    ins, roots, values, edges, keep, allow = _prepare_grad(
        outputs,
        inputs,
        grad_outputs,
        retain_graph,
        create_graph,
        allow_unused,
        materialize_grads,
        is_grads_batched,
    )
    captured = engine.execute_sync(
        roots,
        values,
        keep_graph=keep,
        create_graph=create_graph,
        outputs=edges,
        accumulate=False,
        priority=priority,
    )
    return _finish_grad(captured, ins, allow, materialize_grads, create_graph)


def _prepare_backward(
    tensors: Any, grad_tensors: Any, retain_graph: bool | None, create_graph: bool, inputs: Any
) -> tuple[Any, ...]:
    outs = _tensors(tensors, "tensors")
    roots, values = _make_grads(outs, grad_tensors, create_graph, "grad_tensors")
    edges = None
    if inputs is not None:
        ins = _tensors(inputs, "inputs")
        if not ins:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        edges = _input_edges(ins, True)
    keep = create_graph if retain_graph is None else retain_graph
    return roots, values, edges, keep


async def backward(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
    priority: int = 0,
) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of graph leaves.

    Args:
        tensors: tensor(s) to differentiate.
        grad_tensors: one gradient per tensor (``None`` for a scalar means 1).
        retain_graph: keep saved tensors for another backward (default: ``create_graph``).
        create_graph: record the backward itself, for higher-order derivatives.
        inputs: accumulate only into these tensors (leaves, or non-leaves via ``retain_grad``).
        priority: when several backward passes compete for a device, larger runs first.

    Example:
        >>> import asyncio, asyncgrad as ag
        >>> w = ag.tensor([3.0], requires_grad=True)
        >>> asyncio.run(ag.backward((w * w).sum()))
        >>> w.grad
        tensor([6.])
    """
    roots, values, edges, keep = _prepare_backward(
        tensors, grad_tensors, retain_graph, create_graph, inputs
    )
    await engine.execute(
        roots,
        values,
        keep_graph=keep,
        create_graph=create_graph,
        outputs=edges,
        accumulate=True,
        priority=priority,
    )


def backward_sync(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
    priority: int = 0,
) -> None:
    """Blocking twin of :func:`backward`: runs on the calling thread (inside a running loop too)."""
    roots, values, edges, keep = _prepare_backward(
        tensors, grad_tensors, retain_graph, create_graph, inputs
    )
    engine.execute_sync(
        roots,
        values,
        keep_graph=keep,
        create_graph=create_graph,
        outputs=edges,
        accumulate=True,
        priority=priority,
    )


from .function import Function, once_differentiable  # noqa: E402
from .gradcheck import gradcheck, gradgradcheck  # noqa: E402

_ = (Node, Sequence, Edge)
