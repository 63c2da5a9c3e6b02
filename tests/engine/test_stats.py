"""``ag.autograd.engine.stats()``: per-loop counts of graph tasks by outcome, nodes and time per
device, and the longest time the engine held the loop (NOTE [Engine metrics])."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, leaf, scale_chain

stats = ag.autograd.engine.stats


def test_blocking_backward_counts_its_nodes() -> None:
    ag.autograd.engine.reset_stats()
    x = leaf([1.0, 2.0])
    scale_chain(x, 50).sum().backward()  # 50 MulBackward0, SumBackward0, AccumulateGrad
    s = stats()
    assert s["graph_tasks"] == {
        "running": 0,
        "waiting": 0,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
    }
    assert s["nodes"] == {"cpu": 52}
    assert s["time_in_nodes_s"]["cpu"] > 0
    assert 0 < s["longest_stall_s"] <= s["time_in_nodes_s"]["cpu"]


async def test_outcomes_on_the_loop() -> None:
    x = leaf([1.0, 2.0])
    await asyncio.wait_for(ag.backward(scale_chain(x, 10).sum()), TIMEOUT_S)

    def boom(_: Any) -> None:
        raise ValueError("boom")

    y = scale_chain(x, 3)
    y.register_hook(boom)
    with pytest.raises(ValueError, match="boom"):
        await asyncio.wait_for(ag.backward(y.sum()), TIMEOUT_S)

    gate = asyncio.Event()

    async def hold(g: Any) -> None:
        await gate.wait()

    z = scale_chain(x, 3)
    z.register_hook(hold)
    task = asyncio.ensure_future(ag.backward(z.sum()))
    for _ in range(20):
        await asyncio.sleep(0)
    assert stats()["graph_tasks"]["running"] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, TIMEOUT_S)
    await asyncio.wait_for(ag.autograd.engine.wait_idle(), TIMEOUT_S)
    s = stats()
    assert s["graph_tasks"] == {
        "running": 0,
        "waiting": 0,
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
    }
    # 10 + 2 nodes of the first pass and the 2 that ran before the failing hook (the hook runs
    # before the node that receives its gradient)
    assert s["nodes"]["cpu"] == 12 + 2


async def test_each_loop_has_its_own() -> None:
    x = leaf([1.0])
    await asyncio.wait_for(ag.backward(scale_chain(x, 5).sum()), TIMEOUT_S)
    mine = stats()
    assert mine["graph_tasks"]["completed"] == 1
    other = asyncio.new_event_loop()
    try:
        assert stats(other)["graph_tasks"]["completed"] == 0
    finally:
        other.close()


async def test_a_blocking_backward_inside_the_loop_counts_as_a_stall() -> None:
    x = leaf([1.0, 2.0])
    y = scale_chain(x, 2000).sum()
    t0 = time.perf_counter()
    y.backward()  # holds this loop for the whole pass
    held = time.perf_counter() - t0
    s = stats()
    assert s["graph_tasks"]["completed"] == 0  # the pass itself counts with blocking callers
    assert 0 < s["longest_stall_s"] <= held


@pytest.mark.cuda
def test_cuda_nodes_count_per_device() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")

    async def main() -> dict[str, Any]:
        x = ag.ones(3, device="cuda", requires_grad=True)
        loss = (x.cpu() * 2.0).sum()
        await asyncio.wait_for(ag.backward(loss), TIMEOUT_S)
        return stats()

    s = asyncio.run(main())
    ag.cuda.synchronize()
    # SumBackward0, MulBackward0 and ToCopyBackward0 (it receives the CPU gradient) on the CPU;
    # AccumulateGrad on the GPU
    assert s["nodes"] == {"cpu": 3, "cuda:0": 1}
