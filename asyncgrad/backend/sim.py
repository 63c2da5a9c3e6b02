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
* Memory pool. As in CuPy, the block of a collected array (the array that owns it, not a view)
  goes to the pool of the stream that was current on its device when it was allocated, and the
  next allocation of that size on that stream reuses it at once, poisoned by work queued on that
  stream. Stream order keeps earlier readers on that stream safe; a reader on another stream that
  nothing orders after the free reads poison or the new owner's values (NOTE [Memory pool]).
* Synchronous operations. Results whose shape depends on the data (boolean masks, ``nonzero``,
  ``unique``, ...) wait for the current stream of the device and are computed on the host, as in
  CuPy; so are host reads (``get``, ``item``, ``repr``, ...), which, as CuPy's, wait for the
  current stream of the current device (the null stream: the array's device's default stream).
  Implicit conversion to NumPy (``__array__``) raises, as in CuPy.
* Indices. Integer index arrays are not checked: advanced indexing, ``take``,
  ``take_along_axis``, ``put`` and ``scatter_add`` take each index modulo its axis's length, as
  CuPy does (NOTE [Wrapped indices]); they are launches, and only boolean masks synchronise.
* Random numbers. ``random.default_rng`` keeps its state in a device array that each draw, a
  kernel, advances; its bit generator holds a lock, so it cannot be deep-copied, as in CuPy
  (NOTE [Generator state on the device]).
* Host synchronisations. ``forbid_host_sync()`` makes every host wait on the calling thread raise
  HostSyncError, and ``record_host_syncs()`` collects them (NOTE [Host synchronisations]).
* Raw kernels. ``RawModule`` and ``RawKernel`` take CUDA source as CuPy does and run each
  kernel as the NumPy model registered for it (``model_kernel``), after checking every argument
  against the kernel's C signature (NOTE [Modelled raw kernels]).
* Counts. ``count_device_work()`` counts what a GPU would pay: kernel launches by kernel,
  allocations and bytes, events recorded and queried, stream waits, host functions and host
  synchronisations with their callers (NOTE [Counting device work]); with ``kernel_time`` set
  (``configure``) every kernel keeps its stream busy that long (NOTE [Modelled kernel times]).
* Ordering check. With ``ASYNCGRAD_SIM_CUDA_CHECK_ORDER=1`` (or ``configure(check_order=True)``)
  every access to device memory is checked against the stream orders CUDA guarantees, whatever
  the timing: one that no event wait or host wait puts after a conflicting access on another
  stream (a read of a result nothing waited for, a reuse of a block another stream may still
  read) raises StreamOrderError at the launch, naming both (NOTE [Ordering check]).
* Errors. An exception raised by queued work is kept on its stream and raised by the next host wait
  on that stream (``synchronize``, an event's ``synchronize``, a host read, the device's
  ``synchronize``), like an asynchronous CUDA error; none is dropped. A GPU's own asynchronous
  errors are sticky: ``inject_fault`` queues a kernel that breaks its device's context, after which
  the device runs nothing, every event query returns the error's status, and every host wait,
  launch and event record raises it as ``CUDARuntimeError`` (See NOTE [Sticky errors]). Events
  have handles (``ptr``) for ``cuda.runtime.eventQuery``, which returns CUDA status codes as
  CuPy's does.
* Host functions. ``launch_host_func`` callbacks run one at a time, whatever their streams, and an
  exception one raises goes to ``sys.unraisablehook`` and is dropped, as in CuPy (See NOTE [Host
  functions]).

Current device and current streams are per host thread, as in CuPy. The public names are CuPy's
(``Device``, ``Stream``, ``Event`` and ``CUDARuntimeError`` also at the top level), and
``configure``, ``inject_fault``, ``reset_device``, the status codes (``NOT_READY``, ...),
``forbid_host_sync``, ``record_host_syncs``, ``count_device_work``, ``DeviceCounts``,
``model_kernel``, ``HostSyncError`` and ``StreamOrderError``, which are
the simulator's own; CuPy's other functions and ufuncs (``sim.exp``, ``sim.concatenate``, ...) are
NumPy's, dispatching to the simulated device (module ``__getattr__``). Only CuPy's names and
arguments work, on the module, on ``ndarray`` and through NumPy's dispatch (no ``where=`` on a
ufunc, no ``__index__``, ...): See NOTE [CuPy's arguments only]. ``lib.stride_tricks.as_strided``
makes a view of the host buffer with its strides, like the other views.
"""

from __future__ import annotations

import ast
import atexit
import collections
import contextlib
import functools
import inspect
import itertools
import math
import operator
import os
import random as _stdrandom
import re
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CUDARuntimeError",
    "Device",
    "DeviceCounts",
    "Event",
    "HostSyncError",
    "RawKernel",
    "RawModule",
    "Stream",
    "StreamOrderError",
    "arange",
    "array",
    "asarray",
    "asnumpy",
    "configure",
    "count_device_work",
    "cuda",
    "empty",
    "empty_like",
    "erf",
    "eye",
    "forbid_host_sync",
    "full",
    "full_like",
    "inject_fault",
    "lib",
    "linalg",
    "linspace",
    "model_kernel",
    "ndarray",
    "newaxis",
    "ones",
    "ones_like",
    "random",
    "record_host_syncs",
    "reset_device",
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
    """Device count, random delay and the delay's generator; read from the environment once
    (with whether the ordering check is on, which ``_order`` keeps)."""

    __slots__ = ("delay", "devices", "inline", "kernel_time", "lock", "rng")

    def __init__(self) -> None:
        self.devices = int(os.environ.get("ASYNCGRAD_SIM_CUDA") or 0)
        self.delay = float(os.environ.get("ASYNCGRAD_SIM_CUDA_DELAY") or 0.0)
        self.kernel_time = 0.0  # See NOTE [Modelled kernel times]
        self.inline = False  # See NOTE [Counting device work]
        seed = os.environ.get("ASYNCGRAD_SIM_CUDA_SEED")
        self.rng = _stdrandom.Random(int(seed) if seed else None)
        self.lock = threading.Lock()
        if (os.environ.get("ASYNCGRAD_SIM_CUDA_CHECK_ORDER") or "0").strip() not in ("", "0"):
            _order.reset(True)


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
    devices: int | None = None,
    delay: float | None = None,
    seed: int | None = None,
    check_order: bool | None = None,
    kernel_time: float | None = None,
    inline: bool | None = None,
) -> None:
    """Change the simulation: the number of devices, the largest random sleep (seconds) before each
    work item of a stream (0: none), the seed of those sleeps, whether every access is checked
    against the stream orders (See NOTE [Ordering check]) and the time every kernel takes on its
    stream (seconds; See NOTE [Modelled kernel times]) and whether work runs as it is queued, on
    the queuing thread (See NOTE [Counting device work]). ``None`` leaves a setting as it is; the
    defaults come from ``ASYNCGRAD_SIM_CUDA``, ``ASYNCGRAD_SIM_CUDA_DELAY``,
    ``ASYNCGRAD_SIM_CUDA_SEED`` and ``ASYNCGRAD_SIM_CUDA_CHECK_ORDER``. The delay may change at any
    time, also while streams run; turning the check on or off forgets what it tracked."""
    settings = _settings()
    if check_order is not None:
        _order.reset(bool(check_order))
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
    if kernel_time is not None:
        if kernel_time < 0:
            raise ValueError(f"kernel_time must be >= 0, got {kernel_time}")
        settings.kernel_time = float(kernel_time)
    if inline is not None:
        settings.inline = bool(inline)


# NOTE [Modelled kernel times]
# With ``configure(kernel_time=t)`` every kernel (not an event wait, a host function or the
# simulator's own poisoning) keeps its stream busy for ``t`` seconds, as on a GPU that leaves the
# host free. The stream keeps a device clock: a kernel starts when the one before it ended or
# when it was queued, whichever is later, ends ``t`` later, and the stream's thread sleeps until
# then. A sleep overshoots by tens of microseconds, but the clock does not drift with it: a
# stream that is behind its clock runs its next kernels without sleeping. So N kernels queued at
# once take N x t (within one sleep's overshoot), and whether a program's host work overlaps its
# device work shows in its wall time: a loop of steps that waits for each step's kernels before
# preparing the next takes host + device time per step, one that runs ahead about the larger.


def _model_kernel_time(queue: _Queue, work: _Work, queued: float) -> None:
    seconds = _settings().kernel_time
    if seconds <= 0:
        return
    func = getattr(work, "func", None)
    if func is _poison or func is _call_host_func or isinstance(func, types.MethodType):
        return  # not a kernel: poison, a host function, a stream's wait or a device's fault
    start = max(queue.busy_until, queued)
    queue.busy_until = end = start + seconds
    now = time.perf_counter()
    if end > now:
        time.sleep(end - now)


def _pause() -> None:
    """The random sleep before a work item, when a delay is set."""
    settings = _settings()
    if settings.delay > 0:
        with settings.lock:
            seconds = settings.rng.uniform(0.0, settings.delay)
        time.sleep(seconds)


# CUDA status codes the simulator reports (``cudaError_t``), with CUDA's names and messages.
SUCCESS: Final = 0
INVALID_DEVICE: Final = 101
INVALID_RESOURCE_HANDLE: Final = 400
NOT_READY: Final = 600
ILLEGAL_ADDRESS: Final = 700
LAUNCH_FAILURE: Final = 719
_STATUS_TEXT: Final = {
    SUCCESS: ("cudaSuccess", "no error"),
    INVALID_DEVICE: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    INVALID_RESOURCE_HANDLE: ("cudaErrorInvalidResourceHandle", "invalid resource handle"),
    NOT_READY: ("cudaErrorNotReady", "device not ready"),
    ILLEGAL_ADDRESS: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    LAUNCH_FAILURE: ("cudaErrorLaunchFailure", "unspecified launch failure"),
}


class CUDARuntimeError(RuntimeError):
    """What CuPy raises when a CUDA runtime call fails: ``status`` is the CUDA status code, and the
    message its name and CUDA's description."""

    def __init__(self, status: int) -> None:
        name, text = _STATUS_TEXT.get(status, (f"cudaError{status}", "unrecognized error code"))
        super().__init__(f"{name}: {text}")
        self.status = status

    def __reduce__(self) -> tuple[type[CUDARuntimeError], tuple[int]]:
        return (type(self), (self.status,))


def _invalid_device(index: int) -> CUDARuntimeError:
    error = CUDARuntimeError(INVALID_DEVICE)
    error.add_note(f"device {index}; {_settings().devices} simulated devices")
    return error


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


# ----------------------------------------------------------------------------- ordering check
# NOTE [Ordering check]
# Poison and random delays show a missing synchronisation only when the producer happens to be
# late, which depends on the machine's load. With ``configure(check_order=True)`` (or
# ``ASYNCGRAD_SIM_CUDA_CHECK_ORDER=1``) the simulator also checks every access against CUDA's
# ordering rules, whatever the timing, as a race detector does: a launch that reads memory whose
# last write is not ordered before it, or writes memory that other unordered work still reads or
# writes, raises StreamOrderError at the launch, naming both accesses and where they ran. The
# orders it knows are CUDA's, kept as vector clocks (an entry per queue; each host thread keeps
# what it has seen finished):
#   - the work of one stream is ordered by its queue;
#   - ``Stream.wait_event`` orders the work queued after it after the event's point (also where
#     the simulator skips an event that has already run: a GPU would still order it);
#   - a host wait (a stream's, an event's or a device's ``synchronize``, a host read) and an event
#     query or ``Stream.done`` that answers "done" order the calling thread after the work it
#     saw finished, and the work it launches later after that;
#   - a block that the pool hands out again is ordered after what the thread that freed it knew
#     (the engine drops arrays on its releaser thread once their events are done); that
#     knowledge orders the reuse alone, not the allocating thread's later launches.
# A host function that has run orders nothing on the host: its thread cannot launch, and a waiter
# learns from a query. A host access needs no entry: it is over when its call returns, so all
# that is launched later, from any thread, follows it. What a query answers depends on timing:
# where a missing order must show every time, a test holds the stream whose work must not be
# seen finished (a gate), so that no query answers "done" early.
# Memory is tracked by block (See NOTE [Memory pool]), with every view of it:
# a launch reads its array operands and writes its results, its ``out=`` arrays and the targets
# of in-place kernels (assignment, ``put``, ``add.at``, ``copyto``, draws advancing a
# generator's state); a host read reads and a host assignment writes. An allocation writes its
# block on its stream at once, as the pool may hand out a block freed there whose earlier readers
# on other streams have not run: so work on another stream that is not ordered after an
# allocation must not touch the array, even to write it (torch's docs give the same rule for its
# caching allocator). And as CuPy's pool splits and merges the blocks freed on a stream, an
# allocation there, of any size, must be ordered after every other stream's access to all of
# them (the simulator itself reuses blocks of the same size only: the check does not rely on
# that). The check sees only memory allocated, and orders made, while it is on: turn it on before
# the arrays and streams it checks are made. tests/cuda/conftest.py turns it on for every CUDA
# test on the simulator; tests/backend/test_sim_order.py tests the check itself.
class StreamOrderError(RuntimeError):
    """A device access that no stream order or host wait puts after an earlier conflicting one
    (See NOTE [Ordering check])."""


class _Access:
    """The accesses to one block that later ones must be ordered after: the last write, and the
    reads since then (one per clock entry: its last), each ``(entry, index, what)``."""

    __slots__ = ("reads", "write")

    def __init__(self) -> None:
        self.write: tuple[int, int, str] | None = None
        self.reads: dict[int, tuple[int, str]] = {}


class _Order:
    """The state of the ordering check: whether it is on, the tracked blocks, and the queues by
    clock entry (for messages)."""

    __slots__ = ("blocks", "epoch", "lock", "on", "queues")

    def __init__(self) -> None:
        self.on = False
        self.epoch = 0  # bumped when turned on or off: host clocks start again
        self.lock = threading.RLock()
        self.blocks: dict[int, tuple[weakref.ref[_Array], _Access]] = {}
        self.queues: weakref.WeakValueDictionary[int, _Queue] = weakref.WeakValueDictionary()

    def reset(self, on: bool) -> None:
        with self.lock:
            self.on = on
            self.epoch += 1
            self.blocks.clear()
            for queue in list(self.queues.values()):
                queue.pool.released.clear()


_order: Final = _Order()
atexit.register(_order.reset, False)  # blocks freed at exit are not checked
_clock_entries: Final = itertools.count(1)  # the queues' entries in a clock
_clock_versions: Final = itertools.count(1)


class _HostClock(threading.local):
    """What this thread has seen finished (See NOTE [Ordering check])."""

    def __init__(self) -> None:
        self.epoch = -1
        self.known: dict[int, int] = {}
        self.version = 0

    def get(self) -> _HostClock:
        if self.epoch != _order.epoch:
            self.epoch = _order.epoch
            self.known = {}
            self.version = next(_clock_versions)
        return self


_host_clock: Final = _HostClock()


def _join(into: dict[int, int], other: dict[int, int]) -> bool:
    """``into`` made to know everything ``other`` knows; whether it learned anything."""
    grew = False
    for key, n in other.items():
        if into.get(key, 0) < n:
            into[key] = n
            grew = True
    return grew


# A thread's clock is read and changed by that thread alone: no lock (a block may be freed, and
# its clock copied, anywhere, even by the garbage collector inside a locked section:
# _Block.__del__).
def _host_learns(known: dict[int, int] | None) -> None:
    """This thread has seen the work that ``known`` covers finished."""
    if known is None or not _order.on:
        return
    clock = _host_clock.get()
    if _join(clock.known, known):
        clock.version = next(_clock_versions)


def _register_block(memory: _Array) -> None:
    """Track a block allocated while the check is on (its id, until it is collected)."""
    key = id(memory)
    blocks = _order.blocks

    def forget(_: object, key: int = key) -> None:
        entry = blocks.get(key)
        if entry is not None and entry[0]() is None:
            del blocks[key]

    blocks[key] = (weakref.ref(memory, forget), _Access())


def _access_of(a: Any) -> _Access | None:
    """The access record of the tracked block an array (or view) lies in, or None."""
    root = a
    while True:
        base = root.base
        if base is None:
            break
        if not isinstance(base, np.ndarray):
            base = getattr(base, "base", None)  # as_strided wraps its base
            if not isinstance(base, np.ndarray):
                break
        root = base
    entry = _order.blocks.get(id(root))
    if entry is None or entry[0]() is not root:
        return None
    return entry[1]


def _arrays_in(obj: Any, found: list[_Array]) -> None:
    t = type(obj)
    if isinstance(obj, np.ndarray):
        if obj.base is not None:  # device memory is a view of its block; host copies are not
            found.append(obj)
    elif t is tuple or t is list:
        for item in obj:
            _arrays_in(item, found)
    elif t is dict:
        for item in obj.values():
            _arrays_in(item, found)


def _is_at(func: Any) -> bool:
    return getattr(func, "__name__", None) == "at" and isinstance(
        getattr(func, "__self__", None), np.ufunc
    )


def _kernel_accesses(
    func: Any, args: tuple[Any, ...], kw: dict[str, Any], reads: list[_Array], writes: list[_Array]
) -> None:
    """What a kernel ``func(*args, **kw)`` reads and writes (See NOTE [Ordering check])."""
    if func is _run_into:
        plan, inner, inner_args, inner_kw = args
        _arrays_in(plan, writes)
        _kernel_accesses(inner, inner_args, inner_kw, reads, writes)
        return
    if func is _run_modelled:  # See NOTE [Modelled raw kernels]
        reads.extend(args[4])
        writes.extend(args[5])
        return
    _arrays_in(args, reads)
    _arrays_in(kw, reads)
    _arrays_in(kw.get("out"), writes)
    if func in _WRITES_FIRST or _is_at(func):
        _arrays_in(args[:1], writes)
    elif func is _draw_into:
        _arrays_in(args[:2], writes)


def _work_name(work: Any) -> str:
    func = getattr(work, "func", work)
    if func is _run_into:
        func = work.args[1]
    elif func is _run_modelled:
        return str(work.args[0]).partition("<")[0]
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return str(name or type(func).__name__)


_HOST: Final = 0  # the entry of a host access (never recorded: See NOTE [Ordering check])


def _entry_name(entry: int) -> str:
    if entry == _HOST:
        return "the host"
    queue = _order.queues.get(entry)
    return f"stream #{entry}" if queue is None else queue.name


def _race(
    what: str, entry: int, verb: str, earlier: tuple[int, int, str], earlier_verb: str
) -> StreamOrderError:
    return StreamOrderError(
        f"{what} on {_entry_name(entry)} {verb} memory that {earlier[2]} on "
        f"{_entry_name(earlier[0])} {earlier_verb}, and nothing orders the two (no event wait or "
        "host wait between them; See NOTE [Ordering check])"
    )


def _check(
    entry: int,
    index: int,
    known: dict[int, int],
    what: str,
    reads: list[_Array],
    writes: list[_Array],
) -> None:
    """Check the accesses of one piece of work (at ``index`` of clock entry ``entry``, which
    knows ``known``), then record them; raise StreamOrderError for the first race."""

    def ordered(earlier: int, at: int) -> bool:
        return earlier == entry or known.get(earlier, 0) > at

    written: dict[int, _Access] = {}
    for a in writes:
        acc = _access_of(a)
        if acc is not None:
            written[id(acc)] = acc
    read: dict[int, _Access] = {}
    for a in reads:
        acc = _access_of(a)
        if acc is not None and id(acc) not in written:
            read[id(acc)] = acc
    for acc in read.values():
        w = acc.write
        if w is not None and not ordered(w[0], w[1]):
            raise _race(what, entry, "reads", w, "wrote")
    for acc in written.values():
        w = acc.write
        if w is not None and not ordered(w[0], w[1]):
            raise _race(what, entry, "writes", w, "wrote")
        for reader, (at, name) in acc.reads.items():
            if not ordered(reader, at):
                raise _race(what, entry, "writes", (reader, at, name), "read")
    if entry == _HOST:  # over already: nothing later can race with it (NOTE [Ordering check])
        for acc in written.values():
            acc.write = None
            acc.reads = {}
        return
    for acc in read.values():
        acc.reads[entry] = (index, what)
    for acc in written.values():
        acc.write = (entry, index, what)
        acc.reads = {}


def _check_submit(queue: _Queue, work: _Work) -> None:
    """The ordering check of a piece of work being queued (called with ``_order.lock`` held)."""
    reads: list[_Array] = []
    writes: list[_Array] = []
    func = getattr(work, "func", None)
    if func is not None and func is not _call_host_func:  # a host function reads no device memory
        _kernel_accesses(func, work.args, work.keywords, reads, writes)  # type: ignore[attr-defined]
    if not reads and not writes:
        return
    known = queue.clock()
    _check(queue.qid, known[queue.qid], known, _work_name(work), reads, writes)


def _check_host(what: str, reads: list[_Array], writes: list[_Array]) -> None:
    """The ordering check of a host read or write of device memory, on this thread."""
    with _order.lock:
        _check(_HOST, 0, _host_clock.get().known, what, reads, writes)


# An access to a freed block by another stream than its own: (entry, index, what, "read" or
# "wrote").
_Earlier = tuple[int, int, str, str]


def _released(queue: _Queue, memory: _Array, known: dict[int, int]) -> None:
    """A block of ``queue``'s goes back to its pool: remember the accesses of other streams to
    it, which every later allocation there must be ordered after. (Called by _Block.__del__,
    anywhere: no lock.)"""
    acc = _access_of(memory)
    if acc is None:
        return
    others: list[_Earlier] = []
    w = acc.write
    if w is not None and w[0] != queue.qid:
        others.append((w[0], w[1], w[2], "wrote"))
    for entry, (at, name) in list(acc.reads.items()):
        if entry != queue.qid:
            others.append((entry, at, name, "read"))
    if others:
        queue.pool.released.append((others, known))


def _check_allocation(queue: _Queue, memory: _Array, freed_by: dict[int, int] | None) -> None:
    """An allocation on ``queue`` writes its block there. CuPy's pool may carve it out of any
    block freed on that stream (it splits and merges them), so it must be ordered after every
    access of another stream to those, or after what the thread that freed them knew (See NOTE
    [Ordering check])."""
    with _order.lock:
        if _access_of(memory) is None:  # fresh, or freed before the check was on
            _register_block(memory)
        own = queue.clock()
        released = queue.pool.released
        for _ in range(len(released)):
            others, known = released.popleft()
            if known is not None:
                known = dict(known)
                _join(known, own)
            else:
                known = own
            left = [o for o in others if known.get(o[0], 0) <= o[1]]
            if left:
                released.appendleft((left, known))
                entry, at, name, verb = left[0]
                raise _race("an allocation", queue.qid, "writes", (entry, at, name), verb)
        known = own
        if freed_by is not None:
            known = dict(own)
            _join(known, freed_by)
        _check(queue.qid, own[queue.qid] - 1, known, "an allocation", [], [memory])


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
        "__weakref__",
        "busy_until",
        "completed",
        "device",
        "dismissed",
        "done",
        "errors",
        "items",
        "known",
        "lock",
        "name",
        "pool",
        "qid",
        "seen",
        "submitted",
        "thread",
        "wake",
    )

    def __init__(self, device: _DeviceState, name: str) -> None:
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)  # host waits and other streams' waits
        self.wake = threading.Condition(self.lock)  # the lingering thread's wait for work
        # The work queued, and when it was (See NOTE [Modelled kernel times]).
        self.items: collections.deque[tuple[_Work, float]] = collections.deque()
        self.submitted = 0
        self.completed = 0
        self.errors: list[BaseException] = []
        self.thread: threading.Thread | None = None
        self.dismissed = False
        self.device = device
        self.name = name
        self.pool = _Pool()  # See NOTE [Memory pool]
        # The ordering check's clock entry, and what the queue's next work is ordered after (See
        # NOTE [Ordering check]).
        self.qid = next(_clock_entries)
        self.known: dict[int, int] = {}
        self.seen = -1  # the version of the host clock it joined last
        self.busy_until = 0.0  # its device clock (See NOTE [Modelled kernel times])
        _order.queues[self.qid] = self
        device.queues.add(self)

    def submit(self, work: _Work) -> None:
        """Queue ``work``; on a broken device, raise its error instead, as a launch, a record or
        a wait queued on a GPU then fails (See NOTE [Sticky errors]). With the ordering check on,
        raise StreamOrderError instead for work that races (See NOTE [Ordering check])."""
        self.device.raise_fault()
        if _order.on:
            with _order.lock:
                _check_submit(self, work)
                self._append(work)
            return
        self._append(work)

    def clock(self) -> dict[int, int]:
        """What the work queued next is ordered after, itself included: the queue's clock, after
        what the calling thread knows (See NOTE [Ordering check]); with ``_order.lock`` held."""
        host = _host_clock.get()
        known = self.known
        if self.seen != host.version:
            _join(known, host.known)
            self.seen = host.version
        known[self.qid] = self.submitted
        return known

    def snapshot(self) -> dict[int, int]:
        """A copy of ``clock()``: what the work queued so far is ordered after."""
        return dict(self.clock())

    def _append(self, work: _Work) -> None:
        if _settings().inline:
            self._run_now(work)
            return
        with self.lock:
            self.items.append((work, time.perf_counter()))
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

    def _run_now(self, work: _Work) -> None:
        """Run ``work`` on this thread as it is queued (the ``inline`` setting: See NOTE [Counting
        device work]), in order after what the queue's thread has yet to run."""
        with self.lock:
            while self.completed < self.submitted:  # what was queued before the setting
                self.done.wait()
            self.submitted += 1
        error: BaseException | None = None
        if not self.device.fault:
            try:
                with np.errstate(all="ignore"):
                    work()
            except BaseException as exc:  # stored, raised at the next host wait
                error = exc
        with self.lock:
            self.completed += 1
            if error is not None:
                self.errors.append(error)
                with self.device.lock:
                    self.device.busy.add(self)
            self.done.notify_all()

    def _drain(self) -> None:
        lock = self.lock
        with lock:
            work, queued = self.items.popleft()
        # CuPy never warns about floating-point errors; the error state is per thread. Other
        # warnings follow the process's filters: one that they turn into an error is stored like
        # any error (the host-side evaluation on stand-ins has usually raised it already).
        with np.errstate(all="ignore"):
            while True:
                error: BaseException | None = None
                if not self.device.fault:  # a broken device runs nothing (NOTE [Sticky errors])
                    _pause()
                    try:
                        work()
                    except BaseException as exc:  # stored, raised at the next host wait
                        error = exc
                    _model_kernel_time(self, work, queued)
                with lock:
                    self.completed += 1
                    if error is not None:
                        self.errors.append(error)
                    self.done.notify_all()
                    if not self.items and not self.dismissed:
                        self.wake.wait(_LINGER_S)
                    if self.items:
                        work, queued = self.items.popleft()
                        continue
                    self.thread = None
                    if not self.errors:
                        with self.device.lock:
                            self.device.busy.discard(self)
                    return

    def wait(self, point: int | None = None) -> list[BaseException]:
        """Block until the work queued before ``point`` (default: all) has run; take the errors.
        A thread left idle is dismissed and joined (See NOTE [Lingering stream threads])."""
        _host_wait()  # See NOTE [Host synchronisations]
        known = None
        if _order.on and point is None:
            with _order.lock:
                known = self.snapshot()
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
        if known is not None:
            _host_learns(known)
        return errors

    def synchronize(self, point: int | None = None) -> None:
        errors = self.wait(point)
        self.device.raise_fault()
        _raise_async(errors, self.name)

    def wait_for(self, point: int, waiter: _DeviceState) -> None:
        """On a thread of another stream, of device ``waiter``: block until the work queued here
        before ``point`` has run, or until ``waiter`` breaks. A broken device runs nothing more,
        so its stream gives up the wait at once, as its thread would not exist on a GPU (See
        NOTE [Sticky errors]; the device's host waits then return at once too)."""
        with waiter.lock:
            waiter.waits.append(self)
        try:
            with self.lock:
                while self.completed < point and not waiter.fault:
                    self.done.wait()
        finally:
            with waiter.lock:
                waiter.waits.remove(self)


class _DeviceState:
    """A simulated device: the queue of its default (legacy) stream, which ``Stream.null`` means
    while the device is current, the queues that have work or errors, and the status of the error
    that broke its context (0 while it works, See NOTE [Sticky errors])."""

    __slots__ = ("busy", "default_queue", "fault", "index", "lock", "numbers", "queues", "waits")

    def __init__(self, index: int) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.busy: set[_Queue] = set()
        self.queues: weakref.WeakSet[_Queue] = weakref.WeakSet()  # all, for the ordering check
        self.waits: list[_Queue] = []  # the queues its streams' threads wait for now
        self.numbers = itertools.count(1)
        self.fault = SUCCESS
        self.default_queue = _Queue(self, f"asyncgrad-sim-stream-{index}-0")

    def synchronize(self) -> None:
        errors = self.wait()
        self.raise_fault()
        _raise_async(errors, f"cuda:{self.index}")

    def wait(self) -> list[BaseException]:
        """Block until every queue of the device has run its work; take their errors."""
        known: list[dict[int, int]] = []
        if _order.on:  # the host is ordered after every stream, idle ones too
            with _order.lock:
                known = [queue.snapshot() for queue in list(self.queues)]
        with self.lock:
            queues = list(self.busy)
        errors: list[BaseException] = []
        for queue in queues:
            errors.extend(queue.wait())
        for k in known:
            _host_learns(k)
        return errors

    def fail(self, status: int) -> None:
        """Break the device's context, as a kernel failing with ``status`` does; its streams'
        waits for other devices' work end (See _Queue.wait_for)."""
        with self.lock:
            if self.fault:
                return
            self.fault = status
            waits = list(self.waits)
        for queue in waits:
            with queue.lock:
                queue.done.notify_all()

    def raise_fault(self) -> None:
        """Raise the error that broke the device's context, if one did."""
        fault = self.fault
        if fault:
            error = CUDARuntimeError(fault)
            error.add_note(
                f"raised by a kernel on cuda:{self.index}: the device's context is broken, and "
                "every later wait for it fails the same way"
            )
            raise error


# NOTE [Sticky errors]
# A kernel that fails on a GPU (one that reads an illegal address, say) breaks the context of its
# device for the rest of the process: the work queued after it never runs (host functions are not
# called), ``cudaEventQuery`` of every event of the device returns the error's status, so
# ``Event.done`` is False for good, and every host wait (a stream's, an event's or the device's
# synchronize, a host read) raises ``CUDARuntimeError`` with it. ``inject_fault`` queues such a
# kernel; ``reset_device`` repairs the device, for tests (a GPU needs a new process). From then
# on, recording an event, launching a kernel or a host function and queuing a wait on the device
# raise the same error at once, as on a GPU (allocations from the pool's cached blocks still
# succeed, as CuPy's do; the launch that would use them fails).
# An exception raised by the Python code of a simulated kernel is not sticky: it is kept on its
# stream and raised once, at the next host wait (``Errors`` in the module's docstring), so that a
# failing kernel is reported with its own traceback and the device goes on working.
def inject_fault(stream: Stream | None = None, status: int = ILLEGAL_ADDRESS) -> None:
    """Queue on ``stream`` (default: the current stream) a kernel that fails with ``status`` when it
    runs, breaking its device's context (See NOTE [Sticky errors])."""
    queue = (get_current_stream() if stream is None else stream)._queue
    queue.submit(functools.partial(queue.device.fail, status))


def reset_device(device: int) -> None:
    """Wait until the streams of ``cuda:device`` have drained, drop their errors, and repair the
    device after a sticky error (See NOTE [Sticky errors])."""
    state = _device_state(device)
    state.wait()
    state.fault = SUCCESS


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
        here.device.raise_fault()  # cudaStreamWaitEvent fails on a broken device
        if _counting:
            _count("stream_waits")
        if _order.on and event._known is not None and queue is not here:
            with _order.lock:  # ordered also where the event has run (NOTE [Ordering check])
                _join(here.known, event._known)
        if queue is None or queue is here or queue.completed >= point:
            return
        here.submit(functools.partial(queue.wait_for, point, here.device))
        here.pool.waited = here.submitted  # See NOTE [Memory pool]

    def synchronize(self) -> None:
        """Wait until all work queued so far has run; raise an error it stored."""
        self._queue.synchronize()

    @property
    def done(self) -> bool:
        queue = self._queue
        if _counting:
            _count("events_queried")
        if _order.on:
            with _order.lock:
                known = queue.snapshot()
            if queue.completed < known[queue.qid]:
                return False
            _host_learns(known)
        with queue.lock:
            return queue.completed == queue.submitted

    def launch_host_func(self, callback: Callable[[Any], object], arg: Any) -> None:
        """Call ``callback(arg)`` on the stream's thread, in order with its kernels, one host
        function at a time (See NOTE [Host functions])."""
        self._queue.submit(functools.partial(_call_host_func, callback, arg))
        if _counting:
            _count("host_funcs")

    def __repr__(self) -> str:
        return f"<sim Stream {self.ptr} (device {self.device_id})>"


Stream.null = Stream(null=True)


# NOTE [Host functions]
# CUDA calls host functions (``launch_host_func``) on a driver thread: those of independent streams
# may run in any order and may be serialised, so a host function that waits for another one to run
# can wait for ever. The simulator serialises them all (one lock), so code that relies on two at
# once hangs here too. CuPy calls the Python callback with nowhere to raise to: an exception it
# raises is reported to ``sys.unraisablehook`` (printed, by default) and dropped, and the stream
# goes on; so here (never stored as the stream's error).
_host_func_lock: Final = threading.Lock()


class _Ignored:
    """An exception raised where nobody can catch it: dropping this object reports it to
    ``sys.unraisablehook``, as Python reports an exception raised by ``__del__``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __del__(self) -> None:
        raise self.error


def _call_host_func(callback: Callable[[Any], object], arg: Any) -> None:
    with _host_func_lock:
        try:
            callback(arg)
        except BaseException as exc:  # reported and dropped (See NOTE [Host functions])
            exc.add_note(f"raised by the host function {callback!r}, ignored as CuPy ignores it")
            _Ignored(exc)


class Event:
    """A point in a stream's work, as ``cupy.cuda.Event``: ``ptr`` is its handle for
    ``cuda.runtime.eventQuery``, and ``done`` is whether that query returns ``cudaSuccess`` (False
    for good once its device is broken, See NOTE [Sticky errors])."""

    __slots__ = ("__weakref__", "_device", "_disable_timing", "_known", "_point", "_queue", "ptr")

    _ptrs: ClassVar[Iterator[int]] = itertools.count(1)

    ptr: int

    def __init__(
        self, block: bool = False, disable_timing: bool = False, interprocess: bool = False
    ) -> None:
        if interprocess and not disable_timing:
            raise ValueError("Timing must be disabled for interprocess events")
        self._device = _device_state(_local.device)
        self._disable_timing = disable_timing  # for tests: CUDA keeps no timing data then
        self._queue: _Queue | None = None
        self._point = 0
        self._known: dict[int, int] | None = None  # See NOTE [Ordering check]
        self.ptr = next(Event._ptrs)
        _events[self.ptr] = self

    def record(self, stream: Stream | None = None) -> None:
        """Mark the work queued so far on ``stream`` (default: the current stream)."""
        queue = (get_current_stream() if stream is None else stream)._queue
        queue.device.raise_fault()  # cudaEventRecord fails on a broken device
        if _counting:
            _count("events_recorded")
        if _order.on:
            with _order.lock:
                known = queue.snapshot()
                self._queue, self._point, self._known = queue, known[queue.qid], known
        else:
            with queue.lock:
                self._queue, self._point, self._known = queue, queue.submitted, None
        self._device = queue.device

    def _status(self) -> int:
        if _counting:
            _count("events_queried")
        fault = self._device.fault
        if fault:
            return fault
        queue = self._queue
        if queue is None:
            return SUCCESS
        if queue.completed < self._point:
            return NOT_READY
        _host_learns(self._known)  # the host saw the work before it done
        return SUCCESS

    @property
    def done(self) -> bool:
        return self._status() == SUCCESS

    def synchronize(self) -> None:
        if self._queue is not None:
            self._queue.synchronize(self._point)
            _host_learns(self._known)
        else:
            self._device.raise_fault()


_events: Final[weakref.WeakValueDictionary[int, Event]] = weakref.WeakValueDictionary()


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
    if _counting:  # See NOTE [Counting device work]
        _count_launch(work)


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

    @staticmethod
    def eventQuery(event: int) -> int:
        """The event's status, never raised: ``cudaSuccess`` (0) once the work before it has run,
        ``cudaErrorNotReady`` (600) until then, the error of a broken device (See NOTE [Sticky
        errors]), ``cudaErrorInvalidResourceHandle`` (400) for no live event."""
        found = _events.get(event)
        return INVALID_RESOURCE_HANDLE if found is None else found._status()


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
# A reused block is poisoned again, in the order of its stream's work (See NOTE [Memory pool]).
_INT_POISON_BYTE: Final = 0xA5


def _poison(buf: _Array) -> None:
    kind = buf.dtype.kind
    if kind in "fc":
        buf.fill(np.nan)
    elif kind in "iu":
        buf.reshape(-1, order="A").view(np.uint8).fill(_INT_POISON_BYTE)
    else:
        buf.fill(True)


# NOTE [Memory pool]
# CuPy's memory pool keeps the block of a collected array for the stream that was current on its
# device when it was allocated, and hands it to the next allocation that fits on that stream at
# once, without waiting for any other stream. Stream order makes that safe for the kernels queued
# on the allocating stream before the free (they run before anything the new owner queues there);
# a kernel queued on another stream that reads the old array and is not ordered after the free
# may read the new owner's data instead. The simulator does the same:
#   - an allocation of n > 0 bytes takes a block of n rounded up to 512 bytes (CuPy's unit), from
#     the pool of the current stream's queue of the device (the queue, not the Stream object, is
#     the stream's identity here); the array that owns the block (never a view: views hold their
#     base) returns it when it is collected, with the point its stream's queue had reached then;
#   - the next allocation of the same rounded size on that stream takes the block freed last and
#     poisons it (See NOTE [Poison]) by work queued on that stream. It does so at once when that
#     changes nothing another stream could tell: the stream has run everything queued before the
#     free (which may read the block), and nothing queued there since is a wait for another
#     stream (which orders that stream's readers before any write the new owner queues).
# So a reader queued earlier on the allocating stream still reads its data, and a reader on
# another stream that is not ordered after the free reads poison, or the new owner's values.
# Queued work keeps the host memory it uses alive (it holds the NumPy buffer); only the reuse is
# modelled. CuPy also splits larger free blocks and merges neighbours; the simulator reuses
# blocks of the same rounded size only, and keeps at most _POOL_KEEP_BYTES of free blocks per
# stream, and _POOL_PENDING_MAX blocks freed since its last allocation (CuPy keeps them all until
# free_all_blocks()).
_BLOCK_UNIT: Final = 512
_POOL_KEEP_BYTES: Final = 64 << 20
_POOL_PENDING_MAX: Final = 1024


_Freed = tuple[_Array, int, "dict[int, int] | None"]


class _Pool:
    """The free blocks of one stream (See NOTE [Memory pool]).

    ``freed`` takes blocks from any thread without a lock (a collected array may be dropped
    anywhere, even by the garbage collector inside a locked section); an allocation moves them
    to ``sizes`` under ``lock``.
    """

    __slots__ = ("freed", "kept", "lock", "released", "sizes", "waited")

    def __init__(self) -> None:
        # (block, its queue's point at the free, what the freeing thread knew: NOTE [Ordering
        # check])
        self.freed: collections.deque[_Freed] = collections.deque()
        self.sizes: dict[int, list[_Freed]] = {}
        self.kept = 0
        self.lock = threading.Lock()
        self.waited = 0  # the queue's count of work after its last wait for another stream
        # Blocks freed while other streams' accesses to them were not known to be ordered before
        # the free, and what the freeing thread knew (See NOTE [Ordering check]).
        self.released: collections.deque[tuple[list[_Earlier], dict[int, int] | None]] = (
            collections.deque()
        )

    def take(self, size: int) -> _Freed | None:
        """A free block of ``size`` bytes, its queue's point at its free and what the thread
        that freed it knew, or None."""
        if not self.freed and not self.sizes.get(size):
            return None
        with self.lock:
            freed, sizes = self.freed, self.sizes
            while freed:
                entry = freed.popleft()
                n = entry[0].nbytes
                if self.kept + n <= _POOL_KEEP_BYTES:
                    sizes.setdefault(n, []).append(entry)
                    self.kept += n
            blocks = sizes.get(size)
            if not blocks:
                return None
            self.kept -= size
            return blocks.pop()


class _Block:
    """The memory of a device array that owns it; back to its stream's pool when the array goes."""

    __slots__ = ("memory", "queue")

    def __init__(self, memory: _Array, queue: _Queue) -> None:
        self.memory = memory
        self.queue = queue

    # The limits are bound here: at interpreter exit the module's globals may be gone (None)
    # before the last arrays are.
    def __del__(
        self,
        _keep: int = _POOL_KEEP_BYTES,
        _pending_max: int = _POOL_PENDING_MAX,
        _check: _Order = _order,
        _clock: _HostClock = _host_clock,
        _note: Callable[[_Queue, _Array, dict[int, int]], None] = _released,
    ) -> None:
        memory, queue = self.memory, self.queue
        freed = queue.pool.freed
        known = None
        if _check.on and _clock.epoch == _check.epoch:
            # What this thread knew, for the block's next owner (See NOTE [Ordering check]).
            known = dict(_clock.known)
            _note(queue, memory, known)
        if memory.nbytes <= _keep and len(freed) < _pending_max:
            freed.append((memory, queue.submitted, known))


def _allocate(
    shape: Any, dtype: Any, device: int, order: Any = "C"
) -> tuple[_Array, _Block | None]:
    """A poisoned buffer for a new array on ``device``, from the pool of the device's current
    stream where it holds a block that fits (See NOTE [Memory pool]), and its block."""
    dt = np.dtype(dtype)
    if dt.kind not in "fciub":
        raise TypeError(f"Unsupported dtype {dt}: the simulated device holds numbers only")
    dims = (operator.index(shape),) if not isinstance(shape, (tuple, list)) else tuple(shape)
    nbytes = math.prod(dims) * dt.itemsize
    if nbytes <= 0 or any(operator.index(n) < 0 for n in dims):
        buf = np.empty(dims, dt, order=order)  # NumPy's error for a negative dimension
        return buf, None
    if _counting:
        _count_allocation(nbytes)
    size = -(-nbytes // _BLOCK_UNIT) * _BLOCK_UNIT
    stream = _local.streams.get(device)  # the null stream means the device's default stream
    queue = _device_state(device).default_queue if stream is None else stream._queue
    reused = queue.pool.take(size)
    if reused is None:
        memory = np.empty(size, np.uint8)
        buf = np.ndarray(dims, dt, buffer=memory, order=order)
        _poison(buf)
        if _order.on:
            _check_allocation(queue, memory, None)
    else:
        memory, point, freed_by = reused
        buf = np.ndarray(dims, dt, buffer=memory, order=order)
        if _order.on:
            _check_allocation(queue, memory, freed_by)
        if queue.completed >= point and queue.pool.waited <= point:
            _poison(buf)
        else:
            queue.submit(functools.partial(_poison, buf))
    return buf, _Block(memory, queue)


def _output(shape: Any, dtype: Any, device: int, order: Any = "C") -> tuple[ndarray, _Array]:
    """A new array on ``device`` that owns its (poisoned) buffer, and the buffer."""
    buf, block = _allocate(shape, dtype, device, order)
    a = _new(buf, device, None)
    a._block = block
    return a, buf


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
        return _output(r.shape if shape is None else shape, r.dtype, device)
    if isinstance(r, (int, float, complex, np.generic)):
        return _output(() if shape is None else shape, np.asarray(r).dtype, device)
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
    if _order.on:
        written: list[_Array] = []
        _arrays_in(_substitute(kwargs.get("out"), _data_of), written)
        what = f"a synchronous {getattr(func, '__name__', 'call')} on the host"
        _check_host(what, [a._data for a in found], written)
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
    result, buf = _output(host.shape, host.dtype, device)
    _submit(device, functools.partial(_host_to_device, buf, host))
    return result


def _host_to_device(buf: _Array, host: _Array) -> None:
    """The kernel of a copy from the host (named for NOTE [Counting device work])."""
    np.copyto(buf, host, casting="unsafe")


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
    if kwargs or method != "__call__":
        _check_ufunc(ufunc, method, inputs, kwargs)
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
    if any(o is not None and type(o) is not ndarray for o in outs):
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
            array, buf = _output(shape, results[i].dtype, device)
            arrays.append(array)
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
        result, buf = _output(shape, r.dtype, device)
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
    result, buf = _output(shape, np.asarray(r).dtype, device)
    _submit(device, functools.partial(_run_into, buf, np.dot, (a._data, b._data), {}))
    return result


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
    if ndim == 0 and axis is not None and axis != ():
        # NumPy reduces a 0-d array over axis 0 or -1; CuPy raises (cupy/cupy#8748): asyncgrad's
        # ops must not pass an axis for a 0-d array.
        raise np.exceptions.AxisError(axis, 0)
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
    result, buf = _output(shape, np.asarray(r).dtype, device)
    _submit(device, functools.partial(_run_into, buf, func, (data, *args[1:]), kwargs))
    return result


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
    if where is True:
        work = functools.partial(np.copyto, dst._data, real(src), casting=casting)
    else:
        work = functools.partial(_masked_copy, dst._data, real(src), casting, real(where))
    _submit(device, work)
    return None


def _masked_copy(dst: _Array, src: Any, casting: Any, where: Any) -> None:
    """``copyto`` with ``where``: a kernel of its own (counted as ``_masked_copy``)."""
    np.copyto(dst, src, casting=casting, where=where)


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
    result, buf = _output(shape, dt, device)
    if fill is not None:
        if type(fill) is ndarray:
            if fill._dev != device:
                raise _peer_access(fill._dev, device)
            value: Any = fill._data
        else:
            value = _operand(fill)
            np.copyto(np.zeros((), buf.dtype), value, casting="unsafe")
        _submit(device, functools.partial(_fill, buf, value))
    return result


def _fill(buf: _Array, value: Any) -> None:
    """The kernel of a fill (named for NOTE [Counting device work]: not a copy)."""
    np.copyto(buf, value, casting="unsafe")


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


# NOTE [Wrapped indices]
# CuPy does not check integer index arrays against the array's shape: advanced indexing (reading,
# assignment, ``scatter_add``), ``take``, ``take_along_axis`` and ``put`` (its default mode) take
# every index modulo the length of its axis (``n`` is the first element, ``-n - 1`` the last), on
# the device, and raise nothing. A Python integer is still checked at the call, as in NumPy. The
# simulator wraps the same way, in the kernel, so code that counts on NumPy's IndexError gets the
# wrapped values here that it would get on a GPU. (An axis of length 0 is not wrapped: NumPy's
# IndexError at the call, where CuPy raises one as well.) Integer index arrays, on the device or
# the host, make a launch, as in CuPy; a boolean mask makes indexing synchronous (the result's
# length is its count of True).
def _is_mask(k: Any) -> bool:
    """Whether the index ``k`` is boolean (an array, or a bool, which NumPy takes as a 0-d mask)."""
    if type(k) is ndarray or isinstance(k, np.ndarray):
        return k.dtype.kind == "b"
    return type(k) is bool or isinstance(k, np.bool_)


def _advanced_key(key: tuple[Any, ...], found: list[ndarray]) -> tuple[tuple[Any, ...], bool]:
    """An advanced index with its host index arrays copied now (the host may change them before
    the kernel runs); whether it holds a boolean mask."""
    converted: list[Any] = []
    mask = False
    for k in key:
        if type(k) is ndarray:
            found.append(k)
        elif isinstance(k, (np.ndarray, list)):
            empty_list = isinstance(k, list) and not k
            k = np.array(k)
            if empty_list:  # no indices, not an empty mask
                k = k.astype(np.intp)
        mask = mask or _is_mask(k)
        converted.append(k)
    return tuple(converted), mask


def _index_standin(k: Any) -> Any:
    """An index array as the host-side inference sees it: zeros of its shape (a valid index of
    any non-empty axis; its values are wrapped in the kernel)."""
    if (type(k) is ndarray or isinstance(k, np.ndarray)) and k.dtype.kind in "iu":
        return _zero_strided(k.shape, k.dtype)
    return k


def _wrap_key(shape: _Shape, key: tuple[Any, ...]) -> tuple[Any, ...]:
    """``key`` (host arrays only) with each integer index array taken modulo the length of the
    axis it indexes (See NOTE [Wrapped indices])."""
    used = 0
    for k in key:
        if k is not None and k is not Ellipsis:
            used += (k.ndim if isinstance(k, np.ndarray) else 0) if _is_mask(k) else 1
    out: list[Any] = []
    axis = 0
    for k in key:
        if k is Ellipsis:
            axis += len(shape) - used
        elif isinstance(k, np.ndarray) and k.dtype.kind in "iu":
            n = shape[axis] if 0 <= axis < len(shape) else 0
            if n:
                k = np.mod(k if k.dtype == np.uint64 else k.astype(np.int64), n)
            axis += 1
        elif _is_mask(k):
            axis += k.ndim if isinstance(k, np.ndarray) else 0
        elif k is not None:
            axis += 1
        out.append(k)
    return tuple(out)


def _take_wrapped(data: _Array, key: tuple[Any, ...]) -> Any:
    return data[_wrap_key(data.shape, key)]


def _take_into(out: _Array, data: _Array, key: tuple[Any, ...]) -> None:
    out[...] = data[_wrap_key(data.shape, key)]


def _put(data: _Array, key: tuple[Any, ...], value: Any) -> None:
    data[key] = value


def _put_wrapped(data: _Array, key: tuple[Any, ...], value: Any) -> None:
    data[_wrap_key(data.shape, key)] = value


def _get_advanced(a: ndarray, key: tuple[Any, ...]) -> Any:
    """Advanced indexing: a launch whose kernel wraps the indices (See NOTE [Wrapped indices]);
    synchronous with a boolean mask, as in CuPy."""
    found = [a]
    key, mask = _advanced_key(key, found)
    device = _device_of(found)
    if mask:
        return _sync_call(_take_wrapped, (a, key), {}, device, found)
    try:
        r = _standin_like(a._data)[tuple(_index_standin(k) for k in key)]
        result, buf = _output(np.shape(r), r.dtype, device)
    except Exception:
        return _sync_call(_take_wrapped, (a, key), {}, device, found)
    _submit(device, functools.partial(_take_into, buf, a._data, _substitute(key, _data_of)))
    return result


def _set_item(a: ndarray, key: tuple[Any, ...], value: Any) -> None:
    """Assignment: a launch (advanced indices wrapped in the kernel, See NOTE [Wrapped
    indices]), synchronous with a boolean mask, as reading is."""
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
    mask = False
    if not basic:
        key, mask = _advanced_key(key, found)
    device = _device_of(found)
    rkey = _substitute(key, _data_of)
    try:
        if mask:
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
            skey = key if basic else tuple(_index_standin(k) for k in key)
            target[skey] = _standin_like(real) if on_device else real
    except Exception:
        get_current_stream(device).synchronize()
        if _order.on:
            _check_host("an assignment on the host", [x._data for x in found], [a._data])
        with np.errstate(all="ignore"):
            a._data[rkey if basic else _wrap_key(a._data.shape, rkey)] = real
        return
    _submit(device, functools.partial(_put if basic else _put_wrapped, a._data, rkey, real))


def _take_wrap_mode(a: Any, indices: Any, axis: Any = None, out: Any = None) -> Any:
    """``cupy.take``: indices wrapped, Python integers too (CuPy's take has no ``mode``)."""
    return np.take(a, indices, axis=axis, out=out, mode="wrap")


def _put_wrap_mode(a: Any, ind: Any, v: Any, mode: str = "wrap") -> None:
    """``cupy.put``: ``mode`` defaults to "wrap"."""
    np.put(a, ind, v, mode=mode)  # type: ignore[arg-type]


def _take_along_axis_wrapped(arr: Any, indices: Any, axis: Any = -1) -> Any:
    """``cupy.take_along_axis``: advanced indexing, so the indices wrap."""
    if axis is None:
        arr, axis = arr.ravel(), 0
    n = arr.shape[operator.index(axis) % max(arr.ndim, 1)] if arr.ndim else 0
    if n and indices.dtype.kind in "iu":
        indices = np.mod(indices if indices.dtype == np.uint64 else indices.astype(np.int64), n)
    return np.take_along_axis(arr, indices, axis=axis)


def _wrapping(impl: Callable[..., Any]) -> _Handler:
    """The handler of a NumPy function that CuPy implements with wrapped indices: ``impl`` in
    its place, launched as any function is."""

    def handler(
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        found: list[ndarray],
        device: int,
    ) -> Any:
        return _generic(impl, args, kwargs, found, device)

    return handler


def _put_handler(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    """``put``: wrapped by default; with mode="raise" CuPy checks on the device and reads the
    verdict, so the call is synchronous."""
    if kwargs.get("mode", args[3] if len(args) > 3 else "wrap") == "raise":
        return _sync_call(_put_wrap_mode, args, kwargs, device, found)
    return _generic(_put_wrap_mode, args, kwargs, found, device)


_HANDLERS[np.take] = _wrapping(_take_wrap_mode)
_HANDLERS[np.put] = _put_handler
_HANDLERS[np.take_along_axis] = _wrapping(_take_along_axis_wrapped)


# ----------------------------------------------------------------------------- raw kernels
# NOTE [Modelled raw kernels]
# CuPy compiles CUDA C++ with NVRTC (``RawModule``, ``RawKernel``); the simulator cannot run C.
# The code that owns a kernel registers a NumPy model of it under the kernel's name
# (``model_kernel``), and the simulator takes the source as CuPy does: it reads the signature of
# each ``__global__`` function (its template parameters, and per parameter a pointer to const, a
# pointer or a scalar, of a C type), and ``get_function`` with a name expression such as
# ``'ce_rows<float,long long>'`` binds the template arguments. A call then checks what a GPU does
# not, because there a mistake is a silently wrong result: the number of arguments; each pointer
# argument an array on the current device, C-contiguous (a raw kernel ignores strides) and of
# exactly the element type the signature declares (it reads the bytes as that type); each scalar
# a NumPy scalar of exactly its type; at most 1,024 threads a block and 48 KiB of dynamic shared
# memory. The model runs as one launch on the current stream, named after the kernel, reading
# every pointer argument and writing those not to const: counted, modelled in time and ordered
# (See NOTE [Ordering check]) like any other. It gets each array as the flat run of its elements,
# as the kernel sees memory, after the launch configuration ``(grid, block, shared_mem)``.
_C_TYPES: Final[dict[str, Any]] = {
    "bool": np.bool_,
    "char": np.int8,
    "signed char": np.int8,
    "unsigned char": np.uint8,
    "short": np.int16,
    "unsigned short": np.uint16,
    "int": np.int32,
    "unsigned int": np.uint32,
    "long long": np.int64,
    "unsigned long long": np.uint64,
    "float": np.float32,
    "double": np.float64,
}
_GLOBAL_FUNCTION: Final = re.compile(
    r"(?:template\s*<(?P<tparams>[^>]*)>\s*)?__global__\s+void\s+(?P<name>\w+)\s*\((?P<params>[^)]*)\)"
)
_kernel_models: dict[str, Callable[..., None]] = {}


def model_kernel(name: str, model: Callable[..., None]) -> None:
    """Run ``model`` for the kernel ``name`` of a ``RawModule`` or ``RawKernel`` (See NOTE
    [Modelled raw kernels]): ``model(launch, *args)``, ``launch`` being ``(grid, block,
    shared_mem)`` and ``args`` the kernel's arguments, arrays as flat host buffers."""
    _kernel_models[name] = model


class _Param:
    __slots__ = ("const", "ctype", "name", "pointer")

    def __init__(self, decl: str, where: str) -> None:
        words = decl.replace("*", " * ").split()
        if len(words) < 2:
            raise ValueError(f"{where}: cannot read the parameter {decl.strip()!r}")
        self.name = words[-1]
        rest = [w for w in words[:-1] if w not in ("__restrict__", "const", "*")]
        self.const = "const" in words[:-1]
        self.pointer = words[:-1].count("*")
        if self.pointer > 1:
            raise ValueError(f"{where}: a pointer to a pointer ({decl.strip()!r})")
        self.ctype = " ".join(rest)


def _kernels_in(code: str) -> dict[str, tuple[list[str], list[_Param]]]:
    found: dict[str, tuple[list[str], list[_Param]]] = {}
    for m in _GLOBAL_FUNCTION.finditer(code):
        name = m["name"]
        tparams = [p.split()[-1] for p in (m["tparams"] or "").split(",") if p.strip()]
        params = [_Param(d, name) for d in m["params"].split(",") if d.strip()]
        found[name] = (tparams, params)
    return found


def _split_template_args(text: str) -> list[str]:
    return [" ".join(a.split()) for a in text.split(",")] if text.strip() else []


class RawKernel:
    """A kernel of CUDA source, run as its registered NumPy model (See NOTE [Modelled raw
    kernels])."""

    def __init__(
        self,
        code: str,
        name: str,
        options: tuple[str, ...] = (),
        backend: str = "nvrtc",
        translate_cucomplex: bool = False,
        *,
        enable_cooperative_groups: bool = False,
        jitify: Any = None,
    ) -> None:
        base, _, targs = name.partition("<")
        base = base.strip()
        kernels = _kernels_in(code)
        if base not in kernels:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name!r}")
        tparams, params = kernels[base]
        args = _split_template_args(targs.rstrip().removesuffix(">")) if targs else []
        if len(args) != len(tparams):
            raise RuntimeError(
                f"{name!r}: kernel {base} takes {len(tparams)} template arguments "
                f"({', '.join(tparams)}), got {len(args)}"
            )
        bound = dict(zip(tparams, args, strict=True))
        self.name = name
        self._base = base
        self._params = params
        self._types: list[Any] = []
        for p in params:
            ctype = bound.get(p.ctype, p.ctype)
            if ctype not in _C_TYPES:
                raise NotImplementedError(f"{name}: the simulated device has no C type {ctype!r}")
            self._types.append(np.dtype(_C_TYPES[ctype]))

    def __call__(self, grid: Any, block: Any, args: Any, **kwargs: Any) -> None:
        shared_mem = kwargs.pop("shared_mem", 0)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
        name = self.name
        model = _kernel_models.get(self._base)
        if model is None:
            raise NotImplementedError(
                f"the simulated device has no model of kernel {self._base!r} (sim.model_kernel)"
            )
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        block = tuple(block) if isinstance(block, (tuple, list)) else (block,)
        if (
            not 1 <= len(grid) <= 3
            or not 1 <= len(block) <= 3
            or any(operator.index(n) < 1 for n in (*grid, *block))
            or math.prod(block) > 1024
            or not 0 <= shared_mem <= 48 * 1024
        ):
            raise ValueError(
                f"{name}: invalid launch (grid {grid}, block {block}, shared_mem {shared_mem})"
            )
        args = tuple(args)
        params = self._params
        if len(args) != len(params):
            raise TypeError(f"{name} takes {len(params)} arguments, got {len(args)}")
        device = _local.device
        data: list[Any] = []
        reads: list[_Array] = []
        writes: list[_Array] = []
        for p, want, a in zip(params, self._types, args, strict=True):
            what = f"{name}: argument {p.name}"
            if p.pointer:
                if not isinstance(a, ndarray):
                    raise TypeError(f"{what} is a pointer to {p.ctype}; got {type(a).__name__}")
                if a._dev != device:
                    raise _peer_access(a._dev, device)
                if a.dtype != want:
                    raise TypeError(f"{what} points to {want}, got an array of {a.dtype}")
                if not a._data.flags.c_contiguous:
                    raise ValueError(f"{what}: a raw kernel ignores strides; got a strided view")
                flat = a._data.reshape(-1)
                data.append(flat)
                reads.append(flat)
                if not p.const:
                    writes.append(flat)
            else:
                if not isinstance(a, np.generic) or a.dtype != want:
                    raise TypeError(
                        f"{what} is a {p.ctype} ({want}): pass a NumPy scalar of that type, "
                        f"got {a!r}"
                    )
                data.append(a)
        launch = (grid, block, shared_mem)
        work = functools.partial(_run_modelled, name, model, launch, tuple(data), reads, writes)
        _submit(device, work)


def _run_modelled(
    name: str,
    model: Callable[..., None],
    launch: tuple[Any, ...],
    data: tuple[Any, ...],
    reads: list[_Array],
    writes: list[_Array],
) -> None:
    with np.errstate(all="ignore"):
        model(launch, *data)


class RawModule:
    """CUDA source holding several kernels (See NOTE [Modelled raw kernels])."""

    def __init__(
        self,
        code: str | None = None,
        *,
        path: str | None = None,
        options: tuple[str, ...] = (),
        backend: str = "nvrtc",
        translate_cucomplex: bool = False,
        enable_cooperative_groups: bool = False,
        name_expressions: Any = None,
        jitify: Any = None,
    ) -> None:
        if code is None or path is not None:
            raise NotImplementedError("RawModule(path=...): the simulated device loads no binary")
        self._code = code
        self._names = None if name_expressions is None else tuple(name_expressions)

    def get_function(self, name: str) -> RawKernel:
        if "<" in name and (self._names is None or name not in self._names):
            raise RuntimeError(f"{name!r} is not among the name expressions given to RawModule")
        return RawKernel(self._code, name)


# ----------------------------------------------------------------------------- counts
# NOTE [Counting device work]
# What a GPU would pay for a program is mostly invisible on the simulator's timing: a launch, an
# allocation from the pool, an event record or query costs a few microseconds of driver time
# each on a GPU and next to nothing here. ``count_device_work()`` counts them instead, on every
# thread while it is open: kernel launches by kernel (the NumPy function or ufunc the simulator
# runs for it; copies from the host are ``_host_to_device``, fills ``_fill``, ``copyto`` with
# ``where`` ``_masked_copy``), allocations and their
# bytes (every new array that owns memory, from the pool or not: CuPy's pool makes a reuse
# cheaper but not free), events recorded and queried (``Event.done``, ``eventQuery``,
# ``Stream.done``), stream waits (``Stream.wait_event``, every call: CUDA queues one whether or
# not the event has run), host functions launched, and every host synchronisation with what
# waited and the file and line that caused it (NOTE [Host synchronisations]). The simulator's own
# work (poisoning reused blocks, its bookkeeping) is not counted: a GPU does none of it.
# What the host does while it waits for the device depends on how fast the device is, and the
# simulator is slower than a GPU. ``configure(inline=True)`` models a device that keeps up: every
# work item runs as it is queued, on the thread that queues it, so no event is ever pending and
# the host's own work is counted alone, the same in every run. It is for counting: the stream
# orders it no longer tests.
class DeviceCounts:
    """What the simulated devices were asked to do while ``count_device_work()`` was open."""

    __slots__ = (
        "allocated_bytes",
        "allocations",
        "events_queried",
        "events_recorded",
        "host_funcs",
        "host_syncs",
        "launches",
        "stream_waits",
    )

    def __init__(self) -> None:
        self.launches: collections.Counter[str] = collections.Counter()
        self.allocations = 0
        self.allocated_bytes = 0
        self.events_recorded = 0
        self.events_queried = 0
        self.stream_waits = 0
        self.host_funcs = 0
        self.host_syncs: list[tuple[str, str]] = []

    @property
    def kernels(self) -> int:
        """The number of kernel launches."""
        return sum(self.launches.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernels": self.kernels,
            "launches": dict(self.launches),
            "allocations": self.allocations,
            "allocated_bytes": self.allocated_bytes,
            "events_recorded": self.events_recorded,
            "events_queried": self.events_queried,
            "stream_waits": self.stream_waits,
            "host_funcs": self.host_funcs,
            "host_syncs": list(self.host_syncs),
        }

    def __repr__(self) -> str:
        return (
            f"DeviceCounts(kernels={self.kernels}, allocations={self.allocations}, "
            f"allocated_bytes={self.allocated_bytes}, events_recorded={self.events_recorded}, "
            f"events_queried={self.events_queried}, stream_waits={self.stream_waits}, "
            f"host_funcs={self.host_funcs}, host_syncs={len(self.host_syncs)})"
        )


_counting: list[DeviceCounts] = []  # the open counts; empty: nothing counts (one test a call)
_counting_lock: Final = threading.Lock()


def _count_launch(work: _Work) -> None:
    name = _work_name(work)
    with _counting_lock:
        for c in _counting:
            c.launches[name] += 1


def _count_allocation(nbytes: int) -> None:
    with _counting_lock:
        for c in _counting:
            c.allocations += 1
            c.allocated_bytes += nbytes


def _count(field: str) -> None:
    with _counting_lock:
        for c in _counting:
            setattr(c, field, getattr(c, field) + 1)


@contextlib.contextmanager
def count_device_work() -> Iterator[DeviceCounts]:
    """Count what every thread asks of the simulated devices while the block runs (See NOTE
    [Counting device work])."""
    counts = DeviceCounts()
    with _counting_lock:
        _counting.append(counts)
    try:
        yield counts
    finally:
        with _counting_lock:
            _counting.remove(counts)


# ----------------------------------------------------------------------------- host waits
# NOTE [Host synchronisations]
# A host wait blocks the calling thread until the device has run the work queued before it: the
# ``synchronize`` of a stream, an event or a device, every host read (``get``, ``item``,
# ``tolist``, ``int()``, ``float()``, ``bool()``, ``repr``, ``asnumpy``...) and the operations
# whose result's shape depends on the data (boolean masks, ``nonzero``, ``unique``...). On an event
# loop's thread it stalls every coroutine for as long as the device is busy. Tests find them with
# two tools: inside ``forbid_host_sync()`` a host wait on this thread raises HostSyncError naming
# the operation and its caller (the loop's thread, around an awaited backward pass), and
# ``record_host_syncs()`` collects every host wait of every thread while it is open. A wait on a
# stream with nothing queued counts too: on a GPU it would block had the stream been busy.
class HostSyncError(RuntimeError):
    """A host synchronisation on a thread where ``forbid_host_sync()`` forbids them."""


class _HostSyncState(threading.local):
    def __init__(self) -> None:
        self.forbidden = 0


_host_sync_state: Final = _HostSyncState()
_host_sync_records: list[list[tuple[str, str]]] = []
_host_sync_lock: Final = threading.Lock()


def _describe_host_wait() -> tuple[str, str]:
    """What waits (the outermost function of this module on the stack, with the function that a
    synchronous call computes) and where it was called from (the first frame outside it)."""
    frame: Any = sys._getframe(2)
    what = "?"
    computes = None
    while frame is not None and frame.f_code.co_filename == __file__:
        what = frame.f_code.co_name
        if what == "_sync_call":
            computes = getattr(frame.f_locals.get("func"), "__name__", None)
        frame = frame.f_back
    if computes is not None and computes != what:
        what = f"{what} (a synchronous {computes})"
    if frame is None:
        return what, "?"
    path = frame.f_code.co_filename
    cut = path.rfind("asyncgrad" + os.sep)
    short = path[cut:] if cut >= 0 else os.path.basename(path)
    return what, f"{short}:{frame.f_lineno} in {frame.f_code.co_name}"


def _host_wait() -> None:
    """Called by every host wait, before it blocks: See NOTE [Host synchronisations]."""
    if not _host_sync_state.forbidden and not _host_sync_records and not _counting:
        return
    what, where = _describe_host_wait()
    with _host_sync_lock:
        for records in _host_sync_records:
            records.append((what, where))
    if _counting:
        with _counting_lock:
            for c in _counting:
                c.host_syncs.append((what, where))
    if _host_sync_state.forbidden:
        raise HostSyncError(
            f"host synchronisation by {what}, called from {where}, on a thread where "
            "forbid_host_sync() forbids them: it blocks the thread until the device has run its "
            "queued work"
        )


@contextlib.contextmanager
def forbid_host_sync() -> Iterator[None]:
    """Make every host wait on this thread raise HostSyncError while the block runs."""
    _host_sync_state.forbidden += 1
    try:
        yield
    finally:
        _host_sync_state.forbidden -= 1


@contextlib.contextmanager
def record_host_syncs() -> Iterator[list[tuple[str, str]]]:
    """A list that collects ``(what, where)`` for every host wait of any thread while the block
    runs."""
    records: list[tuple[str, str]] = []
    with _host_sync_lock:
        _host_sync_records.append(records)
    try:
        yield records
    finally:
        with _host_sync_lock:
            _host_sync_records.remove(records)


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
    a._block = None
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

    __slots__ = ("__weakref__", "_block", "_data", "_dev", "base")

    _data: _Array
    _dev: int
    base: ndarray | None
    _block: _Block | None  # the memory it owns, None for a view (See NOTE [Memory pool])

    def __init__(
        self,
        shape: Any,
        dtype: Any = float,
        memptr: Any = None,
        strides: Any = None,
        order: Any = "C",
    ) -> None:
        """An uninitialised (poisoned) array on the current device (CuPy's signature; no
        ``memptr``/``strides``: views come from views)."""
        if memptr is not None or strides is not None:
            raise NotImplementedError("ndarray(memptr=..., strides=...) on the simulated device")
        device = _local.device
        _device_state(device)
        self._data, self._block = _allocate(shape, dtype, device, order)
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
    def data(self) -> _MemoryPointer:
        """CuPy's ``MemoryPointer`` of the first element: its ``ptr`` (the host buffer's
        address here)."""
        return _MemoryPointer(int(self._data.__array_interface__["data"][0]))

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

    def view(self, dtype: Any = None, type: Any = None) -> ndarray:
        if type is not None:
            raise NotImplementedError("view(type=...): the simulated device has one array type")
        return self._view(self._data.view() if dtype is None else self._data.view(dtype))

    def reshape(self, *shape: Any, order: str = "C", copy: Any = None) -> ndarray:
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return self._reshape(shape, order, copy)

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
        result, buf = _output(new_shape, data.dtype, self._dev)
        _submit(self._dev, functools.partial(_reshape_into, buf, data, order))
        return result

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
        result, buf = _output(self._data.shape, self._data.dtype, self._dev, order)
        _submit(self._dev, functools.partial(np.copyto, buf, self._data))
        return result

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
        result, buf = _output(self._data.shape, target, self._dev)
        work = functools.partial(np.copyto, buf, self._data, casting="unsafe")
        _submit(self._dev, work)
        return result

    def fill(self, value: Any) -> None:
        self[...] = value

    # CuPy's signatures (See NOTE [CuPy's arguments only]), each NumPy's function on the device.
    def sum(
        self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = False
    ) -> Any:
        kw = {"axis": axis, "dtype": dtype, "out": out, "keepdims": keepdims}
        return _call_function(np.sum, (self,), kw)

    def prod(
        self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = None
    ) -> Any:
        kw = {"axis": axis, "dtype": dtype, "out": out, "keepdims": bool(keepdims)}
        return _call_function(np.prod, (self,), kw)

    def mean(
        self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = False
    ) -> Any:
        kw = {"axis": axis, "dtype": dtype, "out": out, "keepdims": keepdims}
        return _call_function(np.mean, (self,), kw)

    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        ddof: Any = 0,
        keepdims: Any = False,
    ) -> Any:
        kw = {"axis": axis, "dtype": dtype, "out": out, "ddof": ddof, "keepdims": keepdims}
        return _call_function(np.std, (self,), kw)

    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        ddof: Any = 0,
        keepdims: Any = False,
    ) -> Any:
        kw = {"axis": axis, "dtype": dtype, "out": out, "ddof": ddof, "keepdims": keepdims}
        return _call_function(np.var, (self,), kw)

    def max(self, axis: Any = None, out: Any = None, keepdims: Any = False) -> Any:
        return _call_function(np.max, (self,), {"axis": axis, "out": out, "keepdims": keepdims})

    def min(self, axis: Any = None, out: Any = None, keepdims: Any = False) -> Any:
        return _call_function(np.min, (self,), {"axis": axis, "out": out, "keepdims": keepdims})

    def argmax(
        self, axis: Any = None, out: Any = None, dtype: Any = None, keepdims: Any = False
    ) -> Any:
        return self._arg_reduction(np.argmax, axis, out, dtype, keepdims)

    def argmin(
        self, axis: Any = None, out: Any = None, dtype: Any = None, keepdims: Any = False
    ) -> Any:
        return self._arg_reduction(np.argmin, axis, out, dtype, keepdims)

    def _arg_reduction(
        self, func: Callable[..., Any], axis: Any, out: Any, dtype: Any, keepdims: Any
    ) -> Any:
        """``argmax``/``argmin``, in ``dtype`` when given (CuPy's extra parameter)."""
        r = _call_function(func, (self,), {"axis": axis, "keepdims": keepdims})
        if dtype is not None:
            r = r.astype(dtype, copy=False)
        if out is not None:
            _call_function(np.copyto, (out, r), {})
            return out
        return r

    def all(self, axis: Any = None, out: Any = None, keepdims: Any = False) -> Any:
        return _call_function(np.all, (self,), {"axis": axis, "out": out, "keepdims": keepdims})

    def any(self, axis: Any = None, out: Any = None, keepdims: Any = False) -> Any:
        return _call_function(np.any, (self,), {"axis": axis, "out": out, "keepdims": keepdims})

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return _call_function(np.cumsum, (self,), {"axis": axis, "dtype": dtype, "out": out})

    def cumprod(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return _call_function(np.cumprod, (self,), {"axis": axis, "dtype": dtype, "out": out})

    def clip(self, min: Any = None, max: Any = None, out: Any = None) -> Any:
        return _call_function(np.clip, (self, min, max), {"out": out})

    def round(self, decimals: Any = 0, out: Any = None) -> Any:
        return _call_function(np.round, (self,), {"decimals": decimals, "out": out})

    def dot(self, b: Any, out: Any = None) -> Any:
        if out is None:
            return _call_function(np.dot, (self, b), {})
        return _call_function(np.dot, (self, b), {"out": out})

    def take(self, indices: Any, axis: Any = None, out: Any = None) -> Any:
        return _call_function(np.take, (self, indices), {"axis": axis, "out": out})

    def put(self, indices: Any, values: Any, mode: Any = "wrap") -> None:
        _call_function(np.put, (self, indices, values), {"mode": mode})

    def repeat(self, repeats: Any, axis: Any = None) -> Any:
        return _call_function(np.repeat, (self, repeats), {"axis": axis})

    def trace(
        self,
        offset: Any = 0,
        axis1: Any = 0,
        axis2: Any = 1,
        dtype: Any = None,
        out: Any = None,
    ) -> Any:
        return _call_function(np.trace, (self, offset, axis1, axis2, dtype, out), {})

    def argsort(self, axis: Any = -1, kind: Any = None) -> Any:
        return _call_function(np.argsort, (self,), {"axis": axis, "kind": kind})

    def sort(self, axis: Any = -1, kind: Any = None) -> None:
        _call_function(np.ndarray.sort, (self,), {"axis": axis, "kind": kind})

    def searchsorted(self, v: Any, side: Any = "left", sorter: Any = None) -> Any:
        return _call_function(np.searchsorted, (self, v), {"side": side, "sorter": sorter})

    def nonzero(self) -> Any:
        return _call_function(np.nonzero, (self,), {})

    def compress(self, condition: Any, axis: Any = None, out: Any = None) -> Any:
        return _call_function(np.compress, (condition, self, axis, out), {})

    def conj(self) -> Any:
        return _ufunc_call(np.conjugate, (self,), {})

    def conjugate(self) -> Any:
        return _ufunc_call(np.conjugate, (self,), {})

    # ------------------------------------------------------------------ NumPy's protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        # CuPy's ufunc of the same name, if any (See NOTE [CuPy's arguments only]).
        if ufunc.__name__ not in _CUPY_UFUNCS or (ufunc is np.matmul and method != "__call__"):
            return NotImplemented
        out = kwargs.get("out")
        if out is not None and len(out) != 1:
            raise ValueError("The 'out' parameter must have exactly one array value")
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
        name = _cupy_function_name(func)
        if name is None:  # CuPy has no such function: NumPy raises its TypeError
            return NotImplemented
        _check_arguments(name, args, kwargs)
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

    def get(
        self, stream: Stream | None = None, order: str = "C", out: Any = None, blocking: bool = True
    ) -> _Array:
        """A NumPy copy, after the stream (default: the current device's current stream) has run
        (also with ``blocking=False``: the copy is taken at once, so the call waits)."""
        self._host_queue(stream).synchronize()
        if _order.on:
            _check_host("a host read (get)", [self._data], [])
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
        work = functools.partial(_host_to_device, self._data, host)
        self._host_queue(stream).submit(work)
        if _counting:
            _count_launch(work)

    def item(self) -> Any:
        return self.get().item()

    def tolist(self) -> Any:
        return self.get().tolist()

    def __float__(self) -> float:
        return float(self.get())

    def __int__(self) -> int:
        return int(self.get())

    def __complex__(self) -> complex:
        return complex(self.get())

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

    # No __imatmul__: CuPy has none, so ``a @= b`` binds a new array to ``a``, as here.

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
    result, buf = _output(a._data.shape, a._data.dtype if dt is None else dt, device)
    _submit(device, functools.partial(np.copyto, buf, a._data, casting="unsafe"))
    return result


def asarray(
    a: Any, dtype: Any = None, order: Any = None, *, copy: Any = None, blocking: bool = False
) -> ndarray:
    """``a`` on the current device: a device array of it as is (or converted), a copy from another
    device, or a copy of host data (taken now, so later host changes do not race with it, with
    ``blocking`` or without)."""
    device = _local.device
    if type(a) is ndarray and a._dev == device:
        if copy:
            return a.astype(a.dtype if dtype is None else dtype, "K" if order is None else order)
        if copy is False and dtype is not None and np.dtype(dtype) != a.dtype:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        return a if dtype is None else a.astype(dtype, copy=False)
    if copy is False:
        raise ValueError("Unable to avoid copy while creating an array as requested.")
    if type(a) is ndarray:
        return _transfer(a, dtype)
    return _upload(np.array(a, dtype=dtype, order="C" if order is None else order))


def array(
    obj: Any,
    dtype: Any = None,
    copy: Any = True,
    order: Any = "K",
    subok: Any = False,
    ndmin: int = 0,
    *,
    blocking: bool = False,
) -> ndarray:
    if type(obj) is ndarray and copy and obj._dev == _local.device:
        r = obj.astype(obj.dtype if dtype is None else dtype, order)
    else:
        r = asarray(obj, dtype, copy=None if copy is True else copy)
    if r.ndim < ndmin:
        r = r.reshape((1,) * (ndmin - r.ndim) + r.shape)
    return r


def asnumpy(
    a: Any,
    stream: Stream | None = None,
    order: Any = "C",
    out: Any = None,
    *,
    blocking: bool = True,
) -> _Array:
    """A NumPy copy of a device array after its stream has run; other values through NumPy."""
    if type(a) is ndarray:
        return a.get(stream, order, out, blocking)
    if out is not None:
        out[...] = a
        return out  # type: ignore[no-any-return]
    return np.asarray(a, order=order)


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
    prototype: Any, dtype: Any = None, order: Any = "K", subok: Any = None, shape: Any = None
) -> ndarray:
    return _like_of(prototype, dtype, shape, None)


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


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> ndarray:
    return _upload(np.arange(start, stop, step, dtype=dtype))


def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: Any = None,
    axis: int = 0,
) -> Any:
    host_linspace: Any = np.linspace
    r = host_linspace(start, stop, num, endpoint, retstep, dtype, axis)
    return (_upload(r[0]), r[1]) if retstep else _upload(r)


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = float, order: Any = "C") -> ndarray:
    return _upload(np.eye(N, M, k, dtype=dtype, order=order))


# ----------------------------------------------------------------------------- stride tricks
class _StrideTricks:
    """``cupy.lib.stride_tricks``'s subset."""

    @staticmethod
    def as_strided(x: ndarray, shape: Any = None, strides: Any = None) -> ndarray:
        """A view of ``x``'s buffer with the given shape and strides (in bytes, of the host
        buffer, which are the array's ``strides``), with no stream work. Like CuPy's, it checks
        nothing: a view reaching past the buffer reads garbage.

        CuPy's view has no ``base`` (it holds the memory by its pointer); the simulator's keeps
        the array it views as its base, as its other views do, so the buffer lives as long as
        the view."""
        if type(x) is not ndarray:
            raise TypeError(f"as_strided expects an array of the simulated device, got {type(x)}")
        data = x._data
        view = np.lib.stride_tricks.as_strided(
            data,
            data.shape if shape is None else tuple(shape),
            data.strides if strides is None else tuple(strides),
        )
        return x._view(view)


class _Lib:
    """``cupy.lib``'s subset."""

    stride_tricks: Final = _StrideTricks()


lib: Final = _Lib()


# ----------------------------------------------------------------------------- linalg
class _MemoryPointer:
    """``cupy.cuda.MemoryPointer``'s address (``ndarray.data.ptr``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def _linalg_standin(data: _Array) -> _Array:
    """Identity matrices of ``data``'s shape: every factorisation takes them."""
    if data.ndim < 2:
        return np.zeros(data.shape, data.dtype)
    m, n = data.shape[-2:]
    return np.broadcast_to(np.eye(m, n, dtype=data.dtype), data.shape)


def _linalg_kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """NumPy's ``fn`` as CuPy's: plain tuples of results, and NaNs where NumPy raises
    LinAlgError (CuPy does not check a factorisation's success unless configured to)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            r = fn(*args, **kwargs)
        except np.linalg.LinAlgError:
            sargs = [_linalg_standin(a) if isinstance(a, np.ndarray) else a for a in args]
            r = fn(*sargs, **kwargs)
            if isinstance(r, tuple):
                r = tuple(np.full(np.shape(x), np.nan, np.asarray(x).dtype) for x in r)
            else:
                r = np.full(np.shape(r), np.nan, np.asarray(r).dtype)
        return tuple(r) if isinstance(r, tuple) else r

    return run


def _linalg_launch(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    found: list[ndarray],
    device: int,
) -> Any:
    return _launch(func, args, kwargs, found, device, _linalg_standin, None)


def _linalg(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _dispatch(_linalg_kernel(fn), args, kwargs, _linalg_launch)


class _Linalg:
    """``cupy.linalg``'s subset that asyncgrad uses: a launch each, results as CuPy's (plain
    tuples; NaNs for a matrix the factorisation does not take)."""

    def inv(self, a: Any) -> Any:
        return _linalg(np.linalg.inv, (a,), {})

    def solve(self, a: Any, b: Any) -> Any:
        # CuPy's checks: a 1-D b is one vector; otherwise no broadcasting of the batch dims
        if b.ndim == 0:
            raise ValueError("b must have at least one dimension")
        if b.ndim == 1 and a.shape[-1] != b.size:
            raise ValueError(
                "a must have (..., M, M) shape and b must have (M,) for one-dimensional b"
            )
        if b.ndim > 1 and a.shape[:-1] != b.shape[:-1]:
            raise ValueError(
                "a must have (..., M, M) shape and b must have (..., M, K) for multidimensional b"
            )
        return _linalg(np.linalg.solve, (a, b), {})

    def det(self, a: Any) -> Any:
        return _linalg(np.linalg.det, (a,), {})

    def slogdet(self, a: Any) -> Any:
        return _linalg(np.linalg.slogdet, (a,), {})

    def cholesky(self, a: Any) -> Any:
        return _linalg(np.linalg.cholesky, (a,), {})

    def qr(self, a: Any, mode: str = "reduced") -> Any:
        return _linalg(np.linalg.qr, (a,), {"mode": mode})

    def svd(self, a: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
        return _linalg(
            np.linalg.svd, (a,), {"full_matrices": full_matrices, "compute_uv": compute_uv}
        )

    def eigh(self, a: Any, UPLO: str = "L") -> Any:
        return _linalg(np.linalg.eigh, (a,), {"UPLO": UPLO})

    def eigvalsh(self, a: Any, UPLO: str = "L") -> Any:
        return _linalg(np.linalg.eigvalsh, (a,), {"UPLO": UPLO})


linalg: Final = _Linalg()


def _add_at_wrapped(a: _Array, key: tuple[Any, ...], value: Any) -> None:
    np.add.at(a, _wrap_key(a.shape, key), value)


def scatter_add(a: ndarray, slices: Any, value: Any) -> None:
    """``cupyx.scatter_add``, deprecated in CuPy 14 (it warns, as CuPy's does): ``add.at``."""
    warnings.warn(
        "`ndarray.scatter_add` is deprecated. Please use `cupy.add.at` instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    _scatter_add(a, slices, value)


def _scatter_add(a: ndarray, slices: Any, value: Any) -> None:
    """``add.at(a, slices, value)``: ``np.add.at`` as a launch, the indices wrapped (See NOTE
    [Wrapped indices])."""
    if type(a) is not ndarray:
        raise TypeError(f"scatter_add expects an array of the simulated device, got {type(a)}")
    key, _ = _advanced_key(slices if type(slices) is tuple else (slices,), [])
    _call_function(_add_at_wrapped, (a, key, value), {})


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
    result, buf = _output(x.shape, dt, x._dev)
    _submit(x._dev, functools.partial(_erf_into, buf, _erf_function(), x._data))
    return result


# ----------------------------------------------------------------------------- random
# NOTE [Generator state on the device]
# CuPy's ``default_rng`` is a ``Generator`` around an ``XORWOW`` bit generator, whose state lives
# on the device: ``bit_generator._state``, a byte array that each draw reads and advances in a
# kernel on the current stream. The bit generator also holds a ``threading.Lock`` (``lock``), so a
# generator can be neither deep-copied nor pickled ("cannot pickle '_thread.lock' object"); a copy
# of its state array is the way to snapshot it, and putting a copy back as ``_state`` restores it.
# The simulator keeps the same attributes and draws the same way: ``_state`` is a device array of
# 48 bytes holding the state of NumPy's PCG64 (not cuRAND's numbers), read and written by the
# draw's kernel.
_PCG_WORDS: Final = 6  # state (128 bits), increment (128 bits), has_uint32, uinteger
_MASK64: Final = (1 << 64) - 1


def _pcg_bytes(bit_generator: np.random.PCG64) -> _Array:
    st = bit_generator.state
    state, inc = st["state"]["state"], st["state"]["inc"]
    words = [state & _MASK64, state >> 64, inc & _MASK64, inc >> 64]
    words += [st["has_uint32"], st["uinteger"]]
    return np.array(words, dtype=np.uint64).view(np.int8)


def _pcg_of(data: _Array) -> np.random.PCG64:
    w = [int(v) for v in data.view(np.uint64)]
    bit_generator = np.random.PCG64()
    bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": w[0] | (w[1] << 64), "inc": w[2] | (w[3] << 64)},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
    return bit_generator


def _draw_into(out: _Array, state: _Array, method: str, args: tuple[Any, ...], kw: Any) -> None:
    """The kernel of a draw: the samples from the state in ``state``, which it advances."""
    bit_generator = _pcg_of(state)
    out[...] = getattr(np.random.Generator(bit_generator), method)(*args, **kw)
    state[...] = _pcg_bytes(bit_generator)


def _size_shape(size: Any) -> _Shape:
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (operator.index(size),)
    return tuple(operator.index(n) for n in size)


class _XORWOW:
    """``cupy.random.XORWOW``'s state and lock (See NOTE [Generator state on the device])."""

    def __init__(self, seed: Any = None, *, size: int = -1) -> None:
        self.lock = threading.Lock()
        if isinstance(seed, np.random.SeedSequence):
            self._seed_seq = seed
        else:
            if type(seed) is ndarray:
                seed = seed.get()
            self._seed_seq = np.random.SeedSequence(seed)
        self._current_device_id = _local.device
        self._seed = self._seed_seq.generate_state(1, np.uint32)[0]
        self._size = 1 if size < 0 else size
        self._state = _upload(_pcg_bytes(np.random.PCG64(self._seed_seq)))

    def _check_device(self) -> None:
        if _local.device != self._current_device_id:
            raise RuntimeError("This Generator state is allocated in a different device")

    def state(self) -> int:
        self._check_device()
        return int(self._state._data.ctypes.data)

    def _state_size(self) -> int:
        return self._size


class _Generator:
    """``cupy.random.Generator``'s samplers: each draw is a kernel on the current stream that
    reads and advances the bit generator's state array (See NOTE [Generator state on the
    device])."""

    def __init__(self, bit_generator: _XORWOW) -> None:
        self.bit_generator = bit_generator
        self._binomial_state = None

    def _draw(self, shape: _Shape, dt: Any, method: str, *args: Any, **kw: Any) -> ndarray:
        bit_generator = self.bit_generator
        bit_generator._check_device()
        state = bit_generator._state
        result, buf = _output(shape, dt, state._dev)
        work = functools.partial(_draw_into, buf, state._data, method, args, kw)
        _submit(state._dev, work)
        return result

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> ndarray:
        dt = np.float64 if np.dtype(dtype).char == "d" else np.float32
        y = self._draw(_size_shape(size), dt, "random", _size_shape(size), dtype=dt)
        if out is not None:
            out[...] = y
            return out  # type: ignore[no-any-return]
        return y.astype(dtype, copy=False)

    def standard_normal(
        self, size: Any = None, dtype: Any = np.float64, out: Any = None
    ) -> ndarray:
        dt = np.float64 if np.dtype(dtype).char == "d" else np.float32
        y = self._draw(_size_shape(size), dt, "standard_normal", _size_shape(size), dtype=dt)
        if out is not None:
            out[...] = y
            return out  # type: ignore[no-any-return]
        return y.astype(dtype, copy=False)

    def uniform(
        self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = np.float64
    ) -> ndarray:
        shape = np.broadcast_shapes(np.shape(low), np.shape(high)) if size is None else size
        shape = _size_shape(shape)
        y = self._draw(shape, np.float64, "uniform", low, high, shape)
        return y.astype(dtype, copy=False)

    def integers(
        self,
        low: Any,
        high: Any = None,
        size: Any = None,
        dtype: Any = np.int64,
        endpoint: bool = False,
    ) -> ndarray:
        shape = _size_shape(size)
        if high is None:
            low, high = 0, low
        if int(high) - (0 if endpoint else 1) < int(low):
            raise ValueError("low >= high")
        return self._draw(shape, dtype, "integers", low, high, shape, dtype, endpoint)


class _Random:
    """``cupy.random``'s subset."""

    Generator: Final = _Generator
    XORWOW: Final = _XORWOW

    @staticmethod
    def default_rng(seed: Any = None) -> _Generator:
        if isinstance(seed, _XORWOW):
            return _Generator(seed)
        if isinstance(seed, _Generator):
            return seed
        return _Generator(_XORWOW(seed))


random: Final = _Random()


# ----------------------------------------------------------------------------- NumPy's other names
# NOTE [CuPy's arguments only]
# Code that passes an argument CuPy lacks (a NumPy keyword such as ``where=`` or ``initial=``, a
# function or ufunc method CuPy does not have) fails on a GPU; the simulator must fail the same
# way, or it hides the fault. So its NumPy-backed names are limited to CuPy's, each called with
# CuPy's parameters:
#   - functions (``sim.concatenate``, or NumPy's ``np.concatenate`` dispatching here through
#     ``__array_function__``): those of _CUPY_FUNCTIONS, whose arguments are bound to CuPy's
#     signature first (a TypeError as Python raises it for CuPy's function); a NumPy function
#     CuPy lacks returns NotImplemented from ``__array_function__``, so NumPy raises its
#     TypeError, and ``sim.<name>`` raises AttributeError, as on ``cupy``;
#   - ufuncs: those of _CUPY_UFUNCS; a call takes ``out``, ``dtype`` and ``casting`` only (CuPy's
#     ``ufunc.__call__`` raises ``TypeError('Wrong arguments ...')`` for anything else), matmul
#     the keywords of CuPy's generalized ufunc; ``reduce``/``accumulate`` exist for add and
#     multiply only, ``reduceat`` for add, ``at`` for the ufuncs with a scatter operation, each
#     with CuPy's parameters (others raise NotImplementedError, as CuPy's do);
#   - the module's own functions and ndarray's methods are written with CuPy's signatures.
# tests/backend/test_sim_surface.py compares all of them with the installed CuPy.
# The tables hold CuPy 14's parameter lists (names, kinds, defaults).
_CUPY_FUNCTIONS: Final[dict[str, str]] = {
    "all": "a, axis=None, out=None, keepdims=False",
    "allclose": "a, b, rtol=1e-05, atol=1e-08, equal_nan=False",
    "amax": "a, axis=None, out=None, keepdims=False",
    "amin": "a, axis=None, out=None, keepdims=False",
    "any": "a, axis=None, out=None, keepdims=False",
    "argmax": "a, axis=None, dtype=None, out=None, keepdims=False",
    "argmin": "a, axis=None, dtype=None, out=None, keepdims=False",
    "argpartition": "a, kth, axis=-1",
    "argsort": "a, axis=-1, kind=None",
    "argwhere": "a",
    "around": "a, decimals=0, out=None",
    "array_equal": "a1, a2, equal_nan=False",
    "array_split": "ary, indices_or_sections, axis=0",
    "asanyarray": "a, dtype=None, order=None, *, copy=None, blocking=False",
    "ascontiguousarray": "a, dtype=None",
    "atleast_1d": "*arys",
    "atleast_2d": "*arys",
    "atleast_3d": "*arys",
    "bincount": "x, weights=None, minlength=None",
    "broadcast_arrays": "*args",
    "broadcast_shapes": "*args",
    "broadcast_to": "array, shape",
    "can_cast": "from_, to, casting='safe'",
    "clip": "a, a_min, a_max, out=None",
    "compress": "condition, a, axis=None, out=None",
    "concatenate": "tup, axis=0, out=None, *, dtype=None, casting='same_kind'",
    "copyto": "dst, src, casting='same_kind', where=None",
    "count_nonzero": "a, axis=None",
    "cross": "a, b, axisa=-1, axisb=-1, axisc=-1, axis=None",
    "cumprod": "a, axis=None, dtype=None, out=None",
    "cumsum": "a, axis=None, dtype=None, out=None",
    "delete": "arr, indices, axis=None",
    "diag": "v, k=0",
    "diagonal": "a, offset=0, axis1=0, axis2=1",
    "diff": "a, n=1, axis=-1, prepend=None, append=None",
    "dot": "a, b, out=None",
    "dsplit": "ary, indices_or_sections",
    "einsum": "*operands, **kwargs",
    "empty_like": "prototype, dtype=None, order='K', subok=None, shape=None",
    "expand_dims": "a, axis",
    "extract": "condition, a",
    "flatnonzero": "a",
    "flip": "a, axis=None",
    "fliplr": "a",
    "flipud": "a",
    "full_like": "a, fill_value, dtype=None, order='K', subok=None, shape=None",
    "histogram": "x, bins=10, range=None, density=False, weights=None",
    "histogram2d": "x, y, bins=10, range=None, weights=None, density=None",
    "histogramdd": "sample, bins=10, range=None, weights=None, density=False",
    "hsplit": "ary, indices_or_sections",
    "hstack": "tup, *, dtype=None, casting='same_kind'",
    "imag": "val",
    "inner": "a, b",
    "intersect1d": "arr1, arr2, assume_unique=False, return_indices=False",
    "isclose": "a, b, rtol=1e-05, atol=1e-08, equal_nan=False",
    "iscomplexobj": "x",
    "isrealobj": "x",
    "kron": "a, b",
    "matrix_transpose": "x, /",
    "max": "a, axis=None, out=None, keepdims=False",
    "may_share_memory": "a, b, max_work=None",
    "mean": "a, axis=None, dtype=None, out=None, keepdims=False",
    "min": "a, axis=None, out=None, keepdims=False",
    "moveaxis": "a, source, destination",
    "nan_to_num": "x, copy=True, nan=0.0, posinf=None, neginf=None",
    "nanargmax": "a, axis=None, dtype=None, out=None, keepdims=False",
    "nanargmin": "a, axis=None, dtype=None, out=None, keepdims=False",
    "nanmax": "a, axis=None, out=None, keepdims=False",
    "nanmean": "a, axis=None, dtype=None, out=None, keepdims=False",
    "nanmin": "a, axis=None, out=None, keepdims=False",
    "nanprod": "a, axis=None, dtype=None, out=None, keepdims=False",
    "nanstd": "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False",
    "nansum": "a, axis=None, dtype=None, out=None, keepdims=False",
    "nanvar": "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False",
    "ndim": "a",
    "nonzero": "a",
    "ones_like": "a, dtype=None, order='K', subok=None, shape=None",
    "outer": "a, b, out=None",
    "pad": "array, pad_width, mode='constant', **kwargs",
    "prod": "a, axis=None, dtype=None, out=None, keepdims=False",
    "put": "a, ind, v, mode='wrap'",
    "ravel": "a, order='C'",
    "real": "val",
    "repeat": "a, repeats, axis=None",
    "reshape": "a, newshape, order='C', *, copy=None",
    "result_type": "*arrays_and_dtypes",
    "rot90": "a, k=1, axes=(0, 1)",
    "round": "a, decimals=0, out=None",
    "searchsorted": "a, v, side='left', sorter=None",
    "setdiff1d": "ar1, ar2, assume_unique=False",
    "setxor1d": "ar1, ar2, assume_unique=False",
    "shape": "a",
    "shares_memory": "a, b, max_work=None",
    "size": "a, axis=None",
    "sort": "a, axis=-1, kind=None",
    "split": "ary, indices_or_sections, axis=0",
    "squeeze": "a, axis=None",
    "stack": "tup, axis=0, out=None, *, dtype=None, casting='same_kind'",
    "std": "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False",
    "sum": "a, axis=None, dtype=None, out=None, keepdims=False",
    "swapaxes": "a, axis1, axis2",
    "take": "a, indices, axis=None, out=None",
    "take_along_axis": "a, indices, axis",
    "tensordot": "a, b, axes=2",
    "tile": "A, reps",
    "trace": "a, offset=0, axis1=0, axis2=1, dtype=None, out=None",
    "transpose": "a, axes=None",
    "tril": "m, k=0",
    "trim_zeros": "filt, trim='fb'",
    "triu": "m, k=0",
    "union1d": "arr1, arr2",
    "unique": (
        "ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, "
        "equal_nan=True"
    ),
    "unique_all": "x",
    "unique_counts": "x",
    "unique_inverse": "x",
    "unique_values": "x",
    "unravel_index": "indices, dims, order='C'",
    "var": "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False",
    "vsplit": "ary, indices_or_sections",
    "vstack": "tup, *, dtype=None, casting='same_kind'",
    "where": "condition, x=None, y=None",
    "zeros_like": "a, dtype=None, order='K', subok=None, shape=None",
}

_CUPY_UFUNCS: Final = frozenset(
    {
        "abs",
        "absolute",
        "acos",
        "acosh",
        "add",
        "arccos",
        "arccosh",
        "arcsin",
        "arcsinh",
        "arctan",
        "arctan2",
        "arctanh",
        "asin",
        "asinh",
        "atan",
        "atan2",
        "atanh",
        "bitwise_and",
        "bitwise_count",
        "bitwise_invert",
        "bitwise_left_shift",
        "bitwise_not",
        "bitwise_or",
        "bitwise_right_shift",
        "bitwise_xor",
        "cbrt",
        "ceil",
        "conj",
        "conjugate",
        "copysign",
        "cos",
        "cosh",
        "deg2rad",
        "degrees",
        "divide",
        "divmod",
        "equal",
        "exp",
        "exp2",
        "expm1",
        "fabs",
        "float_power",
        "floor",
        "floor_divide",
        "fmax",
        "fmin",
        "fmod",
        "frexp",
        "gcd",
        "greater",
        "greater_equal",
        "heaviside",
        "hypot",
        "invert",
        "isfinite",
        "isinf",
        "isnan",
        "lcm",
        "ldexp",
        "left_shift",
        "less",
        "less_equal",
        "log",
        "log10",
        "log1p",
        "log2",
        "logaddexp",
        "logaddexp2",
        "logical_and",
        "logical_not",
        "logical_or",
        "logical_xor",
        "maximum",
        "minimum",
        "mod",
        "modf",
        "multiply",
        "negative",
        "nextafter",
        "not_equal",
        "positive",
        "pow",
        "power",
        "rad2deg",
        "radians",
        "reciprocal",
        "remainder",
        "right_shift",
        "rint",
        "sign",
        "signbit",
        "sin",
        "sinh",
        "sqrt",
        "square",
        "subtract",
        "tan",
        "tanh",
        "true_divide",
        "trunc",
        "matmul",
    }
)

# The keywords of CuPy's ufunc ``__call__``, and of its generalized ufunc (matmul).
_UFUNC_KEYWORDS: Final = frozenset({"out", "dtype", "casting"})
_GUFUNC_KEYWORDS: Final = frozenset(
    {"axes", "axis", "keepdims", "casting", "dtype", "signature", "order", "out"}
)

# CuPy's ufunc methods: their parameters (after ``self``) and the ufuncs that implement them.
_UFUNC_METHODS: Final[dict[str, tuple[str, frozenset[str] | None]]] = {
    "reduce": (
        "array, axis=0, dtype=None, out=None, keepdims=False",
        frozenset({"add", "multiply"}),
    ),
    "accumulate": ("array, axis=0, dtype=None, out=None", frozenset({"add", "multiply"})),
    "reduceat": ("array, indices, axis=0, dtype=None, out=None", frozenset({"add"})),
    "at": (
        "a, indices, b=None",
        frozenset(
            {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"}
        ),
    ),
    "outer": ("A, B, **kwargs", None),
}

_DEFAULT_NAMES: Final[dict[str, Any]] = {"float": float, "int": int, "bool": bool}


def _parse_signature(params: str) -> inspect.Signature:
    """An ``inspect.Signature`` from a parameter list written as in a ``def``."""
    tree = ast.parse(f"def f({params}): pass").body[0]
    assert isinstance(tree, ast.FunctionDef)
    spec = tree.args

    def default(node: ast.expr | None) -> Any:
        if node is None:
            return inspect.Parameter.empty
        if isinstance(node, ast.Name):
            return _DEFAULT_NAMES[node.id]
        return ast.literal_eval(node)

    P = inspect.Parameter
    positional = [*spec.posonlyargs, *spec.args]
    defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
    parameters: list[inspect.Parameter] = []
    for i, (arg, node) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if i < len(spec.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        parameters.append(P(arg.arg, kind, default=default(node)))
    if spec.vararg is not None:
        parameters.append(P(spec.vararg.arg, P.VAR_POSITIONAL))
    for arg, kw_node in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
        parameters.append(P(arg.arg, P.KEYWORD_ONLY, default=default(kw_node)))
    if spec.kwarg is not None:
        parameters.append(P(spec.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(parameters)


_signatures: dict[str, inspect.Signature] = {}


def _cupy_signature(name: str) -> inspect.Signature:
    """CuPy's signature of function ``name`` of _CUPY_FUNCTIONS, or of ufunc method ``.name``."""
    sig = _signatures.get(name)
    if sig is None:
        params = _UFUNC_METHODS[name[1:]][0] if name[0] == "." else _CUPY_FUNCTIONS[name]
        sig = _signatures[name] = _parse_signature(params)
    return sig


def _check_arguments(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise the TypeError that calling CuPy's ``name`` with these arguments raises."""
    try:
        _cupy_signature(name).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name.lstrip('.')}() {exc}") from None


def _cupy_function_name(func: Callable[..., Any]) -> str | None:
    """The name of CuPy's counterpart of NumPy's function ``func`` (None: CuPy has none)."""
    name = getattr(func, "__name__", None)
    if getattr(func, "__module__", None) != "numpy" or name not in _CUPY_FUNCTIONS:
        return None
    return str(name)


def _check_ufunc(
    ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Raise what CuPy raises for a ufunc call or method it does not take (See NOTE [CuPy's
    arguments only])."""
    name = ufunc.__name__
    if method == "__call__":
        allowed = _GUFUNC_KEYWORDS if ufunc is np.matmul else _UFUNC_KEYWORDS
        if kwargs and not allowed.issuperset(kwargs):
            wrong = {k: v for k, v in kwargs.items() if k not in allowed}
            raise TypeError(f"Wrong arguments {wrong} (for the ufunc {name} on CUDA)")
        return
    entry = _UFUNC_METHODS.get(method)
    if entry is None or ufunc is np.matmul:
        raise AttributeError(f"CuPy's ufunc {name!r} has no method {method!r}")
    implemented = entry[1]
    if implemented is not None and name not in implemented:
        raise NotImplementedError(f"`{name}.{method}` is not supported yet (by CuPy)")
    _check_arguments(f".{method}", inputs, kwargs)


class _Ufunc:
    """A ufunc of CuPy's applied on the device (``sim.add``, ``sim.add.reduce``, ...)."""

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
        if self._ufunc is np.add and len(args) == 3 and not kwargs and type(args[0]) is ndarray:
            _scatter_add(*args)  # CuPy's add.at is its scatter_add: indices wrapped
            return None
        return self._apply("at", args, kwargs)

    # CuPy's ufunc attributes; its ``name`` is ``cupy_<NumPy's name>``.
    @property
    def nin(self) -> int:
        return int(self._ufunc.nin)

    @property
    def nout(self) -> int:
        return int(self._ufunc.nout)

    @property
    def nargs(self) -> int:
        return int(self._ufunc.nargs)

    @property
    def types(self) -> list[str]:
        return list(self._ufunc.types)

    @property
    def name(self) -> str:
        return f"cupy_{self._ufunc.__name__}"

    def __repr__(self) -> str:
        return f"<sim ufunc {self._ufunc.__name__!r}>"


def _device_function(func: Callable[..., Any]) -> Callable[..., Any]:
    name = func.__name__

    @functools.wraps(func)
    def on_device(*args: Any, **kwargs: Any) -> Any:
        _check_arguments(name, args, kwargs)
        try:
            return _call_function(func, args, kwargs)
        except _Defer:
            raise TypeError(f"Unsupported operand types for {name}") from None

    return on_device


# NumPy's classes that CuPy also exports besides the scalar types (np.generic's subclasses).
_CUPY_CLASSES: Final = frozenset({"dtype", "iinfo", "finfo"})

# NOTE: the wrappers are cached here, not in the module's globals: there they would shadow the
# builtins of the same names (max, sum, bool, ...) for this module's own code.
_wrapped: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """CuPy's other names (See NOTE [CuPy's arguments only]): its functions and ufuncs, run on
    the device; NumPy's scalar types, ``dtype``, ``iinfo``, ``finfo`` and constants."""
    wrapped = _wrapped.get(name)
    if wrapped is not None:
        return wrapped
    target = getattr(np, name, None) if not name.startswith("__") else None
    if isinstance(target, np.ufunc):
        if name not in _CUPY_UFUNCS:
            target = None
        else:
            wrapped = _Ufunc(target)
    elif isinstance(target, type):
        if not issubclass(target, np.generic) and name not in _CUPY_CLASSES:
            target = None
        wrapped = target
    elif callable(target):
        wrapped = _device_function(target) if name in _CUPY_FUNCTIONS else None
        target = wrapped
    elif isinstance(target, (int, float)):
        wrapped = target
    else:  # NumPy's submodules and other objects: CuPy has its own or none
        target = None
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (as CuPy has none)")
    _wrapped[name] = wrapped
    return wrapped


# Kernels that write their first argument (See NOTE [Ordering check]).
_WRITES_FIRST: Final = frozenset(
    {
        np.copyto,
        _masked_copy,
        _host_to_device,
        _fill,
        np.put,
        _take_into,
        _put,
        _put_wrapped,
        _put_wrap_mode,
        _reshape_into,
        _erf_into,
        _poison,
        _add_at_wrapped,
    }
)
