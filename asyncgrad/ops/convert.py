"""Copies and conversions: clone, contiguous, ``to`` (device and dtype)."""

from __future__ import annotations

from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import Device, silent_fp
from ._record import OPS, make, wrap


def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    _check_layout(None, memory_format)
    return make(OPS["clone"], input._array.copy(), (input,))


def contiguous(input: Tensor, memory_format: Any = None) -> Tensor:
    """``input`` if its array is C-contiguous, else a contiguous copy; any memory format gives
    the same values (See NOTE [Layouts and memory formats] in dtypes.py)."""
    _check_layout(None, memory_format)
    a = input._array
    if a.flags.c_contiguous:
        return input
    return make(OPS["clone"], backend.namespace(a).ascontiguousarray(a), (input,))


def _check_layout(layout: Any, memory_format: Any) -> None:
    """torch's ``layout=`` and ``memory_format=``: every asyncgrad tensor is dense and strided,
    and a memory format changes no value (See NOTE [Layouts and memory formats] in dtypes.py);
    a sparse layout is refused."""
    if layout is not None and layout is not dtypes.strided:
        raise NotImplementedError(f"asyncgrad has only strided (dense) tensors, not {layout}")
    if memory_format is not None and not isinstance(memory_format, dtypes.memory_format):
        raise TypeError(
            f"memory_format must be a memory format, not {type(memory_format).__name__}"
        )


@silent_fp  # See NOTE [Silent floating point]
def to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``self`` on another device and/or with another dtype (itself when nothing changes)."""
    dev: Device | None = None
    dt = kwargs.pop("dtype", None)
    if "device" in kwargs:
        dev = Device(kwargs.pop("device"))
    kwargs.pop("copy", None)
    kwargs.pop("non_blocking", None)
    _check_layout(None, kwargs.pop("memory_format", None))
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dev, dt = a.device, a.dtype
        elif isinstance(a, Device) or (isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda")):
            dev = Device(a)
        else:
            dt = a
    out = self
    if dev is not None and dev != self.device:
        moved = backend.to_device(self._array, dev)
        out = make(OPS["to_copy"], moved, (self,), {"device": self.device})
    if dt is not None and dtypes.to_dtype(dt) != out.dtype:
        cast = out._array.astype(dtypes.to_dtype(dt))
        # As in torch, a cast to an integer or bool dtype leaves the graph.
        out = make(OPS["cast"], cast, (out,)) if cast.dtype.kind in "fc" else wrap(cast)
    return out
