"""torch's legacy tensor types (``ag.FloatTensor`` ... ``ag.BoolTensor``), ``typename``,
``set_default_tensor_type``, and the layout and memory-format objects.

NOTE [Legacy tensor types]
In torch, ``torch.FloatTensor`` is not a subclass of ``torch.Tensor``: it is a constructor
(``FloatTensor(2, 3)`` an uninitialised 2x3 float32 tensor, ``FloatTensor([1, 2])`` one from
data, ``FloatTensor(t)`` ``t`` itself when it is already float32) and an ``isinstance`` test by
dtype and device (``isinstance(t, torch.FloatTensor)`` is True for a float32 CPU tensor). Here
the same: each type is a class whose metaclass makes the call build an ``ag.Tensor`` and the
``isinstance`` test read the tensor's dtype and device. Uninitialised tensors are zeros.
"""

from __future__ import annotations

import builtins
import warnings
from typing import Any, Final

from . import dtypes, ops
from ._tensor import Size, Tensor
from .backend import Device

__all__ = [
    "BoolTensor",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
    "channels_last",
    "channels_last_3d",
    "contiguous_format",
    "layout",
    "memory_format",
    "newaxis",
    "preserve_format",
    "set_default_tensor_type",
    "sparse_coo",
    "strided",
    "typename",
]


class _TensorType(type):
    """The metaclass of the legacy types (See NOTE [Legacy tensor types])."""

    dtype: Any

    def __instancecheck__(cls, obj: Any) -> builtins.bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == "cpu"

    def __call__(cls, *args: Any, device: Any = None) -> Tensor:
        dt = cls.dtype
        if device is not None and Device(device).type != "cpu":
            raise RuntimeError(
                "legacy constructor expects device type: cpu but device type: "
                f"{Device(device).type} was passed"
            )
        if not args:
            return ops.empty(0, dtype=dt, device=device)
        if builtins.all(
            isinstance(a, builtins.int) and not isinstance(a, builtins.bool) for a in args
        ):
            return ops.zeros(*args, dtype=dt, device=device)
        if len(args) == 1:
            (data,) = args
            if isinstance(data, Size):
                return ops.zeros(tuple(data), dtype=dt, device=device)
            if isinstance(data, Tensor):
                if data.dtype != dt:
                    raise TypeError(
                        f"expected {cls.__name__} (dtype {dt}), got a tensor of dtype {data.dtype}"
                    )
                return data
            if not isinstance(data, (builtins.int, builtins.float, builtins.bool, str)):
                return ops.tensor(data, dtype=dt, device=device)
        raise TypeError(
            f"{cls.__name__}() takes sizes (ints or an ag.Size), or data (a sequence or an "
            f"array), got {', '.join(type(a).__name__ for a in args)}"
        )

    def __repr__(cls) -> str:
        return f"<class 'torch.{cls.__name__}'>"


def _legacy(name: str, dt: Any) -> Any:
    doc = f"``torch.{name}``: builds and recognises {dt} tensors (See NOTE [Legacy tensor types])."
    return _TensorType(name, (), {"dtype": dt, "is_cuda": False, "__doc__": doc})


FloatTensor: Final = _legacy("FloatTensor", dtypes.float32)
DoubleTensor: Final = _legacy("DoubleTensor", dtypes.float64)
HalfTensor: Final = _legacy("HalfTensor", dtypes.float16)
LongTensor: Final = _legacy("LongTensor", dtypes.int64)
IntTensor: Final = _legacy("IntTensor", dtypes.int32)
ShortTensor: Final = _legacy("ShortTensor", dtypes.int16)
CharTensor: Final = _legacy("CharTensor", dtypes.int8)
ByteTensor: Final = _legacy("ByteTensor", dtypes.uint8)
BoolTensor: Final = _legacy("BoolTensor", dtypes.bool_)

_BY_NAME: Final = {
    t.__name__: t
    for t in (
        FloatTensor,
        DoubleTensor,
        HalfTensor,
        LongTensor,
        IntTensor,
        ShortTensor,
        CharTensor,
        ByteTensor,
        BoolTensor,
    )
}


def typename(obj: Any, /) -> str:
    """The fully qualified name of ``obj``'s type, as torch's: a tensor's type string
    ("torch.FloatTensor"), else module and qualified name (builtins without a module)."""
    if isinstance(obj, Tensor):
        name: str = obj.type()
        return name
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module = obj.__class__.__module__ or ""
        qualname = obj.__class__.__qualname__
    if module in ("", "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def set_default_tensor_type(t: Any, /) -> None:
    """Deprecated in torch 2.1 (and warned about, as there): a floating legacy type, or its name
    ("torch.DoubleTensor"), sets the default dtype (``ag.set_default_dtype``)."""
    warnings.warn(
        "torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
        "torch.set_default_dtype() and torch.set_default_device() as alternatives.",
        UserWarning,
        stacklevel=2,
    )
    cls = t
    if isinstance(t, str):
        prefix, _, name = t.rpartition(".")
        if prefix not in ("torch", "asyncgrad") or name not in _BY_NAME:
            raise TypeError(f"invalid type: '{t}'")
        cls = _BY_NAME[name]
    if not isinstance(cls, _TensorType):
        raise TypeError(
            "invalid type object: only floating-point types are supported as the default type"
        )
    if not dtypes.is_floating(cls.dtype):
        raise TypeError("only floating-point types are supported as the default type")
    dtypes.set_default_dtype(cls.dtype)


# ----- layouts and memory formats (in dtypes.py, beside the dtypes: Tensor.layout reads them) -----
from .dtypes import (  # noqa: E402
    channels_last,
    channels_last_3d,
    contiguous_format,
    layout,
    memory_format,
    preserve_format,
    sparse_coo,
    strided,
)

newaxis: Final = None
