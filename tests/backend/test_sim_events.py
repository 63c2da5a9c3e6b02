"""The simulated device's events, asynchronous errors and host functions behave as CuPy's on a GPU:
``cuda.runtime.eventQuery`` returns CUDA status codes, a failed kernel breaks its device for good
(NOTE [Sticky errors]), and host functions run one at a time with their exceptions reported and
dropped (NOTE [Host functions]).

No test sleeps to synchronise; every wait has a timeout.
"""

from __future__ import annotations

import pickle
import sys
import threading
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

from asyncgrad.backend import sim

from .simtools import TIMEOUT_S, held_by_kernel

# How long a host function waits to see another one run (it cannot: they are serialised).
OVERLAP_WAIT_S: Final = 0.2


@pytest.fixture(autouse=True)
def repaired_devices() -> Iterator[None]:
    """Two simulated devices without delays; afterwards both are repaired (a test may break one
    on purpose) and idle."""
    settings = sim._settings()
    before = (settings.devices, settings.delay)
    sim.configure(devices=2, delay=0.0, seed=0)
    try:
        yield
    finally:
        for index in (0, 1):
            sim.reset_device(index)
            sim.cuda.Device(index).synchronize()
        sim.configure(devices=before[0], delay=before[1])


def query(event: sim.Event) -> int:
    return sim.cuda.runtime.eventQuery(event.ptr)


# ----------------------------------------------------------------------------- events
def test_events_have_handles_queried_for_cuda_status_codes() -> None:
    stream = sim.cuda.Stream()
    unrecorded = sim.cuda.Event()
    assert isinstance(unrecorded.ptr, int)
    assert query(unrecorded) == sim.SUCCESS
    with held_by_kernel(stream):
        pending = stream.record()
        assert pending.ptr != unrecorded.ptr
        assert query(pending) == sim.NOT_READY == 600
        assert not pending.done
    pending.synchronize()
    assert query(pending) == sim.SUCCESS == 0
    assert pending.done
    ptr = pending.ptr
    del pending
    assert sim.cuda.runtime.eventQuery(ptr) == sim.INVALID_RESOURCE_HANDLE


def test_events_remember_whether_timing_is_disabled() -> None:
    assert sim.cuda.Stream().record()._disable_timing is False  # as CuPy's Stream.record()
    assert sim.cuda.Event(disable_timing=True)._disable_timing is True
    assert sim.cuda.Event(disable_timing=True, interprocess=True)._disable_timing is True
    with pytest.raises(ValueError, match="Timing must be disabled for interprocess events"):
        sim.cuda.Event(interprocess=True)


def test_cuda_runtime_error_names_the_status_as_cupy_does() -> None:
    error = sim.CUDARuntimeError(sim.ILLEGAL_ADDRESS)
    assert error.status == 700
    assert str(error) == "cudaErrorIllegalAddress: an illegal memory access was encountered"
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.status, str(copy)) == (sim.CUDARuntimeError, 700, str(error))
    try:
        from cupy.cuda import runtime as cupy_runtime  # the wheel imports without a GPU
    except ImportError:
        return
    for status in sim._STATUS_TEXT:
        assert str(sim.CUDARuntimeError(status)) == str(cupy_runtime.CUDARuntimeError(status))


# ----------------------------------------------------------------------------- sticky errors
def test_a_failed_kernel_breaks_its_device_for_good() -> None:
    stream = sim.cuda.Stream()
    other = sim.cuda.Stream()
    with sim.cuda.Device(1):
        elsewhere = sim.cuda.Stream()
    with stream:
        before = sim.ones(3)
        earlier = stream.record()
        stream.synchronize()
    called: list[int] = []
    with held_by_kernel(stream), stream:
        pending = stream.record()
        sim.inject_fault()
        after = before * 2  # never runs
        stream.launch_host_func(called.append, 1)  # never called
        later = stream.record()
    for _ in range(2):  # sticky: every wait fails the same way
        with pytest.raises(sim.CUDARuntimeError, match="cudaErrorIllegalAddress") as info:
            stream.synchronize()
        assert info.value.status == sim.ILLEGAL_ADDRESS
        assert any("cuda:0" in note for note in info.value.__notes__)
    assert np.isnan(after._data).all()
    assert called == []
    for event in (earlier, pending, later, sim.cuda.Event()):
        assert query(event) == sim.ILLEGAL_ADDRESS
        assert not event.done
    launches = (  # nothing more can be queued on the device, on any of its streams
        other.record,
        lambda: other.wait_event(earlier),
        lambda: other.launch_host_func(called.append, 2),
        lambda: before * 2,
        lambda: sim.inject_fault(other),
    )
    for launch in launches:
        with pytest.raises(sim.CUDARuntimeError, match="cudaErrorIllegalAddress"):
            launch()
    waits = (
        later.synchronize,
        sim.cuda.Event().synchronize,
        other.synchronize,
        sim.cuda.Device(0).synchronize,
        sim.cuda.runtime.deviceSynchronize,
        before.get,
        lambda: sim.asnumpy(before),
    )
    for wait in waits:
        with pytest.raises(sim.CUDARuntimeError, match="illegal memory access"):
            wait()
    with sim.cuda.Device(1), elsewhere:  # the other device goes on
        y = sim.arange(3.0) + 1
        ok = elsewhere.record()
    np.testing.assert_array_equal(y.get(elsewhere), [1.0, 2.0, 3.0])
    assert query(ok) == sim.SUCCESS

    sim.reset_device(0)  # a test's repair: a GPU needs a new process
    assert earlier.done
    with stream:
        z = sim.arange(2.0) * 3
    np.testing.assert_array_equal(z.get(stream), [0.0, 3.0])


def test_a_fault_drops_the_host_functions_and_waits_queued_behind_it() -> None:
    """Streams waiting for an event behind the fault are not held up by it."""
    stream, consumer = sim.cuda.Stream(), sim.cuda.Stream()
    called: list[int] = []
    with held_by_kernel(stream):
        sim.inject_fault(stream)
        stream.launch_host_func(called.append, 1)
        consumer.wait_event(stream.record())
        consumer.launch_host_func(called.append, 2)
    with pytest.raises(sim.CUDARuntimeError):
        sim.cuda.Device(0).synchronize()
    assert called == []
    assert stream._queue.completed == stream._queue.submitted
    assert consumer._queue.completed == consumer._queue.submitted


def test_a_broken_device_gives_up_its_waits_for_another_device() -> None:
    """A stream of cuda:1 waits for cuda:0, which is busy; cuda:1 breaks meanwhile (a kernel on
    another of its streams fails). Its stream runs nothing more, so its thread ends and the
    device's host wait raises at once, while cuda:0 still runs, as on a GPU (the thread used to
    stay blocked until cuda:0 was done, and the host wait with it)."""
    producer = sim.cuda.Stream()
    with sim.cuda.Device(1):
        waiting = sim.cuda.Stream()
    with held_by_kernel(producer):
        ready = producer.record()
        with sim.cuda.Device(1):
            waiting.wait_event(ready)
            with waiting:
                behind = sim.ones(2) * 3  # never runs
            sim.inject_fault()  # on cuda:1's default stream
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                sim.cuda.Device(1).synchronize()
            except BaseException as exc:
                outcome.append(exc)

        host = threading.Thread(target=wait)
        host.start()
        host.join(TIMEOUT_S / 2)  # the hold lasts until the block ends (or TIMEOUT_S)
        assert not host.is_alive(), "the host wait on cuda:1 waited for cuda:0"
        assert producer._queue.completed < producer._queue.submitted, "cuda:0 still runs"
        assert [type(e) for e in outcome] == [sim.CUDARuntimeError]
        assert waiting._queue.thread is None, "cuda:1's stream kept its thread"
    assert np.isnan(behind._data).all()
    sim.reset_device(1)


def test_errors_raised_by_a_kernels_python_code_are_not_sticky() -> None:
    stream = sim.cuda.Stream()
    with stream:
        z = sim.zeros(2)
        np.add.at(z, sim.asarray([3]), 1.0)  # ufunc.at keeps NumPy's bounds check
        event = stream.record()
    with pytest.raises(IndexError, match="out of bounds"):
        stream.synchronize()
    assert query(event) == sim.SUCCESS
    stream.synchronize()  # raised once
    np.testing.assert_array_equal(z.get(stream), [0.0, 0.0])


# ----------------------------------------------------------------------------- host functions
def test_host_function_exceptions_are_reported_and_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    stream = sim.cuda.Stream()
    called: list[int] = []

    def fail(message: str) -> None:
        raise RuntimeError(message)

    stream.launch_host_func(fail, "ignored")
    stream.launch_host_func(called.append, 1)
    stream.synchronize()  # nothing to raise: the stream went on
    assert called == [1]
    assert len(reported) == 1
    error = reported[0].exc_value
    assert isinstance(error, RuntimeError)
    assert str(error) == "ignored"
    assert any("host function" in note for note in error.__notes__)


def test_host_functions_of_two_streams_run_one_at_a_time() -> None:
    """The driver may serialise host functions of independent streams: one that waits for
    another to run never sees it run."""
    first, second = sim.cuda.Stream(), sim.cuda.Stream()
    started, second_ran = threading.Event(), threading.Event()
    order: list[str] = []

    def wait_for_the_other(_: Any) -> None:
        started.set()
        order.append("first starts")
        order.append("saw the second" if second_ran.wait(OVERLAP_WAIT_S) else "alone")

    def mark(_: Any) -> None:
        order.append("second")
        second_ran.set()

    first.launch_host_func(wait_for_the_other, None)
    assert started.wait(TIMEOUT_S)
    second.launch_host_func(mark, None)
    first.synchronize()
    second.synchronize()
    assert order == ["first starts", "alone", "second"]
