"""Cancelling an awaited backward (a client gone, a timeout): it stops at the next node
boundary, runs no further hooks, leaves each leaf's ``.grad`` untouched or fully accumulated,
and frees what it held."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, leaf, scale_chain

N_LEAVES = 40


def many_leaves() -> tuple[list[ag.Tensor], ag.Tensor, list[ag.Tensor]]:
    """``sum_i 2^(i mod 5) * sum(x_i)`` over many leaves, each through a short chain, so a
    cancellation lands while some leaves have their gradient and others do not."""
    xs = [leaf(np.full(3, float(i))) for i in range(N_LEAVES)]
    mids = [scale_chain(x, 30, 1.0) * float(2 ** (i % 5)) for i, x in enumerate(xs)]
    total = mids[0].sum()
    for m in mids[1:]:
        total = total + m.sum()
    return xs, total, mids


@pytest.mark.parametrize("by_timeout", [False, True])
async def test_cancel_leaves_each_grad_whole_and_runs_no_more_hooks(by_timeout: bool) -> None:
    xs, total, mids = many_leaves()
    for x in xs[::2]:
        x.grad = ag.ones(3, dtype=ag.float64)  # some leaves accumulate onto an old gradient
    cancelled = False
    late_hooks: list[int] = []
    reached = asyncio.Event()
    gate = asyncio.Event()

    def watch(i: int) -> Any:
        def hook(g: ag.Tensor) -> None:
            if cancelled:
                late_hooks.append(i)

        return hook

    for i, m in enumerate(mids):
        m.register_hook(watch(i))

    async def park(g: ag.Tensor) -> None:
        reached.set()
        await gate.wait()  # never set: the pass is cancelled while this node waits

    mids[N_LEAVES // 2].register_hook(park)
    async with asyncio.timeout(TIMEOUT_S):
        if by_timeout:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):  # fires while the pass is parked (or before)
                    await ag.backward(total)
        else:
            task = asyncio.create_task(ag.backward(total))
            await reached.wait()
            task.cancel("client disconnected")
            with pytest.raises(asyncio.CancelledError):
                await task
        cancelled = True
        await ag.autograd.engine.wait_idle()
    assert late_hooks == []
    whole = untouched = 0
    for i, x in enumerate(xs):
        old = 1.0 if i % 2 == 0 else None
        full = float(2 ** (i % 5))
        if x.grad is None or (old is not None and np.array_equal(x.grad.numpy(), np.ones(3))):
            untouched += 1
        else:
            np.testing.assert_array_equal(x.grad.numpy(), np.full(3, full + (old or 0.0)))
            whole += 1
    assert whole + untouched == N_LEAVES
    assert untouched > 0  # it did stop before the end


async def test_a_timeout_frees_the_pass_buffers() -> None:
    x = leaf(np.ones(1000))
    mid = scale_chain(x, 50, 1.0)
    out = (mid * 3.0).sum()
    seen: list[weakref.ref[Any]] = []
    gate = asyncio.Event()

    async def park(g: ag.Tensor) -> None:
        seen.append(weakref.ref(g))
        await gate.wait()

    mid.register_hook(park)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):  # the pass parks on its hook; the timeout ends it
            await ag.backward(out)
    await asyncio.wait_for(ag.autograd.engine.wait_idle(), TIMEOUT_S)
    gc.collect()
    assert seen
    assert seen[0]() is None  # the gradient buffer held by the parked node is gone
    assert x.grad is None
    assert ag.autograd.engine.stats()["graph_tasks"]["running"] == 0
