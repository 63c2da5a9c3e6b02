"""Data types: the dtype objects, parsing of dtype arguments, and torch's promotion rules."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

__all__ = [
    "bool_",
    "dtype",
    "float16",
    "float32",
    "float64",
    "get_default_dtype",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_floating",
    "promote_binary",
    "set_default_dtype",
    "to_dtype",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

# ``ag.dtype``: the type of every dtype object (``isinstance(t.dtype, ag.dtype)``), as torch.dtype.
dtype = np.dtype

float16: Final = np.dtype("float16")
float32: Final = np.dtype("float32")
float64: Final = np.dtype("float64")
int8: Final = np.dtype("int8")
int16: Final = np.dtype("int16")
int32: Final = np.dtype("int32")
int64: Final = np.dtype("int64")
uint8: Final = np.dtype("uint8")
uint16: Final = np.dtype("uint16")
uint32: Final = np.dtype("uint32")
uint64: Final = np.dtype("uint64")
bool_: Final = np.dtype("bool")

FLOAT_KINDS: Final = frozenset("fc")

_NAMES: Final[dict[str, np.dtype[Any]]] = {
    "float16": float16,
    "half": float16,
    "float32": float32,
    "float": float32,
    "float64": float64,
    "double": float64,
    "int8": int8,
    "int16": int16,
    "short": int16,
    "int32": int32,
    "int": int32,
    "int64": int64,
    "long": int64,
    "uint8": uint8,
    "uint16": uint16,
    "uint32": uint32,
    "uint64": uint64,
    "bool": bool_,
}


def to_dtype(d: Any) -> np.dtype[Any]:
    """The dtype named by ``d``: a dtype, a name ("float32", "long"), or a Python type."""
    if isinstance(d, str):
        try:
            named: np.dtype[Any] = _NAMES[d]
            return named
        except KeyError:
            raise TypeError(f"unknown dtype {d!r}") from None
    if d is float:  # torch reads the Python type as float64, whatever the default dtype
        return float64
    if d is int:
        return int64
    if d is bool:
        return bool_
    parsed: np.dtype[Any] = np.dtype(d)
    return parsed


def is_floating(d: np.dtype[Any]) -> bool:
    return d.kind in FLOAT_KINDS


def is_float64(a: Any) -> bool:
    """Whether ``a`` (an array, or a Python number) has dtype float64."""
    dt = getattr(a, "dtype", None)  # not `== float64` alone: np.dtype(None) is float64
    return dt is not None and dt == float64


def default_dtype_of(data_dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """torch's default for data given as Python numbers: floats take the default dtype (float32
    unless ``set_default_dtype`` changed it) and ints int64. ``None`` when the inferred dtype is
    already right."""
    if data_dtype == float64:
        d = _default_float[0]
        return None if d is float64 else d
    if data_dtype.kind == "i" and data_dtype != int64:
        return int64
    return None


_CATEGORY: Final = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def promote_binary(out: np.dtype[Any], x: Any, y: Any) -> np.dtype[Any]:
    """The result dtype torch gives a binary op whose NumPy result has dtype ``out``.

    Two differences from NumPy: a Python float with an integer tensor gives float32 (NumPy:
    float64), and a 0-d tensor with a dimensioned one decides the type only when its category
    (bool < int < float) is higher; otherwise the dimensioned operand's dtype wins (NumPy would
    let a 0-d float64 widen a float32 tensor).
    """
    if out == float64 and not is_float64(x) and not is_float64(y):
        return _default_float[0]
    xd, yd = getattr(x, "ndim", None), getattr(y, "ndim", None)
    if xd is None or yd is None or (xd == 0) is (yd == 0):
        return out
    big, small = (y, x) if xd == 0 else (x, y)
    cb, cs = _CATEGORY.get(big.dtype.kind, 3), _CATEGORY.get(small.dtype.kind, 3)
    result: np.dtype[Any] = big.dtype if cs <= cb else small.dtype
    return result


# ----- the default floating dtype -----
# NOTE [Default dtype]
# As torch's ``set_default_dtype``: one setting for the whole process (not per thread or task),
# read by the factories (``zeros``, ``rand``, ...) when given no dtype, by Python floats turned
# into tensors (``tensor(1.5)``), and by a Python float meeting an integer tensor. A one-item
# list, so the readers' lookup stays one global and one index.
_DEFAULT_FLOATS: Final = (float16, float32, float64)
_default_float: list[np.dtype[Any]] = [float32]


def get_default_dtype() -> np.dtype[Any]:
    """The dtype that factories and Python floats give (float32 unless changed)."""
    return _default_float[0]


def set_default_dtype(d: Any) -> None:
    """Make ``d`` (float16, float32 or float64) the default floating dtype, process-wide."""
    dt = to_dtype(d)
    if dt not in _DEFAULT_FLOATS:
        raise TypeError(f"only floating-point types are supported as the default type, got {dt}")
    _default_float[0] = next(f for f in _DEFAULT_FLOATS if f == dt)
