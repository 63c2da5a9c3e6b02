"""The simulated device counts what a GPU would pay (NOTE [Counting device work]), runs work as
it is queued when asked to (``inline``), and models kernel times with a clock that does not
drift (NOTE [Modelled kernel times]); ``asyncgrad.testing.count_python_calls`` counts the Python
calls outside the device runtime (NOTE [Counting Python calls]).

No test sleeps to synchronise; every wait has a timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from asyncgrad.backend import sim
from asyncgrad.testing import count_python_calls

from .simtools import TIMEOUT_S


@pytest.fixture(autouse=True)
def plain_device() -> Iterator[None]:
    """One simulated device without delays, modelled kernel times or inline work, idle after."""
    settings = sim._settings()
    before = (settings.devices, settings.delay)
    sim.configure(devices=1, delay=0.0, seed=0, kernel_time=0.0, inline=False)
    try:
        yield
    finally:
        sim.configure(kernel_time=0.0, inline=False)
        sim.cuda.Device(0).synchronize()
        sim.configure(devices=before[0], delay=before[1])


def test_it_counts_launches_allocations_events_waits_and_host_syncs() -> None:
    a = sim.asarray(np.arange(6.0))  # one copy from the host, one allocation
    with sim.count_device_work() as c:
        b = a * 2.0  # a kernel and its result
        b += 1.0  # a kernel, in place: no allocation
        z = sim.zeros(3)  # a fill
        s = sim.cuda.Stream(non_blocking=True)
        ev = sim.cuda.Event()
        ev.record()
        s.wait_event(ev)
        assert isinstance(ev.done, bool)
        total = float(b.sum())  # a reduction, then a host read
    assert dict(c.launches) == {"multiply": 1, "add": 1, "_fill": 1, "sum": 1}
    assert c.kernels == 4
    assert c.allocations == 3  # b, z and the sum
    assert c.allocated_bytes == 6 * 8 + 3 * 8 + 8
    assert (c.events_recorded, c.events_queried, c.stream_waits) == (1, 1, 1)
    assert len(c.host_syncs) == 1
    what, where = c.host_syncs[0]
    assert what == "__float__"
    assert where.startswith("test_sim_counts.py:")
    assert where.endswith("in " + _name())
    assert total == float(np.sum(np.arange(6.0) * 2 + 1))
    assert z.shape == (3,)
    with sim.count_device_work() as later:
        a + a
    assert later.kernels == 1
    assert c.kernels == 4  # a closed count stays as it was


def _name() -> str:
    return "test_it_counts_launches_allocations_events_waits_and_host_syncs"


def test_counts_come_from_every_thread() -> None:
    a = sim.asarray(np.ones(4))
    with sim.count_device_work() as c:
        t = threading.Thread(target=lambda: a + a)
        t.start()
        t.join(TIMEOUT_S)
        a - a
    assert dict(c.launches) == {"add": 1, "subtract": 1}


def test_inline_work_runs_as_it_is_queued_on_the_queuing_thread() -> None:
    ran_on: list[threading.Thread] = []
    sim.configure(inline=True)
    x = sim.asarray(np.arange(4.0))
    stream = sim.cuda.get_current_stream()
    stream._queue.submit(lambda: ran_on.append(threading.current_thread()))
    assert ran_on == [threading.current_thread()]
    y = x + 1.0
    assert stream.done  # nothing pending: no event is ever waited for
    np.testing.assert_array_equal(y._data, np.arange(4.0) + 1.0)  # computed at the launch
    with sim.forbid_host_sync():
        ev = stream.record()
        assert ev.done


def test_modelled_kernels_queued_at_once_take_their_time_back_to_back() -> None:
    t = 0.01
    sim.configure(kernel_time=t)
    x = sim.asarray(np.ones(3))
    stream = sim.cuda.get_current_stream()
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        x = x + 1.0
    stream.synchronize()
    t1 = time.perf_counter()
    # The device clock moved by t a kernel from no earlier than t0, and the host's wait ended
    # only once the stream's thread had slept until it.
    assert t0 + 5 * t <= stream._queue.busy_until <= t1
    assert float(x.sum()) == 18.0


def _count_me(n: int) -> int:
    return n + 1


def test_python_calls_are_counted_outside_the_device_runtime() -> None:
    a = sim.asarray(np.ones(4))
    with count_python_calls() as calls:
        for i in range(7):
            _count_me(i)
        a * 3.0  # the simulator's own frames stand for CuPy's compiled code: not counted
    by = calls.by_function
    assert by[f"test_sim_counts.py:{_count_me.__code__.co_firstlineno} _count_me"] == 7
    assert not [k for k in by if "backend/sim.py" in k]
    assert calls.total >= 7
