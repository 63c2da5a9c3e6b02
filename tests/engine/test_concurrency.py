"""Many backward passes on one loop: independence, grad-mode isolation, cancellation, error
isolation, and a loop that keeps serving other tasks meanwhile."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.engine import scheduler
from asyncgrad.engine.reentrant import current_graph_task

from .helpers import TIMEOUT_S, assert_close, leaf, scale_chain

CHAIN_LEN: Final = 20_000
CONCURRENT: Final = 200


def _heaps_empty(loop: asyncio.AbstractEventLoop) -> bool:
    return all(not q.heap for q in scheduler.of(loop).queues.values())


class Boom(Exception):
    """A distinctive error type, so a test can tell the original from a wrapper."""


# ----------------------------------------------------------------------------- many at once
async def test_many_concurrent_grads_on_independent_graphs() -> None:
    rng = np.random.default_rng(1)
    values = [rng.normal(size=4) for _ in range(CONCURRENT)]

    async def one(i: int, v: np.ndarray[Any, Any]) -> tuple[ag.Tensor | None, ...]:
        x = leaf(v)
        w = leaf(v[::-1].copy())
        out = ((x * w).sin() * float(i) + x.exp()).sum()
        await asyncio.sleep(0)  # let the others build their graphs too
        return await ag.grad(out, [x, w])

    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(*(one(i, v) for i, v in enumerate(values)))
        await ag.autograd.engine.wait_idle()
    for i, (v, (gx, gw)) in enumerate(zip(values, results, strict=True)):
        w = v[::-1]
        assert_close(gx, i * np.cos(v * w) * w + np.exp(v))
        assert_close(gw, i * np.cos(v * w) * v)
    assert _heaps_empty(asyncio.get_running_loop())


async def test_concurrent_backward_into_one_leaf_sums_exactly() -> None:
    x = leaf([1.0, 2.0])

    async def one(k: int) -> None:
        await ag.backward((scale_chain(x, 50) * float(k)).sum())

    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(*(one(k) for k in range(1, 41)))
    assert_close(x.grad, [820.0, 820.0])  # 1 + 2 + ... + 40


async def test_priority_does_not_change_results() -> None:
    async def one(priority: int) -> tuple[ag.Tensor | None, ...]:
        x = leaf([0.5, 1.5])
        return await ag.grad(scale_chain(x, 200, 1.001).sum(), x, priority=priority)

    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(*(one(p) for p in (-3, 0, 5, 100)))
    for (g,) in results:
        assert_close(g, [1.001**200] * 2)


async def test_concurrent_grads_through_one_retained_graph() -> None:
    x = leaf([0.5, 1.0, 1.5])
    h = x.exp()
    out = (h * h.sin()).sum()
    calls: list[int] = []
    assert h.grad_fn is not None
    h.grad_fn.register_prehook(lambda go: calls.append(1))

    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(*(ag.grad(out, x, retain_graph=True) for _ in range(20)))
    e = np.exp([0.5, 1.0, 1.5])
    for (g,) in results:
        assert_close(g, (np.sin(e) + e * np.cos(e)) * e)
    assert len(calls) == 20


def test_threads_and_loop_accumulate_into_one_leaf() -> None:
    x = leaf([1.0, 2.0])
    per_thread = 30
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per_thread):
                (scale_chain(x, 10) * 1.0).sum().backward()
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    async def on_loop() -> None:
        for _ in range(per_thread):
            await ag.backward((scale_chain(x, 10) * 1.0).sum())

    threads = [threading.Thread(target=work, name=f"accumulate-{i}") for i in range(4)]
    for t in threads:
        t.start()
    asyncio.run(asyncio.wait_for(on_loop(), TIMEOUT_S))
    for t in threads:
        t.join(timeout=TIMEOUT_S)
        assert not t.is_alive()
    assert errors == []
    assert_close(x.grad, [5.0 * per_thread] * 2)


async def test_higher_priority_pass_overtakes_a_running_one() -> None:
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    near_root = scale_chain(x, CHAIN_LEN - 10)
    slow = scale_chain(near_root, 10).sum()
    fast = scale_chain(y, 50).sum()
    running = asyncio.Event()
    finished: list[str] = []
    near_root.register_hook(lambda g: running.set())
    x.register_post_accumulate_grad_hook(lambda t: finished.append("slow"))
    y.register_post_accumulate_grad_hook(lambda t: finished.append("fast"))
    async with asyncio.timeout(TIMEOUT_S):
        low = asyncio.create_task(ag.backward(slow, priority=0))
        await running.wait()  # the slow pass holds the device worker, about 20,000 nodes to go
        await ag.backward(fast, priority=10)
        assert not low.done()
        await low
    assert finished == ["fast", "slow"]


# ----------------------------------------------------------------------------- grad modes
async def test_no_grad_in_one_task_does_not_leak_into_another() -> None:
    x = leaf([1.0, 2.0])
    blocked = asyncio.Event()
    release = asyncio.Event()

    async def quiet() -> bool:
        with ag.no_grad():
            blocked.set()
            async with asyncio.timeout(TIMEOUT_S):
                await release.wait()
            return (x * 2).requires_grad

    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(quiet())
        await blocked.wait()
        assert ag.is_grad_enabled()
        y = (x * 3).sum()  # recorded while the other task sits inside no_grad
        assert y.requires_grad
        assert y.grad_fn is not None
        release.set()
        assert await task is False
        (g,) = await ag.grad(y, x)
    assert_close(g, [3.0, 3.0])
    assert ag.is_grad_enabled()


async def test_task_created_inside_no_grad_inherits_it() -> None:
    x = leaf([1.0, 2.0])
    go = asyncio.Event()

    async def child() -> tuple[bool, bool]:
        async with asyncio.timeout(TIMEOUT_S):
            await go.wait()
        return ag.is_grad_enabled(), (x * 2).requires_grad

    with ag.no_grad():
        task = asyncio.create_task(child())
    assert ag.is_grad_enabled()  # the parent left no_grad before the child ran
    go.set()
    async with asyncio.timeout(TIMEOUT_S):
        assert await task == (False, False)
    with ag.enable_grad():
        enabled_child = asyncio.create_task(child())
    async with asyncio.timeout(TIMEOUT_S):
        assert await enabled_child == (True, True)


async def test_no_grad_decorator_covers_coroutine_body() -> None:
    x = leaf([1.0, 2.0])
    inside = asyncio.Event()
    resume = asyncio.Event()

    @ag.no_grad()
    async def body() -> tuple[bool, bool]:
        before = (x * 2).requires_grad
        inside.set()
        async with asyncio.timeout(TIMEOUT_S):
            await resume.wait()
        return before, (x * 2).requires_grad

    coro = body()
    assert ag.is_grad_enabled()  # creating the coroutine changes nothing
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(coro)
        await inside.wait()
        assert ag.is_grad_enabled()
        assert (x * 2).requires_grad
        resume.set()
        assert await task == (False, False)
    assert ag.is_grad_enabled()


async def test_backward_does_not_change_callers_grad_mode() -> None:
    x = leaf([1.0, 2.0])
    with ag.no_grad():
        y = x * 1
    assert not y.requires_grad
    out = (x * x).sum()
    with ag.no_grad():
        async with asyncio.timeout(TIMEOUT_S):
            (g,) = await ag.grad(out, x, create_graph=True)
        assert not ag.is_grad_enabled()
    assert g.requires_grad  # create_graph records the backward even under no_grad


# ----------------------------------------------------------------------------- cancellation
@pytest.mark.parametrize("hook_kind", ["sync", "async"])
async def test_cancel_mid_backward_of_long_chain(hook_kind: str) -> None:
    loop = asyncio.get_running_loop()
    x = leaf([1.0, 2.0])
    near_root = scale_chain(x, CHAIN_LEN - 200)
    out = scale_chain(near_root, 200).sum()
    reached = asyncio.Event()
    graph_tasks: list[Any] = []

    # The hook sits 200 nodes below the root: about 19,800 nodes are still to run when it fires.
    if hook_kind == "sync":

        def hook(g: ag.Tensor) -> None:
            graph_tasks.append(current_graph_task.get())
            reached.set()

    else:
        never = asyncio.Event()

        async def hook(g: ag.Tensor) -> None:  # type: ignore[misc]
            graph_tasks.append(current_graph_task.get())
            reached.set()
            await never.wait()  # parks this node until the graph task is cancelled

    near_root.register_hook(hook)
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.backward(out))
        await reached.wait()
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        await ag.autograd.engine.wait_idle()
    assert x.grad is None
    assert _heaps_empty(loop)
    (gt,) = graph_tasks
    assert gt.done
    assert not gt.not_ready
    assert not gt.dependencies
    assert all(t.done() for t in gt.inflight or ())  # a parked node's task was cancelled too


async def test_cancel_one_backward_leaves_another_running() -> None:
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    out_x = scale_chain(x, 2_000, 1.0).sum()
    parked = asyncio.Event()
    mid_y = scale_chain(y, 1_000, 2.0)
    out_y = scale_chain(mid_y, 1_000, 1.0).sum()
    release_y = asyncio.Event()

    async def park(g: ag.Tensor) -> None:
        parked.set()
        async with asyncio.timeout(TIMEOUT_S):
            await release_y.wait()

    mid_y.register_hook(park)
    never = asyncio.Event()

    async def forever(g: ag.Tensor) -> None:
        await never.wait()

    x.register_hook(forever)
    async with asyncio.timeout(TIMEOUT_S):
        task_y = asyncio.create_task(ag.backward(out_y))
        task_x = asyncio.create_task(ag.backward(out_x))
        await parked.wait()
        task_x.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task_x
        release_y.set()
        await task_y
        await ag.autograd.engine.wait_idle()
    assert x.grad is None
    assert_close(y.grad, [2.0**1000] * 2, rtol=1e-12)
    assert _heaps_empty(asyncio.get_running_loop())


async def test_cancel_reaches_an_awaited_reentrant_backward() -> None:
    inner_parked = asyncio.Event()
    never = asyncio.Event()
    node_tasks: list[asyncio.Task[Any]] = []

    async def park(g: ag.Tensor) -> None:
        node_tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        inner_parked.set()
        await never.wait()

    class Nested(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            node_tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            with ag.enable_grad():
                z = leaf([1.0, 2.0])
                mid = z * 2.0
                mid.register_hook(park)
                inner = scale_chain(mid, 10).sum()
            await ag.grad(inner, z)  # parks in `park`, one level down
            return g

    x = leaf([1.0, 2.0])
    out = scale_chain(Nested.apply(scale_chain(x, 10)), 10).sum()
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.backward(out))
        await inner_parked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await ag.autograd.engine.wait_idle()
        await asyncio.wait(node_tasks)
    assert len(node_tasks) == 2
    assert all(t.cancelled() for t in node_tasks)
    node_tasks.clear()
    assert x.grad is None
    assert _heaps_empty(asyncio.get_running_loop())


# ----------------------------------------------------------------------------- errors
class FailingBackward(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        raise Boom("backward failed")


def _failing_graph(where: str) -> tuple[ag.Tensor, ag.Tensor, str]:
    x = leaf([1.0, 2.0])
    if where == "function":
        mid = FailingBackward.apply(scale_chain(x, 100))
        node_name = "FailingBackwardBackward"
    else:
        mid = scale_chain(x, 100) * 3.0

        def failing_hook(g: ag.Tensor) -> None:
            raise Boom("hook failed")

        mid.register_hook(failing_hook)
        node_name = "MulBackward0"
    return x, scale_chain(mid, 100).sum(), node_name


@pytest.mark.parametrize("where", ["function", "hook"])
async def test_error_in_one_backward_does_not_affect_another(where: str) -> None:
    x_bad, out_bad, node_name = _failing_graph(where)
    y = leaf([3.0, 4.0])
    mid_y = scale_chain(y, 100, 0.5)
    out_y = scale_chain(mid_y, 100, 2.0).sum()
    parked = asyncio.Event()
    release_y = asyncio.Event()

    async def park(g: ag.Tensor) -> None:
        parked.set()
        async with asyncio.timeout(TIMEOUT_S):
            await release_y.wait()

    mid_y.register_hook(park)
    async with asyncio.timeout(TIMEOUT_S):
        task_y = asyncio.create_task(ag.backward(out_y))
        await parked.wait()  # the good pass is in flight, half done
        with pytest.raises(Boom) as info:
            await ag.backward(out_bad)
        release_y.set()
        await task_y
        await ag.autograd.engine.wait_idle()
    assert type(info.value) is Boom
    notes = getattr(info.value, "__notes__", [])
    assert any(node_name in n for n in notes), notes
    assert x_bad.grad is None
    assert_close(y.grad, [1.0, 1.0])  # 0.5 ** 100 * 2 ** 100
    assert _heaps_empty(asyncio.get_running_loop())


async def test_concurrent_failures_each_reach_their_own_caller() -> None:
    async def one(i: int) -> Any:
        x = leaf([float(i), 1.0])
        if i % 2:
            return (await ag.grad(scale_chain(x, 20, 2.0).sum(), x))[0]
        _, out, _ = _failing_graph("function" if i % 4 else "hook")
        return await ag.backward(out)

    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(*(one(i) for i in range(40)), return_exceptions=True)
    for i, r in enumerate(results):
        if i % 2:
            assert_close(r, [2.0**20] * 2)
        else:
            assert type(r) is Boom


async def test_error_keeps_original_traceback() -> None:
    _, out, _ = _failing_graph("function")
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(Boom) as info:
            await ag.backward(out)
    frames = [entry.name for entry in info.traceback]
    assert "backward" in frames  # FailingBackward.backward is on the traceback


# ----------------------------------------------------------------------------- sync in a loop
async def test_sync_backward_inside_running_loop() -> None:
    x = leaf([1.0, 2.0])
    out = (scale_chain(x, 1_000, 1.0) * x).sum()
    out.backward()
    assert_close(x.grad, [2.0, 4.0])
    (g,) = ag.grad_sync((x**3).sum(), x)
    assert_close(g, [3.0, 12.0])


async def test_sync_backward_while_async_backward_is_parked() -> None:
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    mid = scale_chain(x, 100)
    out_x = scale_chain(mid, 100).sum()
    parked = asyncio.Event()
    release = asyncio.Event()

    async def park(g: ag.Tensor) -> None:
        parked.set()
        async with asyncio.timeout(TIMEOUT_S):
            await release.wait()

    mid.register_hook(park)
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.backward(out_x))
        await parked.wait()
        (y * y).sum().backward()  # blocking, while the loop's queue holds another pass
        assert_close(y.grad, [6.0, 8.0])
        assert x.grad is None
        release.set()
        await task
    assert_close(x.grad, [1.0, 1.0])


# ----------------------------------------------------------------------------- fairness
async def test_loop_keeps_serving_during_long_backward() -> None:
    x = leaf([1.0, 2.0])
    near_root = scale_chain(x, CHAIN_LEN - 10)
    out = scale_chain(near_root, 10).sum()
    started = asyncio.Event()
    ticks_during = 0

    near_root.register_hook(lambda g: started.set())

    async def ticker(backward: asyncio.Task[None]) -> None:
        nonlocal ticks_during
        await started.wait()
        while not backward.done():
            ticks_during += 1
            await asyncio.sleep(0)  # yield to the loop: one tick per loop iteration

    async with asyncio.timeout(TIMEOUT_S):
        backward = asyncio.create_task(ag.backward(out))
        tick = asyncio.create_task(ticker(backward))
        await backward
        await tick
    assert_close(x.grad, [1.0, 1.0])
    assert ticks_during >= 3
