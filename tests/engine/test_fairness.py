"""Order across graph tasks (NOTE [Fair order]): arrival turns, small ones first, no starvation.

Driven by the engine's own events (hooks that fire when a pass starts, the order in which awaits
return), never by sleeps; the engine's quantum and window are set per test.
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
    old = (engine.quantum_s, engine.window_s)

    def set_(quantum_s: float, window_s: float) -> None:
        engine.configure(quantum_s=quantum_s, window_s=window_s)

    yield set_
    engine.configure(quantum_s=old[0], window_s=old[1])


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
    fair_config(quantum_s=1e-9, window_s=0.5)
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
    ("window_s", "overtakes"),
    [
        pytest.param(10.0, True, id="inside-the-window-a-small-pass-overtakes"),
        # window_s=0: a large pass keeps its turn, so a later pass, small or not, waits for it.
        pytest.param(0.0, False, id="after-the-window-it-waits-behind"),
    ],
)
async def test_a_later_pass_and_a_running_large_one(
    fair_config: Any, window_s: float, overtakes: bool
) -> None:
    fair_config(quantum_s=1e-9, window_s=window_s)
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
                assert large.done(), "the later pass overtook a large pass outside the window"
            assert_close(g, np.full(4, 8.0))
            (gl,) = await large
        assert_close(gl, np.ones(4))
    finally:
        large.cancel()


async def test_a_stream_of_small_passes_does_not_starve_a_large_one(fair_config: Any) -> None:
    """Four clients keep the CPU worker busy with new passes, more than it can run, for as long
    as the large pass runs; a newest-first order never let it finish. Its turn comes once the
    window has passed."""
    fair_config(quantum_s=1e-9, window_s=0.005)
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
    fair_config(quantum_s=10.0, window_s=10.0)
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
    with pytest.raises(ValueError, match="window_s must be >= 0"):
        engine.configure(window_s=-1)


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
