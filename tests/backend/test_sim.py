"""The simulated CUDA device: its streams really run asynchronously, so a missing synchronisation
shows as poison or a wrong result; its arrays compute what NumPy computes.

No test sleeps to synchronise: a stream is held by a host function that waits for a gate
(``held``), and every wait has a timeout.
"""

from __future__ import annotations

import gc
import pickle
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

from asyncgrad.backend import sim

from .simtools import TIMEOUT_S, held, wait_for_gate

pytestmark = pytest.mark.usefixtures("two_devices")

THREAD_PREFIX: Final = "asyncgrad-sim-stream-"
# Random sleeps before each work item, for the tests that shake orderings.
DELAY_S: Final = 0.0005


def host(x: Any) -> Any:
    """The host value of a result: device arrays copied after their stream ran."""
    if isinstance(x, sim.ndarray):
        return x.get()
    if isinstance(x, (tuple, list)):
        return type(x)(host(item) for item in x)
    return x


def sim_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def inputs() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    return {
        "a": rng.standard_normal((3, 4)),
        "b": rng.standard_normal((3, 4)),
        "i": np.array([2, 0, 2]),
        "n": np.arange(12).reshape(3, 4),
    }


Case = Callable[[Any, dict[str, Any]], Any]

# The same code on NumPy (xp=np) and on the device (xp=sim); ``v`` holds the operands.
CASES: Final[dict[str, Case]] = {
    "add": lambda xp, v: v["a"] + v["b"],
    "scalar arithmetic": lambda xp, v: (2 * v["a"] - v["b"] / 3) ** 2 + np.float32(1),
    "reflected": lambda xp, v: (1 - v["a"], 2 / (v["a"] + 5), 3 % (v["n"] + 1)),
    "unary": lambda xp, v: (-v["a"], abs(v["a"]), ~(v["n"] > 3), +v["a"]),
    "comparison": lambda xp, v: (v["a"] > v["b"], v["a"] == v["a"], v["n"] != 3),
    "np ufunc": lambda xp, v: (np.exp(v["a"]), np.maximum(v["a"], v["b"]), np.isnan(v["a"])),
    "module ufunc": lambda xp, v: (xp.tanh(v["a"]), xp.add(v["a"], 1, dtype=np.float32)),
    "divmod": lambda xp, v: divmod(v["n"], 5),
    "broadcast": lambda xp, v: v["a"] + v["b"][0] * v["a"][:, :1],
    "matmul": lambda xp, v: (v["a"] @ v["b"].T, np.matmul(v["a"].T, v["b"]), v["a"][0] @ v["b"][1]),
    "batched matmul": lambda xp, v: v["a"].reshape(3, 2, 2) @ v["b"].reshape(3, 2, 2),
    "dot": lambda xp, v: (np.dot(v["a"], v["b"].T), v["a"].dot(v["b"][0]), np.dot(v["a"][0], 2.0)),
    "sum": lambda xp, v: (np.sum(v["a"]), v["a"].sum(axis=0), v["a"].sum(1, keepdims=True)),
    "reductions": lambda xp, v: (
        v["a"].mean(),
        v["a"].max(axis=1),
        np.min(v["a"], axis=(0, 1)),
        v["a"].prod(axis=0),
        v["a"].std(),
        np.var(v["a"], axis=1, ddof=1),
    ),
    "arg reductions": lambda xp, v: (v["a"].argmax(), np.argmin(v["a"], axis=0)),
    "boolean reductions": lambda xp, v: ((v["a"] > 0).all(axis=1), np.any(v["a"] > 2)),
    "ufunc methods": lambda xp, v: (
        np.add.reduce(v["a"]),
        np.multiply.reduce(v["a"], axis=1),
        np.add.accumulate(v["a"], axis=1),
        np.multiply.outer(v["a"][0], v["b"][1]),
    ),
    "functions": lambda xp, v: (
        np.where(v["a"] > 0, v["a"], v["b"]),
        np.where(v["a"] > 0, v["a"], 0.0),
        np.clip(v["a"], -0.5, 0.5),
        np.concatenate([v["a"], v["b"]], axis=1),
        np.stack([v["a"], v["b"]]),
        np.cumsum(v["a"], axis=0),
        np.argsort(v["a"], axis=1),
        np.take_along_axis(v["a"], np.argsort(v["a"], axis=1), axis=1),
        np.round(v["a"], 2),
        np.tril(v["a"]),
        np.einsum("ij,ij->i", v["a"], v["b"]),
    ),
    "scalar results": lambda xp, v: (
        np.allclose(v["a"], v["a"]),
        np.allclose(v["a"], v["b"]),
        np.count_nonzero(v["n"]),
        np.array_equal(v["a"], v["a"]),
    ),
    "like": lambda xp, v: (
        np.zeros_like(v["a"]),
        np.ones_like(v["n"], dtype=np.float32),
        np.full_like(v["a"], 7.0),
        xp.zeros_like(v["a"], shape=(2,)),
    ),
    "astype and copy": lambda xp, v: (v["a"].astype(np.float32), v["n"].copy(), v["a"].T.copy()),
    "erf": lambda xp, v: (
        xp.erf(v["a"]) if xp is sim else np.vectorize(__import__("math").erf)(v["a"])
    ),
    "views": lambda xp, v: (
        v["a"].T,
        v["a"].mT,
        v["a"][1],
        v["a"][:, 1:3],
        v["a"][..., None, ::2],
        v["a"][2, 3],
        v["a"].reshape(4, 3),
        v["a"].ravel(),
        v["a"].swapaxes(0, 1),
        v["a"].diagonal(),
        v["a"][None].squeeze(0),
        v["n"].view(np.uint64),
        np.transpose(v["a"]),
        np.moveaxis(v["a"], 0, 1),
        np.expand_dims(v["a"], 1),
        np.broadcast_to(v["a"][0], (2, 4)),
        np.atleast_3d(v["a"]),
        np.swapaxes(v["a"], 0, 1),
        np.reshape(v["a"], (2, 6)),
        np.ravel(v["a"]),
    ),
    "copies that look like views": lambda xp, v: (
        v["a"].T.reshape(12),
        v["a"].T.ravel(),
        v["a"].flatten(),
    ),
    "advanced indexing": lambda xp, v: (
        v["a"][v["i"]],
        v["a"][:, v["i"]],
        v["a"][v["i"], v["i"] + 1],
        v["a"][[0, 2]],
        v["a"][np.array([True, False, True])],
    ),
    "data-dependent shapes": lambda xp, v: (
        v["a"][v["a"] > 0],
        np.nonzero(v["a"] > 0),
        (v["n"] % 3).nonzero(),
        np.unique(v["n"] % 4),
        np.argwhere(v["a"] > 1),
        np.flatnonzero(v["n"] > 5),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_results_match_numpy(name: str) -> None:
    """Every operation queued on a stream gives NumPy's values, dtypes and shapes, also when the
    stream sleeps at random before each item."""
    sim.configure(delay=DELAY_S / 10)
    values = inputs()
    expected = CASES[name](np, values)
    got = CASES[name](sim, {k: sim.asarray(x) for k, x in values.items()})
    sim.cuda.get_current_stream().synchronize()
    expected_leaves = expected if isinstance(expected, tuple) else (expected,)
    got_leaves = got if isinstance(got, tuple) else (got,)
    assert len(got_leaves) == len(expected_leaves)
    for g, e in zip(got_leaves, expected_leaves, strict=True):
        for gi, ei in zip(
            g if isinstance(g, tuple) else (g,), e if isinstance(e, tuple) else (e,), strict=True
        ):
            assert isinstance(gi, sim.ndarray), f"a device array, not {type(gi)}"
            h, ref = gi.get(), np.asarray(ei)
            assert h.shape == ref.shape
            assert h.dtype == ref.dtype
            np.testing.assert_allclose(h, ref, rtol=1e-6, atol=1e-12)


IN_PLACE: Final[dict[str, Callable[[Any, Any], None]]] = {
    "iadd through a row view": lambda xp, a: a[1].__iadd__(10),
    "imul through a transposed view": lambda xp, a: a.T[0].__imul__(-2),
    "ufunc out= a view": lambda xp, a: np.add(a[:, 1], 1, out=a[:, 1]),
    "module ufunc out=, unsafe": lambda xp, a: xp.add(a, 0.75, out=a, casting="unsafe"),
    "setitem basic": lambda xp, a: a.__setitem__((slice(None), 0), 5),
    "setitem through a reshaped view": lambda xp, a: a.reshape(12).__setitem__(3, 7),
    "setitem of an array": lambda xp, a: a.__setitem__(1, xp.asarray(np.arange(4) * 3)),
    "setitem advanced": lambda xp, a: a.__setitem__(xp.asarray(np.array([2, 0])), -1),
    "setitem advanced with a host list": lambda xp, a: a.__setitem__((0, [1, 3]), 9),
    "setitem boolean mask": lambda xp, a: a.__setitem__(a > 5, 0),
    "fill a view": lambda xp, a: a[2].fill(4),
    "copyto a view": lambda xp, a: xp.copyto(a[0], xp.asarray(np.array([4, 3, 2, 1]))),
    "np.copyto with where": lambda xp, a: np.copyto(a, 1, where=a > 4),
    "add.at": lambda xp, a: np.add.at(a, (xp.asarray(np.array([0, 0, 2])), 1), 5),
    "add.at of the module (CuPy's scatter_add)": lambda xp, a: (
        xp.add.at(a, xp.asarray(np.array([1, 1])), 1)
        if xp is sim
        else np.add.at(a, np.array([1, 1]), 1)
    ),
    "sort in place": lambda xp, a: a[::-1].sort(axis=0),
}


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_in_place_matches_numpy(name: str) -> None:
    """In-place operations, through views too, change the base array as in NumPy."""
    sim.configure(delay=DELAY_S / 10)
    expected = np.arange(12).reshape(3, 4)
    IN_PLACE[name](np, expected)
    a = sim.asarray(np.arange(12).reshape(3, 4))
    IN_PLACE[name](sim, a)
    np.testing.assert_array_equal(a.get(), expected)


def test_launches_return_at_once_with_poisoned_outputs() -> None:
    """A kernel's output is allocated at launch and filled with poison; its values arrive when the
    stream runs it."""
    x = sim.asarray([1.0, -2.0, 3.0])
    n = sim.asarray(np.array([1, 2, 3], dtype=np.int32))
    with held() as stream:
        y = x * 2
        k = n + 1
        positive = x > 0
        e = sim.empty((2,), dtype=np.float32)
        assert not stream.done
        assert np.isnan(y._data).all()
        assert (k._data == np.int32(-1515870811)).all()  # bytes 0xA5
        assert positive._data.all()
    np.testing.assert_array_equal(y.get(), [2.0, -4.0, 6.0])
    np.testing.assert_array_equal(k.get(), [2, 3, 4])
    np.testing.assert_array_equal(positive.get(), [True, False, True])
    assert np.isnan(e.get()).all(), "empty() keeps the poison"
    assert stream.done


def test_views_do_no_stream_work() -> None:
    a = sim.asarray(np.arange(6.0).reshape(2, 3))
    stream = sim.cuda.Stream()
    with stream:
        views = [a.T, a[1], a[:, ::2], a.reshape(3, 2), np.transpose(a), np.expand_dims(a, 0)]
        views += [a.ravel(), np.broadcast_to(a, (2, 2, 3)), a[None, ..., 1], a.view(np.int64)]
    assert stream._queue.submitted == 0
    for v in views:
        assert v.base is a
        assert not v.flags.owndata
    assert a[1].T.base is a, "a view of a view has the owner as base"
    assert a.flags.owndata
    assert a.flags.c_contiguous
    assert a.T.flags.f_contiguous
    assert not a.T.flags.c_contiguous


def test_stream_runs_work_in_order_under_random_delays() -> None:
    sim.configure(delay=DELAY_S)
    stream = sim.cuda.Stream()
    seen: list[int] = []
    x = sim.asarray(np.zeros(1))
    # The upload runs on the default stream, which nothing orders with `stream` (every stream
    # is non-blocking here): without this wait a delayed upload could overwrite the first
    # increment, and every count would be one short.
    sim.cuda.get_current_stream().synchronize()

    def count(expected: int) -> None:  # a host function sees the kernels queued before it only
        seen.append(int(x._data[0]) - expected)

    with stream:
        for i in range(60):
            x += 1
            stream.launch_host_func(seen.append, i)
            stream.launch_host_func(count, i + 1)
    stream.synchronize()
    assert seen[::2] == list(range(60))
    assert seen[1::2] == [0] * 60


def test_wait_event_orders_two_streams_under_random_delays() -> None:
    """The consumer sees the producer's results only through the event."""
    sim.configure(delay=DELAY_S)
    producer, consumer = sim.cuda.Stream(), sim.cuda.Stream()
    x = sim.asarray(np.arange(4.0))
    sim.cuda.get_current_stream().synchronize()
    for _ in range(25):
        with producer:
            y = x + 1
            y *= 3
            event = producer.record()
        with consumer:
            consumer.wait_event(event)
            z = y - 1
        consumer.synchronize()
        np.testing.assert_array_equal(z._data, (np.arange(4.0) + 1) * 3 - 1)
    producer.synchronize()


def test_without_wait_event_the_consumer_reads_poison() -> None:
    producer, consumer = sim.cuda.Stream(), sim.cuda.Stream()
    x = sim.asarray(np.arange(4.0))
    sim.cuda.get_current_stream().synchronize()
    with held(producer), producer:
        y = x + 1
        with consumer:
            z = y * 2
        consumer.synchronize()
        assert np.isnan(z._data).all(), "the consumer ran before the producer"
    producer.synchronize()
    np.testing.assert_array_equal(y._data, np.arange(4.0) + 1)


def test_wait_event_blocks_the_stream_not_the_host() -> None:
    producer, consumer = sim.cuda.Stream(), sim.cuda.Stream()
    x = sim.asarray(np.arange(3.0))
    sim.cuda.get_current_stream().synchronize()
    with held(producer):
        with producer:
            y = x * 10
        event = sim.cuda.Event()
        event.record(producer)
        assert not event.done
        consumer.wait_event(event)
        with consumer:
            z = y + 1
        assert not consumer.done
        assert np.isnan(z._data).all()
    consumer.synchronize()
    assert event.done
    np.testing.assert_array_equal(z.get(consumer), [1.0, 11.0, 21.0])


def test_events() -> None:
    stream = sim.cuda.Stream()
    unrecorded = sim.cuda.Event()
    assert unrecorded.done
    unrecorded.synchronize()
    stream.wait_event(unrecorded)
    assert stream._queue.submitted == 0, "waiting for an unrecorded event is no work"
    with held(stream):
        before = stream.record()
        with stream:
            sim.zeros(3)
        assert not before.done
    before.synchronize()
    assert before.done
    stream.synchronize()
    with stream:
        sim.ones(3)
    early = stream.record()
    with held(stream):
        early.synchronize()  # waits for its point only, not for the held work after it
        assert early.done
        assert not stream.done
    stream.synchronize()


def test_host_functions_run_on_the_stream_thread_in_order() -> None:
    stream = sim.cuda.Stream()
    calls: list[tuple[str, str]] = []
    for name in "abc":
        stream.launch_host_func(lambda n: calls.append((n, threading.current_thread().name)), name)
    stream.synchronize()
    assert [c[0] for c in calls] == ["a", "b", "c"]
    assert all(c[1].startswith(f"{THREAD_PREFIX}0-") for c in calls)


def queue_error(a: sim.ndarray, index: int) -> None:
    """Queue a kernel that fails when it runs: ``np.add.at`` with an index out of range (unlike
    ``sim.add.at``, which wraps indices as CuPy's does, NumPy's ufunc.at keeps its check)."""
    np.add.at(a, sim.asarray([index]), 1.0)


def test_errors_are_raised_at_the_next_host_wait() -> None:
    stream = sim.cuda.get_current_stream()
    z = sim.zeros(3)
    queue_error(z, 5)  # out of range: found when the kernel runs
    with pytest.raises(IndexError, match="out of bounds") as info:
        stream.synchronize()
    assert any("asynchronously" in note for note in info.value.__notes__)
    stream.synchronize()  # reported once

    z += 1
    queue_error(z, -9)
    with pytest.raises(IndexError):
        z.get()  # a host read is a wait too
    np.testing.assert_array_equal(z.get(), [1.0, 1.0, 1.0])


def test_later_errors_are_kept_as_notes() -> None:
    stream = sim.cuda.Stream()
    with stream:
        z = sim.zeros(2)
        queue_error(z, 3)
        queue_error(z, 7)
    with pytest.raises(IndexError, match="index 3") as info:
        stream.synchronize()
    assert any("index 7" in note for note in info.value.__notes__)


def test_errors_of_a_dropped_stream_reach_the_device() -> None:
    stream = sim.cuda.Stream()
    with stream:
        z = sim.zeros(2)
        queue_error(z, 3)
    del stream
    gc.collect()
    with pytest.raises(IndexError):
        sim.cuda.Device(0).synchronize()
    sim.cuda.Device(0).synchronize()


def test_host_waits_do_not_hang_on_errors() -> None:
    stream = sim.cuda.Stream()
    event = sim.cuda.Event()
    with stream:
        z = sim.zeros(2)
        queue_error(z, 3)
        event.record()
    with pytest.raises(IndexError):
        event.synchronize()
    assert stream.done


def test_host_reads_synchronise() -> None:
    with held():
        x = sim.asarray([1.5, 2.5]) * 2
    assert x.tolist() == [3.0, 5.0]
    assert float(x[0]) == 3.0
    assert int(x[1]) == 5
    assert x[1].item() == 5.0
    assert bool(x[0] > 1)
    assert repr(x) == "array([3., 5.])"
    assert str(x) == "[3. 5.]"
    assert f"{x[0]:.1f}" == "3.0"
    np.testing.assert_array_equal(sim.asnumpy(x), [3.0, 5.0])
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)


def test_implicit_conversion_to_numpy_is_refused() -> None:
    x = sim.asarray([1.0, 2.0])
    message = "Implicit conversion to a NumPy array is not allowed"
    with pytest.raises(TypeError, match=message):
        np.asarray(x)
    with pytest.raises(TypeError, match=message):
        np.array([x, x])
    with pytest.raises(BufferError):
        x.__dlpack__()
    assert x.__dlpack_device__() == (2, 0)
    with pytest.raises(TypeError):
        pickle.dumps(x)


def test_operands_must_share_a_device_and_not_be_numpy_arrays() -> None:
    a = sim.asarray([1.0, 2.0])
    with sim.cuda.Device(1):
        b = sim.asarray([1.0, 2.0])
    for op in (
        lambda: a + b,
        lambda: np.add(a, b),
        lambda: np.concatenate([a, b]),
        lambda: a @ b,
        lambda: a.__setitem__(0, b[0]),
    ):
        with pytest.raises(
            ValueError, match=r"resides \(1\) is different from the current device \(0\)"
        ):
            op()
    for op in (
        lambda: a + np.ones(2),
        lambda: np.ones(2) * a,
        lambda: np.stack([a, np.ones(2)]),
        lambda: a * np.array(2.0),  # not even a 0-d one, as in CuPy
    ):
        with pytest.raises(TypeError, match="NumPy array"):
            op()
    np.testing.assert_array_equal((a + np.float64(1) + 1).get(), [3.0, 4.0])


def test_copy_between_devices_is_ordered_only_by_the_caller() -> None:
    """As CuPy's, a copy from another device is queued on the current device's stream and waits
    for nothing on the source device: the caller orders it with an event."""
    with held(sim.cuda.get_current_stream(0)):
        a = sim.asarray([1.0, 2.0]) + 1
        with sim.cuda.Device(1):
            racing = sim.asarray(a)
            assert racing.device.id == 1
            racing.get()  # runs at once, before a's kernel
    assert np.isnan(racing.get()).all()
    with held(sim.cuda.get_current_stream(0)):
        a = sim.asarray([1.0, 2.0]) + 1
        ready = sim.cuda.Stream.null.record()  # on cuda:0's default stream
        with sim.cuda.Device(1):
            sim.cuda.Stream.null.wait_event(ready)  # cuda:1's default stream waits
            c = sim.asarray(a) * 2
            assert not sim.cuda.get_current_stream().done
    np.testing.assert_array_equal(c.get(), [4.0, 6.0])
    assert sim.asarray(a) is a
    assert sim.asarray(a, dtype=np.float32).dtype == np.float32


def test_asarray_copies_host_data_at_the_call() -> None:
    data = np.array([1.0, 2.0])
    with held():
        x = sim.asarray(data)
        data[:] = -1
    np.testing.assert_array_equal(x.get(), [1.0, 2.0])


def test_inference_errors_surface_as_in_numpy() -> None:
    a = sim.asarray(np.arange(6).reshape(2, 3))
    with pytest.raises(TypeError, match="Cannot cast ufunc"):
        a += 1.5
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(4)
    with pytest.raises(ValueError, match="matmul"):
        a @ a
    with pytest.raises(np.exceptions.AxisError):
        a.sum(axis=2)
    with pytest.raises(IndexError):
        a[2]
    with pytest.raises(ValueError, match="broadcast"):
        a + sim.zeros(2)


def test_no_threads_after_synchronize() -> None:
    s1, s2 = sim.cuda.Stream(), sim.cuda.Stream()
    x = sim.asarray(np.ones(8))
    for stream in (s1, s2):
        with stream:
            for _ in range(20):
                x = x + 1
    assert sim_threads(), "streams with work have threads"
    for stream in (s1, s2, sim.cuda.get_current_stream()):
        stream.synchronize()
    assert not sim_threads()


def test_a_dropped_stream_keeps_no_thread() -> None:
    stream = sim.cuda.Stream()
    ref = weakref.ref(stream)
    gate = threading.Event()
    stream.launch_host_func(wait_for_gate, gate)
    with stream:
        y = sim.zeros(4) + 1
    del stream
    gc.collect()
    try:
        assert ref() is None, "queued work does not keep its stream alive"
        assert sim_threads()
    finally:
        gate.set()
    sim.cuda.Device(0).synchronize()
    assert not sim_threads()
    np.testing.assert_array_equal(y._data, np.ones(4))


def test_random_is_reproducible_by_seed() -> None:
    def draw(seed: int) -> Any:
        rng = sim.random.default_rng(seed)
        return host(
            [
                rng.random((3,)),
                rng.standard_normal((2, 2), dtype=np.float32),
                rng.uniform(-1.0, 1.0, size=4),
                rng.integers(0, 10, size=(5,)),
            ]
        )

    first, again, other = draw(7), draw(7), draw(8)
    for f, a in zip(first, again, strict=True):
        np.testing.assert_array_equal(f, a)
    assert not np.array_equal(first[0], other[0])
    assert first[1].dtype == np.float32
    assert ((first[3] >= 0) & (first[3] < 10)).all()


def test_current_device_and_stream_are_per_thread() -> None:
    stream = sim.cuda.Stream()
    default = sim.cuda.get_current_stream()
    assert default is sim.cuda.Stream.null
    assert default.ptr == 0
    assert stream.ptr != 0
    seen: dict[str, Any] = {}

    def other_thread() -> None:
        seen["stream"] = sim.cuda.get_current_stream()
        seen["device"] = sim.cuda.runtime.getDevice()
        sim.cuda.Device(1).use()
        seen["after use"] = sim.cuda.runtime.getDevice()

    with sim.cuda.Device(1):
        stream1 = sim.cuda.Stream()
    with stream, sim.cuda.Device(1), stream1, sim.cuda.Device(0):  # a stream of the current device
        assert sim.cuda.get_current_stream() is stream
        assert sim.cuda.get_current_stream(1) is stream1
        with sim.cuda.Device(1):
            assert sim.cuda.runtime.getDevice() == 1
            assert sim.cuda.get_current_stream() is stream1
            assert sim.asarray([1.0]).device == sim.cuda.Device(1)
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(TIMEOUT_S)
        with sim.cuda.Stream() as inner:
            assert sim.cuda.get_current_stream() is inner
        assert sim.cuda.get_current_stream() is stream
    assert sim.cuda.get_current_stream() is default
    assert seen == {"stream": default, "device": 0, "after use": 1}
    assert sim.cuda.runtime.getDevice() == 0


def test_devices() -> None:
    assert sim.cuda.runtime.getDeviceCount() == 2
    with pytest.raises(sim.CUDARuntimeError, match="invalid device ordinal"):
        sim.cuda.Device(2)
    assert issubclass(sim.cuda.runtime.CUDARuntimeError, RuntimeError)
    assert sim.cuda.Device().id == 0
    assert sim.cuda.Stream().device_id == 0
    with sim.cuda.Device(1):
        assert sim.cuda.Stream().device_id == 1
        assert sim.cuda.Stream(null=True) == sim.cuda.Stream.null


def test_numpy_names_and_dtypes() -> None:
    assert sim.float32 is np.float32
    assert sim.newaxis is None
    assert sim.pi == np.pi
    x = sim.arange(5, dtype=np.float64)
    assert isinstance(sim.exp(x), sim.ndarray)
    assert isinstance(sim.concatenate([x, x]), sim.ndarray)
    assert isinstance(sim.sum(x), sim.ndarray)
    assert sim.sum(x).ndim == 0
    np.testing.assert_array_equal(sim.add.reduce(x).get(), 10.0)
    np.testing.assert_allclose(sim.linspace(0, 1, 3).get(), [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(sim.eye(2).get(), np.eye(2))
    np.testing.assert_array_equal(sim.full((2,), 3, dtype=np.int8).get(), [3, 3])
    np.testing.assert_array_equal(sim.ones_like(x).get(), np.ones(5))
    assert sim.shape(x) == (5,)
    assert sim.ndim(x) == 1
    assert sim.result_type(x, np.float32) == np.float64
    with pytest.raises(AttributeError):
        sim.no_such_function  # noqa: B018


def test_scatter_add_warns_as_cupys_deprecated_one_does() -> None:
    """CuPy 14 deprecates ``cupyx.scatter_add`` (``ndarray.scatter_add``) for ``cupy.add.at``;
    the simulator warns the same, so code still calling it fails the tests here too."""
    a = sim.zeros(3)
    with pytest.warns(DeprecationWarning, match=r"Please use `cupy.add.at` instead"):
        sim.scatter_add(a, sim.asarray(np.array([0, 0, 4])), 1.0)
    np.testing.assert_array_equal(a.get(), [2.0, 1.0, 0.0])


def test_a_reduction_over_an_axis_of_a_0d_array_raises_as_cupys() -> None:
    """NumPy reduces a 0-d array over axis 0; CuPy raises (cupy/cupy#8748), so the simulated
    device raises too, rather than hiding an op that passes an axis for a 0-d tensor."""
    from asyncgrad.backend import sim

    a = sim.asarray(np.float64(3.0))
    with pytest.raises(np.exceptions.AxisError, match="axis 0 is out of bounds"):
        a.max(axis=0)
    assert float(a.max()) == 3.0
    assert float(a.sum(axis=())) == 3.0
