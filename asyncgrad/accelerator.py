"""``ag.accelerator``: torch's device-agnostic accelerator API over asyncgrad's one accelerator
type, CUDA (real, or simulated with ASYNCGRAD_SIM_CUDA=N). Without a CUDA device every answer is
torch's on a machine without an accelerator: ``is_available()`` False, ``current_accelerator()``
None, ``device_count()`` 0, and what needs a device raises torch's RuntimeError."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import cuda
from .backend import Device

__all__ = [
    "current_accelerator",
    "current_device_idx",
    "current_device_index",
    "current_stream",
    "device_count",
    "device_index",
    "empty_cache",
    "get_memory_info",
    "is_available",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_device_idx",
    "set_device_index",
    "set_stream",
    "synchronize",
]

_NONE = "Cannot access accelerator device when none is available."


def _require() -> None:
    if not cuda.is_available():
        raise RuntimeError(_NONE)


def is_available() -> bool:
    """Whether an accelerator (a CUDA device) can be used."""
    return cuda.is_available()


def current_accelerator(check_available: bool = False) -> Device | None:
    """``device('cuda')`` where CUDA is available, else None (as torch on a CPU-only machine)."""
    return Device("cuda") if cuda.is_available() else None


def device_count() -> int:
    return cuda.device_count() if cuda.is_available() else 0


def current_device_index() -> int:
    _require()
    return cuda.current_device()


current_device_idx = current_device_index


def set_device_index(device: Any, /) -> None:
    _require()
    if device is not None:
        cuda.set_device(device)


set_device_idx = set_device_index


@contextmanager
def device_index(device: int | None, /) -> Iterator[None]:
    """Make ``device`` current inside the block (None: change nothing)."""
    if device is None:
        yield
        return
    _require()
    prev = cuda.current_device()
    cuda.set_device(device)
    try:
        yield
    finally:
        cuda.set_device(prev)


def synchronize(device: Any = None, /) -> None:
    _require()
    cuda.synchronize(device)


def current_stream(device: Any = None, /) -> cuda.Stream:
    _require()
    return cuda.current_stream(device)


def set_stream(stream: cuda.Stream) -> None:
    _require()
    raise NotImplementedError(
        "ag.accelerator.set_stream is not supported: use `with ag.cuda.stream(s):` to run work "
        "on a stream"
    )


def empty_cache() -> None:
    """Nothing to free here: CuPy's memory pool keeps its blocks for reuse."""
    _require()


def _memory(name: str) -> Any:
    def query(device_index: Any = None, /) -> Any:
        _require()
        raise NotImplementedError(f"ag.accelerator.{name} is not supported by asyncgrad")

    query.__name__ = query.__qualname__ = name
    return query


get_memory_info = _memory("get_memory_info")
memory_allocated = _memory("memory_allocated")
max_memory_allocated = _memory("max_memory_allocated")
memory_reserved = _memory("memory_reserved")
max_memory_reserved = _memory("max_memory_reserved")
memory_stats = _memory("memory_stats")
reset_accumulated_memory_stats = _memory("reset_accumulated_memory_stats")
reset_peak_memory_stats = _memory("reset_peak_memory_stats")
