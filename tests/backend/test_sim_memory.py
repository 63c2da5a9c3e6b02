"""The simulated device's memory pool (NOTE [Memory pool] in asyncgrad/backend/sim.py): as in
CuPy, the block of a collected array goes back to the stream that allocated it and the next
allocation of that size there reuses it at once. Stream order keeps readers on that stream
safe; a reader on another stream that nothing orders after the free reads poison.

Streams are held by a host function waiting for a gate, never by sleeping; every wait has a
timeout. Each test allocates on streams of its own, whose pools start empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncgrad.backend import sim

from .simtools import held

pytestmark = pytest.mark.usefixtures("two_devices")


def ptr(a: Any) -> int:
    return int(a.__cuda_array_interface__["data"][0])


def test_a_freed_block_is_reused_at_once_by_its_stream() -> None:
    s = sim.cuda.Stream()
    with s:
        a = sim.asarray(np.arange(8.0))
        block = ptr(a)
        del a
        b = sim.empty((8,))
        assert ptr(b) == block
        del b
        # Any size that rounds to the same 512 bytes, any dtype (poisoned for that dtype).
        c = sim.zeros((100,), dtype=np.int32)
        assert ptr(c) == block
        d = sim.empty((3,), dtype=np.float32)
        assert ptr(d) != block, "c still owns the block"
    np.testing.assert_array_equal(c.get(s), np.zeros(100, np.int32))


def test_a_block_stays_with_the_stream_and_device_that_allocated_it() -> None:
    s1, s2 = sim.cuda.Stream(), sim.cuda.Stream()
    with s1:
        a = sim.empty((8,))
    block = ptr(a)
    del a
    with s2:
        assert ptr(sim.empty((8,))) != block
    with sim.cuda.Device(1), sim.cuda.Stream():
        assert ptr(sim.empty((8,))) != block
    with s1:
        assert ptr(sim.empty((1000,))) != block, "another rounded size"
        assert ptr(sim.empty((8,))) == block


def test_views_keep_their_base_block() -> None:
    s = sim.cuda.Stream()
    with s:
        a = sim.asarray(np.arange(8.0))
        block = ptr(a)
        views = [a[2:], a.reshape(2, 4), a.T]
        del a
        b = sim.empty((8,))
        assert ptr(b) != block
        del views[:2]
        c = sim.empty((8,))
        assert ptr(c) != block, "a view still holds the block"
        del views
        d = sim.empty((8,))
        assert ptr(d) == block
    assert b.get(s).shape == (8,)


def test_readers_queued_earlier_on_the_same_stream_read_their_data() -> None:
    """The reuse is poisoned by work queued on the allocating stream: kernels queued there
    before the free still read the old values."""
    s = sim.cuda.Stream()
    with s:
        a = sim.asarray(np.arange(8.0))
        s.synchronize()
        with held(s):
            doubled = a * 2
            block = ptr(a)
            del a
            b = sim.asarray(np.full(8, 7.0))
            assert ptr(b) == block
            poisoned = sim.empty((8,), dtype=np.int64)  # not the same block: b owns it
            assert ptr(poisoned) != block
        s.synchronize()
    np.testing.assert_array_equal(doubled.get(), np.arange(8.0) * 2)
    np.testing.assert_array_equal(b.get(), np.full(8, 7.0))


def test_a_reader_on_another_stream_not_ordered_after_the_free_reads_poison() -> None:
    producer, reader = sim.cuda.Stream(), sim.cuda.Stream()
    with producer:
        a = sim.asarray(np.arange(8.0))
        producer.synchronize()
    block = ptr(a)
    with held(reader), reader:
        doubled = a * 2  # queued, not run
        del a
        with producer:
            b = sim.empty((8,))  # reuses a's block: poisoned at once (producer has run it all)
        assert ptr(b) == block
        assert np.isnan(b._data).all()
    reader.synchronize()
    assert np.isnan(doubled.get()).all(), "the reader ran after the block was reused"


@pytest.mark.parametrize("wait_first", [True, False], ids=["wait-then-free", "free-then-wait"])
def test_a_reader_ordered_before_the_reuse_by_an_event_reads_its_data(wait_first: bool) -> None:
    """The allocating stream waits for the reader (what the engine does at the end of a pass),
    before or after the free: the reuse's poison and the new owner's writes come after the
    reader, as on a GPU."""
    producer, reader = sim.cuda.Stream(), sim.cuda.Stream()
    with producer:
        a = sim.asarray(np.arange(8.0))
        producer.synchronize()
    block = ptr(a)
    with held(reader), reader:
        doubled = a * 2
        if wait_first:
            producer.wait_event(reader.record())
        del a
        if not wait_first:
            producer.wait_event(reader.record())
        with producer:
            b = sim.asarray(np.full(8, 5.0))
        assert ptr(b) == block
    reader.synchronize()
    producer.synchronize()
    np.testing.assert_array_equal(doubled.get(reader), np.arange(8.0) * 2)
    np.testing.assert_array_equal(b.get(producer), np.full(8, 5.0))


def test_fresh_and_reused_outputs_are_poisoned_until_written() -> None:
    s = sim.cuda.Stream()
    with s:
        x = sim.asarray(np.arange(8, dtype=np.int32))
        s.synchronize()
        y = x + 1
        s.synchronize()
        del y
        with held(s):
            k = x + 1  # reuses y's block once the stream has run everything before the free
            assert (k._data == np.int32(-1515870811)).all()
        np.testing.assert_array_equal(k.get(), np.arange(8) + 1)


def test_zero_size_arrays_and_host_results_own_no_block() -> None:
    s = sim.cuda.Stream()
    with s:
        e = sim.empty((0, 3))
        assert e._block is None
        u = sim.unique(sim.asarray(np.array([3, 1, 3])))  # computed on the host
        assert u._block is None
        np.testing.assert_array_equal(u.get(), [1, 3])
        with pytest.raises(ValueError, match="negative"):
            sim.empty((-1, 2))
        with pytest.raises(TypeError, match="numbers only"):
            sim.empty((2,), dtype=object)
