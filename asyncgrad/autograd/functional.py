"""``ag.autograd.functional``: vector-Jacobian, Jacobian-vector and Hessian products of a function.

``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp`` and ``hvp`` take torch's arguments and
return torch's shapes (a tuple where the inputs or outputs were a tuple, a Tensor where they were
one). As torch's where no event loop runs in the calling thread (they compute at the call);
awaitable inside a running loop (``await F.jacobian(f, x)``), where ``func`` may also be
``async def`` (See NOTE [One rule for gradient calls] in entry.py). The ``*_sync`` twins block
wherever they are called.

# NOTE [Functional steps]
# Each function is written once, as a generator of steps: it yields a list of ``ag.grad`` calls
# it needs next (independent of each other) and is sent back their results. The coroutine awaits
# the calls of one step together (``asyncio.gather``: a Jacobian's rows are concurrent graph tasks
# over one retained graph, which the engine interleaves, so a large Jacobian lets the loop run
# between slices like any backward); on other event loops (trio) it awaits them in turn. The sync
# twin runs them with ``grad_sync``. ``hessian`` is the Jacobian of a function that itself takes
# Jacobian steps: the user's function is a step generator too (``yield from``), so nothing is
# written twice. In the coroutines ``func`` may also be ``async def``.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Callable, Generator
from types import FrameType
from typing import TYPE_CHECKING, Any

from .. import ops
from .._tensor import Tensor
from ..graph.grad_mode import enable_grad, is_grad_enabled, set_grad_enabled
from .api import _grad, grad_sync
from .entry import AT_ONCE, Finished, awaitable, call_use, loop_running

if TYPE_CHECKING:
    from .entry import TupleCall

__all__ = [
    "hessian",
    "hessian_sync",
    "hvp",
    "hvp_sync",
    "jacobian",
    "jacobian_sync",
    "jvp",
    "jvp_sync",
    "vhp",
    "vhp_sync",
    "vjp",
    "vjp_sync",
]


class _Await:
    """A step that awaits what an ``async def`` func returned."""

    __slots__ = ("aw",)

    def __init__(self, aw: Any) -> None:
        self.aw = aw


# A step: a list of keyword-argument dicts for ag.grad, or an _Await.
Steps = Generator[Any, Any, Any]

# The most Jacobian rows (backward passes) one step runs at once.
ROWS_PER_STEP = 256


def _run_sync(gen: Steps) -> Any:
    try:
        req = next(gen)
        while True:
            if isinstance(req, _Await):
                if inspect.iscoroutine(req.aw):
                    req.aw.close()
                req = gen.throw(
                    TypeError(
                        "the function returned an awaitable: an async function needs the "
                        "awaited form, `await ag.autograd.functional.<name>(...)` inside a "
                        "running event loop"
                    )
                )
                continue
            req = gen.send([grad_sync(**c) for c in req])
    except StopIteration as stop:
        return stop.value


def _asyncio_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _run_async(gen: Steps) -> Any:
    try:
        req = next(gen)
        while True:
            if isinstance(req, _Await):
                req = gen.send(await req.aw)
                continue
            if len(req) > 1 and _asyncio_running():
                res = list(await asyncio.gather(*(_grad(**c) for c in req)))
            else:
                res = [await _grad(**c) for c in req]
            req = gen.send(res)
    except StopIteration as stop:
        return stop.value


def _call(gen: Steps, caller: FrameType | None, name: str) -> Any:
    """Run ``gen`` at once where no loop runs; inside one, its awaitable (See NOTE [One rule for
    gradient calls] in entry.py)."""
    if loop_running():
        use = call_use(caller, globals()[name])
        if use != AT_ONCE:
            full = f"ag.autograd.functional.{name}"
            return awaitable(_run_async(gen), use, caller, full, f"{full}_sync")
    return _run_sync(gen)


def _user(func: Callable[..., Any]) -> Callable[..., Steps]:
    """The user's function as a step generator (one step if it is ``async def``)."""

    def call(*args: Any) -> Steps:
        out = func(*args)
        # ag.grad's tuple where it ran at once is awaitable too, but it is a value here.
        if inspect.isawaitable(out) and not isinstance(out, Finished):
            out = yield _Await(out)
        return out

    return call


# ----------------------------------------------------------------------------- torch's helpers
def _as_tuple(x: Any, arg_name: str, fn_name: str) -> tuple[bool, tuple[Tensor, ...]]:
    is_tuple = isinstance(x, tuple)
    xs = x if is_tuple else (x,)
    for i, el in enumerate(xs):
        if not isinstance(el, Tensor):
            where = f"value at index {i}" if is_tuple else f"given {arg_name}"
            raise TypeError(
                f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors "
                f"but the {where} has type {type(el)}."
            )
    return is_tuple, xs


def _tuple_postprocess(res: Any, to_unpack: Any) -> Any:
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _preprocess(xs: tuple[Tensor, ...], create_graph: bool, need_graph: bool) -> tuple[Tensor, ...]:
    """Inputs for the function: a view that stays in the caller's graph under create_graph,
    else a detached tensor (requiring grad when ``need_graph``)."""
    res = []
    for t in xs:
        if create_graph and t.requires_grad:
            res.append(t.view(*t.shape))
        else:
            res.append(t.detach().requires_grad_(need_graph))
    return tuple(res)


def _postprocess(xs: Any, create_graph: bool) -> Any:
    if isinstance(xs[0], Tensor):
        return xs if create_graph else tuple(t.detach() for t in xs)
    return tuple(_postprocess(x, create_graph) for x in xs)


def _validate_v(v: tuple[Tensor, ...], other: tuple[Tensor, ...], other_is_tuple: bool) -> None:
    if len(other) != len(v):
        if other_is_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}."
            )
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other, strict=True)):
        if tuple(a.shape) != tuple(b.shape):
            prepend = f"Entry {i} in " if other_is_tuple else ""
            raise RuntimeError(
                f"{prepend}v has invalid size: should be {b.shape} but got {a.shape}."
            )


def _check_requires_grad(xs: Any, input_type: str, strict: bool) -> None:
    if not strict:
        return
    for i, t in enumerate(xs):
        if t is None:
            raise RuntimeError(
                f"The output of the user-provided function is independent of input {i}. This is "
                "not allowed in strict mode."
            )
        if t.requires_grad:
            continue
        if input_type == "hessian":
            raise RuntimeError(
                f"The hessian of the user-provided function with respect to input {i} is "
                "independent of the input. This is not allowed in strict mode. You should ensure "
                "that your function is thrice differentiable and that the hessian depends on the "
                "inputs."
            )
        if input_type == "jacobian":
            raise RuntimeError(
                "While computing the hessian, found that the jacobian of the user-provided "
                f"function with respect to input {i} is independent of the input. This is not "
                "allowed in strict mode. You should ensure that your function is twice "
                "differentiable and that the jacobian depends on the inputs (this would be "
                "violated by a linear function for example)."
            )
        if input_type == "grad_inputs":
            raise RuntimeError(
                f"The gradient with respect to input {i} is independent of the inputs of the "
                "user-provided function. This is not allowed in strict mode."
            )
        raise RuntimeError(
            f"Output {i} of the user-provided function does not require gradients. The outputs "
            "must be computed in a differentiable manner from the input when running in strict "
            "mode."
        )


def _grad_call(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    create_graph: bool = False,
    retain_graph: bool | None = None,
) -> dict[str, Any] | None:
    """The ag.grad arguments for the outputs that require grad (None if none does)."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    outs, gos = [], []
    for o, g in zip(outputs, grad_outputs, strict=True):
        if o is not None and o.requires_grad:
            outs.append(o)
            gos.append(g)
    if not outs:
        return None
    return {
        "outputs": outs,
        "inputs": list(inputs),
        "grad_outputs": gos,
        "retain_graph": retain_graph,
        "create_graph": create_graph,
        "allow_unused": True,
    }


def _grads(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    create_graph: bool = False,
    retain_graph: bool | None = None,
) -> Steps:
    """One ag.grad call as a step (torch's _autograd_grad): None for every input when no output
    requires grad."""
    call = _grad_call(outputs, inputs, grad_outputs, create_graph, retain_graph)
    if call is None:
        return (None,) * len(inputs)
    (res,) = yield [call]
    return tuple(res)


_STRICT_NONE = {
    "back": "The output of the user-provided function is independent of input {i}. This is not "
    "allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the "
    "grad_outputs when using the double backward trick to compute forward mode gradients. This "
    "is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. This "
    "is not allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} "
    "in the grad_jacobian. This is not allowed in strict mode as it prevents from using the "
    "double backward trick to replace forward mode AD.",
}


def _fill_in_zeros(
    grads: Any, refs: Any, strict: bool, create_graph: bool, stage: str
) -> tuple[Tensor, ...]:
    res = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(_STRICT_NONE[stage].format(i=i))
            g = ops.zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"The {what} of the user-provided function is independent of input {i}. This is "
                "not allowed in strict mode when create_graph=True."
            )
        res.append(g)
    return tuple(res)


def _single_element_v(xs: tuple[Tensor, ...], of: str) -> None:
    if len(xs) != 1 or xs[0].numel() != 1:
        raise RuntimeError(
            f"The vector v can only be None if the {of} a single Tensor with a single element."
        )


# ----------------------------------------------------------------------------- the steps
def _vjp_steps(func: Any, inputs: Any, v: Any, create_graph: bool, strict: bool) -> Steps:
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "vjp")
        ins = _preprocess(ins, create_graph, True)
    with enable_grad():
        raw = yield from func(*ins)
    is_outputs_tuple, outs = _as_tuple(raw, "outputs of the user-provided function", "vjp")
    _check_requires_grad(outs, "outputs", strict)
    vs: Any = None
    if v is not None:
        _, vs = _as_tuple(v, "v", "vjp")
        vs = _preprocess(vs, create_graph, False)
        _validate_v(vs, outs, is_outputs_tuple)
    else:
        _single_element_v(outs, "user-provided function returns")
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = yield from _grads(outs, ins, vs, create_graph)
        vjp = _fill_in_zeros(res, ins, strict, create_graph, "back")
    return (
        _tuple_postprocess(_postprocess(outs, create_graph), is_outputs_tuple),
        _tuple_postprocess(_postprocess(vjp, create_graph), is_inputs_tuple),
    )


def _jvp_steps(func: Any, inputs: Any, v: Any, create_graph: bool, strict: bool) -> Steps:
    # The double-backward trick, as torch: the vjp with a zero vector u that requires grad is
    # linear in u, and its vjp with respect to u, with v, is J v.
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "jvp")
        ins = _preprocess(ins, create_graph, True)
        vs: Any = None
        if v is not None:
            _, vs = _as_tuple(v, "v", "jvp")
            vs = _preprocess(vs, create_graph, False)
            _validate_v(vs, ins, is_inputs_tuple)
        else:
            _single_element_v(ins, "input to the user-provided function is")
        raw = yield from func(*ins)
        is_outputs_tuple, outs = _as_tuple(raw, "outputs of the user-provided function", "jvp")
        _check_requires_grad(outs, "outputs", strict)
        us = tuple(ops.zeros_like(o, requires_grad=True) for o in outs)
        gin = yield from _grads(outs, ins, us, create_graph=True)
        _check_requires_grad(gin, "grad_inputs", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = yield from _grads(gin, us, vs, create_graph)
        jvp = _fill_in_zeros(res, outs, strict, create_graph, "back_trick")
    return (
        _tuple_postprocess(_postprocess(outs, create_graph), is_outputs_tuple),
        _tuple_postprocess(_postprocess(jvp, create_graph), is_outputs_tuple),
    )


def _check_strategy(strategy: str, create_graph: bool, strict: bool, vectorize: bool) -> None:
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more performant. '
            'Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode" and create_graph:
        raise NotImplementedError(
            "torch.autograd.functional.jacobian: `create_graph=True` and "
            '`strategy="forward-mode"` are not supported together (yet). Please either set '
            '`create_graph=False` or `strategy="reverse-mode"`.'
        )
    if vectorize and strict:
        raise RuntimeError(
            "torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
            "supported together. Please either set `strict=False` or `vectorize=False`."
        )


def _jacobian_steps(
    func: Any, inputs: Any, create_graph: bool, strict: bool, vectorize: bool, strategy: str
) -> Steps:
    _check_strategy(strategy, create_graph, strict, vectorize)
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "jacobian")
        ins = _preprocess(ins, create_graph, True)
        raw = yield from func(*ins)
    is_outputs_tuple, outs = _as_tuple(raw, "outputs of the user-provided function", "jacobian")
    _check_requires_grad(outs, "outputs", strict)
    # One vjp per element of every output (a row of the Jacobian), ROWS_PER_STEP rows a step:
    # they run concurrently over the retained graph (See NOTE [Functional steps]); the one-hot
    # vectors of a step are made with it, so memory stays bounded for a long output.
    rows_of: list[tuple[int, int]] = [
        (i, j) for i, out in enumerate(outs) for j in range(out.numel())
    ]
    results: list[Any] = []
    for start in range(0, len(rows_of), ROWS_PER_STEP):
        chunk = rows_of[start : start + ROWS_PER_STEP]
        calls: list[dict[str, Any]] = []
        where: list[int] = []  # per row: its call, or -1 where no output requires grad
        for i, j in chunk:
            out = outs[i]
            e = ops.zeros(out.numel(), dtype=out.dtype, device=out.device)
            e[j] = 1
            call = _grad_call((out,), ins, (e.reshape(out.shape),), create_graph, True)
            where.append(-1 if call is None else len(calls))
            if call is not None:
                calls.append(call)
        with set_grad_enabled(True if create_graph else is_grad_enabled()):
            got = (yield calls) if calls else []
        results += [got[c] if c >= 0 else (None,) * len(ins) for c in where]
    rows: list[list[list[Tensor]]] = [[[] for _ in ins] for _ in outs]
    for (i, _), vj in zip(rows_of, results, strict=True):
        for k, (g, inp) in enumerate(zip(vj, ins, strict=True)):
            if g is None:
                if strict:
                    raise RuntimeError(
                        f"Output {i} of the user-provided function is independent of input {k}. "
                        "This is not allowed in strict mode."
                    )
                g = ops.zeros_like(inp)
            elif strict and create_graph and not g.requires_grad:
                raise RuntimeError(
                    f"The jacobian of the user-provided function is independent of input {i}. "
                    "This is not allowed in strict mode when create_graph=True."
                )
            rows[i][k].append(g)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        jac = tuple(
            tuple(
                ops.stack(rows[i][k], 0).reshape(*out.shape, *inp.shape)
                if rows[i][k]
                else ops.zeros((*out.shape, *inp.shape), dtype=inp.dtype, device=inp.device)
                for k, inp in enumerate(ins)
            )
            for i, out in enumerate(outs)
        )
    return _tuple_postprocess(_postprocess(jac, create_graph), (is_outputs_tuple, is_inputs_tuple))


def _single_output(func: Any, fn_name: str, strict: bool) -> Callable[..., Steps]:
    def call(*inp: Tensor) -> Steps:
        out = yield from func(*inp)
        is_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", fn_name)
        _check_requires_grad(t_out, "outputs", strict)
        if is_tuple or not isinstance(out, Tensor):
            raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(
                f"The Tensor returned by the function given to {fn_name} should contain a single "
                "element"
            )
        return out.squeeze()  # as torch's: a (1, 1, 1) output gives the Hessian's own shape

    return call


def _hessian_steps(
    func: Any, inputs: Any, create_graph: bool, strict: bool, vectorize: bool, strategy: str
) -> Steps:
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "hessian")
    single = _single_output(func, "hessian", strict)

    def jac_func(*inp: Tensor) -> Steps:
        jac = yield from _jacobian_steps(single, inp, True, False, False, "reverse-mode")
        _check_requires_grad(jac, "jacobian", strict)
        return jac

    res = yield from _jacobian_steps(jac_func, ins, create_graph, strict, vectorize, strategy)
    return _tuple_postprocess(res, (is_inputs_tuple, is_inputs_tuple))


def _hv_steps(name: str, func: Any, inputs: Any, v: Any, create_graph: bool, strict: bool) -> Steps:
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", name)
        ins = _preprocess(ins, create_graph, True)
        vs: Any = None
        if v is not None:
            _, vs = _as_tuple(v, "v", name)
            vs = _preprocess(vs, create_graph, False)
            _validate_v(vs, ins, is_inputs_tuple)
        else:
            _single_element_v(ins, "input to the user-provided function is")
        raw = yield from func(*ins)
        is_outputs_tuple, outs = _as_tuple(raw, "outputs of the user-provided function", name)
        _check_requires_grad(outs, "outputs", strict)
        if is_outputs_tuple or not isinstance(raw, Tensor):
            raise RuntimeError(f"The function given to {name} should return a single Tensor")
        if raw.numel() != 1:
            raise RuntimeError(
                f"The Tensor returned by the function given to {name} should contain a single "
                "element"
            )
        jac = yield from _grads(outs, ins, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        if name == "hvp":
            # Double-backward trick: the vjp of the gradient with a zero vector u that requires
            # grad is u^T H; its vjp with respect to u, with v, is H v.
            us = tuple(ops.zeros_like(t, requires_grad=True) for t in ins)
            double_back = yield from _grads(jac, ins, us, create_graph=True)
            _check_requires_grad(jac, "hessian", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        if name == "vhp":
            res = yield from _grads(jac, ins, vs, create_graph)
            prod = _fill_in_zeros(res, ins, strict, create_graph, "double_back")
        else:
            res = yield from _grads(double_back, us, vs, create_graph)
            prod = _fill_in_zeros(res, ins, strict, create_graph, "double_back_trick")
    return (
        _tuple_postprocess(_postprocess(outs, create_graph), is_outputs_tuple),
        _tuple_postprocess(_postprocess(prod, create_graph), is_inputs_tuple),
    )


# ----------------------------------------------------------------------------- public API
def vjp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> TupleCall[Any]:
    """``(func(*inputs), v^T J)``: the vector-Jacobian product of ``func`` at ``inputs``.

    ``v`` has the outputs' shapes (None for a single one-element output); the product has the
    inputs' shapes. ``create_graph``: both results are differentiable. ``strict``: raise when an
    output does not depend on an input instead of returning zeros.

    Example:
        >>> import asyncio, asyncgrad as ag
        >>> from asyncgrad.autograd import functional as F
        >>> out, g = F.vjp(lambda x: (x * x).sum(), ag.tensor([1.0, 2.0]))
        >>> g
        tensor([2., 4.])
        >>> async def main():
        ...     return await F.vjp(lambda x: (x * x).sum(), ag.tensor([3.0]))
        >>> asyncio.run(main())[1]
        tensor([6.])
    """
    return _call(_vjp_steps(_user(func), inputs, v, create_graph, strict), sys._getframe(1), "vjp")  # type: ignore[no-any-return]


def vjp_sync(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """Blocking twin of :func:`vjp`."""
    return _run_sync(_vjp_steps(_user(func), inputs, v, create_graph, strict))  # type: ignore[no-any-return]


def jvp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> TupleCall[Any]:
    """``(func(*inputs), J v)``: the Jacobian-vector product, by the double-backward trick (two
    reverse passes) as torch computes it. ``v`` has the inputs' shapes (None for a single
    one-element input); the product has the outputs' shapes."""
    return _call(_jvp_steps(_user(func), inputs, v, create_graph, strict), sys._getframe(1), "jvp")  # type: ignore[no-any-return]


def jvp_sync(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """Blocking twin of :func:`jvp`."""
    return _run_sync(_jvp_steps(_user(func), inputs, v, create_graph, strict))  # type: ignore[no-any-return]


def jacobian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """The Jacobian of ``func`` at ``inputs``: for one output and one input a Tensor of shape
    ``output.shape + input.shape``; a tuple over the inputs and/or outputs where those are
    tuples (``jac[i][j]``: output i, input j).

    Every row is a vector-Jacobian product; the coroutine runs them as concurrent backward
    passes over one retained graph. ``vectorize`` and ``strategy`` are accepted for torch's
    signature and give the same values (always computed by rows in reverse mode).
    """
    return _call(
        _jacobian_steps(_user(func), inputs, create_graph, strict, vectorize, strategy),
        sys._getframe(1),
        "jacobian",
    )


def jacobian_sync(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """Blocking twin of :func:`jacobian` (the rows one after the other)."""
    return _run_sync(
        _jacobian_steps(_user(func), inputs, create_graph, strict, vectorize, strategy)
    )


def hessian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """The Hessian of the scalar function ``func`` at ``inputs``: a Tensor of shape
    ``input.shape + input.shape`` for one input, ``hess[i][j]`` for a tuple of inputs.
    ``vectorize`` and ``outer_jacobian_strategy`` are accepted and give the same values."""
    return _call(
        _hessian_steps(
            _user(func), inputs, create_graph, strict, vectorize, outer_jacobian_strategy
        ),
        sys._getframe(1),
        "hessian",
    )


def hessian_sync(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """Blocking twin of :func:`hessian`."""
    return _run_sync(
        _hessian_steps(
            _user(func), inputs, create_graph, strict, vectorize, outer_jacobian_strategy
        )
    )


def vhp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> TupleCall[Any]:
    """``(func(*inputs), v^T H)`` for a scalar function ``func``; ``v`` has the inputs' shapes."""
    return _call(  # type: ignore[no-any-return]
        _hv_steps("vhp", _user(func), inputs, v, create_graph, strict), sys._getframe(1), "vhp"
    )


def vhp_sync(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """Blocking twin of :func:`vhp`."""
    return _run_sync(_hv_steps("vhp", _user(func), inputs, v, create_graph, strict))  # type: ignore[no-any-return]


def hvp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> TupleCall[Any]:
    """``(func(*inputs), H v)`` for a scalar function ``func``, by the double-backward trick
    (equal to ``vhp`` for a twice continuously differentiable function, and slower)."""
    return _call(  # type: ignore[no-any-return]
        _hv_steps("hvp", _user(func), inputs, v, create_graph, strict), sys._getframe(1), "hvp"
    )


def hvp_sync(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """Blocking twin of :func:`hvp`."""
    return _run_sync(_hv_steps("hvp", _user(func), inputs, v, create_graph, strict))  # type: ignore[no-any-return]
