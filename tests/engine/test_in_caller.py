"""Passes in their callers (See NOTE [One scheduler], 5): an awaited pass on an idle
device runs in the awaiting task, with no loop iteration; the callers of one loop iteration
share one slice, and what does not fit goes on in the device's worker."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, assert_close, engine_setting, leaf, loop_turns, scale_chain

WORKER_PREFIX = "asyncgrad-worker-"


def _where_nodes_run(y: ag.Tensor, ran: list[str]) -> None:
    """Record, for each node of ``y``'s chain that runs, the name of the task it runs in."""

    def hook(grad: Any) -> None:
        task = asyncio.current_task()
        ran.append("" if task is None else task.get_name())

    node = y.grad_fn
    while node is not None and node.next_functions:
        node.register_prehook(hook)
        node = node.next_functions[0][0]


async def test_a_pass_on_an_idle_device_completes_without_a_loop_iteration() -> None:
    loop = asyncio.get_running_loop()
    iterated = False

    def mark() -> None:
        nonlocal iterated
        iterated = True

    x = leaf([1.0, 2.0, 3.0])
    y = scale_chain(x, 5, 2.0).sum()
    ran: list[str] = []
    _where_nodes_run(y, ran)
    me = asyncio.current_task()
    assert me is not None
    loop.call_soon(mark)  # runs at the loop's next iteration
    (g,) = await ag.grad(y, [x])
    assert not iterated  # the await did not yield
    assert_close(g, np.full(3, 32.0))
    assert len(ran) == 6  # the sum and the 5 products
    assert set(ran) == {me.get_name()}
    async with asyncio.timeout(TIMEOUT_S):
        await ag.autograd.engine.wait_idle()


async def test_callers_in_one_loop_iteration_share_one_slice() -> None:
    """With a slice too short for more than the first pass, the callers that come after it in
    the same iteration are answered by the worker."""
    runs: list[list[str]] = []

    async def client(i: int) -> None:
        x = leaf([float(i + 1)])
        y = scale_chain(x, 3, 3.0).sum()
        ran: list[str] = []
        runs.append(ran)
        _where_nodes_run(y, ran)
        (g,) = await ag.grad(y, [x])
        assert_close(g, [27.0])

    with engine_setting("slice_s") as set_slice:
        set_slice(1e-9)
        async with asyncio.timeout(TIMEOUT_S):
            # All eight start in one iteration of the loop.
            await asyncio.gather(*(client(i) for i in range(8)))
    in_caller = [r for r in runs if not r[0].startswith(WORKER_PREFIX)]
    assert len(in_caller) == 1
    assert all(name.startswith(WORKER_PREFIX) for r in runs if r is not in_caller[0] for name in r)


async def test_a_pass_longer_than_the_slice_goes_on_in_the_worker() -> None:
    x = leaf([0.5, 1.5])
    y = scale_chain(x, 100, 1.0).sum()
    ran: list[str] = []
    _where_nodes_run(y, ran)
    me = asyncio.current_task()
    assert me is not None
    with engine_setting("slice_s") as set_slice:
        set_slice(1e-9)  # a worker checks the clock every 16 nodes
        async with loop_turns() as turns, asyncio.timeout(TIMEOUT_S):
            (g,) = await ag.grad(y, [x])
    assert_close(g, [1.0, 1.0])
    assert len(ran) == 101  # the sum and the 100 products
    first = ran.index(next(n for n in ran if n.startswith(WORKER_PREFIX)))
    assert 0 < first <= 16  # the caller ran the first stretch of nodes
    assert set(ran[:first]) == {me.get_name()}
    assert all(n.startswith(WORKER_PREFIX) for n in ran[first:])
    assert turns.count > 1  # the loop kept turning while the worker finished it


async def test_an_error_in_a_pass_run_in_its_caller_reaches_the_caller() -> None:
    x = leaf([1.0, 2.0])
    y = scale_chain(x, 3, 2.0)

    def boom(grad: Any) -> None:
        raise ValueError("bad gradient")

    y.register_hook(boom)
    with pytest.raises(ValueError, match="bad gradient"):
        await ag.grad(y.sum(), [x])
    # The device is idle again: the next pass runs (in its caller) and is right.
    (g,) = await ag.grad(scale_chain(x, 2, 2.0).sum(), [x])
    assert_close(g, [4.0, 4.0])
