"""Whatever a node raises fails its own graph task and reaches its caller; the worker survives.

A BaseException that is not an Exception (GeneratorExit, a CancelledError raised by user code or
by a future an async hook awaited, a user's own BaseException subclass) reaches the caller as the
cause of a RuntimeError, so that the caller can tell it from its own cancellation; KeyboardInterrupt
and SystemExit reach it as they are. Other graph tasks on the loop are unaffected.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, assert_close, leaf


class UserStop(BaseException):
    """A BaseException subclass of the user's own."""


BASE_EXCEPTIONS: list[Callable[[], BaseException]] = [
    GeneratorExit,
    UserStop,
    asyncio.CancelledError,
]


def raising_function(make_exc: Callable[[], BaseException], is_async: bool) -> Any:
    if is_async:

        class AsyncRaise(ag.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
                return x * 1

            @staticmethod
            async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
                raise make_exc()

        return AsyncRaise

    class SyncRaise(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            raise make_exc()

    return SyncRaise


def assert_stopped_by(err: BaseException, exc_type: type[BaseException], node: str) -> None:
    assert isinstance(err, RuntimeError)
    assert type(err.__cause__) is exc_type
    assert f"stopped by {exc_type.__name__} in {node}" in str(err)


@pytest.mark.parametrize("is_async", [False, True], ids=["def", "async_def"])
@pytest.mark.parametrize("make_exc", BASE_EXCEPTIONS, ids=lambda f: f.__name__)
async def test_base_exception_in_backward_fails_only_its_graph_task(
    make_exc: Callable[[], BaseException], is_async: bool
) -> None:
    fn = raising_function(make_exc, is_async)
    x = leaf([1.0, 2.0])
    w = leaf([3.0, 4.0])
    bad = fn.apply(x).sum()
    good = (w * w).sum()
    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(ag.backward(bad), ag.backward(good), return_exceptions=True)
    assert_stopped_by(results[0], type(make_exc()), type(bad.grad_fn.next_functions[0][0]).__name__)
    assert results[1] is None
    assert_close(w.grad, [6.0, 8.0])
    assert x.grad is None
    # The worker survived: the next backward on this loop runs.
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward((x * 5).sum())
    assert_close(x.grad, [5.0, 5.0])


@pytest.mark.parametrize("make_exc", BASE_EXCEPTIONS, ids=lambda f: f.__name__)
def test_base_exception_in_backward_sync(make_exc: Callable[[], BaseException]) -> None:
    fn = raising_function(make_exc, False)
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError) as info:
        fn.apply(x).sum().backward()
    assert_stopped_by(info.value, type(make_exc()), "SyncRaiseBackward")
    (x * 2).sum().backward()
    assert_close(x.grad, [2.0, 2.0])


def test_keyboard_interrupt_reaches_the_sync_caller_as_is() -> None:
    fn = raising_function(lambda: KeyboardInterrupt("stop"), False)
    x = leaf([1.0])
    with pytest.raises(KeyboardInterrupt, match="stop"):
        fn.apply(x).sum().backward()
    (x * 3).sum().backward()
    assert_close(x.grad, [3.0])


@pytest.mark.parametrize("where", ["tensor_hook", "prehook", "posthook", "callback"])
async def test_base_exception_in_hooks(where: str) -> None:
    x = leaf([1.0, 2.0])
    y = x * 2
    out = y.sum()

    def boom(*args: Any) -> None:
        raise GeneratorExit

    if where == "tensor_hook":
        y.register_hook(boom)
    elif where == "prehook":
        assert y.grad_fn is not None
        y.grad_fn.register_prehook(boom)
    elif where == "posthook":
        assert y.grad_fn is not None
        y.grad_fn.register_hook(boom)
    else:
        y.register_hook(lambda g: ag.autograd.queue_callback(boom))
    with pytest.raises(RuntimeError, match="stopped by GeneratorExit") as info:
        async with asyncio.timeout(TIMEOUT_S):
            await ag.backward(out)
    assert type(info.value.__cause__) is GeneratorExit


async def test_async_hook_whose_future_is_cancelled_fails_the_graph_task() -> None:
    x = leaf([1.0, 2.0])
    y = x * 3
    entered = asyncio.Event()
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def hook(g: ag.Tensor) -> None:
        entered.set()
        await fut

    y.register_hook(hook)
    task = asyncio.create_task(ag.backward(y.sum()))
    async with asyncio.timeout(TIMEOUT_S):
        await entered.wait()
    fut.cancel()  # someone else cancels what the hook awaits
    with pytest.raises(RuntimeError, match="stopped by CancelledError in MulBackward0") as info:
        async with asyncio.timeout(TIMEOUT_S):
            await task
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    assert x.grad is None
    async with asyncio.timeout(TIMEOUT_S):
        await ag.autograd.engine.wait_idle()


async def test_async_hook_may_handle_a_cancelled_future() -> None:
    x = leaf([1.0, 2.0])
    y = x * 3
    entered = asyncio.Event()
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def hook(g: ag.Tensor) -> ag.Tensor:
        entered.set()
        try:
            await fut
        except asyncio.CancelledError:
            return g * 10  # the node handled it: the backward goes on
        return g

    y.register_hook(hook)
    task = asyncio.create_task(ag.backward(y.sum()))
    async with asyncio.timeout(TIMEOUT_S):
        await entered.wait()
    fut.cancel()
    async with asyncio.timeout(TIMEOUT_S):
        await task
    assert_close(x.grad, [30.0, 30.0])


async def test_cancelling_the_caller_cancels_an_awaiting_hook() -> None:
    x = leaf([1.0, 2.0])
    y = x * 3
    entered = asyncio.Event()
    hook_cancelled = asyncio.Event()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def hook(g: ag.Tensor) -> None:
        entered.set()
        try:
            await never
        except asyncio.CancelledError:
            hook_cancelled.set()
            raise

    y.register_hook(hook)
    task = asyncio.create_task(ag.backward(y.sum()))
    async with asyncio.timeout(TIMEOUT_S):
        await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(TIMEOUT_S):
            await task
    async with asyncio.timeout(TIMEOUT_S):
        await hook_cancelled.wait()
        await ag.autograd.engine.wait_idle()
    assert x.grad is None
    never.cancel()


async def test_error_after_an_awaiting_node_started_leaves_no_unawaited_hook() -> None:
    # y2's node runs first (newer) and hands its async hook to a task of its own; y1's node
    # then fails in the same slice, which stops the graph task before that task's first step.
    # The hook's coroutine is closed, not dropped (Python would warn "never awaited").
    x = leaf([1.0, 2.0])
    y1 = x * 2
    y2 = x * 3
    started = False

    async def slow_hook(g: ag.Tensor) -> None:
        nonlocal started
        started = True

    def failing_hook(g: ag.Tensor) -> None:
        raise ValueError("stop here")

    y2.register_hook(slow_hook)
    y1.register_hook(failing_hook)
    with pytest.raises(ValueError, match="stop here"):
        async with asyncio.timeout(TIMEOUT_S):
            await ag.backward(y1.sum() + y2.sum())
    async with asyncio.timeout(TIMEOUT_S):
        await ag.autograd.engine.wait_idle()
    gc.collect()
    assert not started
