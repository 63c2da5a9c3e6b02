"""A simulated CUDA device: NumPy buffers behind the subset of CuPy's API that asyncgrad uses, with
streams that really run asynchronously.

CI machines have no GPU. With ``ASYNCGRAD_SIM_CUDA=N`` asyncgrad makes ``cuda:0`` .. ``cuda:N-1``
simulated devices, and its device code, written once against a CuPy-like module, gets this module in
place of ``cupy``. The point is that a missing stream synchronisation gives wrong (or flaky) results
in tests, so the model is the strictest one CUDA allows:

* Streams. A stream is a FIFO of work items. A daemon thread per stream
  (``asyncgrad-sim-stream-<device>-<n>``) runs them in order; it starts when work arrives and exits
  as soon as the queue is empty, so a synchronised program has no simulator threads left. Every
  stream, the default streams included, behaves like a non-blocking CUDA stream: nothing orders
  work on two streams but an event (``Stream.wait_event``), and such a wait blocks the waiting
  stream's thread, never the host. As in CuPy, ``Stream.null`` is one object for all devices
  (device_id -1, ptr 0; streams compare and hash by ptr), the current stream of every device
  until another is made current, and work on it goes to the default stream of the device
  current at each call (See NOTE [The null stream]); a stream made current must belong to the
  current device (``use``, ``with``), as CuPy checks. With ``ASYNCGRAD_SIM_CUDA_DELAY`` (or
  ``configure(delay=...)``) each item is preceded by a random sleep, which shakes out orderings
  that only hold by luck.
* Arrays. ``ndarray`` wraps a host buffer (``_data``) and a device id. Views (basic indexing,
  ``reshape`` where NumPy could give a view, ``transpose``, ...) do no stream work and share the
  buffer. Everything else is a kernel launch on the current stream of the CURRENT device, as in
  CuPy: an operand on another device raises CuPy's ValueError (no peer access; See NOTE [Kernels
  run on the current device]), and new arrays (results, creation functions, ``*_like``, copies
  from another device, which nothing orders after the source device's work) go on the current
  device. The result's shape and dtype are worked out on the host without reading any data, the
  output buffer is allocated at once and filled with poison (NaN, a garbage integer pattern,
  True), the computation is queued, and the call returns. Reading a buffer before its kernel ran
  gives visibly wrong values.
* Synchronous operations. Results whose shape depends on the data (boolean masks, ``nonzero``,
  ``unique``, ...) wait for the current stream of the device and are computed on the host, as in
  CuPy; so are host reads (``get``, ``item``, ``repr``, ...), which, as CuPy's, wait for the
  current stream of the current device (the null stream: the array's device's default stream).
  Implicit conversion to NumPy (``__array__``) raises, as in CuPy.
* Errors. An exception raised by queued work is kept on its stream and raised by the next host wait
  on that stream (``synchronize``, an event's ``synchronize``, a host read, the device's
  ``synchronize``), like an asynchronous CUDA error; none is dropped.

Current device and current streams are per host thread, as in CuPy. The public names are CuPy's
(``Device``, ``Stream``, ``Event`` and ``CUDARuntimeError`` also at the top level), and
``configure``; any other NumPy name (``sim.exp``, ``sim.concatenate``, ...) is NumPy's function
dispatching to the simulated device (module ``__getattr__``).
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import operator
import os
import random as _stdrandom
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CUDARuntimeError",
    "Device",
    "Event",
    "Stream",
    "arange",
    "array",
    "asarray",
    "asnumpy",
    "configure",
    "cuda",
    "empty",
    "empty_like",
    "erf",
    "eye",
    "full",
    "full_like",
    "linspace",
    "ndarray",
    "newaxis",
    "ones",
    "ones_like",
    "random",
    "scatter_add",
    "zeros",
    "zeros_like",
]

_Array = npt.NDArray[Any]
_Work = Callable[[], object]
_Shape = tuple[int, ...]

newaxis: Final = None
dtype: Final = np.dtype
bool_: Final = np.bool_
int8: Final = np.int8
int16: Final = np.int16
int32: Final = np.int32
int64: Final = np.int64
uint8: Final = np.uint8
uint16: Final = np.uint16
uint32: Final = np.uint32
uint64: Final = np.uint64
intp: Final = np.intp
float16: Final = np.float16
float32: Final = np.float32
float64: Final = np.float64
complex64: Final = np.complex64
complex128: Final = np.complex128


# ----------------------------------------------------------------------------- settings
class _Settings:
    """Device count, random delay and the delay's generator; read from the environment once."""

    __slots__ = ("delay", "devices", "lock", "rng")

    def __init__(self) -> None:
        self.devices = int(os.environ.get("ASYNCGRAD_SIM_CUDA") or 0)
        self.delay = float(os.environ.get("ASYNCGRAD_SIM_CUDA_DELAY") or 0.0)
        seed = os.environ.get("ASYNCGRAD_SIM_CUDA_SEED")
        self.rng = _stdrandom.Random(int(seed) if seed else None)
        self.lock = threading.Lock()


_settings_lock: Final = threading.Lock()
_settings_instance: _Settings | None = None


def _settings() -> _Settings:
    global _settings_instance
    settings = _settings_instance
    if settings is None:
        with _settings_lock:
            settings = _settings_instance
            if settings is None:
                settings = _settings_instance = _Settings()
    return settings


def configure(
    devices: int | None = None, delay: float | None = None, seed: int | None = None
) -> None:
    """Change the simulation: the number of devices, the largest random sleep (seconds) before each
    work item of a stream (0: none), the seed of those sleeps. ``None`` leaves a setting as it is;
    the defaults come from ``ASYNCGRAD_SIM_CUDA``, ``ASYNCGRAD_SIM_CUDA_DELAY`` and
    ``ASYNCGRAD_SIM_CUDA_SEED``. The delay may change at any time, also while streams run."""
    settings = _settings()
    if devices is not None:
        if devices < 0:
            raise ValueError(f"devices must be >= 0, got {devices}")
        settings.devices = devices
    if delay is not None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        settings.delay = float(delay)
    if seed is not None:
        with settings.lock:
            settings.rng.seed(seed)


def _pause() -> None:
    """The random sleep before a work item, when a delay is set."""
    settings = _settings()
    if settings.delay > 0:
        with settings.lock:
            seconds = settings.rng.uniform(0.0, settings.delay)
        time.sleep(seconds)


class CUDARuntimeError(RuntimeError):
    """What CuPy raises when a CUDA runtime call fails; here only for an invalid device."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _invalid_device(index: int) -> CUDARuntimeError:
    count = _settings().devices
    return CUDARuntimeError(
        101, f"cudaErrorInvalidDevice: invalid device ordinal ({index}; {count} simulated devices)"
    )


# ----------------------------------------------------------------------------- streams
def _raise_async(errors: list[BaseException], where: str) -> None:
    """Raise the first of the errors that work queued on ``where`` stored, naming the others."""
    if not errors:
        return
    first = errors[0]
    first.add_note(f"raised asynchronously by work queued on {where}")
    for later in errors[1:]:
        first.add_note(f"a later asynchronous error on {where}: {later!r}")
    raise first


# NOTE [Lingering stream threads]
# Starting a thread costs about 100 us, ten times a small launch; a thread that left the moment
# its queue ran dry would be started again for nearly every launch of a program that waits for
# nothing. So a drained stream thread waits a moment (_LINGER_S) for more work before it exits.
# A host wait that finds the queue drained dismisses it and joins it: after a stream's
# synchronize() its thread is gone, as if it had exited at once; and a stream dropped without a
# wait loses its thread a moment later.
_LINGER_S: Final = 0.005


class _Queue:
    """The work of one stream, run in order by a thread that exists only while there is work.

    ``submitted`` counts the items ever queued and ``completed`` those that have run (raised or
    not), so "everything queued before point n has run" is ``completed >= n``. Errors wait in
    ``errors`` for the next host wait. The queue refers to its device, never to its ``Stream``, so a
    dropped stream is collected while its thread finishes the work.
    """

    __slots__ = (
        "completed",
        "device",
        "dismissed",
        "done",
        "errors",
        "items",
        "lock",
        "name",
        "submitted",
        "thread",
        "wake",
    )

    def __init__(self, device: _DeviceState, name: str) -> None:
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)  # host waits and other streams' waits
        self.wake = threading.Condition(self.lock)  # the lingering thread's wait for work
        self.items: collections.deque[_Work] = collections.deque()
        self.submitted = 0
        self.completed = 0
        self.errors: list[BaseException] = []
        self.thread: threading.Thread | None = None
        self.dismissed = False
        self.device = device
        self.name = name

    def submit(self, work: _Work) -> None:
        with self.lock:
            self.items.append(work)
            self.submitted += 1
            self.dismissed = False
            if self.thread is not None:
                self.wake.notify()
                return
            thread = self.thread = threading.Thread(target=self._drain, name=self.name, daemon=True)
            # NOTE: a queue with work or unreported errors is held by its device, so that the
            # device's synchronize() finds it even after its Stream was dropped.
            with self.device.lock:
                self.device.busy.add(self)
        thread.start()

    def _drain(self) -> None:
        lock = self.lock
        with lock:
            work = self.items.popleft()
        # CuPy never warns about floating-point errors; the error state is per thread. Other
        # warnings follow the process's filters: one that they turn into an error is stored like
        # any error (the host-side evaluation on stand-ins has usually raised it already).
        with np.errstate(all="ignore"):
            while True:
                _pause()
                error: BaseException | None = None
                try:
                    work()
                except BaseException as exc:  # stored, raised at the next host wait
                    error = exc
                with lock:
                    self.completed += 1
                    if error is not None:
                        self.errors.append(error)
                    self.done.notify_all()
                    if not self.items and not self.dismissed:
                        self.wake.wait(_LINGER_S)
                    if self.items:
                        work = self.items.popleft()
                        continue
                    self.thread = None
                    if not self.errors:
                        with self.device.lock:
                            self.device.busy.discard(self)
                    return

    def wait(self, point: int | None = None) -> list[BaseException]:
        """Block until the work queued before ``point`` (default: all) has run; take the errors.
        A thread left idle is dismissed and joined (See NOTE [Lingering stream threads])."""
        with self.lock:
            target = self.submitted if point is None else point
            while self.completed < target:
                self.done.wait()
            errors = self.errors
            if errors:
                self.errors = []
                if self.thread is None:
                    with self.device.lock:
                        self.device.busy.discard(self)
            idle = self.thread if self.completed == self.submitted else None
            if idle is not None:
                self.dismissed = True
                self.wake.notify()
        if idle is not None and idle is not threading.current_thread():
            idle.join()
        return errors

    def synchronize(self, point: int | None = None) -> None:
        _raise_async(self.wait(point), self.name)

    def wait_for(self, point: int) -> None:
        """On another stream's thread: block until the work queued here before ``point`` ran."""
        with self.lock:
            while self.completed < point:
                self.done.wait()


class _DeviceState:
    """A simulated device: the queue of its default (legacy) stream, which ``Stream.null`` means
    while the device is current, and the queues that have work or errors."""

    __slots__ = ("busy", "default_queue", "index", "lock", "numbers")

    def __init__(self, index: int) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.busy: set[_Queue] = set()
        self.numbers = itertools.count(1)
        self.default_queue = _Queue(self, f"asyncgrad-sim-stream-{index}-0")

    def synchronize(self) -> None:
        with self.lock:
            queues = list(self.busy)
        errors: list[BaseException] = []
        for queue in queues:
            errors.extend(queue.wait())
        _raise_async(errors, f"cuda:{self.index}")


_device_states: dict[int, _DeviceState] = {}
_device_states_lock: Final = threading.Lock()


def _device_state(index: int) -> _DeviceState:
    state = _device_states.get(index)
    if state is None or index >= _settings().devices:
        if not 0 <= index < _settings().devices:
            raise _invalid_device(index)
        with _device_states_lock:
            state = _device_states.get(index)
            if state is None:
                state = _device_states[index] = _DeviceState(index)
    return state


class _ThreadState(threading.local):
    """This thread's current device and current stream per device (none: ``Stream.null``), with
    their ``with`` stacks."""

    def __init__(self) -> None:
        self.device = 0
        self.streams: dict[int, Stream] = {}
        self.stream_stack: list[tuple[int, Stream | None]] = []
        self.device_stack: list[int] = []


_local: Final = _ThreadState()


class Device:
    """A simulated CUDA device, as ``cupy.cuda.Device``: ``with Device(1):`` or ``use()`` makes it
    this thread's current device."""

    __slots__ = ("id",)

    id: int

    def __init__(self, device: int | None = None) -> None:
        index = _local.device if device is None else operator.index(device)
        _device_state(index)
        self.id = index

    def use(self) -> None:
        _local.device = self.id

    def __enter__(self) -> Device:
        _local.device_stack.append(_local.device)
        _local.device = self.id
        return self

    def __exit__(self, *exc: object) -> None:
        _local.device = _local.device_stack.pop()

    def synchronize(self) -> None:
        """Wait for the work of every stream of this device; raise their stored errors."""
        _device_state(self.id).synchronize()

    def __int__(self) -> int:
        return self.id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return self.id == other.id

    def __hash__(self) -> int:
        return hash((Device, self.id))

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


# NOTE [The null stream]
# As in CuPy, ``Stream.null`` (and any ``Stream(null=True)``, an equal object) is one stream
# object for every device: device_id -1, ptr 0, compared and hashed by ptr like every stream.
# What work on it means is decided at each call by the device current then: a kernel, a
# ``record``, a ``wait_event``, a ``synchronize`` or a host function on it goes to the default
# stream of the current device. So code that hands the null stream around must make the right
# device current around each use; the simulator gives every device's default stream its own
# queue and resolves ``Stream.null`` to one of them at each call, so code that does not shows
# (work on the wrong device's queue, unordered with what it meant to follow).
class Stream:
    """A simulated CUDA stream of the device current at construction, as ``cupy.cuda.Stream``.

    Every stream is non-blocking (no implicit ordering with the default stream); ``null=True``
    gives an object equal to ``Stream.null`` (See NOTE [The null stream]).
    """

    __slots__ = ("__weakref__", "_own", "device_id", "ptr")

    _ptrs: ClassVar[Iterator[int]] = itertools.count(1)
    null: ClassVar[Stream]

    device_id: int
    ptr: int
    _own: _Queue | None  # None for the null stream

    def __new__(
        cls,
        null: bool = False,
        non_blocking: bool = False,
        ptds: bool = False,
        priority: int | None = None,
    ) -> Stream:
        self = object.__new__(cls)
        if null:
            self.device_id, self.ptr, self._own = -1, 0, None
            return self
        state = _device_state(_local.device)
        self.device_id = state.index
        self.ptr = next(cls._ptrs)
        self._own = _Queue(state, f"asyncgrad-sim-stream-{state.index}-{next(state.numbers)}")
        return self

    @property
    def _queue(self) -> _Queue:
        """The queue work on this stream goes to now: its own, or for the null stream the
        current device's default queue."""
        own = self._own
        return _device_state(_local.device).default_queue if own is None else own

    def _device_for_use(self) -> int:
        """The device whose current stream this becomes; CuPy's check that it is current."""
        current = _local.device
        if self.device_id != -1 and self.device_id != current:
            raise RuntimeError(
                f"The device that the stream is created on ({self.device_id}) does not match "
                f"with the current device ({current})"
            )
        return current

    def use(self) -> Stream:
        """Make this the current stream of the current device (its own) on this thread."""
        _local.streams[self._device_for_use()] = self
        return self

    def __enter__(self) -> Stream:
        device = self._device_for_use()
        streams = _local.streams
        _local.stream_stack.append((device, streams.get(device)))
        streams[device] = self
        return self

    def __exit__(self, *exc: object) -> None:
        device, previous = _local.stream_stack.pop()
        if previous is None:
            _local.streams.pop(device, None)
        else:
            _local.streams[device] = previous

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self) -> int:
        return self.ptr

    def record(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Work queued here later waits until the event's recorded point has run."""
        queue, point = event._queue, event._point
        here = self._queue
        if queue is None or queue is here or queue.completed >= point:
            return
        here.submit(functools.partial(queue.wait_for, point))

    def synchronize(self) -> None:
        """Wait until all work queued so far has run; raise an error it stored."""
        self._queue.synchronize()

    @property
    def done(self) -> bool:
        queue = self._queue
        with queue.lock:
            return queue.completed == queue.submitted

    def launch_host_func(self, callback: Callable[[Any], object], arg: Any) -> None:
        """Call ``callback(arg)`` on the stream's thread, in order with its kernels."""
        self._queue.submit(functools.partial(callback, arg))

    def __repr__(self) -> str:
        return f"<sim Stream {self.ptr} (device {self.device_id})>"


Stream.null = Stream(null=True)


class Event:
    """A point in a stream's work, as ``cupy.cuda.Event``."""

    __slots__ = ("_point", "_queue")

    def __init__(
        self, block: bool = False, disable_timing: bool = False, interprocess: bool = False
    ) -> None:
        self._queue: _Queue | None = None
        self._point = 0

    def record(self, stream: Stream | None = None) -> None:
        """Mark the work queued so far on ``stream`` (default: the current stream)."""
        queue = (get_current_stream() if stream is None else stream)._queue
        with queue.lock:
            self._queue, self._point = queue, queue.submitted

    @property
    def done(self) -> bool:
        queue = self._queue
        return queue is None or queue.completed >= self._point

    def synchronize(self) -> None:
        if self._queue is not None:
            self._queue.synchronize(self._point)


def get_current_stream(device_id: int = -1) -> Stream:
    """This thread's current stream of the device (default: the current device); ``Stream.null``
    unless another was made current there."""
    stream = _local.streams.get(_local.device if device_id == -1 else device_id)
    return Stream.null if stream is None else stream


def _submit(device: int, work: _Work) -> None:
    """Queue a kernel of operands on ``device``: on the current stream of the current device,
    which must be ``device`` (See NOTE [Kernels run on the current device])."""
    current = _local.device
    if device != current:
        raise _peer_access(device, current)
    stream = _local.streams.get(current)
    (_device_state(current).default_queue if stream is None else stream._queue).submit(work)


class _Runtime:
    """``cupy.cuda.runtime``'s device queries."""

    CUDARuntimeError: Final = CUDARuntimeError

    @staticmethod
    def getDeviceCount() -> int:
        return _settings().devices

    @staticmethod
    def getDevice() -> int:
        return _local.device

    @staticmethod
    def setDevice(device: int) -> None:
        Device(device).use()

    @staticmethod
    def deviceSynchronize() -> None:
        Device().synchronize()


class _Cuda:
    """``cupy.cuda``'s subset: devices, streams, events and the runtime's queries."""

    Device: Final = Device
    Stream: Final = Stream
    Event: Final = Event
    runtime: Final = _Runtime()
    get_current_stream: Final = staticmethod(get_current_stream)

    @staticmethod
    def is_available() -> bool:
        return _settings().devices > 0


cuda: Final = _Cuda()


# ----------------------------------------------------------------------------- buffers
# NOTE [Poison]: an output buffer is filled when it is allocated, at launch, with values that are
# wrong in a way tests notice: NaN for floats, bytes 0xA5 for integers (large negative numbers for
# the signed types), True for booleans. A consumer that reads it before the kernel ran sees them.
_INT_POISON_BYTE: Final = 0xA5


def _alloc(shape: Any, dtype: Any, order: Any = "C") -> _Array:
    buf = np.empty(shape, dtype, order=order)
    kind = buf.dtype.kind
    if kind in "fc":
        buf.fill(np.nan)
    elif kind in "iu":
        buf.reshape(-1, order="A").view(np.uint8).fill(_INT_POISON_BYTE)
    elif kind == "b":
        buf.fill(True)
    else:
        raise TypeError(f"Unsupported dtype {buf.dtype}: the simulated device holds numbers only")
    return buf


def _zero_strided(shape: _Shape, dtype: Any) -> _Array:
    """A writable array of ``shape`` whose elements all share one zero: a stand-in for an operand
    when the result's shape and dtype are worked out without its data."""
    return np.ndarray(shape, dtype, buffer=np.zeros(1, dtype), strides=(0,) * len(shape))


_units: dict[Any, _Array] = {}


def _unit(dt: np.dtype[Any]) -> _Array:
    """A shared read-only one-element zero of ``dt``: stands in for an operand of an elementwise
    function, whose result dtype does not depend on shapes."""
    unit = _units.get(dt)
    if unit is None:
        unit = np.zeros(1, dt)
        unit.flags.writeable = False
        _units[dt] = unit
    return unit


_broadcasts: dict[tuple[_Shape, ...], _Shape] = {}


def _broadcast(shapes: list[_Shape]) -> _Shape:
    first = shapes[0]
    for shape in shapes:
        if shape != first:
            break
    else:
        return first
    key = tuple(shapes)
    result = _broadcasts.get(key)
    if result is None:
        result = tuple(np.broadcast_shapes(*shapes))
        if len(_broadcasts) > 4096:
            _broadcasts.clear()
        _broadcasts[key] = result
    return result


# ----------------------------------------------------------------------------- operands
class _Defer(Exception):
    """An operand of another library that implements NumPy's protocols: let it handle the call."""


class _NeedsHost(Exception):
    """A result the host-side inference cannot describe: compute it synchronously instead."""


_foreign_types: dict[type, bool] = {}


def _is_foreign(t: type) -> bool:
    foreign = _foreign_types.get(t)
    if foreign is None:
        foreign = not issubclass(t, (np.ndarray, np.generic)) and (
            hasattr(t, "__array_ufunc__") or hasattr(t, "__array_function__")
        )
        _foreign_types[t] = foreign
    return foreign


def _host_array_error(a: _Array) -> TypeError:
    return TypeError(
        f"Unsupported type {type(a)} (shape {a.shape}): a NumPy array cannot be an operand of "
        "an operation on the simulated CUDA device; move it there with asarray() first"
    )


def _scan(obj: Any, found: list[ndarray]) -> None:
    """Collect the device arrays in ``obj`` (tuples and lists are searched); refuse NumPy arrays
    other than 0-d ones."""
    t = type(obj)
    if t is ndarray:
        found.append(obj)
    elif t is tuple or t is list:
        for item in obj:
            _scan(item, found)
    elif isinstance(obj, np.ndarray):
        if obj.ndim:
            raise _host_array_error(obj)
    elif _is_foreign(t):
        raise _Defer


def _scan_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[ndarray]:
    found: list[ndarray] = []
    _scan(args, found)
    for value in kwargs.values():
        _scan(value, found)
    return found


# NOTE [Kernels run on the current device]
# CuPy launches every kernel on the current device (on its current stream) and puts new arrays
# there, whatever device the operands are on; an operand on another device is refused with a
# ValueError unless peer access between the two devices can be enabled (then it only warns, and
# the kernel reads the other device's memory). The simulated devices have no peer access, so an
# operand on another device than the current one is always that ValueError: code must make its
# operands' device current around every launch. Views, metadata and host reads launch nothing
# and work from any device; a copy of an array on another device (``asarray``, ``copy``) is
# made on the current device, on its current stream, ordered after nothing on the source device.
def _peer_access(resides: int, current: int) -> ValueError:
    return ValueError(
        f"The device where the array resides ({resides}) is different from the current device "
        f"({current}). Peer access is unavailable between these devices."
    )


def _device_of(found: list[ndarray]) -> int:
    """The current device, where a kernel of the operands ``found`` runs; refuses an operand on
    another device (See NOTE [Kernels run on the current device])."""
    device = _local.device
    for a in found:
        if a._dev != device:
            raise _peer_access(a._dev, device)
    return device


def _substitute(obj: Any, replace: Callable[[ndarray], Any]) -> Any:
    """``obj`` with each device array replaced, and 0-d NumPy arrays copied (the host may change
    them before the kernel runs)."""
    t = type(obj)
    if t is ndarray:
        return replace(obj)
    if t is tuple:
        return tuple(_substitute(item, replace) for item in obj)
    if t is list:
        return [_substitute(item, replace) for item in obj]
    if isinstance(obj, np.ndarray) and obj.ndim == 0:
        return obj.copy()
    return obj


def _data_of(a: ndarray) -> _Array:
    return a._data


def _substitute_call(
    args: tuple[Any, ...], kwargs: dict[str, Any], replace: Callable[[ndarray], Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _substitute(args, replace), {k: _substitute(v, replace) for k, v in kwargs.items()}


def _operand(x: Any) -> Any:
    """A non-array operand of an elementwise operation, as the kernel will see it."""
    if isinstance(x, (int, float, complex, np.generic)):
        return x
    if isinstance(x, np.ndarray):
        # CuPy takes Python and NumPy scalars, but no NumPy array, not even a 0-d one.
        raise _host_array_error(x)
    if _is_foreign(type(x)):
        raise _Defer
    raise TypeError(f"Unsupported type {type(x)}")


# ----------------------------------------------------------------------------- launches
def _run_into(
    plan: Any, func: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    """The kernel of a launch: compute, then write the results into the buffers of ``plan``."""
    _store(plan, func(*args, **kw))


def _store(plan: Any, value: Any) -> None:
    if plan is None:
        return
    if isinstance(plan, np.ndarray):
        plan[...] = value
        return
    for part, item in zip(plan, value, strict=True):
        _store(part, item)


def _plan(
    r: Any, standins: dict[int, ndarray], keep: list[_Array], device: int, shape: _Shape | None
) -> tuple[Any, Any]:
    """From the result ``r`` of a call on stand-ins: the caller's result (device arrays, outputs
    allocated with poison) and the plan the kernel fills (the new buffers, in the same structure).

    A stand-in returned as is stands for the device array it replaced (an ``out=`` argument).
    ``shape``, when given, is the shape of every array result (elementwise calls on one-element
    stand-ins).
    """
    if isinstance(r, np.ndarray):
        same = standins.get(id(r))
        if same is not None:
            if shape is not None and same.shape != shape:
                raise _NeedsHost
            return same, None
        if r.base is not None and any(np.may_share_memory(r, s) for s in keep):
            raise _NeedsHost  # a view of an operand: only the real data can make it
        buf = _alloc(r.shape if shape is None else shape, r.dtype)
        return _new(buf, device, None), buf
    if isinstance(r, (int, float, complex, np.generic)):
        buf = _alloc(() if shape is None else shape, np.asarray(r).dtype)
        return _new(buf, device, None), buf
    if r is None:
        return None, None
    if type(r) is tuple or type(r) is list:
        parts = [_plan(item, standins, keep, device, shape) for item in r]
        results = [part[0] for part in parts]
        return (tuple(results) if type(r) is tuple else results), tuple(part[1] for part in parts)
    raise _NeedsHost


def _launch(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
    make_standin: Callable[[_Array], _Array],
    shape: _Shape | None,
) -> Any:
    """Evaluate ``func`` on stand-ins for the shapes and dtypes of its results, allocate them and
    queue the real computation; fall back to the synchronous path where that fails."""
    standins: dict[int, ndarray] = {}
    keep: list[_Array] = []

    def stand(a: ndarray) -> _Array:
        s = make_standin(a._data)
        standins[id(s)] = a
        keep.append(s)
        return s

    try:
        sargs, skwargs = _substitute_call(args, kwargs, stand)
        with np.errstate(all="ignore"):
            r = func(*sargs, **skwargs)
        result, plan = _plan(r, standins, keep, device, shape)
    except Exception:
        return _sync_call(func, args, kwargs, device, found)
    rargs, rkwargs = _substitute_call(args, kwargs, _data_of)
    _submit(device, functools.partial(_run_into, plan, func, rargs, rkwargs))
    return result


def _standin_like(data: _Array) -> _Array:
    return _zero_strided(data.shape, data.dtype)


def _unit_like(data: _Array) -> _Array:
    return np.zeros(1, data.dtype)


def _small_like(data: _Array) -> _Array:
    return _zero_strided(tuple(min(n, 1) for n in data.shape), data.dtype)


def _generic(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """Any function: evaluated on zero-stride stand-ins of the operands' shapes."""
    return _launch(func, args, kwargs, found, device, _standin_like, None)


def _elementwise(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """A function that broadcasts its operands (``where``, ``clip``, ...): the dtypes come from a
    call on one-element stand-ins, the shape from broadcasting."""
    try:
        shape = _broadcast([a._data.shape for a in found])
    except ValueError:
        return _sync_call(func, args, kwargs, device, found)
    return _launch(func, args, kwargs, found, device, _unit_like, shape)


def _sync_call(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: int,
    found: list[ndarray] | None = None,
) -> Any:
    """Wait for the device's current stream, then compute on the host (data-dependent results,
    and whatever the host-side inference could not describe, so errors surface as in NumPy)."""
    if found is None:
        found = _scan_call(args, kwargs)
    get_current_stream(device).synchronize()
    rargs, rkwargs = _substitute_call(args, kwargs, _data_of)
    with np.errstate(all="ignore"):
        r = func(*rargs, **rkwargs)
    return _adopt(r, found, device)


def _adopt(r: Any, found: list[ndarray], device: int) -> Any:
    """Host results as device arrays: an operand's own buffer is that operand, a view of it a view,
    a new array or scalar a new device array."""
    if isinstance(r, np.ndarray):
        for a in found:
            if r is a._data:
                return a
        for a in found:
            if np.may_share_memory(r, a._data):
                return _new(r, a._dev, a if a.base is None else a.base)
        return _new(r, device, None)
    if isinstance(r, (int, float, complex, np.generic)):
        return _new(np.array(r), device, None)
    if isinstance(r, tuple):
        items = [_adopt(item, found, device) for item in r]
        return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
    if isinstance(r, list):
        return [_adopt(item, found, device) for item in r]
    return r


def _host_call(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call without device arrays (``sim.arange(3)``): NumPy's result moved to the device."""
    with np.errstate(all="ignore"):
        r = func(*args, **kwargs)
    return _upload_results(r)


def _upload_results(r: Any) -> Any:
    if isinstance(r, (np.ndarray, np.generic)):
        return _upload(np.array(r))
    if type(r) is tuple:
        return tuple(_upload_results(item) for item in r)
    if type(r) is list:
        return [_upload_results(item) for item in r]
    return r


def _upload(host: _Array) -> ndarray:
    """A copy of ``host``, which nobody else holds, on the current device: queued on its current
    stream."""
    device = _local.device
    _device_state(device)
    buf = _alloc(host.shape, host.dtype)
    _submit(device, functools.partial(np.copyto, buf, host))
    return _new(buf, device, None)


_Handler = Callable[
    [Callable[..., Any], tuple[Any, ...], dict[str, Any], "list[ndarray]", int], Any
]


def _dispatch(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], handler: _Handler
) -> Any:
    found = _scan_call(args, kwargs)
    if not found:
        return _host_call(func, args, kwargs)
    if handler in _NO_LAUNCH:  # views and metadata: any device (the views keep their arrays')
        return handler(func, args, kwargs, found, _local.device)
    return handler(func, args, kwargs, found, _device_of(found))


def _call_function(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` for a NumPy function, on the device of its array operands."""
    return _dispatch(func, args, kwargs, _HANDLERS.get(func, _generic))


def _ufunc(ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if method == "__call__":
        if ufunc.signature is None:
            return _ufunc_call(ufunc, inputs, kwargs)
        if ufunc is np.matmul:
            return _dispatch(ufunc, inputs, kwargs, _matmul)
        return _call_function(ufunc, inputs, kwargs)
    bound = getattr(ufunc, method)
    if method == "reduce":
        return _dispatch(bound, inputs, kwargs, functools.partial(_reduction, default_axis=0))
    return _dispatch(bound, inputs, kwargs, _generic)


def _ufunc_call(ufunc: np.ufunc, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The hot path: a ufunc on arrays and scalars, optionally with ``out=``."""
    out = kwargs.get("out")
    outs: tuple[Any, ...] = () if out is None else out if type(out) is tuple else (out,)
    where = kwargs.get("where", True)
    if type(where) is not bool or any(o is not None and type(o) is not ndarray for o in outs):
        return _call_function(ufunc, inputs, kwargs)
    device = _local.device
    operands = False  # whether any operand is a device array
    shapes: list[_Shape] = []
    units: list[Any] = []
    datas: list[Any] = []
    for x in inputs:
        if type(x) is ndarray:
            if x._dev != device:
                raise _peer_access(x._dev, device)
            operands = True
            data = x._data
            shapes.append(data.shape)
            units.append(_unit(data.dtype))
            datas.append(data)
        else:
            value = _operand(x)
            units.append(value)
            datas.append(value)
    for o in outs:
        if o is not None:
            if o._dev != device:
                raise _peer_access(o._dev, device)
            operands = True
            shapes.append(o._data.shape)
    if not operands:
        return _host_call(ufunc, inputs, kwargs)
    kw = kwargs if out is None else {k: v for k, v in kwargs.items() if k != "out"}
    try:
        with np.errstate(all="ignore"):
            if outs:
                unit_outs = tuple(None if o is None else np.zeros(1, o.dtype) for o in outs)
                r = ufunc(*units, out=unit_outs, **kw)
            else:
                r = ufunc(*units, **kw)
        shape = _broadcast(shapes)
    except Exception:
        return _sync_call(ufunc, inputs, kwargs, device)
    nout = ufunc.nout
    results = r if nout > 1 else (r,)
    bufs: list[_Array] = []
    arrays: list[ndarray] = []
    for i in range(nout):
        o = outs[i] if i < len(outs) else None
        if o is None:
            buf = _alloc(shape, results[i].dtype)
            arrays.append(_new(buf, device, None))
            bufs.append(buf)
        else:
            if o._data.shape != shape:
                return _sync_call(ufunc, inputs, kwargs, device)
            arrays.append(o)
            bufs.append(o._data)
    _submit(device, functools.partial(ufunc, *datas, out=tuple(bufs), **kw))
    return arrays[0] if nout == 1 else tuple(arrays)


def _matmul(
    func: Callable[..., Any],
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """``matmul``: evaluated on stand-ins that keep only the contracted and batch dimensions, so the
    shape check costs nothing like the product."""
    out = kwargs.get("out")
    o = out[0] if type(out) is tuple and len(out) == 1 else out
    if (
        len(inputs) != 2
        or type(inputs[0]) is not ndarray
        or type(inputs[1]) is not ndarray
        or (o is not None and type(o) is not ndarray)
        or not inputs[0].ndim
        or not inputs[1].ndim
    ):
        return _generic(func, inputs, kwargs, found, device)
    a, b = inputs
    sa, sb = a._data.shape, b._data.shape
    kw = {k: v for k, v in kwargs.items() if k != "out"}
    ash = sa if len(sa) == 1 else (*sa[:-2], min(sa[-2], 1), sa[-1])
    bsh = sb if len(sb) == 1 else (*sb[:-2], sb[-2], min(sb[-1], 1))
    try:
        with np.errstate(all="ignore"):
            r = np.matmul(_zero_strided(ash, a.dtype), _zero_strided(bsh, b.dtype), **kw)
    except Exception:
        return _sync_call(func, inputs, kwargs, device, found)
    rs = r.shape
    if len(sa) > 1 and len(sb) > 1:
        shape = (*rs[:-2], sa[-2], sb[-1])
    elif len(sb) > 1:
        shape = (*rs[:-1], sb[-1])
    elif len(sa) > 1:
        shape = (*rs[:-1], sa[-2])
    else:
        shape = ()
    if o is None:
        buf = _alloc(shape, r.dtype)
        result = _new(buf, device, None)
    elif o.shape == shape and np.can_cast(r.dtype, o.dtype, kw.get("casting", "same_kind")):
        buf, result = o._data, o
    else:
        return _sync_call(func, inputs, kwargs, device, found)
    _submit(device, functools.partial(np.matmul, a._data, b._data, out=buf, **kw))
    return result


def _dot(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """``dot``: like ``matmul``, stand-ins keep only the contracted dimensions."""
    if (
        len(args) != 2
        or kwargs
        or type(args[0]) is not ndarray
        or type(args[1]) is not ndarray
        or not args[0].ndim
        or not args[1].ndim
    ):
        return _generic(func, args, kwargs, found, device)
    a, b = args
    sa, sb = a._data.shape, b._data.shape
    ash = (*(min(n, 1) for n in sa[:-1]), sa[-1])
    bsh = sb if len(sb) == 1 else (*(min(n, 1) for n in sb[:-2]), sb[-2], min(sb[-1], 1))
    try:
        with np.errstate(all="ignore"):
            r = np.dot(_zero_strided(ash, a.dtype), _zero_strided(bsh, b.dtype))
    except Exception:
        return _sync_call(func, args, kwargs, device, found)
    shape = (*sa[:-1], *sb[:-2], sb[-1]) if len(sb) > 1 else sa[:-1]
    buf = _alloc(shape, np.asarray(r).dtype)
    _submit(device, functools.partial(_run_into, buf, np.dot, (a._data, b._data), {}))
    return _new(buf, device, None)


def _reduction(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
    default_axis: int | None = None,
) -> Any:
    """A reduction over axes (``sum``, ``max``, ``argmax``, ufunc ``reduce``...): evaluated on a
    stand-in with every dimension cut to at most 1 (which keeps NumPy's checks of the axes and of
    empty reductions), the result's shape worked out from the axes."""
    a = args[0] if args else None
    if type(a) is not ndarray or len(found) != 1 or len(args) > 2:
        return _generic(func, args, kwargs, found, device)
    data = a._data
    try:
        with np.errstate(all="ignore"):
            r = func(_small_like(data), *args[1:], **kwargs)
    except Exception:
        return _sync_call(func, args, kwargs, device, found)
    axis = args[1] if len(args) == 2 else kwargs.get("axis", default_axis)
    ndim = data.ndim
    if axis is None:
        axes = set(range(ndim))
    else:
        axes = {operator.index(ax) % ndim for ax in (axis if type(axis) is tuple else (axis,))}
    if kwargs.get("keepdims", False):
        shape = tuple(1 if i in axes else n for i, n in enumerate(data.shape))
    else:
        shape = tuple(n for i, n in enumerate(data.shape) if i not in axes)
    if np.ndim(r) != len(shape):
        return _generic(func, args, kwargs, found, device)
    buf = _alloc(shape, np.asarray(r).dtype)
    _submit(device, functools.partial(_run_into, buf, func, (data, *args[1:]), kwargs))
    return _new(buf, device, None)


def _copyto_params(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> Any:
    return dst, src, casting, where


def _copyto(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    dst, src, casting, where = _copyto_params(*args, **kwargs)
    if type(dst) is not ndarray:
        raise TypeError("copyto: the destination must be an array of the simulated device")

    def unit(x: Any) -> Any:
        return _unit(x.dtype) if type(x) is ndarray else x

    def real(x: Any) -> Any:
        return x._data if type(x) is ndarray else _operand(x)

    try:
        shapes = [x._data.shape for x in (src, where) if type(x) is ndarray]
        if _broadcast([*shapes, dst.shape]) != dst.shape:
            raise _NeedsHost
        with np.errstate(all="ignore"):
            np.copyto(np.zeros(1, dst.dtype), unit(src), casting=casting, where=unit(where))
    except Exception:
        return _sync_call(func, args, kwargs, device, found)
    work = functools.partial(np.copyto, dst._data, real(src), casting=casting, where=real(where))
    _submit(device, work)
    return None


def _like_params(
    prototype: Any,
    dtype: Any = None,
    order: Any = "K",
    subok: Any = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> tuple[Any, Any, Any]:
    return prototype, dtype, shape


def _full_like_params(
    prototype: Any,
    fill_value: Any,
    dtype: Any = None,
    order: Any = "K",
    subok: Any = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> tuple[Any, Any, Any, Any]:
    return prototype, fill_value, dtype, shape


def _like(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """``empty_like``, ``zeros_like``, ``ones_like``, ``full_like``: an allocation and a fill."""
    if func is np.full_like:
        prototype, fill, dt, shape = _full_like_params(*args, **kwargs)
    else:
        prototype, dt, shape = _like_params(*args, **kwargs)
        fill = 0 if func is np.zeros_like else 1
    if type(prototype) is not ndarray:
        return _generic(func, args, kwargs, found, device)
    return _like_of(prototype, dt, shape, None if func is np.empty_like else fill)


def _filled(shape: Any, dt: Any, fill: Any) -> ndarray:
    """A new array on the current device filled with ``fill`` (None: poison)."""
    device = _local.device
    _device_state(device)
    buf = _alloc(shape, dt)
    if fill is not None:
        if type(fill) is ndarray:
            if fill._dev != device:
                raise _peer_access(fill._dev, device)
            value: Any = fill._data
        else:
            value = _operand(fill)
            np.copyto(np.zeros((), buf.dtype), value, casting="unsafe")
        _submit(device, functools.partial(np.copyto, buf, value, casting="unsafe"))
    return _new(buf, device, None)


def _view_function(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """A function that returns views (``transpose``, ``broadcast_to``, ...): applied to the buffers
    at once, without stream work (views read no data)."""
    rargs, rkwargs = _substitute_call(args, kwargs, _data_of)
    return _adopt(func(*rargs, **rkwargs), found, device)


def _reshape_params(
    a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> tuple[Any, Any, str, Any]:
    return a, shape if newshape is None else newshape, order, copy


def _reshape_function(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    a, shape, order, copy = _reshape_params(*args, **kwargs)
    if type(a) is not ndarray:
        return _generic(func, args, kwargs, found, device)
    return a._reshape(shape, order, copy)


def _ravel_function(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    a = args[0] if args else kwargs["a"]
    return a.ravel(*args[1:], **{k: v for k, v in kwargs.items() if k != "a"})


def _metadata(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """A function of shapes, dtypes or memory only (``ndim``, ``result_type``, ...)."""
    rargs, rkwargs = _substitute_call(args, kwargs, _data_of)
    return func(*rargs, **rkwargs)


def _synchronous(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    return _sync_call(func, args, kwargs, device, found)


def _where(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    if len(args) + len(kwargs) == 1:  # where(condition) is nonzero(condition)
        return _sync_call(func, args, kwargs, device, found)
    return _elementwise(func, args, kwargs, found, device)


def _repeat(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    if type(repeats) is ndarray:  # the result's length is the sum of the counts
        return _sync_call(func, args, kwargs, device, found)
    return _generic(func, args, kwargs, found, device)


def _handlers() -> dict[Any, _Handler]:
    def named(*names: str) -> list[Any]:
        return [getattr(np, name) for name in names if hasattr(np, name)]

    handlers: dict[Any, _Handler] = {}
    for f in named(
        "transpose", "permute_dims", "matrix_transpose", "swapaxes", "moveaxis", "expand_dims",
        "squeeze", "broadcast_to", "broadcast_arrays", "diagonal", "atleast_1d", "atleast_2d",
        "atleast_3d", "real", "imag", "flip", "fliplr", "flipud", "rot90", "split", "array_split",
        "hsplit", "vsplit", "dsplit",
    ):  # fmt: skip
        handlers[f] = _view_function
    for f in named(
        "nonzero", "argwhere", "flatnonzero", "compress", "extract", "unique", "unique_all",
        "unique_counts", "unique_inverse", "unique_values", "bincount", "histogram",
        "histogram2d", "histogramdd", "histogram_bin_edges", "trim_zeros", "intersect1d",
        "union1d", "setdiff1d", "setxor1d", "delete", "insert",
    ):  # fmt: skip
        handlers[f] = _synchronous
    for f in named(
        "shape", "ndim", "size", "result_type", "can_cast", "iscomplexobj", "isrealobj",
        "may_share_memory", "shares_memory",
    ):  # fmt: skip
        handlers[f] = _metadata
    for f in named(
        "sum", "prod", "max", "min", "amax", "amin", "mean", "std", "var", "all", "any",
        "argmax", "argmin", "nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanstd",
        "nanvar", "nanargmax", "nanargmin", "count_nonzero",
    ):  # fmt: skip
        handlers[f] = _reduction
    for f in named("clip", "isclose", "round", "around", "nan_to_num"):
        handlers[f] = _elementwise
    for f in named("empty_like", "zeros_like", "ones_like", "full_like"):
        handlers[f] = _like
    handlers[np.where] = _where
    handlers[np.repeat] = _repeat
    handlers[np.copyto] = _copyto
    handlers[np.dot] = _dot
    handlers[np.reshape] = _reshape_function
    handlers[np.ravel] = _ravel_function
    return handlers


_HANDLERS: Final = _handlers()
# Handlers that launch nothing themselves (a copy they make checks its device at its launch).
_NO_LAUNCH: Final = frozenset(
    (_view_function, _metadata, _reshape_function, _ravel_function, _like)
)


# ----------------------------------------------------------------------------- indexing
def _is_basic(key: tuple[Any, ...]) -> bool:
    """Whether ``key`` holds only ints, slices, None and Ellipsis (a view)."""
    for k in key:
        t = type(k)
        if not (
            t is int
            or t is slice
            or k is None
            or k is Ellipsis
            or (isinstance(k, np.integer) and t is not bool)
        ):
            return False
    return True


def _advanced_key(key: tuple[Any, ...], found: list[ndarray]) -> tuple[tuple[Any, ...], bool]:
    """An advanced index with its host index arrays copied now; whether it holds device arrays."""
    converted: list[Any] = []
    on_device = False
    for k in key:
        if type(k) is ndarray:
            found.append(k)
            on_device = True
            converted.append(k)
        elif isinstance(k, (np.ndarray, list)):
            converted.append(np.array(k))
        else:
            converted.append(k)
    return tuple(converted), on_device


def _take_into(out: _Array, data: _Array, key: tuple[Any, ...]) -> None:
    out[...] = data[key]


def _put(data: _Array, key: tuple[Any, ...], value: Any) -> None:
    data[key] = value


def _get_advanced(a: ndarray, key: tuple[Any, ...]) -> Any:
    """Advanced indexing: synchronous with device index arrays (as CuPy is with masks, whose
    result's size depends on the data), a launch with host ones."""
    found = [a]
    key, synchronous = _advanced_key(key, found)
    device = _device_of(found)
    if synchronous:
        return _sync_call(operator.getitem, (a, key), {}, device, found)
    try:
        r = _standin_like(a._data)[key]
        buf = _alloc(np.shape(r), r.dtype)
    except Exception:
        return _sync_call(operator.getitem, (a, key), {}, device, found)
    _submit(device, functools.partial(_take_into, buf, a._data, key))
    return _new(buf, device, None)


def _set_item(a: ndarray, key: tuple[Any, ...], value: Any) -> None:
    """Assignment: a launch, but synchronous with device index arrays, like reading."""
    found = [a]
    on_device = type(value) is ndarray
    if on_device:
        found.append(value)
        real: Any = value._data
    elif isinstance(value, (int, float, complex, np.generic)):
        real = value
    else:  # a host array or a nested list, copied now
        real = np.array(value)
    basic = _is_basic(key)
    synchronous = False
    if not basic:
        key, synchronous = _advanced_key(key, found)
    device = _device_of(found)
    rkey = _substitute(key, _data_of)
    try:
        if synchronous:
            raise _NeedsHost
        target = _standin_like(a._data)
        if basic and (on_device or np.ndim(real) == 0):
            # Check broadcasting and casting without a pass over the selection.
            ellipsis = any(k is Ellipsis for k in key)
            selected = np.shape(target[key if ellipsis else (*key, Ellipsis)])
            if _broadcast([value.shape if on_device else (), selected]) != selected:
                raise _NeedsHost
            np.zeros((), a.dtype)[()] = np.zeros((), value.dtype) if on_device else real
        else:
            target[key] = _standin_like(real) if on_device else real
    except Exception:
        get_current_stream(device).synchronize()
        with np.errstate(all="ignore"):
            a._data[rkey] = real
        return
    _submit(device, functools.partial(_put, a._data, rkey, real))


# ----------------------------------------------------------------------------- arrays
class _Flags:
    """The memory-layout flags of an array."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, c_contiguous: bool, f_contiguous: bool, owndata: bool) -> None:
        self.c_contiguous = c_contiguous
        self.f_contiguous = f_contiguous
        self.owndata = owndata

    def __getitem__(self, name: str) -> bool:
        return {
            "C_CONTIGUOUS": self.c_contiguous,
            "F_CONTIGUOUS": self.f_contiguous,
            "OWNDATA": self.owndata,
        }[name]

    def __repr__(self) -> str:
        return (
            f"  C_CONTIGUOUS : {self.c_contiguous}\n  F_CONTIGUOUS : {self.f_contiguous}\n"
            f"  OWNDATA : {self.owndata}"
        )


def _new(data: _Array, device: int, base: ndarray | None) -> ndarray:
    a = object.__new__(ndarray)
    a._data = data
    a._dev = device
    a.base = base
    return a


def _is_operand(x: Any) -> bool:
    return isinstance(x, (ndarray, np.ndarray, int, float, complex, np.generic))


def _binary(ufunc: np.ufunc, a: Any, b: Any) -> Any:
    try:
        return _ufunc(ufunc, "__call__", (a, b), {})
    except _Defer:
        return NotImplemented


def _inplace(ufunc: np.ufunc, a: ndarray, b: Any) -> Any:
    try:
        return _ufunc(ufunc, "__call__", (a, b), {"out": (a,)})
    except _Defer:
        return NotImplemented


class ndarray:
    """An array on a simulated CUDA device: a host buffer written by the device's streams.

    ``_data`` is the NumPy buffer (for a view, a NumPy view of its base's buffer); reading it
    directly bypasses the streams, which is what tests do to see poison.
    """

    __slots__ = ("__weakref__", "_data", "_dev", "base")

    _data: _Array
    _dev: int
    base: ndarray | None

    def __init__(self, shape: Any, dtype: Any = float, *, order: Any = "C") -> None:
        """An uninitialised (poisoned) array on the current device."""
        device = _local.device
        _device_state(device)
        self._data = _alloc(shape, dtype, order)
        self._dev = device
        self.base = None

    # ------------------------------------------------------------------ attributes
    @property
    def shape(self) -> _Shape:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def strides(self) -> _Shape:
        return self._data.strides

    @property
    def itemsize(self) -> int:
        return self._data.itemsize

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    @property
    def flags(self) -> _Flags:
        flags = self._data.flags
        return _Flags(flags.c_contiguous, flags.f_contiguous, self.base is None)

    @property
    def device(self) -> Device:
        return Device(self._dev)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        data = self._data
        return {
            "shape": data.shape,
            "typestr": data.dtype.str,
            "descr": data.dtype.descr,
            "data": (data.ctypes.data, False),
            "strides": None if data.flags.c_contiguous else data.strides,
            "version": 3,
        }

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of unsized object")
        return int(self._data.shape[0])

    # ------------------------------------------------------------------ views
    def _view(self, data: _Array) -> ndarray:
        return _new(data, self._dev, self if self.base is None else self.base)

    @property
    def T(self) -> ndarray:
        return self._view(self._data.T)

    @property
    def mT(self) -> ndarray:
        if self._data.ndim < 2:
            raise ValueError("matrix transpose with ndim < 2 is undefined")
        return self._view(self._data.swapaxes(-1, -2))

    @property
    def real(self) -> Any:
        return _call_function(np.real, (self,), {})

    @property
    def imag(self) -> Any:
        return _call_function(np.imag, (self,), {})

    def transpose(self, *axes: Any) -> ndarray:
        return self._view(self._data.transpose(*axes))

    def swapaxes(self, axis1: int, axis2: int) -> ndarray:
        return self._view(self._data.swapaxes(axis1, axis2))

    def squeeze(self, axis: Any = None) -> ndarray:
        return self._view(self._data.squeeze(axis))

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> ndarray:
        return self._view(self._data.diagonal(offset, axis1, axis2))

    def view(self, dtype: Any = None) -> ndarray:
        return self._view(self._data.view() if dtype is None else self._data.view(dtype))

    def reshape(self, *shape: Any, order: str = "C") -> ndarray:
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return self._reshape(shape, order, None)

    def _reshape(self, shape: Any, order: Any, copy: Any) -> ndarray:
        """A view where NumPy could give one without copying, else a copy queued on the stream."""
        data = self._data
        if copy is not True:
            try:
                return self._view(data.reshape(shape, order=order, copy=False))
            except ValueError:
                if copy is False:
                    raise
            except TypeError:  # NumPy < 2.1: no copy keyword; a view shares the buffer
                r = data.reshape(shape, order=order)
                if np.may_share_memory(r, data):
                    return self._view(r)
        new_shape = _standin_like(data).reshape(shape, order=order).shape  # NumPy's checks
        buf = _alloc(new_shape, data.dtype)
        _submit(self._dev, functools.partial(_reshape_into, buf, data, order))
        return _new(buf, self._dev, None)

    def ravel(self, order: str = "C") -> ndarray:
        if order in ("K", "A"):
            fortran = self._data.flags.f_contiguous and not self._data.flags.c_contiguous
            order = "F" if fortran else "C"
        return self._reshape(-1, order, None)

    def flatten(self, order: str = "C") -> ndarray:
        return self._reshape(-1, order, True)

    def __getitem__(self, key: Any) -> Any:
        k = key if type(key) is tuple else (key,)
        if _is_basic(k):
            if not any(i is Ellipsis for i in k):
                k = (*k, Ellipsis)  # a 0-d view, where NumPy would read a scalar
            return self._view(self._data[k])
        return _get_advanced(self, k)

    def __setitem__(self, key: Any, value: Any) -> None:
        _set_item(self, key if type(key) is tuple else (key,), value)

    def __iter__(self) -> Iterator[Any]:
        if not self._data.ndim:
            raise TypeError("iteration over a 0-d array")
        for i in range(self._data.shape[0]):
            yield self[i]

    # ------------------------------------------------------------------ launches
    def copy(self, order: str = "C") -> ndarray:
        """A copy on the current device (as CuPy: from another device too)."""
        if self._dev != _local.device:
            return _transfer(self, None)
        buf = _alloc(self._data.shape, self._data.dtype, order)
        _submit(self._dev, functools.partial(np.copyto, buf, self._data))
        return _new(buf, self._dev, None)

    def astype(
        self,
        dtype: Any,
        order: str = "K",
        casting: Any = None,
        subok: Any = None,
        copy: bool = True,
    ) -> ndarray:
        target = np.dtype(dtype)
        if not copy and target == self._data.dtype:
            return self
        # NumPy's warnings about the conversion (complex to real) come from the host, at once.
        _unit(self._data.dtype).astype(target)
        buf = _alloc(self._data.shape, target)
        work = functools.partial(np.copyto, buf, self._data, casting="unsafe")
        _submit(self._dev, work)
        return _new(buf, self._dev, None)

    def fill(self, value: Any) -> None:
        self[...] = value

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.sum, (self, *args), kwargs)

    def prod(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.prod, (self, *args), kwargs)

    def mean(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.mean, (self, *args), kwargs)

    def std(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.std, (self, *args), kwargs)

    def var(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.var, (self, *args), kwargs)

    def max(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.max, (self, *args), kwargs)

    def min(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.min, (self, *args), kwargs)

    def argmax(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.argmax, (self, *args), kwargs)

    def argmin(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.argmin, (self, *args), kwargs)

    def all(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.all, (self, *args), kwargs)

    def any(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.any, (self, *args), kwargs)

    def cumsum(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.cumsum, (self, *args), kwargs)

    def cumprod(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.cumprod, (self, *args), kwargs)

    def clip(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.clip, (self, *args), kwargs)

    def round(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.round, (self, *args), kwargs)

    def dot(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.dot, (self, *args), kwargs)

    def take(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.take, (self, *args), kwargs)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.put, (self, *args), kwargs)

    def repeat(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.repeat, (self, *args), kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.trace, (self, *args), kwargs)

    def argsort(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.argsort, (self, *args), kwargs)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        _call_function(np.ndarray.sort, (self, *args), kwargs)

    def searchsorted(self, *args: Any, **kwargs: Any) -> Any:
        return _call_function(np.searchsorted, (self, *args), kwargs)

    def nonzero(self) -> Any:
        return _call_function(np.nonzero, (self,), {})

    def compress(self, condition: Any, axis: Any = None) -> Any:
        return _call_function(np.compress, (condition, self, axis), {})

    def conj(self) -> Any:
        return _ufunc_call(np.conjugate, (self,), {})

    def conjugate(self) -> Any:
        return _ufunc_call(np.conjugate, (self,), {})

    # ------------------------------------------------------------------ NumPy's protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        try:
            return _ufunc(ufunc, method, inputs, kwargs)
        except _Defer:
            return NotImplemented

    def __array_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        try:
            return _call_function(func, args, kwargs)
        except _Defer:
            return NotImplemented

    def __array__(self, dtype: Any = None, copy: Any = None) -> _Array:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly."
        )

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise BufferError("the memory of a simulated CUDA device cannot be exported")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self._dev)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("arrays of the simulated CUDA device cannot be pickled")

    def __copy__(self) -> ndarray:
        return self.copy()

    def __deepcopy__(self, memo: Any) -> ndarray:
        return self.copy()

    # ------------------------------------------------------------------ host reads
    def _host_queue(self, stream: Stream | None) -> _Queue:
        """Where CuPy's host copies of this array go: ``stream`` (default: the current stream of
        the CURRENT device), used with this array's device current (so the null stream means
        this device's default stream)."""
        own = (get_current_stream() if stream is None else stream)._own
        return _device_state(self._dev).default_queue if own is None else own

    def get(self, stream: Stream | None = None, order: str = "C", out: Any = None) -> _Array:
        """A NumPy copy, after the stream (default: the current device's current stream) has
        run."""
        self._host_queue(stream).synchronize()
        if out is not None:
            np.copyto(out, self._data)
            return out  # type: ignore[no-any-return]
        return np.array(self._data, order=order, copy=True)  # type: ignore[call-overload, no-any-return]

    def set(self, arr: Any, stream: Stream | None = None) -> None:
        """Copy a host array in, queued on the stream (default: the current device's current
        stream)."""
        host = np.array(arr, copy=True)
        if host.shape != self._data.shape:
            raise ValueError(f"Shape mismatch: {host.shape} != {self._data.shape}")
        work = functools.partial(np.copyto, self._data, host, casting="unsafe")
        self._host_queue(stream).submit(work)

    def item(self, *args: Any) -> Any:
        return self.get().item(*args)

    def tolist(self) -> Any:
        return self.get().tolist()

    def __float__(self) -> float:
        return float(self.get())

    def __int__(self) -> int:
        return int(self.get())

    def __complex__(self) -> complex:
        return complex(self.get())

    def __index__(self) -> int:
        if self._data.size != 1 or self._data.dtype.kind not in "iu":
            raise TypeError("only integer arrays of one element can be converted to an index")
        return int(self.get().reshape(()))

    def __bool__(self) -> bool:
        if self._data.size != 1:  # NumPy's error, without waiting for the data
            return bool(np.empty(self._data.shape, bool))
        return bool(self.get())

    def __repr__(self) -> str:
        return repr(self.get())

    def __str__(self) -> str:
        return str(self.get())

    def __format__(self, spec: str) -> str:
        return format(self.get(), spec)

    def __contains__(self, value: Any) -> bool:
        equal = self == value
        return equal is not NotImplemented and bool(_call_function(np.any, (equal,), {}))

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Any:
        return _binary(np.add, self, other)

    def __radd__(self, other: Any) -> Any:
        return _binary(np.add, other, self)

    def __iadd__(self, other: Any) -> Any:
        return _inplace(np.add, self, other)

    def __sub__(self, other: Any) -> Any:
        return _binary(np.subtract, self, other)

    def __rsub__(self, other: Any) -> Any:
        return _binary(np.subtract, other, self)

    def __isub__(self, other: Any) -> Any:
        return _inplace(np.subtract, self, other)

    def __mul__(self, other: Any) -> Any:
        return _binary(np.multiply, self, other)

    def __rmul__(self, other: Any) -> Any:
        return _binary(np.multiply, other, self)

    def __imul__(self, other: Any) -> Any:
        return _inplace(np.multiply, self, other)

    def __truediv__(self, other: Any) -> Any:
        return _binary(np.true_divide, self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return _binary(np.true_divide, other, self)

    def __itruediv__(self, other: Any) -> Any:
        return _inplace(np.true_divide, self, other)

    def __floordiv__(self, other: Any) -> Any:
        return _binary(np.floor_divide, self, other)

    def __rfloordiv__(self, other: Any) -> Any:
        return _binary(np.floor_divide, other, self)

    def __ifloordiv__(self, other: Any) -> Any:
        return _inplace(np.floor_divide, self, other)

    def __mod__(self, other: Any) -> Any:
        return _binary(np.remainder, self, other)

    def __rmod__(self, other: Any) -> Any:
        return _binary(np.remainder, other, self)

    def __imod__(self, other: Any) -> Any:
        return _inplace(np.remainder, self, other)

    def __divmod__(self, other: Any) -> Any:
        return _binary(np.divmod, self, other)

    def __rdivmod__(self, other: Any) -> Any:
        return _binary(np.divmod, other, self)

    def __pow__(self, other: Any) -> Any:
        return _binary(np.power, self, other)

    def __rpow__(self, other: Any) -> Any:
        return _binary(np.power, other, self)

    def __ipow__(self, other: Any) -> Any:
        return _inplace(np.power, self, other)

    def __matmul__(self, other: Any) -> Any:
        return _binary(np.matmul, self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return _binary(np.matmul, other, self)

    def __imatmul__(self, other: Any) -> Any:
        return _inplace(np.matmul, self, other)

    def __and__(self, other: Any) -> Any:
        return _binary(np.bitwise_and, self, other)

    def __rand__(self, other: Any) -> Any:
        return _binary(np.bitwise_and, other, self)

    def __iand__(self, other: Any) -> Any:
        return _inplace(np.bitwise_and, self, other)

    def __or__(self, other: Any) -> Any:
        return _binary(np.bitwise_or, self, other)

    def __ror__(self, other: Any) -> Any:
        return _binary(np.bitwise_or, other, self)

    def __ior__(self, other: Any) -> Any:
        return _inplace(np.bitwise_or, self, other)

    def __xor__(self, other: Any) -> Any:
        return _binary(np.bitwise_xor, self, other)

    def __rxor__(self, other: Any) -> Any:
        return _binary(np.bitwise_xor, other, self)

    def __ixor__(self, other: Any) -> Any:
        return _inplace(np.bitwise_xor, self, other)

    def __lshift__(self, other: Any) -> Any:
        return _binary(np.left_shift, self, other)

    def __rlshift__(self, other: Any) -> Any:
        return _binary(np.left_shift, other, self)

    def __ilshift__(self, other: Any) -> Any:
        return _inplace(np.left_shift, self, other)

    def __rshift__(self, other: Any) -> Any:
        return _binary(np.right_shift, self, other)

    def __rrshift__(self, other: Any) -> Any:
        return _binary(np.right_shift, other, self)

    def __irshift__(self, other: Any) -> Any:
        return _inplace(np.right_shift, self, other)

    def __neg__(self) -> Any:
        return _ufunc_call(np.negative, (self,), {})

    def __pos__(self) -> Any:
        return _ufunc_call(np.positive, (self,), {})

    def __abs__(self) -> Any:
        return _ufunc_call(np.absolute, (self,), {})

    def __invert__(self) -> Any:
        return _ufunc_call(np.invert, (self,), {})

    def __lt__(self, other: Any) -> Any:
        return _binary(np.less, self, other)

    def __le__(self, other: Any) -> Any:
        return _binary(np.less_equal, self, other)

    def __gt__(self, other: Any) -> Any:
        return _binary(np.greater, self, other)

    def __ge__(self, other: Any) -> Any:
        return _binary(np.greater_equal, self, other)

    def __eq__(self, other: object) -> Any:
        return _binary(np.equal, self, other) if _is_operand(other) else NotImplemented

    def __ne__(self, other: object) -> Any:
        return _binary(np.not_equal, self, other) if _is_operand(other) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _reshape_into(out: _Array, data: _Array, order: Any) -> None:
    out[...] = data.reshape(out.shape, order=order)


# ----------------------------------------------------------------------------- module functions
def _transfer(a: ndarray, dt: Any) -> ndarray:
    """A copy of ``a`` (on another device) on the current device, queued on its current stream
    and, as in CuPy, ordered after nothing on ``a``'s device: the caller orders it (See NOTE
    [Kernels run on the current device])."""
    device = _local.device
    buf = _alloc(a._data.shape, a._data.dtype if dt is None else dt)
    _submit(device, functools.partial(np.copyto, buf, a._data, casting="unsafe"))
    return _new(buf, device, None)


def asarray(a: Any, dtype: Any = None, order: Any = None) -> ndarray:
    """``a`` on the current device: a device array of it as is (or converted), a copy from another
    device, or a copy of host data (taken now, so later host changes do not race with it)."""
    if type(a) is ndarray:
        if a._dev != _local.device:
            return _transfer(a, dtype)
        return a if dtype is None else a.astype(dtype, copy=False)
    return _upload(np.array(a, dtype=dtype, order="C" if order is None else order))


def array(obj: Any, dtype: Any = None, copy: bool = True, order: Any = "K") -> ndarray:
    if type(obj) is ndarray and copy and obj._dev == _local.device:
        return obj.astype(obj.dtype if dtype is None else dtype, order)
    return asarray(obj, dtype)


def asnumpy(a: Any, stream: Stream | None = None) -> _Array:
    """A NumPy copy of a device array after its stream has run; other values through NumPy."""
    if type(a) is ndarray:
        return a.get(stream)
    return np.asarray(a)


def empty(shape: Any, dtype: Any = float, order: Any = "C") -> ndarray:
    return _filled(shape, dtype, None)


def zeros(shape: Any, dtype: Any = float, order: Any = "C") -> ndarray:
    return _filled(shape, dtype, 0)


def ones(shape: Any, dtype: Any = float, order: Any = "C") -> ndarray:
    return _filled(shape, dtype, 1)


def full(shape: Any, fill_value: Any, dtype: Any = None, order: Any = "C") -> ndarray:
    if dtype is None:
        dtype = fill_value.dtype if type(fill_value) is ndarray else np.array(fill_value).dtype
    return _filled(shape, dtype, fill_value)


def _like_of(a: Any, dt: Any, shape: Any, fill: Any) -> ndarray:
    """A new array shaped like ``a``, on the current device (as CuPy, whatever ``a``'s device)."""
    if type(a) is not ndarray:
        a = np.asarray(a)
    return _filled(a.shape if shape is None else shape, a.dtype if dt is None else dt, fill)


def empty_like(
    a: Any, dtype: Any = None, order: Any = "K", subok: Any = None, shape: Any = None
) -> ndarray:
    return _like_of(a, dtype, shape, None)


def zeros_like(
    a: Any, dtype: Any = None, order: Any = "K", subok: Any = None, shape: Any = None
) -> ndarray:
    return _like_of(a, dtype, shape, 0)


def ones_like(
    a: Any, dtype: Any = None, order: Any = "K", subok: Any = None, shape: Any = None
) -> ndarray:
    return _like_of(a, dtype, shape, 1)


def full_like(
    a: Any,
    fill_value: Any,
    dtype: Any = None,
    order: Any = "K",
    subok: Any = None,
    shape: Any = None,
) -> ndarray:
    return _like_of(a, dtype, shape, fill_value)


def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None) -> ndarray:
    return _upload(np.arange(start, stop, step, dtype=dtype))


def linspace(
    start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None
) -> ndarray:
    return _upload(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype))


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = float) -> ndarray:
    return _upload(np.eye(N, M, k, dtype=dtype))


def scatter_add(a: ndarray, indices: Any, values: Any) -> None:
    """``cupyx.scatter_add``: ``np.add.at(a, indices, values)`` as a launch; an index out of range
    is an asynchronous error."""
    _ufunc(np.add, "at", (a, indices, values), {})


_erf_implementation: Callable[[Any], Any] | None = None


def _erf_function() -> Callable[[Any], Any]:
    global _erf_implementation
    if _erf_implementation is None:
        try:
            from scipy.special import erf as scipy_erf
        except ImportError:  # pragma: no cover - depends on the environment
            _erf_implementation = np.vectorize(math.erf, otypes=[np.float64])
        else:
            _erf_implementation = scipy_erf
    return _erf_implementation


def _erf_into(out: _Array, erf_function: Callable[[Any], Any], x: _Array) -> None:
    out[...] = erf_function(x)


def erf(x: ndarray) -> ndarray:
    """``cupyx.scipy.special.erf``: the error function, in ``x``'s float dtype (float64 for other
    dtypes)."""
    if type(x) is not ndarray:
        raise TypeError(f"erf expects an array of the simulated device, got {type(x)}")
    dt = x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)
    buf = _alloc(x.shape, dt)
    _submit(x._dev, functools.partial(_erf_into, buf, _erf_function(), x._data))
    return _new(buf, x._dev, None)


# ----------------------------------------------------------------------------- random
class _Generator:
    """``cupy.random.Generator``'s samplers: NumPy's generator on the host, the samples copied to
    the current device."""

    __slots__ = ("_rng",)

    def __init__(self, seed: Any = None) -> None:
        self._rng = np.random.default_rng(seed)

    def random(self, size: Any = None, dtype: Any = np.float64) -> ndarray:
        return _upload(np.asarray(self._rng.random(size, dtype=dtype)))

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> ndarray:
        return _upload(np.asarray(self._rng.standard_normal(size, dtype=dtype)))

    def uniform(
        self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = np.float64
    ) -> ndarray:
        return _upload(np.asarray(self._rng.uniform(low, high, size), dtype=dtype))

    def integers(
        self,
        low: Any,
        high: Any = None,
        size: Any = None,
        dtype: Any = np.int64,
        endpoint: bool = False,
    ) -> ndarray:
        sample = self._rng.integers(low, high, size=size, dtype=dtype, endpoint=endpoint)
        return _upload(np.asarray(sample))


class _Random:
    """``cupy.random``'s subset."""

    Generator: Final = _Generator

    @staticmethod
    def default_rng(seed: Any = None) -> _Generator:
        return _Generator(seed)


random: Final = _Random()


# ----------------------------------------------------------------------------- NumPy's other names
class _Ufunc:
    """A NumPy ufunc applied on the device (``sim.add``, ``sim.exp.reduce``, ...)."""

    __slots__ = ("_ufunc",)

    def __init__(self, ufunc: np.ufunc) -> None:
        self._ufunc = ufunc

    def _apply(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return _ufunc(self._ufunc, method, args, kwargs)
        except _Defer:
            raise TypeError(f"Unsupported operand types for {self._ufunc.__name__}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._apply("__call__", args, kwargs)

    def reduce(self, *args: Any, **kwargs: Any) -> Any:
        return self._apply("reduce", args, kwargs)

    def accumulate(self, *args: Any, **kwargs: Any) -> Any:
        return self._apply("accumulate", args, kwargs)

    def reduceat(self, *args: Any, **kwargs: Any) -> Any:
        return self._apply("reduceat", args, kwargs)

    def outer(self, *args: Any, **kwargs: Any) -> Any:
        return self._apply("outer", args, kwargs)

    def at(self, *args: Any, **kwargs: Any) -> Any:
        return self._apply("at", args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ufunc, name)

    def __repr__(self) -> str:
        return f"<sim ufunc {self._ufunc.__name__!r}>"


def _device_function(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def on_device(*args: Any, **kwargs: Any) -> Any:
        try:
            return _call_function(func, args, kwargs)
        except _Defer:
            raise TypeError(f"Unsupported operand types for {func.__name__}") from None

    return on_device


# NOTE: the wrappers are cached here, not in the module's globals: there they would shadow the
# builtins of the same names (max, sum, bool, ...) for this module's own code.
_wrapped: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """Any other NumPy name, as ``cupy.<name>``: functions and ufuncs run on the device; types,
    constants and submodules are NumPy's."""
    wrapped = _wrapped.get(name)
    if wrapped is not None:
        return wrapped
    target = getattr(np, name, None) if not name.startswith("__") else None
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if isinstance(target, np.ufunc):
        wrapped = _Ufunc(target)
    elif callable(target) and not isinstance(target, type):
        wrapped = _device_function(target)
    else:
        wrapped = target
    _wrapped[name] = wrapped
    return wrapped
