"""Order across graph tasks (NOTE [Fair order]): arrival turns, small ones first, no starvation.

Driven by the engine's own events (hooks that fire when a pass starts, the order in which awaits
return), never by sleeps; the engine's quantum and large share are set per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, assert_close, leaf, scale_chain

engine = ag.autograd.engine
LONG = 20_000  # nodes: tens of milliseconds of backward, many slices


@pytest.fixture
def fair_config() -> Iterator[Any]:
    old = (engine.quantum_s, engine.large_share)

    def set_(quantum_s: float, large_share: float) -> None:
        engine.configure(quantum_s=quantum_s, large_share=large_share)

    yield set_
    engine.configure(quantum_s=old[0], large_share=old[1])


def chain_loss(n: int, factor: float = 1.0) -> tuple[ag.Tensor, ag.Tensor]:
    x = leaf(np.linspace(0.5, 1.5, 4))
    return x, scale_chain(x, n, factor).sum()


def started_flag(loss: ag.Tensor) -> asyncio.Event:
    """An event set when the backward of ``loss`` runs its first node."""
    ev = asyncio.Event()

    def hook(g: Any) -> None:
        ev.set()

    loss.register_hook(hook)
    return ev


async def test_passes_started_in_order_finish_in_order(fair_config: Any) -> None:
    """Two long passes started A then B finish A first (a newest-first order finished B first),
    and a burst of equal long passes finishes in arrival order, as if run in turn."""
    fair_config(quantum_s=1e-9, large_share=0.25)
    done: list[int] = []

    async def one(i: int, loss: ag.Tensor, x: ag.Tensor) -> None:
        (g,) = await ag.grad(loss, [x])
        assert_close(g, np.ones(4))
        done.append(i)

    graphs = [chain_loss(3_000) for _ in range(5)]
    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(*(one(i, loss, x) for i, (x, loss) in enumerate(graphs)))
    assert done == [0, 1, 2, 3, 4]


async def test_burst_finishes_in_arrival_order_with_default_settings() -> None:
    done: list[int] = []

    async def one(i: int) -> None:
        x, loss = chain_loss(2_000)
        await ag.backward(loss)
        assert_close(x.grad, np.ones(4))
        done.append(i)

    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(*(one(i) for i in range(4)))
    assert done == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("large_share", "overtakes"),
    [
        pytest.param(1e-4, True, id="ahead-of-its-share-a-large-pass-is-overtaken"),
        # large_share=1: a large pass keeps its turn, so a later pass, small or not, waits for it.
        pytest.param(1.0, False, id="at-a-share-of-one-it-keeps-its-turn"),
    ],
)
async def test_a_later_pass_and_a_running_large_one(
    fair_config: Any, large_share: float, overtakes: bool
) -> None:
    fair_config(quantum_s=1e-9, large_share=large_share)
    x, loss = chain_loss(LONG)
    started = started_flag(loss)
    large = asyncio.create_task(ag.grad(loss, [x]))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await started.wait()
            xs, small = chain_loss(3, factor=2.0)
            (g,) = await ag.grad(small, [xs])
            if overtakes:
                assert not large.done(), "the small pass waited for the large one"
            else:
                assert large.done(), "the later pass overtook a large pass that keeps its turn"
            assert_close(g, np.full(4, 8.0))
            (gl,) = await large
        assert_close(gl, np.ones(4))
    finally:
        large.cancel()


async def test_a_stream_of_small_passes_does_not_starve_a_large_one(fair_config: Any) -> None:
    """Four clients keep the CPU worker busy with new passes, more than it can run, for as long
    as the large pass runs; a newest-first order never let it finish. It keeps its share of the
    worker's time, so it finishes while they go on."""
    fair_config(quantum_s=1e-9, large_share=0.5)
    x, loss = chain_loss(5_000)
    large = asyncio.create_task(ag.grad(loss, [x]))
    served = 0

    async def client() -> None:
        nonlocal served
        while not large.done():
            xs, small = chain_loss(1_000, factor=1.0)
            (g,) = await ag.grad(small, [xs])
            assert_close(g, np.ones(4))
            served += 1

    async with asyncio.timeout(TIMEOUT_S):
        clients = [asyncio.create_task(client()) for _ in range(4)]
        try:
            (g,) = await large
        finally:
            await asyncio.gather(*clients)
    assert_close(g, np.ones(4))
    assert served > 0


async def test_priority_comes_before_turns(fair_config: Any) -> None:
    """A later pass of higher priority goes first even against an older small one."""
    fair_config(quantum_s=10.0, large_share=0.25)
    done: list[str] = []

    async def one(name: str, priority: int) -> None:
        x, loss = chain_loss(2_000)
        await ag.grad(loss, [x], priority=priority)
        done.append(name)

    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(one("old", 0), one("new-high", 5))
    assert done == ["new-high", "old"]


def test_configure_rejects_bad_fairness_settings() -> None:
    with pytest.raises(ValueError, match="quantum_s must be > 0"):
        engine.configure(quantum_s=0)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match=r"large_share must be in \(0, 1\]"):
            engine.configure(large_share=bad)


async def test_lower_priority_work_progresses_under_a_stream_of_higher_priority_requests() -> None:
    """Serving while training: clients at priority 1 ask again as soon as they are answered;
    the trainer's passes (priority 0, large) still finish, on what the clients leave of each
    slice."""
    # The property needs the clients' passes (4 x 31 nodes) to leave something of a slice. At
    # the default 1 ms slice a machine slowed down by other load can fill every slice with them
    # (priority is strict), so the slice here is long enough for any slowdown.
    old_slice = engine.slice_s
    engine.configure(slice_s=0.1)
    try:
        await _trainer_and_clients()
    finally:
        engine.configure(slice_s=old_slice)


async def _trainer_and_clients() -> None:
    done = False
    served = 0

    async def client() -> None:
        nonlocal served
        while not done:
            xs, small = chain_loss(30, factor=1.0)
            (g,) = await ag.grad(small, [xs], priority=1)
            assert_close(g, np.ones(4))
            served += 1

    clients = [asyncio.create_task(client()) for _ in range(4)]
    try:
        async with asyncio.timeout(TIMEOUT_S):
            for _ in range(3):
                x, loss = chain_loss(4_000)
                await ag.backward(loss)
                assert_close(x.grad, np.ones(4))
    finally:
        done = True
        await asyncio.wait_for(asyncio.gather(*clients), TIMEOUT_S)
    assert served > 0


# ------------------------------------------------------------------ the lane of large passes
def _task(turn: int, loop: asyncio.AbstractEventLoop) -> Any:
    """A graph task built at ``turn``, on ``loop``, with nothing queued."""
    from asyncgrad.engine import metrics
    from asyncgrad.engine.graph_task import GraphTask

    gt = GraphTask(False, False, 0, 0, 0, metrics.of(loop), turn=turn)
    gt.loop = loop
    return gt


def _turn_of(gt: Any) -> int:
    from asyncgrad.engine import ready_queue

    return (gt.key_base >> ready_queue.SEQ_BITS) & ready_queue.TURN_MAX


async def test_the_lane_runs_large_passes_one_at_a_time_oldest_first() -> None:
    from asyncgrad.engine import ready_queue as rq

    loop = asyncio.get_running_loop()
    now = rq.now_us()
    old, new = _task(now - 50_000, loop), _task(now - 10_000, loop)
    try:
        new.service = 0.002
        rq.join_lane(new, 4.0)
        # The head: its turn starts from now, not from its build time (it may have waited
        # long, in preparation say, and must not hold newer requests back while catching up),
        # moved by 4 x its node time.
        assert _turn_of(new) >= now + 8_000
        old.service = 0.002
        rq.join_lane(old, 4.0)  # older: it takes the head, the newer one waits behind it
        assert new.lane.tasks == [old, new]
        assert _turn_of(new) == rq.PARKED + new.turn  # behind every other turn
        assert _turn_of(old) < rq.PARKED
        vturn = new.lane.vturn
        old.unmoved = 0.001
        rq.move_head(old, 4.0)
        assert new.lane.vturn == vturn + 4_000
        assert _turn_of(old) == vturn + 4_000
        lane = old.lane
        old.finish()  # the next one takes over the lane's virtual turn
        assert lane.tasks == [new]
        assert old.lane is None
        assert _turn_of(new) == lane.vturn >= vturn + 4_000
    finally:
        for gt in (old, new):
            gt.finish()


async def test_an_ended_pass_leaves_the_lane_whichever_way_it_ends() -> None:
    from asyncgrad.engine import ready_queue as rq

    loop = asyncio.get_running_loop()
    now = rq.now_us()
    a, b, c = (_task(now + i, loop) for i in range(3))
    for gt in (a, b, c):
        gt.service = 0.002
        rq.join_lane(gt, 4.0)
    lane = a.lane
    assert lane.tasks == [a, b, c]
    assert rq.PARKED < _turn_of(b) < _turn_of(c)  # waiting behind the head, oldest first
    b.cancel()  # waiting: the head stays
    assert lane.tasks == [a, c]
    a.fail(RuntimeError("boom"))
    assert lane.tasks == [c]
    assert _turn_of(c) < rq.PARKED
    c.finish()
    assert lane.tasks == []


async def test_an_ended_pass_never_joins_the_lane() -> None:
    """Node time charged after a pass ended (at the end of a worker's slice, say) must not put
    it in the lane, where it would hold every later large pass back."""
    from asyncgrad.engine import ready_queue as rq
    from asyncgrad.engine.worker import charge

    loop = asyncio.get_running_loop()
    gt = _task(rq.now_us(), loop)
    gt.finish()
    charge(gt, 10.0)
    assert gt.lane is None
    assert not gt.large
