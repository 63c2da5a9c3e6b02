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
    "int32",
    "int64",
    "is_floating",
    "promote_binary",
    "to_dtype",
]

# ``ag.dtype``: the type of every dtype object (``isinstance(t.dtype, ag.dtype)``), as torch.dtype.
dtype = np.dtype

float16: Final = np.dtype("float16")
float32: Final = np.dtype("float32")
float64: Final = np.dtype("float64")
int32: Final = np.dtype("int32")
int64: Final = np.dtype("int64")
bool_: Final = np.dtype("bool")

FLOAT_KINDS: Final = frozenset("fc")

_NAMES: Final[dict[str, np.dtype[Any]]] = {
    "float16": float16,
    "half": float16,
    "float32": float32,
    "float": float32,
    "float64": float64,
    "double": float64,
    "int32": int32,
    "int": int32,
    "int64": int64,
    "long": int64,
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
    if d is float:
        return float32
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
    """torch's default for data given as Python numbers: floats become float32 and ints int64.
    ``None`` when the inferred dtype is already right."""
    if data_dtype == float64:
        return float32
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
        return float32
    xd, yd = getattr(x, "ndim", None), getattr(y, "ndim", None)
    if xd is None or yd is None or (xd == 0) is (yd == 0):
        return out
    big, small = (y, x) if xd == 0 else (x, y)
    cb, cs = _CATEGORY.get(big.dtype.kind, 3), _CATEGORY.get(small.dtype.kind, 3)
    result: np.dtype[Any] = big.dtype if cs <= cb else small.dtype
    return result
