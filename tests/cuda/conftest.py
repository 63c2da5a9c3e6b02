"""CUDA tests: on two simulated devices by default (see tests/conftest.py), on a real GPU with
ASYNCGRAD_SIM_CUDA=0. Every test here carries the ``cuda`` marker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/cuda/" in str(item.fspath):
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip(f"no CUDA device: {runtime.why()}")


@pytest.fixture(autouse=True)
def _settled() -> Iterator[None]:
    """Every test ends with the devices idle (so no stream thread of the simulator outlives
    it) and the current device and streams as they were."""
    yield
    if ag.cuda.is_available():
        for i in range(ag.cuda.device_count()):
            ag.cuda.synchronize(i)
            runtime.use_stream(runtime.default_stream(i), i)
        ag.cuda.set_device(0)
        runtime.prune_deferred()


@pytest.fixture
def sim() -> Any:
    """The simulator module (tests that look inside it, or change its delays)."""
    if not runtime.simulated():
        pytest.skip("needs the simulated device (ASYNCGRAD_SIM_CUDA=N)")
    from asyncgrad.backend import sim as module

    return module


@pytest.fixture
def delays(sim: Any) -> Iterator[Any]:
    """Random delays of up to 2 ms before each piece of work on a stream, so that a missing
    synchronisation reads unwritten (poisoned) memory."""
    sim.configure(delay=0.002, seed=1234)
    yield sim
    sim.configure(delay=0.0)
