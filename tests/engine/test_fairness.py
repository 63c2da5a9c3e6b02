"""Order across graph tasks (NOTE [One scheduler]): arrival turns, small ones first, no
starvation, priorities' shares, slices.

Driven by the engine's own events (hooks that fire when a pass starts, the order in which awaits
return) and by the scheduler's clock, which the tests drive by hand where timing matters, never
by sleeps; the policy's quantum and shares are set per test on the loop's scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.engine import scheduler

from .helpers import (
    TIMEOUT_S,
    ManualClock,
    assert_close,
    leaf,
    manual_clock,
    scale_chain,
    turn_recorder,
)

engine = ag.autograd.engine
LONG = 20_000  # nodes: tens of milliseconds of backward, many slices


@pytest.fixture
def fair_config() -> Iterator[Any]:
    """A setter of the running loop's policy (quantum and large share), restored after the
    test."""
    saved: list[tuple[Any, float, float]] = []

    def set_(quantum_s: float, large_share: float) -> None:
        sched = scheduler.of(asyncio.get_running_loop())
        saved.append((sched, sched.quantum_s, sched.large_share))
        sched.quantum_s, sched.large_share = quantum_s, large_share

    yield set_
    for sched, quantum_s, large_share in reversed(saved):
        sched.quantum_s, sched.large_share = quantum_s, large_share


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


@pytest.mark.parametrize(
    ("name", "replaced_by"),
    [
        ("quantum_s", "scheduler.QUANTUM_S"),
        ("large_share", "scheduler.LARGE_SHARE"),
        ("lower_share", "scheduler.LOWER_SHARE"),
    ],
)
def test_removed_options_name_what_replaced_them(name: str, replaced_by: str) -> None:
    before = engine.slice_s
    with pytest.raises(
        TypeError, match=rf"configure\({name}=\.\.\.\) was removed: .*{replaced_by}"
    ):
        ag.configure(slice_s=0.5, **{name: 0.5})
    assert engine.slice_s == before  # nothing changed
    with pytest.raises(AttributeError, match=rf"{name!r} was removed: .*{replaced_by}"):
        getattr(engine, name)
    with pytest.raises(TypeError, match="unexpected keyword argument 'slices'"):
        ag.configure(slices=1)


@pytest.fixture
def lower_share() -> Iterator[Callable[[float], None]]:
    saved: list[tuple[Any, float]] = []

    def set_(share: float) -> None:
        sched = scheduler.of(asyncio.get_running_loop())
        saved.append((sched, sched.lower_share))
        sched.lower_share = share

    yield set_
    for sched, share in reversed(saved):
        sched.lower_share = share


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
    """Serving while training (NOTE [One scheduler], 1): clients at priority 1 keep
    every slice busy, and the trainer's passes at priority 0 still finish while they are
    served, at the default share."""
    lower_share(scheduler.LOWER_SHARE)
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
    """A lower share of 0: while higher-priority requests keep the worker busy, a lower-priority
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
def _task(turn: int, sched: Any) -> Any:
    """A graph task built at ``turn`` by ``sched``, with nothing queued."""
    from asyncgrad.engine.graph_task import GraphTask

    return GraphTask(False, False, 0, 0, 0, sched, turn=turn)


def _turn_of(gt: Any) -> int:
    return scheduler.turn_of(gt.key_base)


async def test_the_lane_runs_large_passes_one_at_a_time_oldest_first() -> None:
    with manual_clock() as clock, _stride_four() as sched:
        now = sched.now_us()
        old, new = _task(now - 50_000, sched), _task(now - 10_000, sched)
        try:
            sched.charge(new, 0.002)  # its quantum: it joins the lane, as its head
            # Its turn starts from now, not from its build time (it may have waited long, in
            # preparation say, and must not hold newer requests back while catching up), moved
            # by 4 x its node time.
            assert _turn_of(new) == now + 8_000
            sched.charge(old, 0.002)  # older: it takes the head, the newer one waits behind it
            assert new.lane.tasks == [old, new]
            assert _turn_of(new) == scheduler.PARKED + new.turn  # behind every other turn
            assert _turn_of(old) == now + 16_000
            vturn = new.lane.vturn
            sched.charge(old, 0.001)  # the head runs on: its turn moves 4 x that
            assert new.lane.vturn == vturn + 4_000
            assert _turn_of(old) == vturn + 4_000
            lane = old.lane
            clock.now += 1.0  # the lane's virtual turn is behind the clock by now
            old.finish()  # the next one takes over the lane's virtual turn, from the clock
            assert lane.tasks == [new]
            assert old.lane is None
            assert _turn_of(new) == lane.vturn == sched.now_us()
        finally:
            for gt in (old, new):
                gt.finish()


@contextlib.contextmanager
def _stride_four() -> Iterator[Any]:
    """The running loop's scheduler with a quantum of 2 ms and a large share of 1/4."""
    sched = scheduler.of(asyncio.get_running_loop())
    old = (sched.quantum_s, sched.large_share)
    sched.quantum_s, sched.large_share = 0.002, 0.25
    try:
        yield sched
    finally:
        sched.quantum_s, sched.large_share = old


async def test_an_ended_pass_leaves_the_lane_whichever_way_it_ends() -> None:
    with manual_clock(), _stride_four() as sched:
        now = sched.now_us()
        a, b, c = (_task(now + i, sched) for i in range(3))
        for gt in (a, b, c):
            sched.charge(gt, 0.002)
        lane = a.lane
        assert lane.tasks == [a, b, c]
        assert scheduler.PARKED < _turn_of(b) < _turn_of(c)  # waiting behind the head, in order
        b.cancel()  # waiting: the head stays
        assert lane.tasks == [a, c]
        a.fail(RuntimeError("boom"))
        assert lane.tasks == [c]
        assert _turn_of(c) < scheduler.PARKED
        c.finish()
        assert lane.tasks == []


async def test_an_ended_pass_never_joins_the_lane() -> None:
    """Node time charged after a pass ended (at the end of a worker's slice, say) must not put
    it in the lane, where it would hold every later large pass back."""
    sched = scheduler.of(asyncio.get_running_loop())
    gt = _task(sched.now_us(), sched)
    gt.finish()
    sched.charge(gt, 10.0)
    assert gt.lane is None
    assert not gt.large


async def test_the_scheduler_reads_time_from_the_clock_it_is_given() -> None:
    """Turns, slices and shares all read one clock, the scheduler's: a test (or a tool) that
    gives it another drives the policy's time directly, and turns go on from where they were."""
    import time

    sched = scheduler.of(asyncio.get_running_loop())
    assert sched.clock is time.perf_counter
    before = sched.now_us()
    turns: list[int] = []
    with manual_clock() as clock:
        start = sched.now_us()
        assert start >= before  # no jump back
        clock.now += 0.25
        assert sched.now_us() == start + 250_000
        x, loss = chain_loss(10)
        loss.register_hook(turn_recorder(turns))
        async with asyncio.timeout(TIMEOUT_S):
            await ag.grad(loss, [x])
        assert turns == [start + 250_000]  # built at the clock's time
    assert sched.clock is time.perf_counter


# ------------------------------------------------------------------ slices and the loop's turn
NODE_S = 5e-6  # what each node takes on the fake clock


class _FakeClock:
    """The running loop's scheduler's clock, moved by hand: each node of a ``chain`` moves it
    NODE_S, and the tests' other work moves it as it goes, so that what a test sees does not
    depend on the machine's pace (slices, a pass's preparation, and turns: a virtual turn moved
    by fake node time must not race a real clock). Records, through the scheduler's observer,
    every slice the worker ran (nodes, callers answered) and every pass run in its caller ahead
    of queued work (``ahead_nodes``, called with its nodes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        sched = scheduler.of(asyncio.get_running_loop())
        self.sched = sched
        self.nodes = 0
        self.slices: list[tuple[int, int]] = []  # (nodes, answered) per slice
        self.ahead_nodes: Callable[[int], None] | None = None
        self._seen = 0
        clock = ManualClock(sched.clock())
        monkeypatch.setattr(sched, "origin", sched.origin)  # restored after the test
        monkeypatch.setattr(sched, "clock", sched.clock)
        sched.use_clock(clock)
        self._clock = clock
        self._start = clock.now  # `now` counts from here
        monkeypatch.setattr(sched, "observer", self._observe)

    @property
    def now(self) -> float:
        """Seconds since the test began; set it only forwards."""
        return self._clock.now - self._start

    @now.setter
    def now(self, value: float) -> None:
        assert value >= self.now, "the clock never goes back"
        self._clock.now = self._start + value

    def _observe(self, kind: str, seconds: float, n: int) -> None:
        nodes, self._seen = self.nodes - self._seen, self.nodes
        if kind == "slice":
            self.slices.append((nodes, n))
        elif n and self.ahead_nodes is not None:
            self.ahead_nodes(nodes)

    def node(self, g: Any) -> None:
        self._clock.now += NODE_S
        self.nodes += 1

    def chain(self, n: int) -> tuple[ag.Tensor, ag.Tensor]:
        """A chain of ``n`` nodes that each take NODE_S; building it takes 1 us (so graph
        tasks built one after another get turns in that order)."""
        self._clock.now += 1e-6
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
    none keeps the turn of the one before (See NOTE [One scheduler], 2), so all of
    them go through the worker."""
    clock = _FakeClock(monkeypatch)

    async def serve(cost_s: float) -> list[int]:
        clock.slices.clear()
        served = 0

        async def client() -> None:
            nonlocal served
            while served < 400:
                x, loss = clock.chain(8)
                (g,) = await ag.grad(loss, [x])
                scheduler.flow_var.set(None)
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
    # The queue ran dry in between: a new busy spell learns its callers afresh, and free
    # callers get whole slices again from the start (an estimate kept from the costly ones
    # cut them short until it wore off).
    free = await serve(0.0)
    assert min(free) >= engine.slice_s / (9 * NODE_S), free[:8]


def test_a_bad_setting_leaves_every_setting_as_it_was() -> None:
    names = ("slice_s", "max_running", "offload_threshold", "executor_size")
    before = [getattr(engine, n) for n in names]
    with pytest.raises(ValueError, match=r"executor_size must be an int >= 1"):
        ag.configure(slice_s=0.5, max_running=3, offload_threshold=10.0, executor_size=0)
    assert [getattr(engine, n) for n in names] == before


# ------------------------------------------------------------------ a request keeps its turn
async def test_a_requests_gradients_run_back_to_back_under_a_burst(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests of several gradients each (less than a quantum of node time in all), launched
    at once, with passes of a quarter slice so that the worker always has some queued: each
    request's later passes keep its turn (See
    NOTE [One scheduler], 2) and run in their callers ahead of the later requests'
    (See NOTE [One scheduler], 5), so the requests finish one after another, in the
    order they came, not all late together after taking turns pass by pass."""
    clock = _FakeClock(monkeypatch)
    nodes = int(engine.slice_s / 4 / NODE_S)
    requests, passes = 8, 5
    assert passes * nodes * NODE_S < scheduler.QUANTUM_S
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
    quantum = scheduler.QUANTUM_S
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
    priority is owed (See NOTE [One scheduler], 1): the lower-priority pass goes on
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
    expected = elapsed * scheduler.LOWER_SHARE - engine.slice_s
    assert low_during * NODE_S >= expected, (low_during, elapsed)


async def test_requests_keep_no_turn_beside_a_large_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clients looping over one-gradient requests beside a large backward: while it runs, their
    calls take turns of their own (See NOTE [One scheduler], 2), so the large one's
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
    the worker, which serves the queue, keeps the rest (See NOTE [One scheduler], 5).
    Without the bound a request's short passes would fill whole slices in its caller, and the
    worker's own share came on top of them."""
    clock = _FakeClock(monkeypatch)
    loop = asyncio.get_running_loop()
    turn = 0
    running = True

    def next_turn() -> None:
        nonlocal turn
        turn += 1
        if running:
            loop.call_soon(next_turn)

    ahead: dict[int, int] = {}  # turn of the loop -> nodes run in callers ahead of queued work

    def count_ahead(nodes: int) -> None:
        ahead[turn] = ahead.get(turn, 0) + nodes

    clock.ahead_nodes = count_ahead
    # More queued passes than a slice runs, so that some are always queued.
    requests, passes, nodes = 16, 5, 20
    assert passes * nodes * NODE_S < scheduler.QUANTUM_S  # each keeps its turn throughout
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
    most = scheduler.AHEAD_SHARE * engine.slice_s / NODE_S + 17
    assert max(ahead.values()) <= most, ahead
