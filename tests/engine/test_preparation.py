"""The preparation walks (exec_info for grad()/inputs=, dependency counts) yield to the loop as
they go down a graph, not only on the way back up (See NOTE [Preparation yields])."""

from __future__ import annotations

import asyncio

import asyncgrad as ag
from asyncgrad.engine import engine

from .helpers import TIMEOUT_S, assert_close, engine_setting, leaf, loop_turns

CHAIN = 5_000


def count_yields(gen: object) -> int:
    n = 0
    try:
        while True:
            next(gen)  # type: ignore[call-overload]
            n += 1
    except StopIteration:
        return n


def test_exec_info_walk_yields_going_down_and_coming_back() -> None:
    p = leaf([1.0])
    y = p
    for _ in range(CHAIN):
        y = y * 1.0
    x = leaf([2.0])
    out = (y + x * 3.0).sum()
    assert out.grad_fn is not None
    x_edge = x._edge()
    assert x_edge is not None
    gen = engine._init_exec_info(out.grad_fn, [x_edge], False)
    # Each of the chain's nodes is visited going down and again coming back up.
    assert count_yields(gen) >= 2 * CHAIN // engine.VISITS_PER_YIELD


async def test_grad_over_a_long_unneeded_branch_lets_the_loop_run() -> None:
    p = leaf([1.0])
    y = p
    for _ in range(CHAIN):
        y = y * 1.0
    x = leaf([2.0])
    out = (y + x * 3.0).sum()
    with engine_setting("slice_s") as set_slice:
        set_slice(1e-9)  # yield at every chance
        async with loop_turns() as turns, asyncio.timeout(TIMEOUT_S):
            (gx,) = await ag.grad(out, [x])
    assert_close(gx, [3.0])
    # Only two nodes run; the rest of the await is the walk over the chain, which yields
    # every VISITS_PER_YIELD visits.
    assert turns.count >= 2 * CHAIN // engine.VISITS_PER_YIELD
