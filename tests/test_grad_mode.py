"""Grad modes: context managers, decorators of sync/async functions, per task and per thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

import asyncgrad as ag


def test_no_grad_context_and_restore() -> None:
    x = ag.ones(2, requires_grad=True)
    with ag.no_grad():
        assert not ag.is_grad_enabled()
        y = x * 2
        with ag.enable_grad():
            z = x * 2
    assert ag.is_grad_enabled()
    assert not y.requires_grad
    assert y.grad_fn is None
    assert z.requires_grad
    assert z.grad_fn is not None


def test_set_grad_enabled_as_call_and_context() -> None:
    with ag.set_grad_enabled(False):
        assert not ag.is_grad_enabled()
    assert ag.is_grad_enabled()
    ag.set_grad_enabled(False)
    try:
        assert not ag.is_grad_enabled()
    finally:
        ag.set_grad_enabled(True)
    with pytest.raises(TypeError, match="bool"):
        ag.set_grad_enabled("no")  # type: ignore[arg-type]


def test_no_grad_decorates_sync_and_generator_functions() -> None:
    @ag.no_grad()
    def f() -> bool:
        return ag.is_grad_enabled()

    @ag.no_grad()
    def gen():  # type: ignore[no-untyped-def]
        yield ag.is_grad_enabled()
        yield ag.is_grad_enabled()

    assert f() is False
    assert list(gen()) == [False, False]
    assert ag.is_grad_enabled()


async def test_no_grad_decorates_async_function_body() -> None:
    # torch's decorator exits before the coroutine body runs; ours covers the body.
    @ag.no_grad()
    async def body() -> tuple[bool, bool]:
        before = ag.is_grad_enabled()
        await asyncio.sleep(0)
        return before, ag.is_grad_enabled()

    coro = body()
    assert ag.is_grad_enabled()
    async with asyncio.timeout(5):
        assert await coro == (False, False)
    assert ag.is_grad_enabled()


async def test_grad_mode_is_per_task() -> None:
    inside = asyncio.Event()
    release = asyncio.Event()
    x = ag.ones(3, requires_grad=True)

    async def holder() -> bool:
        with ag.no_grad():
            inside.set()
            await release.wait()
            return ag.is_grad_enabled()

    async def recorder() -> ag.Tensor:
        await inside.wait()
        y = x * 3  # another task's no_grad must not leak here
        release.set()
        return y

    async with asyncio.timeout(5):
        held, y = await asyncio.gather(holder(), recorder())
    assert held is False
    assert y.requires_grad
    assert y.grad_fn is not None


async def test_task_created_inside_no_grad_inherits_it() -> None:
    async def child() -> bool:
        return ag.is_grad_enabled()

    with ag.no_grad():
        task = asyncio.create_task(child())
    async with asyncio.timeout(5):
        assert await task is False
    assert ag.is_grad_enabled()


def test_grad_mode_is_per_thread() -> None:
    seen: list[bool] = []
    with ag.no_grad():
        t = threading.Thread(target=lambda: seen.append(ag.is_grad_enabled()))
        t.start()
        t.join(timeout=5)
    assert seen == [True]


def test_inference_mode_tensors_cannot_be_saved() -> None:
    with ag.inference_mode():
        assert not ag.is_grad_enabled()
        assert ag.is_inference_mode_enabled()
        t = ag.ones(3)
    assert t.is_inference()
    w = ag.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        _ = w * t  # mul saves t for w's gradient
    assert not ag.is_inference_mode_enabled()


def test_backward_runs_under_create_graph_mode() -> None:
    seen: list[bool] = []
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.register_hook(lambda g: seen.append(ag.is_grad_enabled()))
    s = y.sum()
    with ag.no_grad():  # the caller's mode does not matter: backward runs with create_graph's
        s.backward(retain_graph=True)
    s.backward(create_graph=True)
    assert seen == [False, True]
