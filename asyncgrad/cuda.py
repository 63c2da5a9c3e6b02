"""``ag.cuda``: CUDA devices, streams and events, with ``torch.cuda``'s names and semantics.

Everything here imports without CuPy; ``is_available()`` is then False and anything that needs a
device raises a RuntimeError saying why. With ``ASYNCGRAD_SIM_CUDA=N`` the devices are simulated
(NumPy arrays, a thread per stream), for machines without a GPU.

Two things go beyond torch: an ``Event`` can be awaited (``await ev``), which resumes once the
GPU has reached it without blocking the event loop meanwhile, and so can
``synchronize_async()``, which waits so for the work queued on a device's current stream and
for the backward passes still in flight there (See NOTE [Passes in flight] in
asyncgrad/backend/cuda.py).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

from .backend import Device
from .backend import cuda as _cuda

__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device_count",
    "is_available",
    "matmul",
    "set_device",
    "stream",
    "synchronize",
    "synchronize_async",
]


def is_available() -> bool:
    """Whether a CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N) can be used."""
    return _cuda.available()


def device_count() -> int:
    return _cuda.device_count()


def current_device() -> int:
    """The index of this thread's current CUDA device."""
    rt = _cuda.require(None)
    return int(rt.cuda.runtime.getDevice())


def _index(device: Any) -> int:
    """The CUDA device index meant by ``device`` (None: the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    dev = Device(device)
    if dev.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {dev}")
    assert dev.index is not None
    return dev.index


def set_device(device: Any) -> None:
    """Make ``device`` this thread's current CUDA device (``cuda:N``, ``N`` or a Device)."""
    idx = _index(device)
    rt = _cuda.require(idx)
    rt.cuda.Device(idx).use()


def synchronize(device: Any = None) -> None:
    """Block until every stream of ``device`` (default: the current one) has finished."""
    idx = _index(device)
    rt = _cuda.require(idx)
    rt.cuda.Device(idx).synchronize()


async def synchronize_async(device: Any = None) -> None:
    """Wait, without blocking the running event loop, until the GPU has run the work queued so
    far on this thread's current stream of ``device`` (default: the current device) and the
    awaited backward passes still in flight there (See NOTE [Passes in flight] in
    asyncgrad/backend/cuda.py): after it, reading a result on the host does not block."""
    idx = _index(device)
    _cuda.require(idx)
    here = (_cuda.record(_cuda.current_stream(idx), idx), idx)
    await _cuda.wait_until_done([*_cuda.in_flight(idx), here])


class Stream:
    """A CUDA stream: kernels queued on it run in order; separate streams may overlap.

    Like torch's, a new stream does not synchronise with the default stream implicitly.
    ``native`` is the runtime's stream (a ``cupy.cuda.Stream``); a device's default stream is
    CuPy's ``Stream.null``, one object for every device, so a Stream is its native stream and
    its device together, and uses the native stream with its device current.
    """

    __slots__ = ("device", "native")

    device: Device
    native: Any

    def __init__(self, device: Any = None, priority: int = 0) -> None:
        idx = _index(device)
        rt = _cuda.require(idx)
        with rt.cuda.Device(idx):
            native = rt.cuda.Stream(non_blocking=True)
        _cuda.note_side_stream()  # See NOTE [Deferred frees]
        object.__setattr__(self, "native", native)
        object.__setattr__(self, "device", Device("cuda", idx))

    @classmethod
    def _of(cls, native: Any, idx: int) -> Stream:
        s = object.__new__(cls)
        object.__setattr__(s, "native", native)
        object.__setattr__(s, "device", Device("cuda", idx))
        return s

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Stream is immutable")

    @property
    def _idx(self) -> int:
        assert self.device.index is not None
        return self.device.index

    def wait_event(self, event: Event) -> None:
        """Work queued on this stream from now on waits until ``event`` has completed."""
        if event.native is not None:
            _cuda.wait_event(self.native, event.native, self._idx)

    def wait_stream(self, stream: Stream) -> None:
        """Work queued on this stream from now on waits for the work queued on ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) at the end of the work queued so far."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self) -> bool:
        """Whether all work queued on this stream has completed; raises the CUDA error of a
        device that a failed kernel broke, as torch does."""
        return _cuda.query(_cuda.record(self.native, self._idx), self._idx)

    def synchronize(self) -> None:
        """Block until all work queued on this stream has completed."""
        with _cuda.rt.cuda.Device(self._idx):
            self.native.synchronize()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Stream)
            and other.native == self.native
            and other.device == self.device
        )

    def __hash__(self) -> int:
        return hash((self.native, self._idx))

    def __repr__(self) -> str:
        ptr = getattr(self.native, "ptr", 0)
        return f"<asyncgrad.cuda.Stream device={self.device} ptr={ptr:#x}>"


class Event:
    """A point in a stream's work, to wait for (from another stream, the host, or a coroutine).

    ``await event`` resumes once the GPU has reached it, without blocking the event loop.
    """

    __slots__ = ("_stream", "blocking", "enable_timing", "native")

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        if interprocess:
            raise NotImplementedError("interprocess events are not supported")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.native: Any = None  # made when first recorded, on the stream's device
        self._stream: Stream | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Record this event at the end of the work queued so far on ``stream`` (default: the
        current stream of the current device)."""
        if stream is None:
            stream = current_stream()
        rt = _cuda.require(stream._idx)
        with rt.cuda.Device(stream._idx):
            if self.native is None:
                self.native = rt.cuda.Event(
                    block=self.blocking, disable_timing=not self.enable_timing
                )
            self.native.record(stream.native)
        self._stream = stream

    def wait(self, stream: Stream | None = None) -> None:
        """Work queued on ``stream`` (default: the current stream) from now on waits for this
        event."""
        if stream is None:
            stream = current_stream()
        stream.wait_event(self)

    def query(self) -> bool:
        """Whether the work before the event has completed (True if never recorded); raises the
        CUDA error of a device that a failed kernel broke, as torch does."""
        if self.native is None or self._stream is None:
            return True
        return _cuda.query(self.native, self._stream._idx)

    def synchronize(self) -> None:
        """Block until the work before the event has completed."""
        if self.native is not None:
            self.native.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, with timing)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True")
        if self.native is None or end_event.native is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        rt = _cuda.require(None)
        return float(rt.cuda.get_elapsed_time(self.native, end_event.native))

    def __await__(self) -> Generator[Any, None, None]:
        if self.native is None or self._stream is None:
            return
        yield from _cuda.wait_until_done([(self.native, self._stream._idx)]).__await__()

    def __repr__(self) -> str:
        if self.native is None:
            state = "unrecorded"
        else:
            try:
                state = "done" if self.query() else "pending"
            except _cuda.rt.cuda.runtime.CUDARuntimeError:  # a broken device: repr must not raise
                state = "failed"
        return f"<asyncgrad.cuda.Event {state}>"


def current_stream(device: Any = None) -> Stream:
    """This thread's current stream of ``device`` (default: the current device)."""
    idx = _index(device)
    _cuda.require(idx)
    return Stream._of(_cuda.current_stream(idx), idx)


def default_stream(device: Any = None) -> Stream:
    idx = _index(device)
    _cuda.require(idx)
    return Stream._of(_cuda.default_stream(idx), idx)


@contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream of its device, and its device the current device, inside
    the block (None: no change), as torch's ``torch.cuda.stream``.

    The current stream is per thread, as in torch; inside a coroutine, keep ``await`` out of
    the block, or other tasks of the loop will queue their work on ``s`` meanwhile.
    """
    if s is None:
        yield
        return
    idx = s._idx
    prev_dev = _cuda.use_device(idx)
    prev = _cuda.use_stream(s.native, idx)
    try:
        yield
    finally:
        _cuda.use_stream(prev, idx)
        _cuda.use_device(prev_dev)


class _Matmul:
    """``ag.cuda.matmul.allow_tf32``: whether float32 matrix products may use TF32 tensor cores
    (faster, about 10 bits of mantissa). Off by default, as ``torch.backends.cuda.matmul``."""

    @property
    def allow_tf32(self) -> bool:
        return _cuda.tf32()

    @allow_tf32.setter
    def allow_tf32(self, flag: bool) -> None:
        _cuda.set_tf32(flag)


matmul = _Matmul()
