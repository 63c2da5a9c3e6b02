"""What the simulator's tests share: the device settings they run with, and ways to hold a
stream at a point so that work queued after it waits."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Final

from asyncgrad.backend import sim

# A held stream is let go after this long even if its block never ends (a failed test).
TIMEOUT_S: Final = 5.0


@contextlib.contextmanager
def two_devices() -> Iterator[None]:
    """Two simulated devices without delays; afterwards every stream has run and the settings are
    back (an error left on a stream fails the test here)."""
    settings = sim._settings()
    before = (settings.devices, settings.delay)
    sim.configure(devices=2, delay=0.0, seed=0)
    try:
        yield
        sim.cuda.Device(0).synchronize()
        sim.cuda.Device(1).synchronize()
    finally:
        sim.configure(devices=before[0], delay=before[1])


def wait_for_gate(gate: threading.Event) -> None:
    if not gate.wait(TIMEOUT_S):
        raise TimeoutError("the gate of a held stream was never opened")


@contextlib.contextmanager
def held(stream: sim.Stream | None = None) -> Iterator[sim.Stream]:
    """Hold ``stream`` (default: the current one) with a host function: work queued on it waits
    until the block ends. Host functions run one at a time (NOTE [Host functions]), so while it
    holds, no other stream's host function runs either."""
    stream = sim.cuda.get_current_stream() if stream is None else stream
    gate = threading.Event()
    stream.launch_host_func(wait_for_gate, gate)
    try:
        yield stream
    finally:
        gate.set()


@contextlib.contextmanager
def held_by_kernel(stream: sim.Stream) -> Iterator[None]:
    """Hold ``stream`` with a long kernel (not a host function, so other streams' host functions
    still run) until the block ends."""
    gate = threading.Event()
    stream._queue.submit(lambda: gate.wait(TIMEOUT_S))
    try:
        yield
    finally:
        gate.set()
