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
from time import perf_counter
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
    r = rt if rt is not None else load()
    return 0 if r is None else int(r.cuda.runtime.getDeviceCount())


def require(index: int | None) -> Any:
    """The runtime, checking that device ``cuda:index`` exists; a clear RuntimeError if not."""
    r = rt if rt is not None else load()
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
            copy = r.asarray(array)
        # The source's stream waits for the copy: dropping the source then returns its block to
        # a pool that reuses it only after the copy read it (See NOTE [Deferred frees]).
        wait_event(current_stream(src), record(current_stream(index), index), src)
        return copy
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
    """An event marking the work queued on ``stream`` so far (without timing data, which the
    engine never reads and which costs the GPU a timestamp)."""
    if _single:
        return _new_event(stream)
    with rt.cuda.Device(index):  # an event is made on, and recorded with, its stream's device
        return _new_event(stream)


def _new_event(stream: Any) -> Any:
    event = rt.cuda.Event(disable_timing=True)
    event.record(stream)
    return event


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
# the work is done. Polling an event from the loop is cheap (``cudaEventQuery``, about 2 us on an
# H100) and quick to notice completion, but polling a long kernel wastes a core; a host function
# (``launch_host_func``) calls back once the work before it has run, costing nothing meanwhile,
# but reaches the loop some tens of microseconds late. So a wait is first polled once per turn of
# the loop (by the loop's one poller, See NOTE [One poller per loop], which lets everything else
# ready run in between) for POLL_SWITCH_S
# of wall time, which covers small backward passes; then it queues a host function and sleeps
# until it calls back, with a slow poll (POLL_SLOW_S) as a safety net. The budget is measured with
# ``perf_counter``, not as a sum of sleeps: a short ``asyncio.sleep`` lasts about a millisecond on
# asyncio's epoll loop and nothing on uvloop, so a schedule of sleeps meant a different wait on
# each loop.
# The host function goes on a stream of its own (a waker) that waits for the awaited event, not
# on the event's stream: work queued there after the event (the next pass's kernels) does not
# delay the wake-up. Nor does another caller's event: each waker serves one wait at a time, and
# goes back to its device's idle wakers (``_wakers``) when its host function has run, so there
# are as many as waits in this phase at once.
# A kernel that fails on the GPU (an illegal address) breaks its device for the rest of the
# process: the event is then never done and host functions are never called. The query returns
# the error's status, and the wait raises it as CuPy's ``CUDARuntimeError`` instead of waiting for
# ever.
POLL_SWITCH_S: Final = 500e-6
POLL_SLOW_S: Final = 5e-3
# CUDA status codes of ``cudaEventQuery``: the work before the event has run, or not yet.
_SUCCESS: Final = 0
_NOT_READY: Final = 600

_wakers: dict[int, list[Any]] = {}  # device index -> idle waker streams
_wakers_lock = threading.Lock()


async def wait_until_done(events: list[tuple[Any, int]]) -> None:
    """Wait, without blocking the running loop, until every ``(event, device index)`` is done;
    raise ``CUDARuntimeError`` if a device failed (See NOTE [Waiting for the GPU])."""
    left = pending(events)
    if not left:
        return
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[tuple[Any, int]]] = loop.create_future()
    poller = _pollers.get(loop)
    if poller is None:
        poller = _pollers[loop] = _Poller(loop)
    poller.add(left, fut)
    left = await fut  # what is left once the polling phase has passed
    for ev, idx in left:
        if not pending([(ev, idx)]):
            continue
        done: asyncio.Future[None] = loop.create_future()
        _wake_after(ev, idx, loop, done)
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(done), POLL_SLOW_S)
            except TimeoutError:
                pass
            if not pending([(ev, idx)]):
                break


# NOTE [One poller per loop]
# Many requests on one loop may wait for the GPU at once (one pass each). Were each to poll its
# own events, every turn of the loop would resume every waiting coroutine: a task step, a sleep
# and a query each. Instead one task per loop (``_Poller``) polls every waiting call's events
# once per turn and resolves the call's future when they are done, with what is left when its
# polling phase (POLL_SWITCH_S) has passed (the call then waits for a host function itself), or
# with the device's error. It exists while some call waits, and ends when none does.
class _Poller:
    __slots__ = ("loop", "task", "waits")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # (events left, the caller's future, when its polling phase ends)
        self.waits: list[tuple[list[tuple[Any, int]], asyncio.Future[Any], float]] = []
        self.task: asyncio.Task[None] | None = None

    def add(self, events: list[tuple[Any, int]], fut: asyncio.Future[Any]) -> None:
        self.waits.append((events, fut, perf_counter() + POLL_SWITCH_S))
        if self.task is None:
            self.task = self.loop.create_task(self._run(), name="asyncgrad-gpu-poller")

    async def _run(self) -> None:
        try:
            while self.waits:
                await asyncio.sleep(0)  # everything else ready runs in between
                now = perf_counter()
                keep = []
                for events, fut, until in self.waits:
                    if fut.done():  # its caller was cancelled
                        continue
                    if now >= until:
                        fut.set_result(events)  # on to waiting for a host function
                        continue
                    try:
                        left = pending(events)
                    except Exception as e:  # a device failed
                        fut.set_exception(e)
                        continue
                    if left:
                        keep.append((left, fut, until))
                    else:
                        fut.set_result(left)
                self.waits = keep
        finally:
            # Stopped from outside (the loop shuts down) with calls still waiting: they wait
            # for a host function each instead.
            for events, fut, _ in self.waits:
                if not fut.done():
                    fut.set_result(events)
            self.waits = []
            self.task = None
            if _pollers.get(self.loop) is self:
                del _pollers[self.loop]


_pollers: dict[asyncio.AbstractEventLoop, _Poller] = {}  # See NOTE [One poller per loop]


def query(event: Any, index: int) -> bool:
    """Whether the work before ``event`` (of ``cuda:index``) has run; raises CuPy's
    ``CUDARuntimeError`` when a failed kernel broke the device (it never will)."""
    status = rt.cuda.runtime.eventQuery(event.ptr)
    if status == _SUCCESS:
        return True
    if status == _NOT_READY:
        return False
    error = rt.cuda.runtime.CUDARuntimeError(status)
    error.add_note(f"while waiting for the work queued on cuda:{index}")
    raise error


def pending(events: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """The events not done yet; raises the error of a failed device."""
    return [(ev, idx) for ev, idx in events if not query(ev, idx)]


def _wake_after(
    ev: Any, idx: int, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]
) -> None:
    """Resolve ``fut`` on ``loop`` from a host function that runs once ``ev`` is done."""
    with _wakers_lock:
        idle = _wakers.setdefault(idx, [])
        waker = idle.pop() if idle else None
    if waker is None:
        with rt.cuda.Device(idx):
            waker = rt.cuda.Stream(non_blocking=True)
    arg = (loop, fut, waker, idx)
    if _single:
        waker.wait_event(ev)
        waker.launch_host_func(_wake_from_stream, arg)
        return
    with rt.cuda.Device(idx):
        waker.wait_event(ev)
        waker.launch_host_func(_wake_from_stream, arg)


def _wake_from_stream(
    arg: tuple[asyncio.AbstractEventLoop, asyncio.Future[None], Any, int],
) -> None:
    loop, fut, waker, idx = arg
    with _wakers_lock:
        _wakers[idx].append(waker)  # its work is done: free for the next wait
    try:
        loop.call_soon_threadsafe(_resolve, fut)
    except RuntimeError:
        pass  # the loop is closed: nobody waits any more


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# NOTE [Passes in flight]
# An awaited backward pass that returns nothing to read (``await ag.backward(loss)``: its results
# are the leaves' ``.grad``) ends once its kernels are queued and ordered before the caller's
# current streams, as torch's ``backward()`` returns once it has launched them: the caller's next
# work (the optimizer's step, the next forward) queues behind them on the GPU while the host
# prepares it, so a loop of awaited training steps keeps the GPU busy. What reads a value on the
# host (``.item()``, ``.cpu()``) is what waits for the GPU; ``await ag.cuda.synchronize_async()``
# waits first without blocking the loop. So that the host cannot run ahead without bound (holding
# every step's buffers, and blocking in a launch once CUDA's launch queue is full), at most
# MAX_PASSES_AHEAD such passes per device are in flight: the end of the next one waits, without
# blocking its loop, until the GPU has finished the oldest. A pass that returns gradients
# (``await ag.grad(...)``) ends only once the GPU has computed them, so that reading them does not
# block the loop (See NOTE [Waiting for the GPU]).
MAX_PASSES_AHEAD: Final = 2
_in_flight: dict[int, deque[Any]] = {}  # device index -> end events of the passes in flight
_in_flight_lock = threading.Lock()


def pass_queued(ends: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """Note the end events of a pass that waits for nothing (See NOTE [Passes in flight]); the
    ``(event, device index)`` pairs, of older passes, to wait for before it ends."""
    over: list[tuple[Any, int]] = []
    with _in_flight_lock:
        for ev, idx in ends:
            q = _in_flight.get(idx)
            if q is None:
                q = _in_flight[idx] = deque()
            q.append(ev)
            while len(q) > 1 and query(q[0], idx):  # passes the GPU has finished
                q.popleft()
            while len(q) > MAX_PASSES_AHEAD:
                over.append((q.popleft(), idx))
    return pending(over) if over else over


def in_flight(index: int) -> list[tuple[Any, int]]:
    """The end events of the passes in flight on ``cuda:index`` (See NOTE [Passes in flight])."""
    with _in_flight_lock:
        return [(ev, index) for ev in _in_flight.get(index, ())]


# NOTE [Deferred frees]
# A device array that a kernel on another stream still reads must stay allocated until that
# kernel has run: CuPy's memory pool hands a freed block to the next allocation on the stream
# that allocated it, which does not wait for other streams. So the engine hands such arrays
# to ``defer_free`` with an event recorded after their last use. They are:
#   - gradients made on another stream than the node that reads them (``InputBuffer.cross``),
#     and both summands of a sum made on the consumer's stream (``input_buffer.add``);
#   - what a node saved for backward, released after it ran (``Node.releasable``): an input may
#     come from any stream. Which one is not known cheaply (CuPy keeps it in its pool's private
#     chunks), so the engine keeps saved values of every CUDA node once ``side_streams`` is set:
#     a stream other than the default ones was made with ``asyncgrad.cuda.Stream``, or a node
#     ran on one. Until then every array comes from its device's default stream, the stream of
#     every node, and stream order alone keeps freed blocks safe: one stream costs nothing;
#   - the buffers of a cancelled graph task, whose kernels may not have run yet.
# (The source of a copy to another device needs none: its stream waits for the copy.)
# A stream made outside asyncgrad (``with cupy.cuda.Stream():``) that no node runs on is not
# noticed: arrays made there and saved by nodes on a default stream are not kept.
#
# NOTE [Releasing deferred frees]
# Deferred arrays are dropped as soon as their events are done, whatever else runs: an idle
# server must not keep the device memory of its last cancelled requests. ``prune_deferred``
# drops the finished ones from the front whenever something is deferred or a graph task ends;
# for the rest, a releaser thread (``asyncgrad-deferred-frees``) queries their events, with a
# backoff from RELEASE_POLL_FIRST_S to RELEASE_POLL_MAX_S (a query costs about 2 us; a wait on
# an event would block in the driver and could not notice a second event finishing first). It
# starts when something is deferred that is not done yet, never blocks a loop, and exits once
# nothing is left, after lingering RELEASE_LINGER_S for more (See NOTE [Lingering stream
# threads] in sim.py, for the same trade). An event whose query reports an error (a failed
# kernel broke its device: it will never be done) counts as finished: its arrays are dropped
# rather than polled for ever. Arrays are dropped outside the lock, so that a finaliser that
# defers again cannot deadlock.
RELEASE_POLL_FIRST_S: Final = 50e-6
RELEASE_POLL_MAX_S: Final = 2e-3
RELEASE_LINGER_S: Final = 5e-3
_deferred: deque[tuple[Any, Any]] = deque()
_deferred_lock = threading.Lock()
_deferred_wake = threading.Condition(_deferred_lock)
_releaser: threading.Thread | None = None
# Whether arrays may be allocated on one stream and read on another (NOTE [Deferred frees]).
side_streams = False


def note_side_stream() -> None:
    global side_streams
    side_streams = True


def defer_free(event: Any, refs: Any) -> None:
    """Keep ``refs`` until ``event`` is done (See NOTE [Deferred frees])."""
    global _releaser
    with _deferred_lock:
        _deferred.append((event, refs))
    prune_deferred()
    with _deferred_lock:
        if not _deferred:
            return
        thread = _releaser
        if thread is not None:
            _deferred_wake.notify()  # a lingering releaser takes it
            return
        thread = _releaser = threading.Thread(
            target=_release, name="asyncgrad-deferred-frees", daemon=True
        )
    thread.start()


def free_after(stream: Any, index: int, refs: Any) -> None:
    """Keep ``refs`` until the work queued on ``stream`` (of ``cuda:index``) so far has run (See
    NOTE [Deferred frees]). On a broken device, where recording the event fails, nothing queued
    will ever run: ``refs`` go at once, and cleaning up after a failed pass does not fail too."""
    try:
        event = record(stream, index)
    except rt.cuda.runtime.CUDARuntimeError:
        return
    defer_free(event, refs)


def _finished(event: Any) -> bool:
    """Whether ``event`` is done, or never will be (its device failed)."""
    return bool(rt.cuda.runtime.eventQuery(event.ptr) != _NOT_READY)


def prune_deferred() -> None:
    """Drop deferred arrays whose events are done (in order: an early stop is fine)."""
    dropped = []
    while True:
        with _deferred_lock:
            if not _deferred or not _finished(_deferred[0][0]):
                break
            dropped.append(_deferred.popleft())
    del dropped  # outside the lock


def _release() -> None:
    """The releaser thread (See NOTE [Releasing deferred frees])."""
    global _releaser
    delay = RELEASE_POLL_FIRST_S
    while True:
        with _deferred_lock:
            entries = list(_deferred)
        done = [entry for entry in entries if _finished(entry[0])]
        del entries
        if done:
            with _deferred_lock:
                gone = {id(entry) for entry in done}
                kept = [entry for entry in _deferred if id(entry) not in gone]
                _deferred.clear()
                _deferred.extend(kept)
            del done, kept  # the arrays go here, outside the lock
            delay = RELEASE_POLL_FIRST_S
            continue
        with _deferred_lock:
            if _deferred:
                _deferred_wake.wait(delay)
                delay = min(2 * delay, RELEASE_POLL_MAX_S)
                continue
            _deferred_wake.wait(RELEASE_LINGER_S)
            if not _deferred:
                _releaser = None
                return
            delay = RELEASE_POLL_FIRST_S


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
