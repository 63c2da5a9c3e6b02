"""The simulator's ordering check (NOTE [Ordering check] in asyncgrad/backend/sim.py): with
``configure(check_order=True)`` an access that CUDA's stream orders do not put after an earlier
conflicting one raises StreamOrderError at once, whether or not the earlier work has run.

Streams are held by a kernel waiting for a gate, never by sleeping; every wait has a timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from asyncgrad.backend import sim

from .simtools import TIMEOUT_S, held_by_kernel, two_devices

RACE = "nothing orders the two"


@pytest.fixture(autouse=True)
def checked() -> Iterator[None]:
    """Two simulated devices without delays, with the ordering check on."""
    with two_devices():
        sim.configure(check_order=True)
        try:
            yield
        finally:
            sim.configure(check_order=False)


def elsewhere() -> tuple[sim.Stream, sim.Stream]:
    return sim.cuda.Stream(non_blocking=True), sim.cuda.Stream(non_blocking=True)


def test_a_read_of_another_streams_result_needs_a_wait() -> None:
    producer, consumer = elsewhere()
    with producer:
        a = sim.arange(4.0) * 2
    with consumer, pytest.raises(sim.StreamOrderError, match=RACE) as info:
        _ = a + 1
    assert producer._queue.name in str(info.value)
    assert consumer._queue.name in str(info.value)
    consumer.wait_event(producer.record())
    with consumer:
        b = a + 1
    np.testing.assert_array_equal(b.get(consumer), [1.0, 3.0, 5.0, 7.0])


def test_the_check_does_not_depend_on_timing() -> None:
    """The producer has run (another thread waited for it), yet nothing orders the consumer
    after it: this thread never waited, so the read is a race all the same."""
    producer, consumer = elsewhere()
    with producer:
        a = sim.arange(4.0) * 2
    waiter = threading.Thread(target=producer.synchronize)
    waiter.start()
    waiter.join(TIMEOUT_S)
    assert producer._queue.completed == producer._queue.submitted
    with consumer, pytest.raises(sim.StreamOrderError, match=RACE):
        _ = a + 1
    producer.synchronize()  # this thread has waited now: what it launches next is ordered
    with consumer:
        b = a + 1
    np.testing.assert_array_equal(b.get(consumer), [1.0, 3.0, 5.0, 7.0])


def test_a_wait_for_an_event_that_has_run_still_orders() -> None:
    producer, consumer = elsewhere()
    with producer:
        a = sim.arange(3.0)
    event = producer.record()
    other = threading.Thread(target=event.synchronize)  # the event has run: the wait is skipped
    other.start()
    other.join(TIMEOUT_S)
    consumer.wait_event(event)
    with consumer:
        b = a * 2
    np.testing.assert_array_equal(b.get(consumer), [0.0, 2.0, 4.0])


def test_a_block_reused_while_another_stream_may_still_read_it() -> None:
    """The pool hands out a block freed on its stream at once: a reader on another stream that
    nothing orders before the reuse races with it, however long ago it was queued."""
    owner, reader = elsewhere()
    with owner:
        a = sim.arange(64.0)
    reader.wait_event(owner.record())
    with held_by_kernel(reader):
        with reader:
            b = a * 2  # queued, behind the held kernel
        del a
        with owner, pytest.raises(sim.StreamOrderError, match="an allocation on"):
            sim.empty((64,))
    owner.wait_event(reader.record())  # ordered after the reader now: the reuse is safe
    with owner:
        c = sim.zeros((64,))
    np.testing.assert_array_equal(b.get(reader), 2 * np.arange(64.0))
    np.testing.assert_array_equal(c.get(owner), np.zeros(64))


def test_a_block_freed_after_a_host_wait_is_reused_safely() -> None:
    """The thread that frees a block hands what it knew to the block's next owner: the engine
    drops arrays on its releaser thread once their events are done."""
    owner, reader = elsewhere()
    with owner:
        a = sim.arange(64.0)
    reader.wait_event(owner.record())
    with reader:
        b = a * 2
    done = reader.record()
    holder = [a]
    del a

    def release() -> None:
        done.synchronize()
        holder.clear()

    releaser = threading.Thread(target=release)
    releaser.start()
    releaser.join(TIMEOUT_S)
    with owner:
        c = sim.ones((64,))
    np.testing.assert_array_equal(c.get(owner), np.ones(64))
    np.testing.assert_array_equal(b.get(reader), 2 * np.arange(64.0))


def test_writing_into_another_streams_array_needs_a_wait() -> None:
    """Even a write that reads nothing: the block may still be read by the allocating stream's
    earlier work (the rule torch's docs give for its caching allocator)."""
    owner, writer = elsewhere()
    with owner:
        _ = sim.arange(4.0) * 2  # earlier work on the owner's stream
        a = sim.empty((4,))
    with writer, pytest.raises(sim.StreamOrderError, match="writes memory"):
        a[...] = 1.0
    writer.wait_event(owner.record())
    with writer:
        a[...] = 1.0
        sim.copyto(a, sim.full((4,), 2.0))
    np.testing.assert_array_equal(a.get(writer), np.full(4, 2.0))


def test_an_in_place_kernel_on_one_stream_and_a_reader_on_another() -> None:
    first, second = elsewhere()
    with first:
        a = sim.zeros(4)
    second.wait_event(first.record())
    with second:
        b = a + 1  # reads a
    with first, pytest.raises(sim.StreamOrderError, match="writes memory that add"):
        a += 1  # writes it while the read may not have run
    first.wait_event(second.record())
    with first:
        a += 1
    np.testing.assert_array_equal(b.get(second), np.ones(4))


def test_a_host_read_needs_a_wait_for_the_stream_that_wrote() -> None:
    side = sim.cuda.Stream(non_blocking=True)
    with side:
        a = sim.arange(3.0) + 1
    with pytest.raises(sim.StreamOrderError, match="a host read"):
        a.get()  # waits for the null stream, not for side
    np.testing.assert_array_equal(a.get(side), [1.0, 2.0, 3.0])
    with side:
        b = sim.arange(3.0) * 3
    sim.cuda.Stream.null.wait_event(side.record())
    np.testing.assert_array_equal(b.get(), [0.0, 3.0, 6.0])


def test_a_query_that_answers_done_orders_the_thread() -> None:
    """Another thread waited; this one only asks, and the answer "done" orders what it launches
    next (as on a GPU: the work has finished)."""
    producer, consumer = elsewhere()
    with producer:
        a = sim.arange(3.0)
    event = producer.record()
    waiter = threading.Thread(target=event.synchronize)
    waiter.start()
    waiter.join(TIMEOUT_S)
    with consumer, pytest.raises(sim.StreamOrderError):
        _ = a * 1
    assert sim.cuda.runtime.eventQuery(event.ptr) == sim.SUCCESS
    with consumer:
        b = a + 1
    np.testing.assert_array_equal(b.get(consumer), [1.0, 2.0, 3.0])


def test_a_device_synchronize_orders_every_stream_of_the_device() -> None:
    first, second = elsewhere()
    with first:
        a = sim.arange(3.0)
    with second:
        b = sim.arange(3.0) * 2
    sim.cuda.Device(0).synchronize()
    c = a + b  # on the null stream: ordered by the host's wait
    np.testing.assert_array_equal(c.get(), [0.0, 3.0, 6.0])


def test_a_copy_between_devices_is_ordered_by_an_event_of_the_source() -> None:
    a = sim.arange(4.0) * 5
    with sim.cuda.Device(1):
        with pytest.raises(sim.StreamOrderError, match="copyto on asyncgrad-sim-stream-1"):
            sim.asarray(a)
        sim.cuda.Stream.null.wait_event(_recorded_on(0))
        b = sim.asarray(a)
        np.testing.assert_array_equal(b.get(), [0.0, 5.0, 10.0, 15.0])


def _recorded_on(device: int) -> sim.Event:
    with sim.cuda.Device(device):
        return sim.cuda.Stream.null.record()


def test_views_are_checked_as_their_block() -> None:
    producer, consumer = elsewhere()
    with producer:
        a = sim.arange(8.0).reshape(2, 4)
    with consumer, pytest.raises(sim.StreamOrderError):
        _ = a[1].T * 2


def test_nothing_is_checked_with_the_check_off() -> None:
    sim.configure(check_order=False)
    producer, consumer = elsewhere()
    with producer:
        a = sim.arange(4.0)
    with consumer:
        _ = a + 1  # a race, unchecked
    sim.cuda.Device(0).synchronize()
