"""The simulator's null stream and kernel placement, as CuPy's: ``Stream.null`` is one object for
every device, whose work goes to the default stream of the device current at each call; kernels
run on the current device and refuse operands on another one (no peer access); new arrays go on
the current device.

No test sleeps to synchronise: a stream is held by a host function waiting for a gate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

from asyncgrad.backend import sim

from .simtools import held

pytestmark = pytest.mark.usefixtures("two_devices")

PEER: Final = r"The device where the array resides \(1\) is different from the current device \(0\)"


@contextlib.contextmanager
def held_default(device: int) -> Iterator[None]:
    """Hold the default stream of ``device`` (work queued on it waits until the block ends)."""
    with contextlib.ExitStack() as stack:
        with sim.cuda.Device(device):
            stack.enter_context(held(sim.cuda.Stream.null))
        yield


def on_device_1(make: Callable[[], Any]) -> Any:
    with sim.cuda.Device(1):
        return make()


def test_null_stream_is_one_object_for_every_device() -> None:
    null = sim.cuda.Stream.null
    assert (null.device_id, null.ptr, hash(null)) == (-1, 0, 0)
    assert sim.cuda.get_current_stream(0) is null
    assert sim.cuda.get_current_stream(1) is null
    with sim.cuda.Device(1):
        assert sim.cuda.get_current_stream() is null
        other = sim.cuda.Stream(null=True)
    assert other is not null
    assert other == null
    assert other.device_id == -1
    assert len({null, other}) == 1
    assert sim.cuda.Stream() != null
    assert null != "null"
    assert not hasattr(sim.cuda, "get_default_stream")  # CuPy has none


def test_null_stream_work_goes_to_the_current_devices_default_stream() -> None:
    null = sim.cuda.Stream.null
    with held_default(0):
        a = sim.asarray([1.0, 2.0]) * 2  # on cuda:0's default stream, held
        on_0 = null.record()
        with sim.cuda.Device(1):
            assert null.done  # cuda:1's default stream has nothing queued
            null.synchronize()  # returns: nothing held there
            on_1 = null.record()
            b = sim.asarray([3.0]) + 1
            null.synchronize()
            np.testing.assert_array_equal(b._data, [4.0])
        assert on_1.done
        assert not on_0.done
        assert not null.done
        assert np.isnan(a._data).all()
    null.synchronize()
    assert on_0.done
    np.testing.assert_array_equal(a._data, [2.0, 4.0])


def test_wait_event_on_the_null_stream_orders_the_current_device() -> None:
    with held_default(0):
        a = sim.asarray([1.0, 2.0]) + 1
        ready = sim.cuda.Stream.null.record()
        with sim.cuda.Device(1):
            sim.cuda.Stream.null.wait_event(ready)
            b = sim.asarray(a) * 2  # a copy, ordered only by the wait above
    np.testing.assert_array_equal(on_device_1(b.get), [4.0, 6.0])


def test_a_stream_is_made_current_only_on_its_device() -> None:
    with sim.cuda.Device(1):
        s1 = sim.cuda.Stream()
    match = r"The device that the stream is created on \(1\) does not match with the current"
    with pytest.raises(RuntimeError, match=match):
        s1.use()
    with pytest.raises(RuntimeError, match=match), s1:
        pass
    assert sim.cuda.get_current_stream(1) is sim.cuda.Stream.null
    with sim.cuda.Device(1):
        with s1:
            assert sim.cuda.get_current_stream() is s1
            with sim.cuda.Stream.null:  # the null stream: the current device's
                assert sim.cuda.get_current_stream(1) is sim.cuda.Stream.null
            assert sim.cuda.get_current_stream(1) is s1
        assert sim.cuda.get_current_stream(0) is sim.cuda.Stream.null


def test_kernels_refuse_operands_on_another_device() -> None:
    a = on_device_1(lambda: sim.asarray([1.0, 2.0, 3.0]))
    for op in (
        lambda: a * 2,
        lambda: sim.exp(a),
        lambda: a.sum(),
        lambda: a.astype(np.float32),
        lambda: sim.zeros(3) + a,
        lambda: a[::2].flatten(),
        lambda: a[sim.asarray([0, 1])],
        lambda: a.__setitem__(0, 5.0),
        lambda: sim.concatenate([a, a]),
    ):
        with pytest.raises(ValueError, match=PEER):
            op()
    assert on_device_1(lambda: (a * 2).device.id) == 1


def test_views_and_host_reads_work_from_any_device() -> None:
    a = on_device_1(lambda: sim.arange(6.0).reshape(2, 3))
    for view in (a.T, a[0], a.reshape(3, 2), sim.transpose(a), a[None, ...]):
        assert view.device.id == 1
    np.testing.assert_array_equal(a.get(), np.arange(6.0).reshape(2, 3))
    assert a[1, 2].item() == 5.0


def test_new_arrays_go_on_the_current_device() -> None:
    a = on_device_1(lambda: sim.asarray([1.0, 2.0]))
    assert sim.zeros_like(a).device.id == 0
    assert sim.empty_like(a).device.id == 0
    assert sim.full_like(a, 3.0).device.id == 0
    copied = a.copy()  # CuPy copies another device's array onto the current device
    assert copied.device.id == 0
    np.testing.assert_array_equal(copied.get(), [1.0, 2.0])
    with sim.cuda.Device(1):
        assert sim.ones(2).device.id == 1
        assert sim.random.default_rng(0).random(2).device.id == 1
        assert (a + 1).device.id == 1
        assert sim.asarray(np.ones(2)).device.id == 1
