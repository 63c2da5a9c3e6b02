"""The simulator models three more of CuPy's behaviours: integer index arrays wrap around instead
of raising (NOTE [Wrapped indices]), the random generator keeps its state in a device array and
cannot be deep-copied (NOTE [Generator state on the device]), and host synchronisations can be
forbidden on a thread or recorded (NOTE [Host synchronisations])."""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

from asyncgrad.backend import sim

from .simtools import TIMEOUT_S

pytestmark = pytest.mark.usefixtures("two_devices")


def _base() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


# ----------------------------------------------------------------------------- wrapped indices
# Each case: the device call, and what CuPy computes (NumPy with each index taken modulo its
# axis's length). None of them raises, unlike NumPy without the modulo.
READS: Final[dict[str, tuple[Callable[[Any], Any], Callable[[np.ndarray], Any]]]] = {
    "getitem, device index": (
        lambda a: a[sim.asarray(np.array([3, -4, 7]))],
        lambda h: h[[0, 2, 1]],
    ),
    "getitem, host array": (lambda a: a[np.array([5])], lambda h: h[[2]]),
    "getitem, list, second axis": (lambda a: a[:, [4, -5]], lambda h: h[:, [0, 3]]),
    "getitem, two arrays": (
        lambda a: a[sim.asarray(np.array([3, 1])), sim.asarray(np.array([9, -1]))],
        lambda h: h[[0, 1], [1, 3]],
    ),
    "getitem, int and array": (lambda a: a[1, [6]], lambda h: h[1, [2]]),
    "getitem, int8 index of a long axis": (
        lambda a: a.reshape(12)[sim.asarray(np.array([13, -13], dtype=np.int8))],
        lambda h: h.reshape(12)[[1, 11]],
    ),
    "take, flattened": (
        lambda a: a.take(sim.asarray(np.array([12, -13]))),
        lambda h: h.ravel()[[0, 11]],
    ),
    "take, axis, Python int": (lambda a: sim.take(a, 5, axis=1), lambda h: h[:, 1]),
    "take_along_axis": (
        lambda a: sim.take_along_axis(a, sim.asarray(np.array([[4], [5], [-1]])), axis=1),
        lambda h: h[[0, 1, 2], [0, 1, 3]][:, None],
    ),
}


@pytest.mark.parametrize("name", list(READS))
def test_integer_index_arrays_wrap_around(name: str) -> None:
    run, expected = READS[name]
    got = run(sim.asarray(_base()))
    np.testing.assert_array_equal(got.get(), expected(_base()))


WRITES: Final[dict[str, tuple[Callable[[Any], None], Callable[[np.ndarray], None]]]] = {
    "setitem, device index": (
        lambda a: a.__setitem__(sim.asarray(np.array([4])), -1.0),
        lambda h: h.__setitem__(1, -1.0),
    ),
    "setitem, host list (CuPy's documented example)": (
        lambda a: a.__setitem__((0, [1, 4]), 10.0),
        lambda h: h.__setitem__((0, [1, 0]), 10.0),
    ),
    "setitem, device values": (
        lambda a: a.__setitem__((slice(None), sim.asarray(np.array([-6]))), sim.zeros((3, 1))),
        lambda h: h.__setitem__((slice(None), [2]), 0.0),
    ),
    "add.at (CuPy's scatter_add)": (
        lambda a: sim.add.at(a, (sim.asarray(np.array([3, 3, -1])), 0), 1.0),
        lambda h: np.add.at(h, ([0, 0, 2], 0), 1.0),
    ),
    "put, default mode": (
        lambda a: a.put(sim.asarray(np.array([13])), 7.0),
        lambda h: h.put([1], 7.0),
    ),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_integer_index_arrays_wrap_around_in_writes(name: str) -> None:
    run, expected = WRITES[name]
    a = sim.asarray(_base())
    run(a)
    h = _base()
    expected(h)
    np.testing.assert_array_equal(a.get(), h)


def test_python_integers_and_explicit_raise_are_still_checked() -> None:
    a = sim.asarray(_base())
    with pytest.raises(IndexError, match="out of bounds"):
        a[3]
    with pytest.raises(IndexError):
        a.put(sim.asarray(np.array([13])), 7.0, mode="raise")
    with pytest.raises(IndexError):  # nothing to wrap around on an empty axis
        sim.zeros((0, 2))[np.array([1])]


def test_integer_index_arrays_are_launches_and_masks_synchronise() -> None:
    """A device index array makes a kernel (its values are read on the device); a boolean mask
    waits for the stream, as the result's length is its count of True."""
    a = sim.asarray(_base())
    i = sim.asarray(np.array([0, 2]))
    gate = threading.Event()
    stream = sim.cuda.get_current_stream()
    stream.launch_host_func(lambda _: gate.wait(TIMEOUT_S), None)
    try:
        with sim.forbid_host_sync():
            picked = a[i]
            a[i] = 1.0
            sim.add.at(a, i, 1.0)
            taken = a.take(i)
            with pytest.raises(sim.HostSyncError, match="__getitem__"):
                a[a > 3]
        assert np.isnan(picked._data).all()  # not run yet
        assert np.isnan(taken._data).all()
    finally:
        gate.set()
    np.testing.assert_array_equal(picked.get(), _base()[[0, 2]])


# ----------------------------------------------------------------------------- the generator
def test_the_generator_holds_a_lock_and_its_state_on_the_device() -> None:
    rng = sim.random.default_rng(3)
    bit_generator = rng.bit_generator
    assert isinstance(bit_generator, sim.random.XORWOW)
    assert isinstance(bit_generator.lock, type(threading.Lock()))
    assert isinstance(bit_generator._state, sim.ndarray)
    assert bit_generator._state.dtype == np.int8
    assert bit_generator._current_device_id == 0
    with pytest.raises(TypeError, match=r"cannot pickle '_thread\.lock' object"):
        copy.deepcopy(rng)
    with pytest.raises(TypeError, match=r"cannot pickle '_thread\.lock' object"):
        pickle.dumps(rng)
    assert sim.random.default_rng(rng) is rng
    assert sim.random.default_rng(bit_generator).bit_generator is bit_generator


def test_a_copy_of_the_state_array_restores_the_sequence() -> None:
    rng = sim.random.default_rng(3)
    rng.random((2,))
    snapshot = rng.bit_generator._state.copy()
    first = [rng.random((3,)).get(), rng.standard_normal((2,)).get(), rng.integers(0, 9, 4).get()]
    rng.bit_generator._state = snapshot.copy()
    again = [rng.random((3,)).get(), rng.standard_normal((2,)).get(), rng.integers(0, 9, 4).get()]
    for f, g in zip(first, again, strict=True):
        np.testing.assert_array_equal(f, g)
    assert not np.array_equal(first[0], rng.random((3,)).get())


def test_draws_are_kernels_that_advance_the_state_on_the_stream() -> None:
    rng = sim.random.default_rng(3)
    state = rng.bit_generator._state
    before = state.get()
    gate = threading.Event()
    sim.cuda.get_current_stream().launch_host_func(lambda _: gate.wait(TIMEOUT_S), None)
    try:
        with sim.forbid_host_sync():
            y = rng.random((4,), dtype=np.float32)
        assert y.dtype == np.float32
        assert np.isnan(y._data).all()
        np.testing.assert_array_equal(state._data, before)  # not advanced yet
    finally:
        gate.set()
    assert ((y.get() >= 0) & (y.get() < 1)).all()
    assert not np.array_equal(state.get(), before)


def test_the_generator_belongs_to_its_device() -> None:
    rng = sim.random.default_rng(3)
    with sim.cuda.Device(1), pytest.raises(RuntimeError, match="different device"):
        rng.random((2,))


# ----------------------------------------------------------------------------- host waits
HOST_WAITS: Final[dict[str, tuple[Callable[[Any], Any], str]]] = {
    "get": (lambda a: a.get(), "get"),
    "item": (lambda a: a[0].item(), "item"),
    "int": (lambda a: int(a[0]), "__int__"),
    "float": (lambda a: float(a[0]), "__float__"),
    "bool": (lambda a: bool(a[0]), "__bool__"),
    "repr": (lambda a: repr(a), "__repr__"),
    "asnumpy": (lambda a: sim.asnumpy(a), "asnumpy"),
    "stream synchronize": (lambda a: sim.cuda.get_current_stream().synchronize(), "synchronize"),
    "device synchronize": (lambda a: sim.cuda.Device(0).synchronize(), "synchronize"),
    "nonzero": (lambda a: a.nonzero(), "nonzero"),
    "boolean mask": (lambda a: a[a > 1], "__getitem__"),
}


@pytest.mark.parametrize("name", list(HOST_WAITS))
def test_forbidden_host_waits_raise_naming_what_and_where(name: str) -> None:
    run, what = HOST_WAITS[name]
    a = sim.asarray(np.array([1.0, 2.0, 3.0]))
    with sim.forbid_host_sync(), pytest.raises(sim.HostSyncError, match=what) as info:
        run(a)
    assert "test_sim_indexing_rng.py" in str(info.value)
    run(a)  # allowed again after the block


def test_host_waits_are_forbidden_on_one_thread_and_recorded_on_all() -> None:
    a = sim.asarray(np.array([1.0, 2.0]))
    seen: list[Any] = []

    def other() -> None:
        seen.append(float(a.sum()))

    with sim.record_host_syncs() as records, sim.forbid_host_sync():
        b = a * 2  # launches are no host waits
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(TIMEOUT_S)
    assert seen == [3.0]
    assert [what for what, _ in records] == ["__float__"]
    assert records[0][1].endswith("in other")
    with sim.record_host_syncs() as later:
        b.get()
    assert len(later) == 1
    assert len(records) == 1
