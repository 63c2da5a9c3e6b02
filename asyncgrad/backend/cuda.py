"""CUDA devices: the runtime behind ``cuda:N`` tensors, loaded on first use.

The runtime is CuPy, or with ``ASYNCGRAD_SIM_CUDA=N`` the simulator (``sim.py``), which fakes the
part of CuPy used here with NumPy and a thread per stream. Everything below is written once
against that shared surface, so the simulator runs the same code as a real GPU.

Streams and events are the runtime's own objects (``cupy.cuda.Stream``/``Event``); the engine
passes them around as they are. The current stream is the runtime's, per thread and device.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "available",
    "current_stream",
    "default_stream",
    "defer_free",
    "load",
    "loaded",
    "record",
    "require",
    "use_stream",
    "wait_event",
    "wait_until_done",
]

_lock = threading.Lock()
rt: Any = None  # the runtime module (cupy, or the simulator) once loaded
_why: str | None = None  # why there is none
# Whether any CUDA device has been used in this process: the engine does its stream
# bookkeeping only then (See NOTE [Streams in the graph] in asyncgrad/engine/streams.py).
loaded = False
_tf32 = False
# With one device there is no other device to switch to around stream calls.
_single = True
# NOTE [Several devices in use]
# CuPy runs every kernel on the current device (See NOTE [Kernels run on the current device] in
# sim.py), while asyncgrad's ops, as torch's, run on their operands' device. While a process uses
# one device that is the current one and nothing needs switching; the first time it names
# another (``require`` with another index than the device current when CUDA loaded), the hooks
# given to ``on_several_devices`` run once: the ops layer then puts its device guards in place
# (See NOTE [Ops run on their operands' device] in asyncgrad/ops/device_guard.py). A process
# that uses one device, even on a machine with several, pays nothing for them.
_first = 0
_several = False
_several_hooks: list[Callable[[], None]] = []


def _find() -> tuple[Any, str | None]:
    sim_count = os.environ.get("ASYNCGRAD_SIM_CUDA", "").strip()
    if sim_count not in ("", "0"):
        from . import sim

        sim.configure()
        if sim.cuda.runtime.getDeviceCount() > 0:
            return sim, None
        return None, "ASYNCGRAD_SIM_CUDA asks for no simulated device"
    try:
        import cupy
    except ImportError as e:
        if getattr(e, "name", None) not in ("cupy", None):
            return None, f"CuPy is installed but could not be imported ({type(e).__name__}: {e})"
        return None, (
            "CuPy is not installed; install asyncgrad with the CUDA extra matching your "
            "CUDA version: pip install 'asyncgrad[cuda12]' or 'asyncgrad[cuda13]' (or set "
            "ASYNCGRAD_SIM_CUDA=N for N simulated devices)"
        )
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # no driver, no device: CuPy raises its CUDARuntimeError
        return None, f"CuPy is installed but found no usable CUDA device ({e})"
    if n == 0:
        return None, "CuPy is installed but found no CUDA device"
    return cupy, None


def load() -> Any:
    """The runtime module, or None when CUDA is unavailable (``why()`` says why)."""
    global rt, _why, loaded, _single, _first
    if rt is not None or _why is not None:
        return rt
    with _lock:
        if rt is None and _why is None:
            found, why = _find()
            if found is not None:
                from . import _register_device_array

                _register_device_array(found.ndarray, found)
                rt = found
                _single = int(found.cuda.runtime.getDeviceCount()) == 1
                _first = int(found.cuda.runtime.getDevice())
                loaded = True
                if _tf32:
                    _apply_tf32()
            else:
                _why = why
    return rt


def why() -> str:
    load()
    return _why or ""


def simulated() -> bool:
    """Whether the CUDA devices are the simulator's."""
    return rt is not None and rt.__name__ != "cupy"


def available() -> bool:
    return load() is not None


def device_count() -> int:
    r = load()
    return 0 if r is None else int(r.cuda.runtime.getDeviceCount())


def require(index: int | None) -> Any:
    """The runtime, checking that device ``cuda:index`` exists; a clear RuntimeError if not."""
    r = load()
    if r is None:
        raise RuntimeError(f"cannot use a CUDA device: {_why}")
    if index is not None:
        n = int(r.cuda.runtime.getDeviceCount())
        if not 0 <= index < n:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal: cuda:{index} does not exist "
                f"({n} device{'s' if n != 1 else ''} available)"
            )
        if index != _first and not _several:
            _use_several()
    return r


def on_several_devices(hook: Callable[[], None]) -> None:
    """Call ``hook`` once the process uses a second CUDA device (now, if it does already; See
    NOTE [Several devices in use])."""
    with _lock:
        if not _several:
            _several_hooks.append(hook)
            return
    hook()


def several_devices() -> bool:
    """Whether the process has used more than one CUDA device."""
    return _several


def _use_several() -> None:
    global _several
    with _lock:
        if _several:
            return
        _several = True
        hooks = list(_several_hooks)
        _several_hooks.clear()
    for hook in hooks:
        hook()


# ----------------------------------------------------------------------------- arrays
def to_device(array: Any, index: int) -> Any:
    """``array`` (a NumPy array, or one on any CUDA device) copied to ``cuda:index``.

    The copy runs on the destination's current stream, ordered after the work queued so far on
    the source device's current stream, so it reads finished data without a host wait. (CuPy's
    copy between devices orders nothing itself; and each stream is used with its own device
    current, since a current stream may be the null stream, whose meaning is the current
    device's: See NOTE [The null stream] in sim.py.)
    """
    r = require(index)
    if type(array) is r.ndarray:
        src = int(array.device.id)
        if src == index:
            return array
        wait_event(current_stream(index), record(current_stream(src), src), index)
    with r.cuda.Device(index):
        return r.asarray(array)


def copy(array: Any) -> Any:
    """A copy of a device array on its own device (CuPy's ``copy`` makes it on the current
    device)."""
    if _single:
        return array.copy()
    with rt.cuda.Device(int(array.device.id)):
        return array.copy()


def to_host(array: Any) -> Any:
    """A NumPy copy of a device array: waits for the current stream of its device (made the
    current device: CuPy copies on the current device's current stream)."""
    with rt.cuda.Device(int(array.device.id)):
        return rt.asnumpy(array)


# ----------------------------------------------------------------------------- streams
def current_stream(index: int) -> Any:
    return rt.cuda.get_current_stream(index)


def default_stream(index: int) -> Any:
    """The null stream: one object for every device, meaning the default stream of the device
    current where it is used (See NOTE [The null stream] in sim.py); pass ``index`` along with
    it."""
    return rt.cuda.Stream.null


def use_stream(stream: Any, index: int) -> Any:
    """Make ``stream`` the current stream of ``cuda:index`` on this thread; returns the previous
    one, for ``use_stream(previous, index)``."""
    prev = rt.cuda.get_current_stream(index)
    if prev is not stream:
        if _single:
            stream.use()
        else:
            with rt.cuda.Device(index):
                stream.use()
    return prev


def use_device_of(array: Any) -> int:
    """Make the device of ``array`` current, where kernels writing it must run, once several
    devices are in use (See NOTE [Several devices in use]); returns the previous device for
    ``use_device``, or -1 when nothing changed (a NumPy array, or one device in use)."""
    if not _several or type(array) is not rt.ndarray:
        return -1
    return use_device(int(array.device.id))


def use_device(index: int) -> int:
    """Make ``cuda:index`` this thread's current device (where new arrays go); returns the
    previous one."""
    prev = int(rt.cuda.runtime.getDevice())
    if prev != index:
        rt.cuda.Device(index).use()
    return prev


def single_device() -> bool:
    return _single


def record(stream: Any, index: int) -> Any:
    """An event marking the work queued on ``stream`` so far."""
    if _single:
        return stream.record()
    with rt.cuda.Device(index):
        return stream.record()


def wait_event(stream: Any, event: Any, index: int) -> None:
    """Work queued on ``stream`` from now on waits for ``event`` (never the host)."""
    if _single:
        stream.wait_event(event)
        return
    with rt.cuda.Device(index):
        stream.wait_event(event)


def stream_wait(consumer: Any, producer: Any, index: int) -> None:
    """``consumer`` waits for the work queued on ``producer`` so far (no-op if the same)."""
    if consumer is not producer:
        wait_event(consumer, record(producer, index), index)


# NOTE [Waiting for the GPU]
# An awaiting caller must not block its loop while the GPU works, and should resume soon after
# the work is done. Polling ``Event.done`` from the loop is cheap (a query, about 2 us on an H100)
# and quick to notice completion, but polling a long kernel often wastes a core; a host function
# queued on the stream (``launch_host_func``) calls back once the work before it has run, costing
# nothing meanwhile, but reaches the loop some tens of microseconds late. So a wait first polls
# with a short exponential backoff (POLL_FIRST_S, doubling up to POLL_SWITCH_S in total), which
# covers small backward passes, and then queues a host function and sleeps until it calls back,
# with a slow poll (POLL_SLOW_S) as a safety net.
POLL_FIRST_S: Final = 20e-6
POLL_SWITCH_S: Final = 500e-6
POLL_SLOW_S: Final = 5e-3


async def wait_until_done(events: list[tuple[Any, Any]]) -> None:
    """Wait, without blocking the running loop, until every ``(event, stream)`` is done."""
    pending = [(ev, s) for ev, s in events if not ev.done]
    if not pending:
        return
    loop = asyncio.get_running_loop()
    delay = POLL_FIRST_S
    spent = 0.0
    while spent < POLL_SWITCH_S:
        await asyncio.sleep(delay)
        spent += delay
        delay *= 2
        pending = [(ev, s) for ev, s in pending if not ev.done]
        if not pending:
            return
    for ev, s in pending:
        fut: asyncio.Future[None] = loop.create_future()
        s.launch_host_func(_wake_from_stream, (loop, fut))
        while not ev.done:
            try:
                await asyncio.wait_for(asyncio.shield(fut), POLL_SLOW_S)
            except TimeoutError:
                continue
            break


def _wake_from_stream(arg: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]) -> None:
    loop, fut = arg
    try:
        loop.call_soon_threadsafe(_resolve, fut)
    except RuntimeError:
        pass  # the loop is closed: nobody waits any more


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# NOTE [Deferred frees]
# A device array that a kernel on another stream still reads must stay allocated until that
# kernel has run: CuPy's memory pool hands a freed block to the next allocation on the stream
# that allocated it, which does not wait for other streams. So the engine hands such arrays
# (gradients consumed on another stream, buffers of a cancelled graph task) to ``defer_free``
# with an event recorded after their last use; they are dropped once the event is done, checked
# whenever something is deferred or a graph task ends.
_deferred: deque[tuple[Any, Any]] = deque()
_deferred_lock = threading.Lock()


def defer_free(event: Any, refs: Any) -> None:
    with _deferred_lock:
        _deferred.append((event, refs))
    prune_deferred()


def prune_deferred() -> None:
    """Drop deferred arrays whose events are done (in order: an early stop is fine)."""
    while True:
        with _deferred_lock:
            if not _deferred or not _deferred[0][0].done:
                return
            _deferred.popleft()


def deferred_count() -> int:
    return len(_deferred)


# ----------------------------------------------------------------------------- math modes
def set_tf32(flag: bool) -> None:
    """Whether float32 matrix products may use TF32 tensor cores (off by default, as in torch)."""
    global _tf32
    _tf32 = bool(flag)
    if rt is not None:
        _apply_tf32()


def _apply_tf32() -> None:
    if simulated():
        return  # the simulator computes float32 products in float32 either way
    import numpy
    from cupy._core import _routines_linalg as linalg

    mode = linalg.COMPUTE_TYPE_TF32 if _tf32 else linalg.COMPUTE_TYPE_DEFAULT
    linalg.set_compute_type(numpy.float32, mode)


def tf32() -> bool:
    return _tf32
