"""Data types: the dtype objects, parsing of dtype arguments, and torch's promotion rules."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

__all__ = [
    "bool_",
    "can_cast",
    "dtype",
    "finfo",
    "float16",
    "float32",
    "float64",
    "get_default_dtype",
    "iinfo",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_floating",
    "promote_binary",
    "promote_types",
    "result_type",
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


# ----- torch's dtype facts: finfo, iinfo, promote_types, can_cast, result_type -----
class finfo:
    """The limits of a floating dtype (float32, or the default dtype with no argument), with
    torch's attributes: ``bits``, ``eps``, ``max``, ``min``, ``tiny``, ``smallest_normal``,
    ``resolution`` and ``dtype`` (its name, as torch's). A complex dtype gives its parts'."""

    def __init__(self, type: Any = None) -> None:
        dt = _default_float[0] if type is None else to_dtype(type)
        if dt.kind not in FLOAT_KINDS:
            raise TypeError(
                "torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                "'torch.finfo'"
            )
        info = np.finfo(dt)
        self.bits: int = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = float(info.smallest_normal)
        self.smallest_normal = self.tiny
        self.resolution = 10.0 ** -int(info.precision)
        self.dtype: str = str(info.dtype)

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
            f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, "
            f"dtype={self.dtype})"
        )


class iinfo:
    """The limits of an integer dtype, with torch's attributes ``bits``, ``max``, ``min`` and
    ``dtype`` (its name)."""

    def __init__(self, type: Any) -> None:
        dt = to_dtype(type)
        if dt.kind == "b":
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if dt.kind not in "iu":
            raise TypeError(
                "torch.iinfo() requires an integer input type. Use torch.finfo to handle "
                "'torch.iinfo'"
            )
        info = np.iinfo(dt)
        self.bits: int = int(info.bits)
        self.max: int = int(info.max)
        self.min: int = int(info.min)
        self.dtype: str = str(dt)

    def __repr__(self) -> str:
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"


_WIDE_UNSIGNED: Final = frozenset({"uint16", "uint32", "uint64"})
_C10_NAMES: Final = {
    "bool": "Bool",
    "uint8": "Byte",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
}


def _category(d: np.dtype[Any]) -> int:
    return _CATEGORY.get(d.kind, 3)


def promote_types(type1: Any, type2: Any) -> np.dtype[Any]:
    """torch's promotion of two dtypes: within a category (bool < integer < floating <
    complex) the wider type, across categories the higher one's type (float16 with int64 is
    float16), float with complex the complex type that holds both. Like torch, the unsigned
    types wider than uint8 promote with no other integer or bool type (a RuntimeError)."""
    a, b = to_dtype(type1), to_dtype(type2)
    if a == b:
        return a
    ca, cb = _category(a), _category(b)
    if ca <= 1 and cb <= 1 and (a.name in _WIDE_UNSIGNED or b.name in _WIDE_UNSIGNED):
        raise RuntimeError(
            "Promotion for uint16, uint32, uint64 types is not supported, attempted to promote "
            f"{_C10_NAMES[a.name]} and {_C10_NAMES[b.name]}"
        )
    if ca == cb or {ca, cb} == {2, 3}:
        out: np.dtype[Any] = np.promote_types(a, b)
        return out
    return a if ca > cb else b


def can_cast(from_: Any, to: Any) -> bool:
    """Whether torch's casting rules allow ``from_`` to ``to`` in a type-checked op: no cast
    down a category (complex to real, floating to integer, anything but bool to bool)."""
    f, t = to_dtype(from_), to_dtype(to)
    cf, ct = _category(f), _category(t)
    return not (cf == 3 and ct != 3) and not (cf == 2 and ct < 2) and not (cf > 0 and ct == 0)


def _wrapped_dtype(x: Any) -> np.dtype[Any]:
    """The dtype a Python number takes in torch's promotion (floats the default dtype)."""
    if isinstance(x, bool):
        return bool_
    if isinstance(x, int):
        return int64
    if isinstance(x, float):
        return _default_float[0]
    if isinstance(x, complex):
        return np.dtype("complex128") if _default_float[0] == float64 else np.dtype("complex64")
    raise TypeError(f"result_type(): expected a Tensor or a Number, got {type(x).__name__}")


def _combine(higher: np.dtype[Any] | None, lower: np.dtype[Any] | None) -> np.dtype[Any] | None:
    """torch's ``combine_categories``: ``higher`` (from the higher-priority operands) decides,
    unless ``lower`` is of a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.kind == "c":
        return higher
    if lower.kind == "c":
        if higher.kind == "f":
            return np.dtype("complex128") if higher == float64 else np.dtype("complex64")
        return lower
    if higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return promote_types(higher, lower)
    return higher


def result_type(tensor: Any, other: Any) -> np.dtype[Any]:
    """The dtype torch's arithmetic gives ``tensor`` and ``other`` (tensors or Python numbers):
    tensors with dimensions decide first, then 0-d tensors, then Python numbers, each of the
    later ones only where it is of a higher category (See ``promote_types``)."""
    ranks: list[np.dtype[Any] | None] = [None, None, None]  # dimensioned, 0-d, wrapped numbers
    for x in (tensor, other):
        if hasattr(x, "dtype") and hasattr(x, "ndim"):
            slot, d = (0 if x.ndim else 1), to_dtype(x.dtype)
        else:
            slot, d = 2, _wrapped_dtype(x)
        prev = ranks[slot]
        ranks[slot] = d if prev is None else promote_types(prev, d)
    out = _combine(ranks[0], _combine(ranks[1], ranks[2]))
    assert out is not None
    return out


# ----- layouts and memory formats -----
# NOTE [Layouts and memory formats]
# asyncgrad's tensors are all dense and strided; a memory format changes only how torch lays out
# a tensor's bytes, never its values or its indexing. The objects exist for code that names them
# (``x.contiguous(memory_format=torch.channels_last)``, ``layout=torch.strided``), and the
# functions that accept them compute the same values whichever is given.
class layout:  # torch's name
    """The type of ``ag.strided`` (and ``ag.sparse_coo``, which asyncgrad's ops do not take)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"torch.{self._name}"

    def __reduce__(self) -> str:
        return self._name  # pickled by name: the module's object of that name


class memory_format:  # torch's name
    """The type of ``ag.contiguous_format``, ``preserve_format``, ``channels_last`` and
    ``channels_last_3d`` (See NOTE [Layouts and memory formats])."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"torch.{self._name}"

    def __reduce__(self) -> str:
        return self._name


strided: Final = layout("strided")
sparse_coo: Final = layout("sparse_coo")
contiguous_format: Final = memory_format("contiguous_format")
preserve_format: Final = memory_format("preserve_format")
channels_last: Final = memory_format("channels_last")
channels_last_3d: Final = memory_format("channels_last_3d")
