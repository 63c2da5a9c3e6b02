"""Waiting for the GPU (NOTE [Waiting for the GPU] in asyncgrad/backend/cuda.py): an awaiting
caller resumes when its events are done, fails with the CUDA error of a broken device instead of
waiting for ever (NOTE [Sticky errors] in the simulator), and is woken by a host function that
only its own event orders.

The tests that break a device or hold a stream with a long kernel look inside the simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

from .conftest import host, leaf, needs_devices

# An await that has not finished by then hangs.
WAIT_S: Final = 5.0
# A long kernel left running (a failed test) ends by itself after this long.
KERNEL_TIMEOUT_S: Final = 10.0


@pytest.fixture
def broken(sim: Any) -> Iterator[Any]:
    """The simulator, whose devices are repaired after the test (a GPU needs a new process)."""
    try:
        yield sim
    finally:
        for index in range(ag.cuda.device_count()):
            sim.reset_device(index)


def long_kernel(stream: Any) -> threading.Event:
    """Queue on ``stream`` (a simulated one) a kernel that runs until the returned event is set:
    it holds the stream without being a host function, which would hold every host function."""
    done = threading.Event()
    stream._queue.submit(lambda: done.wait(KERNEL_TIMEOUT_S))
    return done


# ----------------------------------------------------------------------------- a broken device
async def test_a_device_error_fails_an_awaited_grad_instead_of_hanging(broken: Any) -> None:
    x = leaf(np.linspace(-1, 1, 8))
    loss = (x * x).sum()
    broken.inject_fault()  # ahead of the backward's kernels on the current stream
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress") as info:
        await asyncio.wait_for(ag.grad(loss, [x], retain_graph=True), WAIT_S)
    assert any("cuda:0" in note for note in info.value.__notes__)
    with pytest.raises(broken.CUDARuntimeError, match="illegal memory access"):
        await asyncio.wait_for(loss.abackward(), WAIT_S)


async def test_a_device_error_fails_a_pass_whose_worker_runs_ahead(broken: Any) -> None:
    """The worker waits for the GPU between slices (NOTE [Running ahead of the GPU]): the error
    found there fails the passes queued on the device."""
    x = leaf(np.ones(4))
    y = x
    for _ in range(200):
        y = y * 1.0
    loss = y.sum()
    old = ag.autograd.engine.slice_s
    ag.autograd.engine.configure(slice_s=1e-9)  # a slice is then the 16 nodes between checks
    try:
        broken.inject_fault()
        with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
            await asyncio.wait_for(ag.grad(loss, [x]), WAIT_S)
    finally:
        ag.autograd.engine.configure(slice_s=old)


async def test_a_device_error_fails_a_copy_to_the_host_in_an_awaited_backward(
    broken: Any,
) -> None:
    x = ag.tensor(np.linspace(-1, 1, 8), requires_grad=True)
    loss = (x.cuda() ** 2).sum()
    broken.inject_fault()
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        await asyncio.wait_for(ag.grad(loss, [x]), WAIT_S)


async def test_awaiting_an_event_of_a_broken_device_raises(broken: Any) -> None:
    s = ag.cuda.current_stream()
    held = long_kernel(s.native)  # the fault runs only after the event is recorded
    broken.inject_fault(s.native)
    ev = s.record_event()
    held.set()
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        await asyncio.wait_for(_wait(ev), WAIT_S)


def _break_device_now(sim: Any) -> Callable[[ag.Tensor], None]:
    """A tensor hook that breaks the current device and returns once it is broken: every launch
    and event record on it raises from then on, as on a GPU."""

    def hook(_: ag.Tensor) -> None:
        sim.inject_fault()
        with contextlib.suppress(sim.CUDARuntimeError):
            sim.cuda.get_current_stream().synchronize()

    return hook


async def test_a_device_broken_mid_pass_fails_the_pass_and_the_engine_goes_on(
    broken: Any,
) -> None:
    """The kernels after the failed one cannot even be launched: the awaited pass fails with the
    CUDA error (never hangs); the other device keeps serving on the same loop, and so does the
    broken one once repaired."""
    needs_devices(2)
    x = leaf(np.linspace(-1.0, 1.0, 8))
    h = x * 2.0
    h.register_hook(_break_device_now(broken))
    loss = h.sin().sum()
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        await asyncio.wait_for(ag.grad(loss, [x]), WAIT_S)
    y = leaf(np.arange(4.0), "cuda:1")
    (gy,) = await asyncio.wait_for(ag.grad((y * y).sum(), [y]), WAIT_S)
    np.testing.assert_array_equal(host(gy), 2.0 * np.arange(4.0))
    broken.reset_device(0)
    z = leaf(np.arange(4.0))
    (gz,) = await asyncio.wait_for(ag.grad((z * 3.0).sum(), [z]), WAIT_S)
    np.testing.assert_array_equal(host(gz), np.full(4, 3.0))


async def test_an_error_on_one_device_while_the_other_runs_leaves_no_stream_thread(
    broken: Any,
) -> None:
    """The gradient of a leaf on cuda:1 is copied there from cuda:0, whose stream is busy: cuda:1's
    stream waits for it. cuda:1 breaks meanwhile: the awaited pass fails with its error while
    cuda:0 still runs, and cuda:1's stream, which will run nothing more, keeps no thread (one
    stayed blocked in its wait until cuda:0 was done)."""
    needs_devices(2)
    x = leaf(np.linspace(-1.0, 1.0, 8), "cuda:1")
    loss = (x.to("cuda:0") * 2.0).sin().sum()
    with broken.cuda.Device(1):
        elsewhere = broken.cuda.Stream(non_blocking=True)  # idle: its fault runs at once

    def break_cuda1(_: ag.Tensor) -> None:
        with broken.cuda.Device(1):
            broken.inject_fault(elsewhere)

    x.register_hook(break_cuda1)
    held = long_kernel(ag.cuda.current_stream(0).native)
    try:
        with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
            await asyncio.wait_for(ag.grad(loss, [x]), WAIT_S)
        assert not ag.cuda.current_stream(0).query(), "cuda:0 still runs"
        for thread in threading.enumerate():
            if thread.name.startswith("asyncgrad-sim-stream-1-"):
                thread.join(WAIT_S)
                assert not thread.is_alive(), f"{thread.name} outlived its broken device"
    finally:
        held.set()


def test_a_device_broken_mid_pass_fails_a_blocking_backward(broken: Any) -> None:
    x = leaf(np.linspace(-1.0, 1.0, 8))
    h = x * 2.0
    h.register_hook(_break_device_now(broken))
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        h.sin().sum().backward()
    broken.reset_device(0)
    x.grad = None
    (x * 3.0).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(host(x.grad), np.full(8, 3.0))


async def _wait(ev: ag.cuda.Event) -> None:
    await ev


# ----------------------------------------------------------------------------- events
async def test_the_engines_events_keep_no_timing_data(
    sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[Any] = []
    record = sim.Event.record

    def spy(self: Any, stream: Any = None) -> None:
        recorded.append(self)
        record(self, stream)

    xv = np.linspace(-1, 1, 8)
    x = leaf(xv)
    s = ag.cuda.Stream()
    s.wait_stream(ag.cuda.current_stream())
    with ag.cuda.stream(s):
        a = x.sin()
    ag.cuda.current_stream().wait_stream(s)
    loss = (a * x).sum()  # x's gradients meet from two streams
    monkeypatch.setattr(sim.Event, "record", spy)
    (g,) = await asyncio.wait_for(ag.grad(loss, [x]), WAIT_S)
    monkeypatch.undo()
    np.testing.assert_allclose(g.cpu().numpy(), np.cos(xv) * xv + np.sin(xv))
    assert recorded
    assert all(ev._disable_timing for ev in recorded)


# ----------------------------------------------------------------------------- waking up
async def test_a_wake_up_does_not_wait_for_work_queued_after_the_event(
    sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "POLL_SWITCH_S", 0.0)  # straight to the host function
    monkeypatch.setattr(runtime, "POLL_SLOW_S", 60.0)  # and no safety-net poll
    s = runtime.current_stream(0)
    before = long_kernel(s)
    ev = runtime.record(s, 0)
    after = long_kernel(s)  # the next work on the stream, still running when ev is done
    try:
        task = asyncio.ensure_future(runtime.wait_until_done([(ev, 0)]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        before.set()
        await asyncio.wait_for(task, WAIT_S)
        assert ev.done
        assert not after.is_set()
        assert not s.done
    finally:
        before.set()
        after.set()


async def test_a_wake_up_does_not_wait_for_another_callers_event(
    sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two waits in their host-function phase at once on one device: the one whose event is done
    first resumes, while the other's event is still held."""
    monkeypatch.setattr(runtime, "POLL_SWITCH_S", 0.0)
    monkeypatch.setattr(runtime, "POLL_SLOW_S", 60.0)
    s1, s2 = ag.cuda.Stream().native, ag.cuda.Stream().native
    slow, quick = long_kernel(s1), long_kernel(s2)
    ev1, ev2 = runtime.record(s1, 0), runtime.record(s2, 0)
    try:
        first = asyncio.ensure_future(runtime.wait_until_done([(ev1, 0)]))
        for _ in range(20):
            await asyncio.sleep(0)
        second = asyncio.ensure_future(runtime.wait_until_done([(ev2, 0)]))
        for _ in range(20):
            await asyncio.sleep(0)
        quick.set()
        await asyncio.wait_for(second, WAIT_S)
        assert not first.done()
        slow.set()
        await asyncio.wait_for(first, WAIT_S)
    finally:
        slow.set()
        quick.set()


class _Clock:
    """A ``perf_counter`` that advances one second per reading."""

    def __init__(self) -> None:
        self.ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self.ticks))


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner.name``: the list holds one entry per call."""
    calls: list[int] = []
    original: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(owner, name, counted)
    return calls


async def test_polling_lasts_its_budget_of_wall_time_then_a_host_function_wakes(
    sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every loop the first phase polls once per turn of the loop until POLL_SWITCH_S of
    perf_counter time has passed (a clock of one second per reading, a budget of four)."""
    monkeypatch.setattr(runtime, "perf_counter", _Clock())
    monkeypatch.setattr(runtime, "POLL_SWITCH_S", 4.0)
    s = runtime.current_stream(0)
    gate = long_kernel(s)
    ev = runtime.record(s, 0)
    queries = _count_calls(monkeypatch, sim.cuda.runtime, "eventQuery")
    at_launch: list[int] = []
    launch = sim.Stream.launch_host_func

    def spy(self: Any, callback: Any, arg: Any) -> None:
        at_launch.append(len(queries))
        launch(self, callback, arg)

    monkeypatch.setattr(sim.Stream, "launch_host_func", spy)
    try:
        task = asyncio.ensure_future(runtime.wait_until_done([(ev, 0)]))
        for _ in range(1000):
            if at_launch:
                break
            assert not task.done()
            await asyncio.sleep(0)
        gate.set()
        await asyncio.wait_for(task, WAIT_S)
    finally:
        gate.set()
    # The first check, one per turn at clock readings 1, 2 and 3 (the start read 0, and 4 ends
    # the budget), and the check before queuing the host function.
    assert at_launch == [1 + 3 + 1]


async def test_a_wait_done_within_the_budget_queues_no_host_function(
    sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "POLL_SWITCH_S", 1e9)
    s = runtime.current_stream(0)
    gate = long_kernel(s)
    ev = runtime.record(s, 0)
    launches = _count_calls(monkeypatch, sim.Stream, "launch_host_func")
    queries = _count_calls(monkeypatch, sim.cuda.runtime, "eventQuery")
    try:
        task = asyncio.ensure_future(runtime.wait_until_done([(ev, 0)]))
        for _ in range(1000):  # it polls while the loop turns
            if len(queries) >= 10:
                break
            await asyncio.sleep(0)
        assert len(queries) >= 10
        assert not task.done()
        gate.set()
        await asyncio.wait_for(task, WAIT_S)
    finally:
        gate.set()
    assert launches == []


def test_query_raises_the_error_of_a_broken_device(broken: Any) -> None:
    """As torch's ``Event.query``/``Stream.query``: a device that a failed kernel broke raises
    its CUDA error instead of answering "not yet" for ever."""
    s = ag.cuda.current_stream()
    ev = s.record_event()
    s.synchronize()
    assert ev.query()
    assert s.query()
    broken.inject_fault(s.native)
    with contextlib.suppress(broken.CUDARuntimeError):
        s.synchronize()  # the fault has run
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        ev.query()
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        s.query()
    assert "failed" in repr(ev)


def test_a_device_broken_after_the_last_node_fails_a_blocking_backward(broken: Any) -> None:
    """A final callback breaks the device after every node ran: the caller's streams cannot be
    ordered after the pass's, so the backward raises, and the engine counts the pass as failed
    (before, it ended uncounted: neither completed nor failed)."""
    ag.autograd.engine.reset_stats()
    x = leaf(np.linspace(-1.0, 1.0, 8))

    def break_device_at_the_end(g: ag.Tensor) -> None:
        ag.autograd.engine.queue_callback(lambda: _break_device_now(broken)(g))

    x.register_hook(break_device_at_the_end)
    with pytest.raises(broken.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        (x * 2.0).sum().backward()
    tasks = ag.autograd.engine.stats()["graph_tasks"]
    assert (tasks["running"], tasks["failed"], tasks["completed"]) == (0, 1, 0)
