"""CUDA tests: on two simulated devices by default (see tests/conftest.py), on a real GPU with
ASYNCGRAD_SIM_CUDA=0. Every test here carries the ``cuda`` marker.

On the simulator the ordering check is on for every test here (``_ordering_checked``).

Helpers for CUDA tests, on either kind of device (CUDA tests in other folders import them from
``tests.cuda.conftest``): the ``delays`` fixture (slow producers), ``needs_devices``,
``assert_close`` (NOTE [Tolerances on a GPU]), and ``host``, ``leaf``, ``side_stream`` and
``Gate``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

# How long ``Delays.hold`` holds a stream unless told otherwise: far longer than any kernel of
# the tests it slows (microseconds), so a consumer that is not ordered after it reads too early.
HOLD_S: Final = 0.002
# A gate left closed (a blocked loop cannot open it) opens by itself after this long.
GATE_TIMEOUT_S: Final = 3.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/cuda/" in str(item.fspath):
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip(f"no CUDA device: {runtime.why()}")


@pytest.fixture(autouse=True)
def _ordering_checked() -> Iterator[None]:
    """On the simulator every CUDA test runs with the ordering check on (NOTE [Ordering check] in
    asyncgrad/backend/sim.py): an access that no stream order puts after a conflicting one fails
    the test at that access, whatever the timing."""
    if not (ag.cuda.is_available() and runtime.simulated()):
        yield
        return
    from asyncgrad.backend import sim

    sim.configure(check_order=True)
    try:
        yield
    finally:
        sim.configure(check_order=False)


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


def real_gpu() -> bool:
    """Whether the CUDA devices are real GPUs (CuPy's), not the simulator's."""
    return ag.cuda.is_available() and not runtime.simulated()


def needs_devices(n: int) -> None:
    """Skip the calling test unless there are at least ``n`` CUDA devices."""
    found = ag.cuda.device_count()
    if found < n:
        pytest.skip(f"needs {n} CUDA devices, found {found}")


@pytest.fixture
def sim() -> Any:
    """The simulator module (tests that look inside it, or change its delays)."""
    if not runtime.simulated():
        pytest.skip("needs the simulated device (ASYNCGRAD_SIM_CUDA=N)")
    from asyncgrad.backend import sim as module

    return module


# ----------------------------------------------------------------------------- slow producers
# NOTE [Slow producers on a GPU]
# A missing ordering between two streams shows only when the producer is late. On the
# simulator every piece of stream work is preceded by a random delay (and fresh memory holds
# poison), so any producer may be late. A GPU has no such switch, and its kernels take
# microseconds: a consumer that forgot to wait would still, most of the time, run after them.
# So the tests hold the producer's stream at the point that matters (``Delays.hold``): on a GPU a
# one-thread kernel busy-waits on the SM's cycle counter (``clock64()``) for the time asked,
# which keeps everything queued after it on that stream waiting; on the simulator a host
# function sleeps on the stream's thread, on top of the random delays.
_SPIN_SOURCE: Final = r"""
extern "C" __global__ void asyncgrad_tests_spin(const long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


class Delays:
    """What the ``delays`` fixture gives: ``hold`` slows a producer's stream from that point."""

    def __init__(self) -> None:
        self._kernel: Any = None  # the spin kernel, compiled on first use on a GPU
        self._khz: dict[int, int] = {}  # each device's SM clock rate in kHz

    def hold(self, stream: ag.cuda.Stream | None = None, seconds: float = HOLD_S) -> None:
        """Hold ``stream`` (default: the current stream) for ``seconds`` at this point: work
        queued on it from now on starts that much later; nothing waits on the host."""
        if stream is None:
            stream = ag.cuda.current_stream()
        if runtime.simulated():
            stream.native.launch_host_func(time.sleep, seconds)
            return
        idx = stream.device.index
        assert idx is not None
        rt = runtime.require(idx)
        with rt.cuda.Device(idx):  # CuPy launches (and compiles for) the current device
            if self._kernel is None:
                self._kernel = rt.RawKernel(_SPIN_SOURCE, "asyncgrad_tests_spin")
            if idx not in self._khz:
                self._khz[idx] = int(rt.cuda.runtime.getDeviceProperties(idx)["clockRate"])
            cycles = np.int64(seconds * self._khz[idx] * 1e3)
            self._kernel((1,), (1,), (cycles,), stream=stream.native)


@pytest.fixture
def delays() -> Iterator[Delays]:
    """Slow producers (NOTE [Slow producers on a GPU]): on the simulator, random delays of up to
    2 ms before each piece of work on a stream, so that a missing synchronisation reads
    unwritten (poisoned) memory; on either, ``hold`` to hold a stream at a point."""
    if not runtime.simulated():
        yield Delays()
        return
    from asyncgrad.backend import sim

    sim.configure(delay=0.002, seed=1234)
    try:
        yield Delays()
    finally:
        sim.configure(delay=0.0)


# ----------------------------------------------------------------------------- tolerances
# NOTE [Tolerances on a GPU]
# The simulator's kernels are NumPy's, so on it a CUDA test gets the CPU's results to the last
# bit, and tight tolerances (1e-12 and below) catch any change in what was computed. A real GPU
# computes the same maths another way: CUDA's libdevice functions (exp, log, sin, erf, tanh,
# pow, ...) are within a few units in the last place of NumPy's, not equal to them; the compiler
# contracts a * b + c into one fused multiply-add; reductions and cuBLAS add in another order,
# and a sum whose terms cancel is off by about eps times the size of its terms, however small
# the sum. So on a real GPU ``tolerance`` widens what a test asks to GPU_RTOL of the dtype,
# relative, and absolute GPU_RTOL times the largest expected value (at least 1): still far
# below what a real fault gives (a missed synchronisation reads stale or unwritten memory). On
# the simulator, and for integer and boolean results, the test's own tolerances stand.
GPU_RTOL: Final = {
    np.dtype(np.float64): 1e-10,
    np.dtype(np.float32): 2e-5,
    np.dtype(np.float16): 2e-3,
}


def _precision(values: Any) -> np.dtype[Any] | None:
    """The real floating dtype whose GPU_RTOL applies to ``values``; None if not floating."""
    dt = np.asarray(values).dtype
    if dt.kind == "c":
        return np.dtype(np.float32 if dt == np.complex64 else np.float64)
    return dt if dt.kind == "f" else None


def tolerance(actual: Any, desired: Any, rtol: float, atol: float) -> tuple[float, float]:
    """``(rtol, atol)`` to compare a CUDA result ``actual`` with ``desired``: the test's own on
    the simulator, widened on a real GPU (NOTE [Tolerances on a GPU])."""
    if not real_gpu():
        return rtol, atol
    found = [dt for dt in (_precision(actual), _precision(desired)) if dt is not None]
    if not found:
        return rtol, atol
    gpu = max(GPU_RTOL.get(dt, GPU_RTOL[np.dtype(np.float16)]) for dt in found)
    d = np.abs(np.asarray(desired, dtype=np.complex128 if np.iscomplexobj(desired) else None))
    finite = d[np.isfinite(d)] if d.size else d
    scale = float(finite.max()) if finite.size else 0.0
    return max(rtol, gpu), max(atol, gpu * max(1.0, scale))


def assert_close(
    actual: Any, desired: Any, rtol: float = 1e-12, atol: float = 0.0, err_msg: str = ""
) -> None:
    """``np.testing.assert_allclose`` for a CUDA result (read back to the host), with tolerances
    that hold on a real GPU (NOTE [Tolerances on a GPU])."""
    r, a = tolerance(actual, desired, rtol, atol)
    np.testing.assert_allclose(actual, desired, rtol=r, atol=a, err_msg=err_msg)


# ----------------------------------------------------------------------------- tensors and streams
def host(t: ag.Tensor) -> np.ndarray:
    """``t``'s values as a NumPy array (a copy to the host, after its stream)."""
    return np.asarray(t.cpu().numpy(force=True))


def leaf(values: np.ndarray, device: str = "cuda:0") -> ag.Tensor:
    return ag.tensor(values, device=device, requires_grad=True)


def side_stream() -> ag.cuda.Stream:
    """A new stream whose work follows what is queued on the current stream so far."""
    s = ag.cuda.Stream()
    s.wait_stream(ag.cuda.current_stream())
    return s


class Gate:
    """Holds a stream at a point until opened (a host function that waits on the stream; host
    functions run one at a time, so while it holds, no other host function runs)."""

    def __init__(self, stream: ag.cuda.Stream) -> None:
        self.opened = threading.Event()
        self.timed_out = False
        stream.native.launch_host_func(self._hold, None)

    def _hold(self, _: Any) -> None:
        self.timed_out = not self.opened.wait(GATE_TIMEOUT_S)

    def open(self) -> None:
        self.opened.set()


def branches_on_two_streams(x: ag.Tensor, delays: Delays | None = None) -> ag.Tensor:
    """Two branches, each recorded on its own side stream, summed on the default stream: their
    gradients meet in x's input buffer from two streams (same device, other streams). With
    ``delays``, the first branch's stream is held after the forward: its gradient comes late."""
    s1, s2 = side_stream(), side_stream()
    with ag.cuda.stream(s1):
        a = (x * 3.0).sin()
    with ag.cuda.stream(s2):
        if delays is not None:
            delays.hold(s2, 0.5e-3)  # a slow forward on one branch too
        b = x.exp() * x
    ag.cuda.current_stream().wait_stream(s1)
    ag.cuda.current_stream().wait_stream(s2)
    if delays is not None:
        delays.hold(s1)  # the backward's work on s1 starts late
    return (a + b).sum()
