"""Memory: saved tensors are released by backward, and a failed or cancelled backward leaves no
reference cycle that would keep big arrays alive until the cyclic garbage collector runs."""

from __future__ import annotations

import asyncio
import gc
import inspect
import threading
import types
import weakref
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import _build
from asyncgrad.engine import pools
from asyncgrad.engine.engine import _SPENT as SPENT
from asyncgrad.graph.saved_tensor import FREED as _FREED

from .helpers import THREAD_TIMEOUT_S, TIMEOUT_S, assert_close

BIG: Final = 200_000  # elements: big enough to matter, small enough to stay fast
DEPTH_LIMIT: Final = 2


class Boom(Exception):
    pass


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Turn the cyclic collector off, so only reference counting frees memory: whatever is
    still alive at the end is held by a reference (or a cycle), not merely not yet collected."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()


def _big_leaf() -> ag.Tensor:
    return ag.tensor(np.linspace(0.0, 1.0, BIG), requires_grad=True)


def _alive(refs: list[weakref.ref[Any]]) -> list[int]:
    return [i for i, r in enumerate(refs) if r() is not None]


def _settle_engine_threads() -> None:
    """Wait until the engine's threads are done with jobs whose results we already have.

    A pool thread or a helper loop hands over a result (or an error, whose traceback holds
    the job's frames) a moment before it lets go of the job; that moment is not a leak."""
    for thread in threading.enumerate():
        if thread.name.startswith("asyncgrad-reentrant-"):
            thread.join(timeout=THREAD_TIMEOUT_S)
            assert not thread.is_alive()
    pool = pools.thread_pool._pool
    if pool is not None:
        # Every worker thread takes one barrier job, so each has finished its previous job.
        n = pool._max_workers
        barrier = threading.Barrier(n + 1, timeout=THREAD_TIMEOUT_S)
        jobs = [pool.submit(barrier.wait) for _ in range(n)]
        barrier.wait()
        for job in jobs:
            job.result(timeout=THREAD_TIMEOUT_S)
    for helper in list(pools.loop_pool._all):
        # A round trip: the helper loop has run every callback queued before this one.
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), helper.loop).result(
            timeout=THREAD_TIMEOUT_S
        )


async def _next_iteration() -> None:
    """Let the loop finish the callback that resumed us: in debug mode the loop keeps the
    running handle (with its future, and so the error) until that callback returns."""
    await asyncio.sleep(0)


# ----------------------------------------------------------------------------- saved tensors
class SaveIntermediate(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * g


def _graph_with_saved_intermediates() -> tuple[ag.Tensor, ag.Tensor, list[weakref.ref[Any]]]:
    """A graph whose intermediates are reachable only through saved tensors."""
    x = _big_leaf()
    a = x.exp()  # saved by ExpBackward0 (as its output) and by SinBackward0 (as its input)
    b = a.sin()
    c = SaveIntermediate.apply(b)  # b saved by a custom Function
    out = (c * 2.0).sum()
    refs = [weakref.ref(a.array), weakref.ref(b.array)]
    return x, out, refs


@pytest.mark.usefixtures("no_gc")
@pytest.mark.parametrize("form", ["await backward", "await grad", "backward", "grad_sync"])
async def test_backward_releases_saved_tensors(form: str) -> None:
    x, out, refs = _graph_with_saved_intermediates()
    nodes = []
    node = out.grad_fn
    while node is not None:
        nodes.append(node)
        node = next((n for n, _ in node.next_functions if n is not None), None)
    assert _alive(refs) == [0, 1]
    async with asyncio.timeout(TIMEOUT_S):
        if form == "await backward":
            await ag.backward(out)
        elif form == "await grad":
            await ag.grad(out, x)
        elif form == "backward":
            out.backward()
        else:
            ag.grad_sync(out, x)
    assert _alive(refs) == []  # freed while `out` and the whole graph are still alive
    names = {n.name(): n for n in nodes}
    assert names["ExpBackward0"]._saved is _FREED
    assert names["SinBackward0"]._saved is _FREED
    assert names["SaveIntermediateBackward"]._ctx._saved is _FREED
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


@pytest.mark.usefixtures("no_gc")
async def test_retain_graph_keeps_saved_tensors_until_last_backward() -> None:
    x, out, refs = _graph_with_saved_intermediates()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out, retain_graph=True)
        assert _alive(refs) == [0, 1]
        await ag.backward(out)
    assert _alive(refs) == []
    assert x.grad is not None


@pytest.mark.usefixtures("no_gc")
def test_dropping_an_unused_graph_frees_it() -> None:
    x, out, refs = _graph_with_saved_intermediates()
    del out
    assert _alive(refs) == []
    assert x.grad is None


@pytest.mark.usefixtures("no_gc")
def test_a_leafs_edge_is_shared_by_its_consumers_and_dies_with_it() -> None:
    # See NOTE [Fewer objects for the collector]: one edge per leaf, not one per consumer, and
    # no cycle through it (the leaf holds its accumulator, which holds the leaf weakly).
    w = ag.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    x = ag.tensor(np.ones((4, 2)), requires_grad=True)
    a = x @ w
    b = (w * 2.0).sum()
    c = ag.nn.functional.linear(x, w.T)
    edges = [a.grad_fn._next_edges[1]]
    edges.append(b.grad_fn.next_functions[0][0]._next_edges[0])
    assert edges[0] is edges[1]
    assert edges[0] == (w._grad_accumulator(), 0)
    (c.sum() + a.sum() + b).backward()
    assert_close(w.grad.numpy(), 2 * (np.ones((2, 4)) @ np.ones((4, 3))) + 2.0)
    refs = [weakref.ref(w), weakref.ref(edges[0][0])]
    del w, a, b, c, edges
    assert _alive(refs) == []


@pytest.mark.usefixtures("no_gc")
def test_backward_leaves_no_cycles_behind() -> None:
    x, out, refs = _graph_with_saved_intermediates()
    node_refs = [weakref.ref(out.grad_fn)]
    out.backward()
    del out
    assert _alive(refs + node_refs) == []
    assert x.grad is not None


# ----------------------------------------------------------------------------- failures
class FailingBackward(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        raise Boom("backward failed")


class AsyncFailingBackward(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * 1

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        await asyncio.sleep(0)
        raise Boom("async backward failed")


def _failing_hook(g: ag.Tensor) -> None:
    raise Boom("hook failed")


async def _async_failing_hook(g: ag.Tensor) -> None:
    await asyncio.sleep(0)
    raise Boom("async hook failed")


def _failing_graph(where: str) -> tuple[ag.Tensor, ag.Tensor, list[weakref.ref[Any]]]:
    """``x -> exp -> sin -> (failure) -> * 2 -> sum``; the failure stops the pass before the
    nodes that saved the big intermediates have run (so they still hold them)."""
    x = _big_leaf()
    a = x.exp()
    b = a.sin()
    if where == "function":
        c = FailingBackward.apply(b)
    elif where == "async function":
        c = AsyncFailingBackward.apply(b)
    else:
        c = b * 3.0
        c.register_hook(_failing_hook if where == "hook" else _async_failing_hook)
    out = (c * 2.0).sum()
    refs = [weakref.ref(a.array), weakref.ref(b.array), weakref.ref(out.grad_fn)]
    return x, out, refs


WHERE = ["function", "async function", "hook", "async hook"]


@pytest.mark.usefixtures("no_gc")
@pytest.mark.parametrize("where", WHERE)
def test_failed_sync_backward_leaves_no_cycles(where: str) -> None:
    x, out, refs = _failing_graph(where)
    try:
        out.backward()
    except Boom:
        pass
    else:
        pytest.fail("backward did not raise")
    del out
    _settle_engine_threads()
    assert _alive(refs) == []
    assert x.grad is None


@pytest.mark.usefixtures("no_gc")
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("api", ["backward", "grad"])
@pytest.mark.parametrize("adapter", [False, True], ids=["", "adapter"])
async def test_failed_async_backward_leaves_no_cycles(
    where: str, api: str, adapter: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``adapter``: the engine's awaits go through adapt_await on any build, as they do on the
    compiled build on Python 3.12 (See NOTE [Compiled modules] in asyncgrad/_build.py), whose
    frame is then in the error's traceback. Without it, the build's own setting holds."""
    monkeypatch.setattr(_build, "wrap_awaits", adapter or _build.wrap_awaits)
    x, out, refs = _failing_graph(where)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            if api == "backward":
                await ag.backward(out)
            else:
                await ag.grad(out, x)
    except Boom:
        pass
    else:
        pytest.fail("backward did not raise")
    del out
    async with asyncio.timeout(TIMEOUT_S):
        await ag.autograd.engine.wait_idle()
        await _next_iteration()
    _settle_engine_threads()
    assert _alive(refs) == []
    assert x.grad is None


@pytest.mark.usefixtures("no_gc")
async def test_cancelled_backward_leaves_no_cycles() -> None:
    x = _big_leaf()
    a = x.exp()
    b = a.sin()
    c = b * 3.0
    parked = asyncio.Event()
    never = asyncio.Event()
    node_tasks: list[asyncio.Task[Any]] = []

    async def park(g: ag.Tensor) -> None:
        # The task the engine runs this node in (not kept in a local: this frame ends up in the
        # task's CancelledError traceback, and a local would close a cycle through the task).
        node_tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        parked.set()
        await never.wait()

    c.register_hook(park)
    out = (c * 2.0).sum()
    refs = [weakref.ref(a.array), weakref.ref(b.array), weakref.ref(out.grad_fn)]
    del a, b, c
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.backward(out))
        await parked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await ag.autograd.engine.wait_idle()
        await asyncio.wait(node_tasks)  # the parked node is cancelled with its graph task
        await _next_iteration()
    assert all(t.cancelled() for t in node_tasks)
    node_tasks.clear()  # the hook (held by the graph) refers to this list
    del out, task
    assert _alive(refs) == []
    assert x.grad is None


async def test_a_pending_pass_keeps_no_spent_preparation() -> None:
    """While an awaited pass waits on its nodes, neither ``ag.grad``'s frames nor the engine's
    keep the call's argument lists or its finished preparation alive (See NOTE [Fewer objects
    for the collector] in asyncgrad/ops/_record.py): a burst of pending requests gives the
    collector that much less to scan."""
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    mid = x * 2.0
    parked = asyncio.Event()
    go = asyncio.Event()

    async def park(g: ag.Tensor) -> None:
        parked.set()
        await go.wait()

    mid.register_hook(park)
    out = (mid * 3.0).sum()
    async with asyncio.timeout(TIMEOUT_S):

        async def call() -> Any:
            return await ag.grad(out, [x])

        task = asyncio.create_task(call())
        try:
            await parked.wait()
            if ag.__build__ == "pure":  # compiled coroutines have no frames to read
                frames: dict[str, dict[str, Any]] = {}
                coro: Any = task.get_coro()
                while inspect.iscoroutine(coro):  # the awaiting chain, down to the pass's future
                    frames[coro.cr_code.co_name] = dict(coro.cr_frame.f_locals)
                    coro = coro.cr_await
                del coro
                assert {"_grad", "execute", "_run"} <= frames.keys()
                assert "task" not in frames["_grad"]
                held = {"roots", "root_grads", "outputs", "prep"} & frames["execute"].keys()
                assert all(frames["execute"][name] in ((), None, SPENT) for name in held)
                assert frames["_run"].get("prep", SPENT) is SPENT
                del frames
            # A preparation is a generator: a plain one, or mypyc's class for it when compiled.
            spent = [
                o
                for o in gc.get_objects()
                if (type(o) is types.GeneratorType and o.gi_code.co_name == "_prepare")
                or type(o).__name__.startswith("_prepare_")
            ]
            assert spent == []
        finally:
            go.set()  # the pass ends either way: nothing is left running
            (gx,) = await task
    assert_close(gx, [6.0, 6.0])


# ----------------------------------------------------------------------------- reentrant
class ReentrantFailure(ag.autograd.Function):
    """Its backward runs a nested backward ``level`` deep, whose innermost level fails."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.level = level
        return x * 1

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> Any:
        if ctx.level == 0:
            raise Boom("innermost backward failed")
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            inner = ReentrantFailure.apply(xd * 1.0, ctx.level - 1).sum()
        await ag.grad(inner, xd)
        return g, None


@pytest.fixture
def shallow_limit() -> Iterator[None]:
    old = ag.autograd.engine.max_reentrant_depth
    ag.autograd.engine.configure(max_reentrant_depth=DEPTH_LIMIT)
    try:
        yield
    finally:
        ag.autograd.engine.configure(max_reentrant_depth=old)


async def _fail_reentrant_and_check(levels: int) -> None:
    x = _big_leaf()
    a = x.exp()
    out = ReentrantFailure.apply(a, levels).sum()
    refs = [weakref.ref(a.array), weakref.ref(out.grad_fn)]
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await ag.backward(out)
    except Boom:
        pass
    else:
        pytest.fail("backward did not raise")
    del out, a
    async with asyncio.timeout(TIMEOUT_S):
        await _next_iteration()
    _settle_engine_threads()
    assert _alive(refs) == []
    assert x.grad is None


@pytest.mark.usefixtures("no_gc", "shallow_limit")
@pytest.mark.parametrize("levels", [1, 2 * DEPTH_LIMIT + 1])
async def test_failed_reentrant_backward_leaves_no_cycles(levels: int) -> None:
    await _fail_reentrant_and_check(levels)


@pytest.mark.usefixtures("no_gc", "shallow_limit")
async def test_failed_reentrant_backward_on_one_off_threads_leaves_no_cycles() -> None:
    # One pool thread: the second level past the limit finds it busy (blocked on the level
    # below) and runs on a one-off thread instead.
    old_size = ag.autograd.engine.executor_size
    ag.autograd.engine.configure(executor_size=1)
    try:
        await _fail_reentrant_and_check(3 * DEPTH_LIMIT + 2)
    finally:
        ag.autograd.engine.configure(executor_size=old_size)


# ----------------------------------------------------------------------------- helper loops
@pytest.mark.usefixtures("no_gc")
def test_helper_loops_keep_no_graph_alive() -> None:
    # Start from fresh helper loops, so this test is the first graph task that uses one.
    ag.autograd.engine.shutdown()
    x = _big_leaf()
    a = x.exp()
    b = a.sin()
    c = b * 3.0
    seen: list[bool] = []

    async def hook(g: ag.Tensor) -> None:
        await asyncio.sleep(0)
        seen.append(True)

    c.register_hook(hook)  # a blocking backward runs it on a helper loop
    out = (c * 2.0).sum()
    refs = [weakref.ref(a.array), weakref.ref(b.array), weakref.ref(out.grad_fn)]
    del a, b, c
    (g,) = ag.grad_sync(out, x, retain_graph=True)
    assert seen == [True]
    del out
    _settle_engine_threads()
    assert _alive(refs) == []
    assert g is not None


# ----------------------------------------------------------------------------- sanity
def test_engine_still_works_after_leak_tests() -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    (x.exp() * x).sum().backward()
    assert_close(x.grad, np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0])))
