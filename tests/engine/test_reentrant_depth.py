"""Reentrant backward far past the depth limit: a bounded, reused set of threads and event loops
(nothing left behind), cancellation that stops every level, and errors from deep inside.

A test chain is ``depth`` levels of a custom Function whose backward runs the backward pass of
the next level (a sync backward with ``t.backward()``, or an ``async def`` one with ``await
ag.backward``), so level ``d`` runs ``d`` reentrant levels deep. A low depth limit makes a few
hundred levels move to the pool many times over.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import pytest

import asyncgrad as ag
from asyncgrad.engine import pools
from asyncgrad.engine.reentrant import current_graph_task

from .helpers import THREAD_TIMEOUT_S, TIMEOUT_S, assert_close

DEPTH_LIMIT: Final = 4
DEPTH: Final = 300
WARM_UP_DEPTH: Final = 60
ALTERNATING_DEPTH: Final = 60
PARK_LEVEL: Final = 40
CANCEL_LEVEL: Final = 20
ISSUE_DEPTH: Final = 2_000  # the scale the leaks were reported at, under the default limit
FAIL_LEVEL: Final = 1_500
CALLERS: Final = 4
# Threads that end with the level they run (a test waits for them before it counts threads).
ONE_OFF_PREFIXES: Final = ("asyncgrad-reentrant-", "asyncgrad-loop-")

Kind = Callable[[int], str]


def all_async(level: int) -> str:
    return "async"


def all_sync(level: int) -> str:
    return "sync"


def alternating(level: int) -> str:
    return "async" if level % 2 == 0 else "sync"


# Async on top, so that the test's loop stays free (to cancel the pass) while the sync levels
# below block the threads they run on.
def async_then_sync(level: int) -> str:
    return "async" if level < 10 else "sync"


def async_then_alternating(level: int) -> str:
    return "async" if level < 10 else alternating(level)


KINDS = {
    "async": all_async,
    "sync": all_sync,
    "alternating": alternating,
    "async-then-sync": async_then_sync,
    "async-then-alternating": async_then_alternating,
}


class Boom(Exception):
    pass


@pytest.fixture
def shallow_limit() -> Iterator[None]:
    old = ag.autograd.engine.max_reentrant_depth
    ag.autograd.engine.configure(max_reentrant_depth=DEPTH_LIMIT)
    try:
        yield
    finally:
        ag.autograd.engine.configure(max_reentrant_depth=old)


# ----------------------------------------------------------------------------- resources
_fd_lock = threading.Lock()  # listing the fds opens one: one listing at a time


def _open_fds() -> int | None:
    with _fd_lock:
        try:
            return len(os.listdir("/proc/self/fd"))
        except OSError:  # no procfs: file descriptors are not counted
            return None


def _join_one_off_threads() -> None:
    """One-off threads hand over their level's result a moment before they end."""
    for t in threading.enumerate():
        if t.name.startswith(ONE_OFF_PREFIXES):
            t.join(timeout=THREAD_TIMEOUT_S)
            assert not t.is_alive(), t.name


class Usage:
    """Threads and open file descriptors: at the start, the most seen during a pass, and at the
    end (which must be the start: the engine's persistent pool was started by a warm-up)."""

    def __init__(self) -> None:
        _join_one_off_threads()
        self.threads = threading.active_count()
        self.fds = _open_fds()
        self.peak_threads = self.threads
        self.peak_fds = self.fds
        self._lock = threading.Lock()

    def sample(self) -> None:
        threads, fds = threading.active_count(), _open_fds()
        with self._lock:
            self.peak_threads = max(self.peak_threads, threads)
            if fds is not None and self.peak_fds is not None:
                self.peak_fds = max(self.peak_fds, fds)

    def assert_peak_at_most(self, threads: int, fds: int) -> None:
        assert self.peak_threads <= self.threads + threads, (self.threads, self.peak_threads)
        if self.fds is not None:
            assert self.peak_fds is not None
            assert self.peak_fds <= self.fds + fds, (self.fds, self.peak_fds)

    def assert_back_to_start(self) -> None:
        _join_one_off_threads()
        assert threading.active_count() == self.threads, threading.enumerate()
        assert _open_fds() == self.fds


async def _task_count() -> int:
    return len(asyncio.all_tasks()) - 1


async def _assert_pool_idle() -> None:
    """No level is in flight, and no pool loop has a task left."""
    assert pools.jobs_in_flight() == []
    for lt in pools.loop_pool.loops():
        cf = asyncio.run_coroutine_threadsafe(_task_count(), lt.loop)
        assert await asyncio.wrap_future(cf) == 0, lt.thread.name


def _assert_pool_idle_sync() -> None:
    assert pools.jobs_in_flight() == []
    for lt in pools.loop_pool.loops():
        cf = asyncio.run_coroutine_threadsafe(_task_count(), lt.loop)
        assert cf.result(timeout=THREAD_TIMEOUT_S) == 0, lt.thread.name


# ----------------------------------------------------------------------------- the chain
USER_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_user_var", default="unset")


class Probe:
    """One chain: its shape, and what its levels do besides nesting. Each level counts itself,
    samples ``usage``, records what it sees, and may fail, park, or cancel its nested pass."""

    def __init__(self, kind: Kind, depth: int, usage: Usage | None = None) -> None:
        self.kind = kind
        self.depth = depth
        self.usage = usage
        self.lock = threading.Lock()
        self.entered = 0
        # (level, reentrant depth, local depth, grad enabled, USER_VAR) per level
        self.seen: list[tuple[int, int, int, bool, str]] = []
        self.callbacks_run: set[int] = set()
        self.fail_at: int | None = None
        self.park_at: int | None = None
        self.cancel_nested_at: int | None = None
        self.test_loop: asyncio.AbstractEventLoop | None = None
        self.parked: asyncio.Event | None = None
        self.go = threading.Event()  # releases a parked sync level
        self.gate: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        # Every nested pass multiplies by it, so a pass that completes writes its `.grad`.
        self.shared = ag.tensor([1.0], dtype=ag.float64, requires_grad=True)

    def top(self) -> tuple[ag.Tensor, ag.Tensor]:
        x = ag.tensor([1.0], dtype=ag.float64, requires_grad=True)
        return x, self._level_output(x, 0)

    def _level_output(self, x: ag.Tensor, level: int) -> ag.Tensor:
        # The shared leaf comes before the level: its AccumulateGrad runs only after the level's
        # backward (and so every deeper level) has returned.
        fn = SyncLevel if self.kind(level) == "sync" else AsyncLevel
        return fn.apply(x * self.shared, self, level).sum()

    def inner(self, x: ag.Tensor, level: int) -> tuple[ag.Tensor, ag.Tensor]:
        """The leaf and the output of the pass that level ``level`` runs."""
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            return xd, self._level_output(xd, level + 1)

    def enter(self, level: int) -> None:
        with self.lock:
            self.entered += 1
        if self.usage is not None:
            self.usage.sample()
        gt = current_graph_task.get()
        assert gt is not None
        self.seen.append((level, gt.depth, gt.local_depth, ag.is_grad_enabled(), USER_VAR.get()))
        ag.autograd.queue_callback(lambda: self.callbacks_run.add(level))
        if level == self.fail_at:
            raise Boom(f"level {level} failed")
        if level == self.park_at:
            assert self.test_loop is not None
            assert self.parked is not None
            self.test_loop.call_soon_threadsafe(self.parked.set)

    def nested_done(self, level: int) -> None:
        # The pass this level ran has completed, final callbacks included.
        assert level + 1 in self.callbacks_run

    async def park_async(self) -> None:
        gate = asyncio.Event()
        self.gate = (asyncio.get_running_loop(), gate)
        async with asyncio.timeout(TIMEOUT_S):
            await gate.wait()

    def park_sync(self) -> None:
        assert self.go.wait(THREAD_TIMEOUT_S)

    def release(self) -> None:
        self.go.set()
        if self.gate is not None:
            loop, gate = self.gate
            if not loop.is_closed():  # a transient loop is closed once its level has ended
                loop.call_soon_threadsafe(gate.set)


class SyncLevel(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, probe: Probe, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.probe, ctx.level = probe, level
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> Any:
        probe: Probe = ctx.probe
        level: int = ctx.level
        probe.enter(level)
        if level == probe.park_at:
            probe.park_sync()
        if level == probe.depth - 1:
            return g, None, None
        (x,) = ctx.saved_tensors
        xd, out = probe.inner(x, level)
        out.backward()
        probe.nested_done(level)
        return g * xd.grad, None, None


class AsyncLevel(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, probe: Probe, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.probe, ctx.level = probe, level
        return x * 1.0

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> Any:
        probe: Probe = ctx.probe
        level: int = ctx.level
        probe.enter(level)
        if level == probe.park_at:
            await probe.park_async()
        if level == probe.depth - 1:
            return g, None, None
        (x,) = ctx.saved_tensors
        xd, out = probe.inner(x, level)
        if level == probe.cancel_nested_at:
            # Cancel this level's own nested pass once a deeper level has parked: the levels
            # below stop, while this one goes on.
            nested = asyncio.ensure_future(ag.backward(out))
            assert probe.parked is not None
            assert probe.test_loop is not None
            parked = asyncio.run_coroutine_threadsafe(probe.parked.wait(), probe.test_loop)
            async with asyncio.timeout(TIMEOUT_S):
                await asyncio.wrap_future(parked)
            nested.cancel()
            with pytest.raises(asyncio.CancelledError):
                await nested
            return g, None, None
        await ag.backward(out)
        probe.nested_done(level)
        return g * xd.grad, None, None


def _check_complete(probe: Probe, x: ag.Tensor) -> None:
    assert probe.entered == probe.depth
    assert sorted(s[0] for s in probe.seen) == list(range(probe.depth))
    assert_close(x.grad, [1.0])
    assert_close(probe.shared.grad, [float(probe.depth)])  # once per pass: each one completed


async def _run_awaited(kind: Kind, depth: int, usage: Usage | None = None) -> Probe:
    probe = Probe(kind, depth, usage)
    x, out = probe.top()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out)
    _check_complete(probe, x)
    return probe


def _run_blocking(kind: Kind, depth: int, usage: Usage | None = None) -> Probe:
    probe = Probe(kind, depth, usage)
    x, out = probe.top()
    out.backward()
    _check_complete(probe, x)
    return probe


# ----------------------------------------------------------------------------- resources
@pytest.mark.usefixtures("shallow_limit")
async def test_awaited_chain_runs_on_a_fixed_set_of_threads_and_loops() -> None:
    await _run_awaited(all_async, WARM_UP_DEPTH)
    usage = Usage()
    probe = await _run_awaited(all_async, DEPTH, usage)
    # Every level awaits the next on a pool loop that was already there: not one more thread
    # or file descriptor, however deep.
    usage.assert_peak_at_most(threads=0, fds=0)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.autograd.engine.wait_idle()
        await _assert_pool_idle()
    usage.assert_back_to_start()
    for level, depth, local, _, _ in probe.seen:
        assert depth == level
        assert local <= DEPTH_LIMIT


@pytest.mark.usefixtures("shallow_limit")
def test_blocking_caller_of_an_awaited_chain_uses_a_fixed_set() -> None:
    _run_blocking(all_async, WARM_UP_DEPTH)
    usage = Usage()
    _run_blocking(all_async, DEPTH, usage)
    usage.assert_peak_at_most(threads=0, fds=0)
    _assert_pool_idle_sync()
    usage.assert_back_to_start()


@pytest.mark.usefixtures("shallow_limit")
def test_concurrent_blocking_callers_share_the_pool() -> None:
    _run_blocking(all_async, WARM_UP_DEPTH)
    usage = Usage()
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            _run_blocking(all_async, DEPTH, usage)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=caller, name=f"caller-{i}") for i in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=THREAD_TIMEOUT_S)
        assert not t.is_alive()
    assert errors == []
    # The callers' own threads, and nothing else: they all share the pool loop of the warm-up.
    usage.assert_peak_at_most(threads=CALLERS, fds=0)
    _assert_pool_idle_sync()
    usage.assert_back_to_start()


@pytest.mark.usefixtures("shallow_limit")
def test_sync_chain_releases_its_threads() -> None:
    _run_blocking(all_sync, WARM_UP_DEPTH)
    usage = Usage()
    _run_blocking(all_sync, DEPTH, usage)
    # A sync backward's stack cannot be suspended: a thread per DEPTH_LIMIT + 1 levels, no more,
    # and no file descriptors; all of them end with the pass.
    usage.assert_peak_at_most(threads=math.ceil(DEPTH / (DEPTH_LIMIT + 1)), fds=0)
    _assert_pool_idle_sync()
    usage.assert_back_to_start()


@pytest.mark.usefixtures("shallow_limit")
def test_alternating_chain_releases_its_threads_and_loops() -> None:
    # Sync over async over sync ...: every sync level blocks a thread that holds a loop, so
    # each pair of levels holds one while the pass runs, and gives it back when it ends: only
    # the persistent pool (started by the warm-up) is left.
    _run_blocking(alternating, ALTERNATING_DEPTH)
    usage = Usage()
    _run_blocking(alternating, ALTERNATING_DEPTH, usage)
    usage.assert_peak_at_most(threads=ALTERNATING_DEPTH, fds=16 * ALTERNATING_DEPTH)
    _assert_pool_idle_sync()
    usage.assert_back_to_start()
    assert len(pools.loop_pool.loops()) <= ag.autograd.engine.executor_size


async def test_awaited_chain_at_issue_scale() -> None:
    # The default depth limit: ISSUE_DEPTH levels used to leave a thread and a loop (with its
    # file descriptors) behind for every limit's worth of levels.
    await _run_awaited(all_async, 2 * ag.autograd.engine.max_reentrant_depth + 2)
    usage = Usage()
    probe = await _run_awaited(all_async, ISSUE_DEPTH, usage)
    usage.assert_peak_at_most(threads=0, fds=0)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.autograd.engine.wait_idle()
        await _assert_pool_idle()
    usage.assert_back_to_start()
    assert max(s[2] for s in probe.seen) <= ag.autograd.engine.max_reentrant_depth


@pytest.mark.usefixtures("shallow_limit")
@pytest.mark.parametrize("kind", ["async", "async-then-sync", "async-then-alternating"])
async def test_context_reaches_every_offloaded_level(kind: str) -> None:
    token = USER_VAR.set("caller")
    try:
        probe = await _run_awaited(KINDS[kind], WARM_UP_DEPTH)
    finally:
        USER_VAR.reset(token)
    # Grad mode (off inside a backward without create_graph), the caller's context variables,
    # and the graph task (depth; queue_callback, checked by each level) flow into every level.
    assert {(s[3], s[4]) for s in probe.seen} == {(False, "caller")}
    assert [s[1] for s in sorted(probe.seen)] == list(range(WARM_UP_DEPTH))
    assert probe.callbacks_run == set(range(WARM_UP_DEPTH))


# ----------------------------------------------------------------------------- cancellation
@pytest.mark.usefixtures("shallow_limit")
@pytest.mark.parametrize("kind", ["async", "async-then-sync", "async-then-alternating"])
async def test_cancel_stops_every_level(kind: str) -> None:
    await _run_awaited(KINDS[kind], WARM_UP_DEPTH)
    usage = Usage()
    probe = Probe(KINDS[kind], DEPTH)
    probe.park_at = PARK_LEVEL
    probe.test_loop = asyncio.get_running_loop()
    probe.parked = asyncio.Event()
    x, out = probe.top()
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.backward(out))
        await probe.parked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Let the parked level go: it must not start another level (a sync one cannot be
        # interrupted, but the next backward it starts refuses to run).
        probe.release()
        await ag.autograd.engine.wait_idle()
        await _assert_pool_idle()
    usage.assert_back_to_start()
    assert probe.entered == PARK_LEVEL + 1
    assert x.grad is None
    assert probe.shared.grad is None  # no nested pass completed


@pytest.mark.usefixtures("shallow_limit")
async def test_cancelling_a_nested_pass_alone_stops_its_levels() -> None:
    probe = Probe(all_async, DEPTH)
    probe.park_at = PARK_LEVEL
    probe.cancel_nested_at = CANCEL_LEVEL
    probe.test_loop = asyncio.get_running_loop()
    probe.parked = asyncio.Event()
    x, out = probe.top()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out)
        probe.release()
        await ag.autograd.engine.wait_idle()
        await _assert_pool_idle()
    assert probe.entered == PARK_LEVEL + 1
    assert_close(x.grad, [1.0])
    # The top pass, and the nested ones above the cancelled one.
    assert_close(probe.shared.grad, [float(CANCEL_LEVEL + 1)])


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("kind", "depth", "fail_at", "limit"),
    [
        ("async", ISSUE_DEPTH, FAIL_LEVEL, None),
        ("sync", ISSUE_DEPTH, FAIL_LEVEL, None),
        ("async-then-sync", DEPTH, DEPTH // 2, DEPTH_LIMIT),
        ("async-then-alternating", DEPTH // 2, DEPTH // 4, DEPTH_LIMIT),
    ],
)
async def test_error_at_depth_reaches_the_caller(
    kind: str, depth: int, fail_at: int, limit: int | None
) -> None:
    old = ag.autograd.engine.max_reentrant_depth
    if limit is not None:
        ag.autograd.engine.configure(max_reentrant_depth=limit)
    try:
        await _run_awaited(KINDS[kind], WARM_UP_DEPTH)
        usage = Usage()
        probe = Probe(KINDS[kind], depth)
        probe.fail_at = fail_at
        x, out = probe.top()
        async with asyncio.timeout(TIMEOUT_S):
            with pytest.raises(Boom) as info:
                await ag.backward(out)
            await ag.autograd.engine.wait_idle()
            await _assert_pool_idle()
    finally:
        ag.autograd.engine.configure(max_reentrant_depth=old)
    assert str(info.value) == f"level {fail_at} failed"
    del info
    usage.assert_back_to_start()
    assert probe.entered == fail_at + 1
    assert x.grad is None
    assert probe.shared.grad is None


@pytest.mark.usefixtures("shallow_limit")
@pytest.mark.parametrize("kind", ["async", "sync", "alternating"])
def test_error_at_depth_reaches_a_blocking_caller(kind: str) -> None:
    _run_blocking(KINDS[kind], WARM_UP_DEPTH)
    usage = Usage()
    probe = Probe(KINDS[kind], ALTERNATING_DEPTH)
    probe.fail_at = ALTERNATING_DEPTH - 10
    x, out = probe.top()
    with pytest.raises(Boom) as info:
        out.backward()
    assert str(info.value) == f"level {probe.fail_at} failed"
    del info
    _assert_pool_idle_sync()
    usage.assert_back_to_start()
    assert probe.entered == probe.fail_at + 1
    assert x.grad is None
    assert probe.shared.grad is None


@pytest.mark.usefixtures("shallow_limit")
def test_growing_executor_size_after_first_use_does_not_deadlock() -> None:
    # The thread pool is made at its first use with the executor_size of the time; a later,
    # larger executor_size must not queue a level behind pool threads that wait for it.
    old = ag.autograd.engine.executor_size
    ag.autograd.engine.shutdown()
    ag.autograd.engine.configure(executor_size=1)
    done = threading.Event()
    try:
        _run_blocking(all_sync, WARM_UP_DEPTH)
        ag.autograd.engine.configure(executor_size=old + 2)

        def caller() -> None:
            _run_blocking(all_sync, WARM_UP_DEPTH)
            done.set()

        thread = threading.Thread(target=caller, name="sync-chain-caller", daemon=True)
        thread.start()
        assert done.wait(THREAD_TIMEOUT_S), "the chain deadlocked"
        thread.join(timeout=THREAD_TIMEOUT_S)
    finally:
        ag.autograd.engine.configure(executor_size=old)
        if done.is_set():  # a deadlocked pool cannot be shut down
            ag.autograd.engine.shutdown()
