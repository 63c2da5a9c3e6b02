"""Tensor factories and random number generation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import Device
from ..backend import _default_device as _default_device_var
from ._record import arr, as_array, wrap
from .convert import to


class Generator:
    """A random number generator, for the ``generator=`` arguments of the random factories."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = Device(device)
        self._seed: int | None = None
        self._rng = backend.RandomState()
        # A generator per CUDA device, drawing there (made on first use, from the same seed).
        self._devices: dict[Device, backend.RandomState] = {}

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self._rng = backend.RandomState(self._seed)
        self._devices.clear()
        return self

    def state(self, device: Device | None) -> backend.RandomState:
        """The generator that draws on ``device`` (None: this generator's own device)."""
        dev = self.device if device is None else device
        if dev.type == "cpu":
            return self._rng
        rng = self._devices.get(dev)
        if rng is None:
            rng = self._devices[dev] = backend.RandomState(self._seed, dev)
        return rng


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator used by ``rand``, ``randn``, ``randint`` and ``dropout``."""
    return default_generator.manual_seed(int(seed))


def _size(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


_default_device = _default_device_var.get


def _device(device: Any) -> Device | None:
    return _default_device() if device is None else Device(device)


def _finish(array: Any, device: Any, requires_grad: bool) -> Tensor:
    t = wrap(backend.on_device(array, _device(device)))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _dt(dtype: Any, default: Any = dtypes.float32) -> Any:
    return dtypes.to_dtype(default if dtype is None else dtype)


def tensor(
    data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A new tensor holding a copy of ``data``."""
    return _finish(as_array(data, dtype).copy(), device, requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    if isinstance(data, Tensor):
        return to(data, *(a for a in (device, dtype) if a is not None))
    return _finish(as_array(data, dtype), device, False)


def from_numpy(a: Any) -> Tensor:
    if type(a) is not backend.ndarray and not isinstance(a, backend.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(a).__name__})")
    return wrap(a)


def from_dlpack(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return wrap(backend.from_dlpack(x))


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(backend.zeros(_size(size), _dt(dtype), _device(device)), None, requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(backend.ones(_size(size), _dt(dtype), _device(device)), None, requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(backend.empty(_size(size), _dt(dtype), _device(device)), None, requires_grad)


def full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    if dtype is None:
        dtype = (
            dtypes.bool_
            if isinstance(fill_value, bool)
            else dtypes.int64
            if isinstance(fill_value, int)
            else dtypes.float32
        )
    a = backend.full(_size((size,)), fill_value, dtypes.to_dtype(dtype))
    return _finish(a, device, requires_grad)


def _like(input: Any, fill: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    a = arr(input)
    dt = a.dtype if dtype is None else dtypes.to_dtype(dtype)
    dev = backend.device_of(a) if device is None else Device(device)
    return _finish(backend.full(a.shape, fill, dt, dev), None, requires_grad)


def zeros_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    return _like(input, 0, dtype, device, requires_grad)


def ones_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    return _like(input, 1, dtype, device, requires_grad)


def full_like(
    input: Tensor,
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _like(input, fill_value, dtype, device, requires_grad)


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        is_int = all(isinstance(v, (int, backend.integer)) for v in (start, end, step))
        dtype = dtypes.int64 if is_int else dtypes.float32
    a = backend.arange(start, end, step, dtypes.to_dtype(dtype))
    return _finish(a, device, requires_grad)


def linspace(
    start: float,
    end: float,
    steps: int,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _finish(backend.linspace(start, end, steps, _dt(dtype)), device, requires_grad)


def eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _finish(backend.eye(n, m, _dt(dtype)), device, requires_grad)


def rand(
    *size: Any,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    rng = (generator or default_generator).state(_device(device))
    return _finish(rng.random(_size(size), _dt(dtype)), device, requires_grad)


def randn(
    *size: Any,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    rng = (generator or default_generator).state(_device(device))
    return _finish(rng.normal(_size(size), _dt(dtype)), device, requires_grad)


def randint(
    low: int,
    high: int | None = None,
    size: Sequence[int] = (),
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    if high is None:
        low, high = 0, low
    rng = (generator or default_generator).state(_device(device))
    a = rng.integers(low, high, tuple(size))
    if dtype is not None:
        a = a.astype(dtypes.to_dtype(dtype), copy=False)
    return _finish(a, device, False)
