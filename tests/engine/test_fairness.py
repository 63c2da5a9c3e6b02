"""Order across graph tasks (NOTE [Fair order]): arrival turns, small ones first, no starvation.

Driven by the engine's own events (hooks that fire when a pass starts, the order in which awaits
return), never by sleeps; the engine's quantum and large share are set per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, assert_close, engine_setting, leaf, scale_chain, turn_recorder

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
    for bad in (-0.1, 1, 2.0):
        with pytest.raises(ValueError, match=r"lower_share must be in \[0, 1\)"):
            engine.configure(lower_share=bad)


@pytest.fixture
def lower_share() -> Iterator[Callable[[float], None]]:
    with engine_setting("lower_share") as set_:
        yield set_


class _Clients:
    """Eight clients asking at priority 1 again as soon as they are answered, each request a
    300-node chain: together several slices of work, so every slice starts with some of it
    queued and cannot run out of it (an answered client builds and queues its next request
    before the worker's next turn)."""

    def __init__(self) -> None:
        self.served = 0
        self.stop = False
        self.reached: dict[int, asyncio.Event] = {}
        self.tasks = [asyncio.create_task(self._client()) for _ in range(8)]

    async def _client(self) -> None:
        while not self.stop:
            xs, small = chain_loss(300)
            (g,) = await ag.grad(small, [xs], priority=1)
            assert_close(g, np.ones(4))
            self.served += 1
            ev = self.reached.get(self.served)
            if ev is not None:
                ev.set()

    async def wait_served(self, n: int) -> None:
        ev = self.reached.setdefault(n, asyncio.Event())
        if self.served < n:
            await ev.wait()

    async def close(self) -> None:
        self.stop = True
        await asyncio.wait_for(asyncio.gather(*self.tasks), TIMEOUT_S)


async def test_lower_priority_work_progresses_under_a_stream_of_higher_priority_requests(
    lower_share: Callable[[float], None],
) -> None:
    """Serving while training (NOTE [Lower priorities' share]): clients at priority 1 keep
    every slice busy, and the trainer's passes at priority 0 still finish while they are
    served, at the default share."""
    from asyncgrad.engine.reentrant import DEFAULT_LOWER_SHARE

    lower_share(DEFAULT_LOWER_SHARE)
    clients = _Clients()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await clients.wait_served(8)
            before = clients.served
            for _ in range(3):
                x, loss = chain_loss(2_000)
                await ag.backward(loss)
                assert_close(x.grad, np.ones(4))
            assert clients.served > before  # served all along
    finally:
        await clients.close()


async def test_strict_priority_runs_lower_priority_work_only_when_higher_work_runs_out(
    lower_share: Callable[[float], None],
) -> None:
    """``lower_share=0``: while higher-priority requests keep the worker busy, a lower-priority
    pass does not run a single node; it runs once they stop."""
    lower_share(0.0)
    clients = _Clients()
    x, loss = chain_loss(500)
    started = started_flag(loss)
    trainer = asyncio.create_task(ag.backward(loss))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await clients.wait_served(40)
            assert not started.is_set()
            await clients.close()
            await trainer
    finally:
        trainer.cancel()
        await asyncio.gather(trainer, return_exceptions=True)
        await clients.close()
    assert started.is_set()
    assert_close(x.grad, np.ones(4))


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


# ------------------------------------------------------------------ slices and the loop's turn
NODE_S = 5e-6  # what each node takes on the fake clock


class _FakeClock:
    """The worker's clock (See NOTE [Slices share the loop's turn]), moved by hand: each node of
    a ``chain`` moves it NODE_S, and the tests' other work moves it as it goes. Records what
    every slice the worker drained returned: (ran lower priorities, callers answered), and its
    nodes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from asyncgrad.engine import engine as engine_module
        from asyncgrad.engine import ready_queue, worker

        self.now = 0.0
        self.slices: list[tuple[int, int]] = []  # (nodes, answered) per slice
        # Every clock the engine schedules by follows this one, so that what a test sees does
        # not depend on the machine's pace: the slices, a pass's preparation, and turns (a
        # virtual turn moved by fake node time must not race a real clock: See NOTE [Fair
        # order]).
        monkeypatch.setattr(worker, "perf_counter", lambda: self.now)
        monkeypatch.setattr(engine_module, "perf_counter", lambda: self.now)
        t0 = ready_queue._T0
        monkeypatch.setattr(ready_queue, "perf_counter", lambda: t0 + self.now)
        real_drain = worker.drain

        def drain(queue: Any, budget: float, *args: Any) -> Any:
            before = self.nodes
            lower, answered = real_drain(queue, budget, *args)
            task = asyncio.current_task()
            # The worker's slices, not the passes run in their callers (See NOTE [Passes in
            # their callers]).
            if task is not None and task.get_name().startswith("asyncgrad-worker"):
                self.slices.append((self.nodes - before, answered))
            return lower, answered

        monkeypatch.setattr(worker, "drain", drain)
        self.nodes = 0

    def node(self, g: Any) -> None:
        self.now += NODE_S
        self.nodes += 1

    def chain(self, n: int) -> tuple[ag.Tensor, ag.Tensor]:
        x = leaf(np.linspace(0.5, 1.5, 4))
        y = x
        for _ in range(n):
            y = y * 1.0
            y.register_hook(self.node)
        return x, y.sum()


def _middle(xs: list[int]) -> list[int]:
    return xs[1:-1]  # the first slice starts afresh, the last one runs out of nodes


async def test_a_slice_leaves_the_loop_what_its_other_work_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Alone, a long pass runs slices of a whole ``slice_s``; beside a task that takes 300 us of
    every turn of the loop, its slices run that much less (never below a quarter slice)."""
    clock = _FakeClock(monkeypatch)
    x, loss = clock.chain(2_000)
    async with asyncio.timeout(TIMEOUT_S):
        (g,) = await ag.grad(loss, [x], retain_graph=True)
    assert_close(g, np.ones(4))
    alone = _middle([n for n, _ in clock.slices])
    clock.slices.clear()

    done = False

    async def busy() -> None:
        while not done:
            clock.now += 300e-6
            await asyncio.sleep(0)  # one turn of the loop, not a wait for anything

    other = asyncio.create_task(busy())
    try:
        async with asyncio.timeout(TIMEOUT_S):
            (g,) = await ag.grad(loss, [x])
    finally:
        done = True
        await asyncio.wait_for(other, TIMEOUT_S)
    assert_close(g, np.ones(4))
    beside = _middle([n for n, _ in clock.slices])
    full = engine.slice_s / NODE_S
    assert min(alone) >= full  # whole slices
    assert max(beside) < min(alone)
    assert min(beside) >= full * 0.25  # the floor


async def test_a_slice_leaves_time_for_the_callers_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Callers that take time on the loop once answered (their next forward, say): a slice
    answers fewer of them, as much fewer as they take, so that a turn of the loop (the slice
    and their work after it) stays near ``slice_s``. Each gradient is a request of its own:
    none keeps the turn of the one before (See NOTE [A request keeps its turn]), so all of
    them go through the worker."""
    from asyncgrad.engine.ready_queue import request_turn

    clock = _FakeClock(monkeypatch)

    async def serve(cost_s: float) -> list[int]:
        clock.slices.clear()
        served = 0

        async def client() -> None:
            nonlocal served
            while served < 400:
                x, loss = clock.chain(8)
                (g,) = await ag.grad(loss, [x])
                request_turn.set(None)
                assert_close(g, np.ones(4))
                clock.now += cost_s
                served += 1

        async with asyncio.timeout(TIMEOUT_S):
            await asyncio.gather(*(client() for _ in range(40)))
        return _middle([a for _, a in clock.slices])

    free = await serve(0.0)
    costly = await serve(300e-6)
    # Free callers: a whole slice of nodes, 9 nodes each (8 and the sum).
    assert min(free) >= engine.slice_s / (9 * NODE_S)
    # Callers taking 300 us each, once the worker has seen what they take: no more of them
    # than their work fills a turn with, give or take the 16 nodes between two looks at the
    # clock (without the estimate: as many as a quarter slice of nodes answers, 7 here).
    assert max(costly[4:]) <= engine.slice_s / 300e-6 + 1


def test_a_bad_setting_leaves_every_setting_as_it_was() -> None:
    before = (engine.slice_s, engine.quantum_s, engine.large_share, engine.lower_share)
    with pytest.raises(ValueError, match=r"lower_share must be in \[0, 1\)"):
        engine.configure(slice_s=0.5, quantum_s=0.5, large_share=0.5, lower_share=1.0)
    after = (engine.slice_s, engine.quantum_s, engine.large_share, engine.lower_share)
    assert after == before


# ------------------------------------------------------------------ a request keeps its turn
async def test_a_requests_gradients_run_back_to_back_under_a_burst(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests of several gradients each (less than a quantum of node time in all), launched
    at once, with passes of a quarter slice so that the worker always has some queued: each
    request's later passes keep its turn (See
    NOTE [A request keeps its turn]) and run in their callers ahead of the later requests'
    (See NOTE [Passes in their callers]), so the requests finish one after another, in the
    order they came, not all late together after taking turns pass by pass."""
    from asyncgrad.engine import graph_task

    clock = _FakeClock(monkeypatch)
    # Turns in the order graph tasks are built, whatever the machine's clock resolution.
    turns = iter(range(graph_task.now_us(), 1 << 46))
    monkeypatch.setattr(graph_task, "now_us", lambda: next(turns))
    nodes = int(engine.slice_s / 4 / NODE_S)
    requests, passes = 8, 5
    assert passes * nodes * NODE_S < engine.quantum_s
    done: list[int] = []  # the request of every pass, in the order they finished
    ended: dict[int, int] = {}  # request -> passes finished (all requests) when it ended

    async def request(i: int) -> None:
        for _ in range(passes):
            x, loss = clock.chain(nodes)
            (g,) = await ag.grad(loss, [x])
            assert_close(g, np.ones(4))
            done.append(i)
        ended[i] = len(done)

    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(*(request(i) for i in range(requests)))
    assert sorted(ended, key=ended.__getitem__) == list(range(requests)), done
    for i in range(requests):
        # its own passes, those before it, and at most two of each later one
        assert ended[i] <= (i + 1) * passes + 2 * (requests - 1 - i), (i, done)


async def test_a_request_takes_a_new_turn_after_a_quantum_of_node_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task that computes gradients in a loop keeps its turn for ``quantum_s`` of node time,
    then takes a new one (behind whatever came meanwhile), which it keeps for the next quantum:
    a caller that never stops holds nobody back for longer than a quantum at a time."""
    clock = _FakeClock(monkeypatch)
    turns: list[int] = []
    record = turn_recorder(turns)
    per_pass = 8 * NODE_S  # the chain's 8 nodes with a hook; the sum has none
    quantum = engine.quantum_s
    async with asyncio.timeout(TIMEOUT_S):
        for _ in range(int(2.5 * quantum / per_pass)):
            x, loss = clock.chain(8)
            loss.register_hook(record)
            (g,) = await ag.grad(loss, [x])
            assert_close(g, np.ones(4))
    firsts = [i for i in range(1, len(turns)) if turns[i] != turns[i - 1]]
    assert len(firsts) == 2, firsts
    assert turns[firsts[0]] > turns[0]
    for start, end in ((0, firsts[0]), (firsts[0], firsts[1])):
        assert abs((end - start) * per_pass - quantum) <= 1.01 * per_pass, (start, end)


async def test_passes_run_in_their_caller_still_leave_lower_priorities_their_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests of a high priority whose passes run in their callers, ahead of queued work of
    their own priority and of a lower one, count that node time towards the share the lower
    priority is owed (See NOTE [Lower priorities' share]): the lower-priority pass goes on
    meanwhile."""
    clock = _FakeClock(monkeypatch)
    low_nodes = 0

    def low_node(g: Any) -> None:
        nonlocal low_nodes
        clock.node(g)
        low_nodes += 1

    x_low = leaf(np.linspace(0.5, 1.5, 4))
    y = x_low
    for _ in range(4_000):
        y = y * 1.0
        y.register_hook(low_node)
    loss_low = y.sum()
    started = asyncio.Event()
    loss_low.register_hook(lambda g: started.set())
    high_until = 0.02  # fake seconds

    async def high() -> None:
        while clock.now < high_until:
            x, loss = clock.chain(8)
            (g,) = await ag.grad(loss, [x], priority=1)
            assert_close(g, np.ones(4))

    async with asyncio.timeout(TIMEOUT_S):
        low = asyncio.create_task(ag.grad(loss_low, [x_low], priority=0))
        await started.wait()  # it ran first, and queued what its first slice left
        start, nodes_at_start = clock.now, low_nodes
        high_until += start
        await asyncio.gather(*(high() for _ in range(64)))
        low_during = low_nodes - nodes_at_start
        elapsed = clock.now - start
        (g_low,) = await low
    assert_close(g_low, np.ones(4))
    # At least its share of the node time, less a slice for the debt not yet paid.
    expected = elapsed * engine.lower_share - engine.slice_s
    assert low_during * NODE_S >= expected, (low_during, elapsed)


async def test_requests_keep_no_turn_beside_a_large_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clients looping over one-gradient requests beside a large backward: while it runs, their
    calls take turns of their own (See NOTE [A request keeps its turn]), so the large one's
    virtual turn keeps giving both sides their share and no small request waits long. (Kept
    turns would pass it every time, then fall far behind it.)"""
    clock = _FakeClock(monkeypatch)
    waits: list[float] = []
    stop = False

    async def client() -> None:
        while not stop:
            await asyncio.sleep(0)  # a request's trip through the loop
            sent = clock.now
            x, loss = clock.chain(12)
            clock.now += 40e-6  # its forward
            (g,) = await ag.grad(loss, [x])
            assert_close(g, np.ones(4))
            waits.append(clock.now - sent)

    x, loss = clock.chain(8_000)
    async with asyncio.timeout(TIMEOUT_S):
        large = asyncio.create_task(ag.grad(loss, [x]))
        clients = [asyncio.create_task(client()) for _ in range(8)]
        (g,) = await large
        stop = True
        await asyncio.gather(*clients)
    assert_close(g, np.ones(4))
    assert len(waits) > 100
    # A small request waits for at most a few slices of the large one's (kept turns: 23 ms).
    assert max(waits) <= 10 * engine.slice_s, sorted(waits)[-5:]


async def test_passes_ahead_of_queued_work_leave_the_worker_most_of_a_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The later gradients of requests that keep their turn run in their callers ahead of
    queued work, but in each turn of the loop only within the first AHEAD_SHARE of the slice:
    the worker, which serves the queue, keeps the rest (See NOTE [Passes in their callers]).
    Without the bound a request's short passes would fill whole slices in its caller, and the
    worker's own share came on top of them."""
    from asyncgrad.engine import graph_task, worker

    clock = _FakeClock(monkeypatch)
    turns = iter(range(graph_task.now_us(), 1 << 46))
    monkeypatch.setattr(graph_task, "now_us", lambda: next(turns))
    clock.now = 1.0  # a turn's start is marked by a nonzero time
    loop = asyncio.get_running_loop()
    turn = 0
    running = True

    def next_turn() -> None:
        nonlocal turn
        turn += 1
        if running:
            loop.call_soon(next_turn)

    ahead: dict[int, int] = {}  # turn of the loop -> nodes run in callers ahead of queued work
    counted = worker.drain

    def drain(queue: Any, budget: float, *args: Any) -> Any:
        own = args[2] if len(args) > 2 else None  # a caller drains its own pass only
        passing = own is not None and any(e[4] is not own for e in queue.heap)
        before = clock.nodes
        out = counted(queue, budget, *args)
        if passing:
            ahead[turn] = ahead.get(turn, 0) + clock.nodes - before
        return out

    monkeypatch.setattr(worker, "drain", drain)
    # More queued passes than a slice runs, so that some are always queued.
    requests, passes, nodes = 16, 5, 20
    assert passes * nodes * NODE_S < engine.quantum_s  # each keeps its turn throughout
    ended: list[int] = []

    async def request(i: int) -> None:
        for _ in range(passes):
            x, loss = clock.chain(nodes)
            (g,) = await ag.grad(loss, [x])
            assert_close(g, np.ones(4))
        ended.append(i)

    loop.call_soon(next_turn)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await asyncio.gather(*(request(i) for i in range(requests)))
    finally:
        running = False
    assert ended == list(range(requests))  # still one after another, in order
    assert sum(ahead.values()) > 4 * nodes  # passes did run in their callers ahead of others
    # At most the share, give or take the nodes between two looks at the clock and the sum
    # (whole slices of 200 nodes without the bound).
    most = worker.AHEAD_SHARE * engine.slice_s / NODE_S + 17
    assert max(ahead.values()) <= most, ahead
