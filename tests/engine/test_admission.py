"""The cap on graph tasks running at once per loop (NOTE [One scheduler], 6)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, assert_close, leaf, scale_chain

engine = ag.autograd.engine


@pytest.fixture
def cap() -> Iterator[Any]:
    old = engine.max_running
    yield lambda n: engine.configure(max_running=n)
    engine.configure(max_running=old)


def graph_tasks() -> dict[str, int]:
    return engine.stats()["graph_tasks"]  # type: ignore[no-any-return]


def held_pass(gate: asyncio.Event, entered: asyncio.Event) -> tuple[ag.Tensor, ag.Tensor]:
    """A pass whose first node waits (in an async hook) until ``gate`` is set."""
    x = leaf(np.arange(3.0))
    y = (x * 2.0).sum()

    async def hook(g: Any) -> None:
        entered.set()
        await gate.wait()

    y.register_hook(hook)
    return x, y


async def test_passes_past_the_cap_wait_in_priority_order(cap: Any) -> None:
    cap(1)
    engine.reset_stats()
    gate, entered = asyncio.Event(), asyncio.Event()
    x0, y0 = held_pass(gate, entered)
    order: list[str] = []

    async def one(name: str, priority: int) -> None:
        x = leaf(np.ones(2))
        (g,) = await ag.grad(scale_chain(x, 5, 3.0).sum(), [x], priority=priority)
        assert_close(g, np.full(2, 243.0))
        order.append(name)

    async with asyncio.timeout(TIMEOUT_S):
        first = asyncio.create_task(ag.grad(y0, [x0]))
        await entered.wait()
        low = asyncio.create_task(one("low", 0))
        high = asyncio.create_task(one("high", 7))
        low2 = asyncio.create_task(one("low2", 0))
        # One loop turn: each new task runs its first step, which ends in the line.
        await asyncio.sleep(0)
        assert graph_tasks()["waiting"] == 3
        assert graph_tasks()["running"] == 1
        gate.set()
        (g0,) = await first
        await asyncio.gather(low, high, low2)
    assert_close(g0, np.full(3, 2.0))
    assert order == ["high", "low", "low2"]
    s = graph_tasks()
    assert (s["running"], s["waiting"], s["completed"]) == (0, 0, 4)


async def test_a_cancelled_waiter_never_starts_and_counts_as_cancelled(cap: Any) -> None:
    cap(1)
    engine.reset_stats()
    gate, entered = asyncio.Event(), asyncio.Event()
    x0, y0 = held_pass(gate, entered)
    x = leaf(np.ones(2))
    y = (x * 3.0).sum()
    async with asyncio.timeout(TIMEOUT_S):
        first = asyncio.create_task(ag.backward(y0))
        await entered.wait()
        waiter = asyncio.create_task(ag.backward(y))
        await asyncio.sleep(0)  # one loop turn: the new task's first step ends in the line
        assert graph_tasks()["waiting"] == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert graph_tasks()["waiting"] == 0
        gate.set()
        await first
    assert x.grad is None  # it never ran
    assert_close(x0.grad, np.full(3, 2.0))
    s = graph_tasks()
    assert (s["completed"], s["cancelled"], s["running"]) == (1, 1, 0)
    # Its place went back: a new pass runs at once.
    await asyncio.wait_for(ag.backward(y), TIMEOUT_S)
    assert_close(x.grad, np.full(2, 3.0))


async def test_nested_backward_is_not_held_back_by_the_cap(cap: Any) -> None:
    """A backward started inside a running pass must not wait for a place its parent holds."""
    cap(1)

    class Inner(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1.0

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            z = leaf(np.array([2.0]))
            with ag.enable_grad():
                zz = (z * z).sum()
            (gz,) = await ag.grad(zz, [z])  # d/dz z^2 = 4
            return g * gz

    x = leaf(np.ones(2))
    (g,) = await asyncio.wait_for(ag.grad(Inner.apply(x).sum(), [x]), TIMEOUT_S)
    assert_close(g, np.full(2, 4.0))


async def test_many_passes_under_a_cap_all_complete(cap: Any) -> None:
    cap(3)
    engine.reset_stats()
    xs = [leaf(np.full(2, float(i))) for i in range(40)]

    async def one(x: ag.Tensor) -> Any:
        return await ag.grad((x * x).sum(), [x])

    res = await asyncio.wait_for(asyncio.gather(*(one(x) for x in xs)), TIMEOUT_S)
    for x, (g,) in zip(xs, res, strict=True):
        assert_close(g, 2 * x.detach().numpy())
    assert graph_tasks()["completed"] == 40


def test_configure_checks_max_running(cap: Any) -> None:
    with pytest.raises(ValueError, match="max_running must be None or an int >= 1"):
        engine.configure(max_running=0)
    cap(2)
    assert engine.max_running == 2
    engine.configure(max_running=None)
    assert engine.max_running is None
