"""Array backends and devices: the one place that picks NumPy (and, later, CuPy) for an array."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, Final, ParamSpec, TypeVar

import numpy as np

__all__ = ["CPU", "Device", "device", "get_array_module", "quiet_fp", "restore_fp", "silent_fp"]


class Device:
    """A compute device: ``cpu`` or ``cuda:N``. Instances are interned, so ``is`` compares them."""

    __slots__ = ("index", "type")
    _cache: ClassVar[dict[tuple[str, int | None], Device]] = {}

    type: str
    index: int | None

    def __new__(cls, spec: str | Device | None = None, index: int | None = None) -> Device:
        if isinstance(spec, Device):
            return spec
        if spec is None:
            spec = "cpu"
        if not isinstance(spec, str):
            raise TypeError(f"device must be a string like 'cpu' or 'cuda:0', got {spec!r}")
        kind, _, num = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise RuntimeError(
                f"Expected one of cpu, cuda device type at start of device string: {spec}"
            )
        if num:
            if not num.isdigit():
                raise RuntimeError(f"Invalid device string: '{spec}'")
            index = int(num)
        if kind == "cpu":
            index = None
        elif index is None:
            index = 0
        key = (kind, index)
        dev = cls._cache.get(key)
        if dev is None:
            dev = object.__new__(cls)
            object.__setattr__(dev, "type", kind)
            object.__setattr__(dev, "index", index)
            cls._cache[key] = dev
        return dev

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Device is immutable")

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except (RuntimeError, TypeError):
                return False
        return self is other

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (str(self),))


device = Device
CPU: Final = Device("cpu")


def get_array_module(array: Any) -> Any:
    """The array namespace (``numpy`` or ``cupy``) that owns ``array``."""
    if type(array) is np.ndarray:
        return np
    mod = type(array).__module__
    if mod.startswith("cupy"):
        import cupy

        return cupy
    return np


def device_of(array: Any) -> Device:
    if type(array) is np.ndarray:
        return CPU
    dev = getattr(array, "device", None)
    if dev is not None and type(array).__module__.startswith("cupy"):
        return Device("cuda", int(dev.id))
    return CPU


def to_device(array: Any, dev: Device) -> Any:
    if dev.type == "cpu":
        if type(array) is np.ndarray:
            return array
        return array.get()
    import cupy

    with cupy.cuda.Device(dev.index):
        return cupy.asarray(array)


# NOTE [Silent floating point]
# torch computes with infinities and NaNs silently (log(0) is -inf, 0/0 is NaN, exp(800) is inf);
# NumPy warns about them ("divide by zero", "invalid value", "overflow"). So the forward ops, the
# backward rules (FunctionNode.apply) and the sums of gradients run with NumPy's floating-point
# errors ignored, between ``token = quiet_fp()`` and ``restore_fp(token)`` (in a ``finally``), or
# decorated with ``silent_fp`` where one more call does not matter.
# np.errstate(all="ignore") would do the same, but it adds about 1.7 us to a backward node that
# otherwise takes about 3.2 us (a chain of small elementwise ops). Since NumPy 2 the error state
# is a context variable (thread- and task-local), and setting and resetting it directly costs
# about 0.15 to 0.3 us (some 2,000 instructions). NumPy 1 has no such variable: there the two
# functions use np.errstate. CuPy does not warn about floating-point errors.
quiet_fp: Callable[[], Any]
restore_fp: Callable[[Any], Any]
try:
    from numpy._core._ufunc_config import (  # type: ignore[attr-defined]
        _extobj_contextvar,
        _make_extobj,
    )
except ImportError:  # pragma: no cover - NumPy 1

    def quiet_fp() -> Any:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def restore_fp(token: Any) -> Any:
        return token.__exit__(None, None, None)

else:
    quiet_fp = functools.partial(_extobj_contextvar.set, _make_extobj(all="ignore"))
    restore_fp = _extobj_contextvar.reset


_P = ParamSpec("_P")
_R = TypeVar("_R")


def silent_fp(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` run between ``quiet_fp()`` and ``restore_fp()``: see NOTE [Silent floating point]."""

    @functools.wraps(fn)
    def silent(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        token = quiet_fp()
        try:
            return fn(*args, **kwargs)
        finally:
            restore_fp(token)

    return silent
