"""backward() and grad() and their _sync twins: check and normalise arguments, then call the
engine.

As torch's in a script; awaitable inside a running event loop (See NOTE [One rule for gradient
calls] in entry.py). The ``*_sync`` twins and ``Tensor.backward`` run the same graph task on the
calling thread wherever they are called.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from .. import backend, engine
from .._tensor import SAME_DTYPE, Tensor
from ..engine.backward_pass import BackwardPass
from ..graph.node import Edge
from .entry import AT_ONCE, awaitable, backward_done, call_use, finished, loop_running
from .graph import GradientEdge

if TYPE_CHECKING:
    from .entry import NoneCall, TupleCall

__all__ = ["backward", "backward_sync", "grad", "grad_sync"]


_ARRAY_HINT = "; wrap arrays in a Tensor first: ag.tensor(a) (or ag.from_numpy(a))"


def _kind(x: Any) -> str:
    """Name what a caller passed, for error messages: ``float 2.0``, ``numpy.ndarray``."""
    if x is None:
        return "None"
    t = type(x)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    if isinstance(x, (bool, int, float, complex, backend.generic)):
        return f"{name} {x!r}"
    shape = getattr(x, "shape", None)
    if isinstance(shape, tuple):
        return f"{name} of shape {shape}"
    return name


def _not_a_sequence(x: Any) -> bool:
    """Arrays, numbers, strings and mappings are not taken for a sequence of Tensors (iterating
    them would give numbers, characters or keys)."""
    if isinstance(x, (str, bytes, Mapping, numbers.Number)):
        return True
    t = type(x)
    return (
        hasattr(t, "__array__")
        or hasattr(t, "__array_interface__")
        or hasattr(t, "__cuda_array_interface__")
        or hasattr(t, "__dlpack__")
        or not isinstance(x, Iterable)
    )


def _hint(x: Any) -> str:
    if isinstance(x, numbers.Number):
        return "; pass a Tensor of the output's shape, e.g. ag.full_like(output, value)"
    return "" if isinstance(x, (str, bytes, Mapping)) else _ARRAY_HINT


def _tensors(x: Any, what: str) -> list[Any]:
    """``x`` as a list of Tensors and GradientEdges (torch's ``get_gradient_edge``): one, or a
    list, tuple or other iterable of them."""
    if isinstance(x, Tensor):
        return [x]
    if type(x) is list or type(x) is tuple:
        out = list(x)
    elif isinstance(x, GradientEdge):
        return [x]
    elif _not_a_sequence(x):
        raise TypeError(
            f"{what} must be a Tensor or a sequence of Tensors, got {_kind(x)}{_hint(x)}"
        )
    else:
        out = list(x)
    for i, t in enumerate(out):
        if not isinstance(t, (Tensor, GradientEdge)):
            raise TypeError(f"{what}[{i}] must be a Tensor, got {_kind(t)}{_hint(t)}")
    return out


def _meta(x: Any) -> tuple[tuple[int, ...], Any, Any]:
    """Shape, dtype and device of a Tensor, or of the gradient a GradientEdge takes."""
    if isinstance(x, Tensor):
        return tuple(x.shape), x.dtype, x.device
    shape, dtype = x.node._input_meta[x.output_nr]
    return tuple(shape), dtype, x.node._device


def _grad_list(grads: Any, n: int, what: str) -> list[Tensor | None]:
    """The gradients given for ``n`` outputs, one Tensor or None each."""
    if grads is None:
        return [None] * n
    if isinstance(grads, Tensor):
        out: list[Any] = [grads]
    elif type(grads) is list or type(grads) is tuple:
        out = list(grads)
    elif _not_a_sequence(grads):
        raise TypeError(
            f"{what} must be a Tensor, None, or a sequence with a Tensor or None per output, "
            f"got {_kind(grads)}{_hint(grads)}"
        )
    else:
        out = list(grads)
    for i, g in enumerate(out):
        if g is not None and not isinstance(g, Tensor):
            raise TypeError(f"{what}[{i}] must be a Tensor or None, got {_kind(g)}{_hint(g)}")
    if len(out) != n:
        raise RuntimeError(f"got {len(out)} {what} for {n} outputs: they must match in number")
    return out


_MAY_BE_NONE = frozenset({"retain_graph", "allow_unused"})


def _check_args(priority: Any, **flags: Any) -> int:
    """Slow path of the argument checks, taken only when a flag is not a bool (or None where
    allowed) or ``priority`` is not an int: raise naming the argument, or return ``priority``
    as an int (a NumPy integer, say)."""
    for name, value in flags.items():
        if value is None and name in _MAY_BE_NONE:
            continue
        if value is not True and value is not False:
            allowed = "True, False or None" if name in _MAY_BE_NONE else "True or False"
            raise TypeError(f"{name} must be {allowed}, got {_kind(value)}")
    if type(priority) is int:
        return priority
    if not isinstance(priority, (bool, backend.bool_scalar)):
        try:
            return operator.index(priority)
        except TypeError:
            pass
    raise TypeError(f"priority must be an int, got {_kind(priority)}")


def _make_grads(
    outputs: list[Any], grads: Any, create_graph: bool, what: str
) -> tuple[list[Edge], list[Any]]:
    """Check the gradients given for ``outputs``; return the root edges and their gradients.

    Changes nothing: the caller may still reject the call after this.
    """
    glist = [None] * len(outputs) if grads is None else _grad_list(grads, len(outputs), what)
    roots: list[Edge] = []
    values: list[Any] = []
    for i, (out, g) in enumerate(zip(outputs, glist, strict=True)):
        if not isinstance(out, Tensor):  # a GradientEdge: the gradient enters its node's input
            roots.append(Edge(out.node, out.output_nr))
            values.append(_edge_grad(out, g, i, create_graph, what))
            continue
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
            arr = backend.full_like(out._array, 1)
            values.append(Tensor._wrap(arr) if create_graph else arr)
        else:
            values.append(
                _given_grad(g, i, tuple(out.shape), out.dtype, out.device, create_graph, what)
            )
        roots.append(e)
    return roots, values


def _given_grad(
    g: Tensor, i: int, shape: tuple[int, ...], dtype: Any, device: Any, create: bool, what: str
) -> Any:
    """The gradient ``g`` given for output ``i`` of that shape, dtype and device, checked (and
    cast to a float dtype it lacks)."""
    if tuple(g.shape) != shape:
        raise RuntimeError(
            f"Mismatch in shape: {what}[{i}] has a shape of {tuple(g.shape)} and "
            f"output[{i}] has a shape of {shape}."
        )
    if g.device != device:
        raise RuntimeError(
            f"invalid gradient at index {i} - expected device {device} but got {g.device}"
        )
    if g.dtype != dtype:
        if g.dtype.kind not in "fc":
            raise RuntimeError(
                f"invalid gradient at index {i} - expected a floating dtype like "
                f"{dtype} but got {g.dtype}"
            )
        g = g.to(dtype)
    return g if create else g._array


def _edge_grad(edge: Any, g: Tensor | None, i: int, create: bool, what: str) -> Any:
    """The root gradient for a GradientEdge given as an output: ``g``, or ones where the
    gradient it takes has one element (as for a scalar output)."""
    shape, dtype, device = _meta(edge)
    if g is not None:
        return _given_grad(g, i, shape, dtype, device, create, what)
    if math.prod(shape) != 1:
        raise RuntimeError(
            f"grad can be implicitly created only for scalar outputs (output {i} has shape "
            f"{shape}); pass a gradient of that shape"
        )
    if dtype.kind not in "fc":
        raise RuntimeError(
            f"grad can be implicitly created only for real scalar outputs but got {dtype}"
        )
    arr = backend.ones(shape, dtype, device)
    return Tensor._wrap(arr) if create else arr


def _input_edges(inputs: list[Any], for_backward: bool) -> list[Edge]:
    """The edges of ``inputs`` (Tensors, or GradientEdges taken as they are). For backward,
    non-leaf Tensor inputs then retain their grad: that is done only once every input has passed
    its checks, so a rejected call changes nothing."""
    edges = []
    for i, t in enumerate(inputs):
        if isinstance(t, GradientEdge):
            edges.append(Edge(t.node, t.output_nr))
            continue
        e = t._edge() if t.requires_grad else None
        if e is None:
            raise RuntimeError(
                f"One of the differentiated Tensors (inputs[{i}], shape {tuple(t.shape)}) does not "
                "require grad"
            )
        edges.append(e)
    if for_backward:
        for t in inputs:
            if isinstance(t, Tensor) and not t.is_leaf:
                t.retain_grad()
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
    priority: int = 0,
) -> tuple[list[Any], bool, BackwardPass]:
    if (
        (retain_graph is not None and retain_graph is not True and retain_graph is not False)
        or (create_graph is not True and create_graph is not False)
        or (allow_unused is not None and allow_unused is not True and allow_unused is not False)
        or (is_grads_batched is not True and is_grads_batched is not False)
        or (materialize_grads is not True and materialize_grads is not False)
        or priority.__class__ is not int
    ):
        priority = _check_args(
            priority,
            retain_graph=retain_graph,
            create_graph=create_graph,
            allow_unused=allow_unused,
            is_grads_batched=is_grads_batched,
            materialize_grads=materialize_grads,
        )
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
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    if materialize_grads and any(isinstance(t, GradientEdge) for t in ins):
        raise RuntimeError(
            "materialize_grads cannot be used when the given input is a GradientEdge"
        )
    roots, values = _make_grads(outs, grad_outputs, create_graph, "grad_outputs")
    edges = _input_edges(ins, False)
    keep = create_graph if retain_graph is None else retain_graph
    return ins, allow_unused, _task(roots, values, edges, False, keep, create_graph, priority)


# NOTE [Batched grad_outputs]
# ``grad(..., is_grads_batched=True)`` takes each grad_output with a leading batch dimension and
# gives each gradient the same leading dimension: entry b is the gradient for grad_outputs[b].
# torch computes the batch with vmap in one pass; asyncgrad, which has no vmap, runs one pass per
# entry over the same graph (kept until the last, which keeps it as ``retain_graph`` says) and
# stacks the results. Same values, B passes of time; a gradient that is None for every entry is
# None (materialize_grads makes it zeros).
def _batches(
    outputs: Any, grad_outputs: Any, retain_graph: bool | None, create_graph: bool
) -> list[tuple[Any, bool | None]]:
    outs = _tensors(outputs, "outputs")
    if grad_outputs is None:
        raise RuntimeError(
            "grad(is_grads_batched=True) needs grad_outputs, each with a leading batch dimension"
        )
    gos = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs)
    if len(gos) != len(outs):
        raise RuntimeError(
            f"grad can be implicitly created only for scalar outputs; got {len(gos)} "
            f"grad_outputs for {len(outs)} outputs"
        )
    sizes = set()
    for i, (g, o) in enumerate(zip(gos, outs, strict=True)):
        if not isinstance(g, Tensor):
            raise TypeError(
                f"grad(is_grads_batched=True): grad_outputs[{i}] must be a Tensor with a leading "
                f"batch dimension, got {type(g).__name__}"
            )
        if g.ndim != o.ndim + 1 or tuple(g.shape[1:]) != tuple(o.shape):
            raise RuntimeError(
                f"If `is_grads_batched=True`, we interpret the first dimension of each grad_output "
                f"as the batch dimension. The sizes of the remaining dimensions are expected to "
                f"match the shape of corresponding output, but a mismatch was detected: "
                f"grad_output[{i}] has a shape of {list(g.shape)} and output[{i}] has a shape "
                f"of {list(o.shape)}."
            )
        sizes.add(int(g.shape[0]))
    if len(sizes) > 1:
        raise RuntimeError(
            f"grad(is_grads_batched=True): the grad_outputs' batch sizes differ: {sorted(sizes)}"
        )
    n = sizes.pop()
    if n == 0:
        raise RuntimeError("grad(is_grads_batched=True): the batch is empty")
    last = create_graph if retain_graph is None else retain_graph
    return [([g[b] for g in gos], True if b < n - 1 else last) for b in range(n)]


def _stacked(parts: list[tuple[Tensor | None, ...]]) -> tuple[Tensor | None, ...]:
    from ..ops import stack  # ops sit above the entry points' module at import time

    res: list[Tensor | None] = []
    for column in zip(*parts, strict=True):
        if all(g is None for g in column):
            res.append(None)
            continue
        like = next(g for g in column if g is not None)
        zero = backend.full_like(like._array, 0)
        res.append(stack([Tensor._wrap(zero) if g is None else g for g in column]))
    return tuple(res)


def _task(
    roots: list[Edge],
    values: list[Any],
    outputs: list[Edge] | None,
    accumulate: bool,
    keep_graph: bool,
    create_graph: bool,
    priority: int,
) -> BackwardPass:
    """The engine's one value for one pass: the same for the coroutine and its twin (See NOTE
    [One pass, one value] in asyncgrad/engine/backward_pass.py)."""
    return BackwardPass(roots, values, outputs, accumulate, keep_graph, create_graph, priority)


def _finish_grad(
    captured: list[Any], ins: list[Any], allow_unused: bool, materialize: bool, create: bool
) -> tuple[Tensor | None, ...]:
    res: list[Tensor | None] = []
    for i, (g, t) in enumerate(zip(captured, ins, strict=False)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors (inputs[{i}], shape {_meta(t)[0]}) "
                    "appears to not have been used in the graph. Set allow_unused=True if this is "
                    "the desired behavior."
                )
            # materialize_grads never comes with a GradientEdge input (See _prepare_grad)
            res.append(Tensor._wrap(backend.full_like(t._array, 0)) if materialize else None)
            continue
        m = t._meta if isinstance(t, Tensor) else None
        if m is not None and m.grad_dtype is not SAME_DTYPE and m.grad_dtype is not None:
            if g.dtype != m.grad_dtype:  # a leaf's grad_dtype, as torch's engine casts to it
                g = g.to(m.grad_dtype) if create else g.astype(m.grad_dtype)
        res.append(g if create else Tensor._wrap(g))
    return tuple(res)


@overload
def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: Literal[False] | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
    priority: int = 0,
) -> TupleCall[Tensor]: ...


@overload
def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
    priority: int = 0,
) -> TupleCall[Tensor | None]: ...


def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
    priority: int = 0,
) -> Any:
    """Gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``.

    As torch's where no event loop runs in the calling thread (a script, a worker thread): the
    backward pass runs at the call, ``(gx,) = ag.grad(y, [x])``; the tuple it returns is also a
    finished coroutine, so ``asyncio.run(ag.grad(y, [x]))`` gives it too. Inside a running event
    loop it is awaitable, ``(gx,) = await ag.grad(y, [x])``, and any other use of it raises
    (See NOTE [One rule for gradient calls] in asyncgrad/autograd/entry.py).

    It may be awaited on asyncio's loop, uvloop's, or trio's (through anyio): under trio the
    pass runs on a worker thread, and cancelling the awaiting task stops it at its next node;
    async hooks then run on a helper asyncio loop, where they cannot await trio's primitives
    (NOTE [Other event loops] in asyncgrad/engine/foreign.py).

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
        A tuple with one gradient per input (``None`` for an input not reached, with
        ``allow_unused``); inside a running loop, an awaitable of it.

    Raises:
        TypeError: an argument of the wrong type (an array instead of a Tensor, say).
        RuntimeError: an output that does not require grad, a non-scalar output without
            ``grad_outputs``, an input not reached (without ``allow_unused``), or an error
            raised by a node (re-raised with the node named).

    Example:
        >>> import asyncio, asyncgrad as ag
        >>> x = ag.tensor([1.0, 2.0], requires_grad=True)
        >>> ag.grad((x * x).sum(), x)
        (tensor([2., 4.]),)
        >>> async def main():
        ...     return await ag.grad((x * x * x).sum(), x)
        >>> asyncio.run(main())
        (tensor([ 3., 12.]),)
    """
    if loop_running():
        caller = sys._getframe(1)
        use = call_use(caller, grad)
        if use != AT_ONCE:
            coro = _grad(
                outputs,
                inputs,
                grad_outputs,
                retain_graph,
                create_graph,
                allow_unused,
                is_grads_batched,
                materialize_grads,
                priority,
            )
            return awaitable(coro, use, caller, "ag.grad", "ag.grad_sync")
    return finished(
        grad_sync(
            outputs,
            inputs,
            grad_outputs,
            retain_graph,
            create_graph,
            allow_unused,
            is_grads_batched,
            materialize_grads,
            priority,
        )
    )


async def _grad(
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
    """The coroutine of :func:`grad`, always (the library's own awaited calls use it)."""
    if is_grads_batched is True:  # See NOTE [Batched grad_outputs]
        parts = []
        for one, keep in _batches(outputs, grad_outputs, retain_graph, create_graph):
            parts.append(
                await _grad(
                    outputs,
                    inputs,
                    one,
                    keep,
                    create_graph,
                    allow_unused,
                    False,
                    materialize_grads,
                    priority,
                )
            )
        return _stacked(parts)
    ins, allow, task = _prepare_grad(
        outputs,
        inputs,
        grad_outputs,
        retain_graph,
        create_graph,
        allow_unused,
        materialize_grads,
        is_grads_batched,
        priority,
    )
    run = engine.execute(task)
    del task  # See NOTE [Fewer objects for the collector] in asyncgrad/ops/_record.py
    captured = await run
    return _finish_grad(captured, ins, allow, materialize_grads, create_graph)


# A never-awaited call warns "coroutine 'grad' was never awaited", naming the public function.
_grad.__name__ = _grad.__qualname__ = "grad"


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
    if is_grads_batched is True:  # See NOTE [Batched grad_outputs]
        parts = [
            grad_sync(
                outputs,
                inputs,
                one,
                keep,
                create_graph,
                allow_unused,
                False,
                materialize_grads,
                priority,
            )
            for one, keep in _batches(outputs, grad_outputs, retain_graph, create_graph)
        ]
        return _stacked(parts)
    ins, allow, task = _prepare_grad(
        outputs,
        inputs,
        grad_outputs,
        retain_graph,
        create_graph,
        allow_unused,
        materialize_grads,
        is_grads_batched,
        priority,
    )
    captured = engine.execute_sync(task)
    return _finish_grad(captured, ins, allow, materialize_grads, create_graph)


def _prepare_backward(
    tensors: Any,
    grad_tensors: Any,
    retain_graph: bool | None,
    create_graph: bool,
    inputs: Any,
    priority: int = 0,
) -> BackwardPass:
    if (
        (retain_graph is not None and retain_graph is not True and retain_graph is not False)
        or (create_graph is not True and create_graph is not False)
        or priority.__class__ is not int
    ):
        priority = _check_args(priority, retain_graph=retain_graph, create_graph=create_graph)
    # A single tensor is what Tensor.backward passes: its argument is called `gradient`.
    what = "gradient" if isinstance(tensors, Tensor) else "grad_tensors"
    outs = _tensors(tensors, "tensors")
    ins = None
    if inputs is not None:
        ins = _tensors(inputs, "inputs")
        if not ins:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    roots, values = _make_grads(outs, grad_tensors, create_graph, what)
    # Last: the only step that changes anything (non-leaf inputs retain their grad).
    edges = None if ins is None else _input_edges(ins, True)
    keep = create_graph if retain_graph is None else retain_graph
    return _task(roots, values, edges, True, keep, create_graph, priority)


def backward(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
    priority: int = 0,
) -> NoneCall:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of graph leaves.

    As torch's where no event loop runs in the calling thread: the pass runs at the call. It
    returns ``BACKWARD_DONE`` where torch returns None: falsy as None, and a finished coroutine
    that awaits to None, so ``asyncio.run(ag.backward(loss))`` works too. Inside a running loop
    (asyncio's, uvloop's or trio's) it is awaitable, ``await ag.backward(loss)``, as
    :func:`grad` (under trio: a cancelled caller leaves each leaf's ``.grad`` untouched or
    complete, never half-written); a call whose value is thrown away raises at once instead of
    computing nothing.

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
        >>> ag.backward((w * w).sum())
        <ag.backward(...) done>
        >>> w.grad
        tensor([6.])
        >>> async def main():
        ...     await ag.backward((w * w).sum())
        >>> asyncio.run(main())
        >>> w.grad
        tensor([12.])
    """
    if loop_running():
        caller = sys._getframe(1)
        use = call_use(caller, backward)
        if use != AT_ONCE:
            coro = _backward(tensors, grad_tensors, retain_graph, create_graph, inputs, priority)
            return cast("NoneCall", awaitable(coro, use, caller, "ag.backward", "ag.backward_sync"))
    backward_sync(tensors, grad_tensors, retain_graph, create_graph, inputs, priority)
    return cast("NoneCall", backward_done())  # See NOTE [One rule for gradient calls]


async def _backward(
    tensors: Any,
    grad_tensors: Any,
    retain_graph: bool | None,
    create_graph: bool,
    inputs: Any,
    priority: int,
) -> None:
    task = _prepare_backward(tensors, grad_tensors, retain_graph, create_graph, inputs, priority)
    run = engine.execute(task)
    del task  # See NOTE [Fewer objects for the collector] in asyncgrad/ops/_record.py
    await run


_backward.__name__ = _backward.__qualname__ = "backward"


def backward_sync(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
    priority: int = 0,
) -> None:
    """Blocking twin of :func:`backward`: runs on the calling thread (inside a running loop too)."""
    task = _prepare_backward(tensors, grad_tensors, retain_graph, create_graph, inputs, priority)
    engine.execute_sync(task)
