"""What compiling a module with mypyc would change without a word (See NOTE [Compiled modules] in
asyncgrad/_build.py). Each test holds on the pure build and must hold on the compiled one: CI
runs the suite on both."""

from __future__ import annotations

import ast
import asyncio
import sys
import tomllib
import warnings
import weakref
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import _build
from asyncgrad.graph.node import LARGE_ELEMENTS, LargeMeta, Node
from asyncgrad.graph.saved_tensor import FREED
from asyncgrad.rules.registry import OPS, FunctionNode

from .helpers import TIMEOUT_S, assert_close, leaf


# ----------------------------------------------------------------------------- the report
def test_the_build_is_reported() -> None:
    compiled = _build.compiled_modules()
    assert ag.__build__ in ("pure", "compiled")
    if ag.__build__ == "pure":
        assert compiled == ()
    else:
        assert "asyncgrad.engine.worker" in compiled
    for name in compiled:  # each one listed is an extension module
        assert str(sys.modules[name].__file__).endswith(tuple(EXTENSION_SUFFIXES)), name


# ----------------------------------------------------------------------------- identities
def test_the_consumers_of_a_leaf_share_its_one_edge() -> None:
    """A leaf's edge is made once (NOTE [Edges are plain tuples]): boxing it again per node
    would cost an object per use."""
    x = leaf([1.0, 2.0])
    a, b = x * 2.0, x.exp()
    assert a.grad_fn is not None
    assert b.grad_fn is not None
    assert a.grad_fn._next_edges[0] is b.grad_fn._next_edges[0]
    (a + b).sum().backward()
    assert_close(x.grad, 2.0 + np.exp([1.0, 2.0]))


def test_nodes_of_one_shape_share_their_input_metadata() -> None:
    """NOTE [Shared input metadata]: one tuple per shape, found by identity of the dtype."""
    x = leaf(np.ones((3, 4)))
    a, b = x * 2.0, x + 1.0
    assert a.grad_fn is not None
    assert b.grad_fn is not None
    assert a.grad_fn._input_meta is b.grad_fn._input_meta


def test_a_large_shape_keeps_its_metadata_class() -> None:
    """The worker finds large nodes by ``type(node._input_meta) is LargeMeta`` (NOTE [Work
    estimates]): a copy into a plain tuple would keep every node on the loop."""
    x = leaf(np.ones(LARGE_ELEMENTS))
    y = x * 2.0
    assert y.grad_fn is not None
    assert type(y.grad_fn._input_meta) is LargeMeta
    assert type((leaf([1.0]) * 2.0).grad_fn._input_meta) is tuple  # type: ignore[union-attr]


def test_a_freed_buffer_is_still_known_as_freed() -> None:
    """Saved values are dropped to the FREED sentinel, found by identity: a second backward
    must fail with PyTorch's message, not compute with a stale value."""
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    node = y.grad_fn.next_functions[0][0]  # type: ignore[union-attr]
    assert isinstance(node, FunctionNode)
    assert node._saved is FREED
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


# ----------------------------------------------------------------------------- weak references
def node_classes() -> list[type[Node]]:
    """Every node class the package defines, the table ops' included."""
    found: list[type[Node]] = []
    stack: list[type[Node]] = [Node]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def test_every_node_class_takes_weak_references() -> None:
    """NOTE [Weak references to nodes]: each concrete node class names ``__weakref__`` itself;
    only the two bases that are never made (and may be compiled) take none."""
    classes = node_classes()
    assert {op.node_cls for op in OPS.values()} <= set(classes)
    missing = [c.__qualname__ for c in classes if not c.__weakrefoffset__]
    assert sorted(missing) == ["FunctionNode", "Node"]


def test_weak_references_to_nodes_are_cleared_with_them() -> None:
    """A node's weak references are cleared when it is freed, and their callbacks run (a
    compiled class that took weak references through a Python base would leave them dangling)."""

    class Twice(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 2.0

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            return g * 2.0

    died: list[Any] = []
    x = leaf([1.0, 2.0])
    y = Twice.apply(x.exp())
    custom = y.grad_fn
    table = custom.next_functions[0][0]
    acc = table.next_functions[0][0]
    refs = [weakref.ref(n, died.append) for n in (custom, table, acc)]
    assert [type(r()).__name__ for r in refs] == ["TwiceBackward", "ExpBackward0", "AccumulateGrad"]
    del custom, table, acc, y
    assert len(died) == 2
    assert [r() is None for r in refs] == [True, True, False]
    del x  # the leaf holds its accumulator
    assert len(died) == 3
    assert refs[2]() is None


def test_no_table_node_class_overrides_what_the_worker_calls_directly() -> None:
    """NOTE [Table nodes are called directly]: the worker calls FunctionNode's own ``apply``
    and ``release_variables`` on every FunctionNode."""
    subclasses = [
        c for c in node_classes() if issubclass(c, FunctionNode) and c is not FunctionNode
    ]
    assert {op.node_cls for op in OPS.values()} <= set(subclasses)
    overriding = [
        c.__qualname__ for c in subclasses if {"apply", "release_variables"} & set(vars(c))
    ]
    assert overriding == []


# ----------------------------------------------------------------------------- class flags
def test_per_op_flags_are_the_op_classes() -> None:
    """Flags set on an op's node class (``_special``, ``_cost``) are what its nodes read: a
    class attribute turned into a per-instance field would read the base's default."""
    x, w = leaf(np.ones((2, 3))), leaf(np.ones((3, 2)))
    node = (x @ w).grad_fn
    assert node is not None
    assert node._special
    assert not Node._special
    plain = (x * 2.0).grad_fn
    assert plain is not None
    assert not plain._special
    assert node._cost == type(node)._cost


async def test_an_async_backward_is_awaited() -> None:
    """``_async_apply`` is set per Function class: its nodes must be awaited, not run inline."""

    class Twice(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 2.0

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            await asyncio.sleep(0)
            return g * 2.0

    x = leaf([1.0, 3.0])
    (gx,) = await asyncio.wait_for(ag.grad(Twice.apply(x).sum(), [x]), TIMEOUT_S)
    assert_close(gx, [2.0, 2.0])


# ----------------------------------------------------------------------------- leaf hooks
@pytest.mark.parametrize("awaited", [False, True])
async def test_a_leafs_hooks_run(awaited: bool) -> None:
    """Hooks on a leaf (its gradient hook, then its post-accumulate hook) run in both APIs."""
    x = leaf([1.0, 2.0])
    seen: list[str] = []

    def grad_hook(g: ag.Tensor) -> ag.Tensor:
        seen.append("grad")
        return g * 10.0

    def post_hook(t: ag.Tensor) -> None:
        seen.append("post")
        assert t.grad is not None

    x.register_hook(grad_hook)
    x.register_post_accumulate_grad_hook(post_hook)
    y = (x * 3.0).sum()
    if awaited:
        await asyncio.wait_for(ag.backward(y), TIMEOUT_S)
    else:
        y.backward()
    assert seen == ["grad", "post"]
    assert_close(x.grad, [30.0, 30.0])


# ----------------------------------------------------------------------------- boundaries
def test_a_subclass_of_an_engine_recorder_records() -> None:
    """Python code subclasses the engine's Recorder (the profiler does)."""
    x = leaf([1.0, 2.0])
    with ag.autograd.profiler.profile() as prof:
        (x * 2.0).sum().backward()
    assert prof.key_averages()


def test_engine_options_keep_their_own_errors() -> None:
    """configure validates its arguments itself: a wrong type gets its message, not a bare
    TypeError from a compiled signature."""
    with pytest.raises(ValueError, match="slice_s must be > 0"):
        ag.configure(slice_s=-1.0)
    with pytest.raises(ValueError, match="blas_threads must be 'auto', None or an int >= 1"):
        ag.configure(blas_threads=1.5)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- awaits
ROOT = Path(__file__).resolve().parents[2]
# Locals of compiled modules that hold one of their own coroutines (``run = _run(gt, prep)``).
NATIVE_LOCALS = {"run"}


def compiled_sources() -> dict[str, ast.Module]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    return {p: ast.parse((ROOT / p).read_text(), p) for p in hook["include"]}


def test_compiled_modules_await_others_through_the_adapter() -> None:
    """Every ``await`` in a compiled module awaits one of the compiled modules' own coroutines,
    or goes through ``adapt_await`` (See NOTE [Compiled modules]: else a cancellation warns on
    Python 3.12 and later)."""
    trees = compiled_sources()
    native = {
        n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.AsyncFunctionDef)
    }
    bare = []
    for path, tree in trees.items():
        for n in ast.walk(tree):
            if not isinstance(n, ast.Await):
                continue
            v = n.value
            if isinstance(v, ast.Call):
                f = v.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if name == "adapt_await" or name in native:
                    continue
            elif isinstance(v, ast.Name) and v.id in NATIVE_LOCALS:
                continue
            bare.append(f"{path}:{n.lineno}: await {ast.unparse(v)}")
    assert bare == []


async def test_the_adapter_throws_one_argument() -> None:
    """What a compiled coroutine throws with three arguments reaches a coroutine as one, with
    its traceback, and without Python 3.12's DeprecationWarning."""
    got: list[BaseException] = []
    fut = asyncio.get_running_loop().create_future()

    async def inner() -> str:
        try:
            await fut
        except ValueError as e:
            got.append(e)
            return "handled"
        return "not reached"

    adapter = _build._OneArgThrow(inner())
    assert adapter.send(None) is fut  # suspended on the future
    err = ValueError("thrown in")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(StopIteration) as stop:
            adapter.throw(ValueError, err, None)
    assert stop.value.value == "handled"
    assert got == [err]
    fut.cancel()


@pytest.fixture
def wrapped_awaits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's awaits through the adapter, as on a compiled build on Python 3.12."""
    monkeypatch.setattr(_build, "wrap_awaits", True)


@pytest.mark.usefixtures("wrapped_awaits")
async def test_cancelling_an_awaited_pass_through_the_adapter() -> None:
    x = leaf([1.0, 2.0])
    mid = x * 2.0
    parked, never = asyncio.Event(), asyncio.Event()

    async def park(g: ag.Tensor) -> None:
        parked.set()
        await never.wait()

    mid.register_hook(park)
    task = asyncio.ensure_future(ag.grad((mid * 3.0).sum(), [x]))
    await asyncio.wait_for(parked.wait(), TIMEOUT_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, TIMEOUT_S)
    # The engine still serves, through the adapter.
    (gx,) = await asyncio.wait_for(ag.grad((x * x).sum(), [x]), TIMEOUT_S)
    assert_close(gx, [2.0, 4.0])


@pytest.mark.usefixtures("wrapped_awaits")
async def test_an_error_in_an_awaited_hook_through_the_adapter() -> None:
    x = leaf([1.0, 2.0])
    mid = x * 2.0

    async def fail(g: ag.Tensor) -> None:
        await asyncio.sleep(0)
        raise ValueError("the hook failed")

    mid.register_hook(fail)
    with pytest.raises(ValueError, match="the hook failed"):
        await asyncio.wait_for(ag.grad((mid * 3.0).sum(), [x]), TIMEOUT_S)
