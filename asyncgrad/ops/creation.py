"""Tensor factories and random number generation."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Final

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import Device, silent_fp
from ..backend import _default_device as _default_device_var
from ._record import arr, as_array, wrap
from .convert import _check_layout, to


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


def _dt(dtype: Any, default: Any = None) -> Any:
    # No default: the default floating dtype (See NOTE [Default dtype] in asyncgrad/dtypes.py).
    if dtype is None:
        return dtypes.get_default_dtype() if default is None else default
    return dtypes.to_dtype(dtype)


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


def zeros(
    *size: Any,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
    memory_format: Any = None,
) -> Tensor:
    _check_layout(layout, memory_format)
    return _finish(backend.zeros(_size(size), _dt(dtype), _device(device)), None, requires_grad)


def ones(
    *size: Any,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
    memory_format: Any = None,
) -> Tensor:
    _check_layout(layout, memory_format)
    return _finish(backend.ones(_size(size), _dt(dtype), _device(device)), None, requires_grad)


def empty(
    *size: Any,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
    memory_format: Any = None,
) -> Tensor:
    _check_layout(layout, memory_format)
    return _finish(backend.empty(_size(size), _dt(dtype), _device(device)), None, requires_grad)


def full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
) -> Tensor:
    _check_layout(layout, None)
    if dtype is None:
        dtype = (
            dtypes.bool_
            if isinstance(fill_value, bool)
            else dtypes.int64
            if isinstance(fill_value, int)
            else dtypes.get_default_dtype()
        )
    a = backend.full(_size((size,)), fill_value, dtypes.to_dtype(dtype))
    return _finish(a, device, requires_grad)


def _like(input: Any, fill: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    a = arr(input)
    dt = a.dtype if dtype is None else dtypes.to_dtype(dtype)
    dev = backend.device_of(a) if device is None else Device(device)
    return _finish(backend.full(a.shape, fill, dt, dev), None, requires_grad)


def zeros_like(
    input: Tensor,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
    memory_format: Any = None,
) -> Tensor:
    _check_layout(layout, memory_format)
    return _like(input, 0, dtype, device, requires_grad)


def ones_like(
    input: Tensor,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
    memory_format: Any = None,
) -> Tensor:
    _check_layout(layout, memory_format)
    return _like(input, 1, dtype, device, requires_grad)


def full_like(
    input: Tensor,
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
    memory_format: Any = None,
) -> Tensor:
    _check_layout(layout, memory_format)
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
    _check_range(start, end, step)
    if dtype is None:
        is_int = all(isinstance(v, (int, backend.integer)) for v in (start, end, step))
        dtype = dtypes.int64 if is_int else dtypes.get_default_dtype()
    a = backend.arange(start, end, step, dtypes.to_dtype(dtype))
    return _finish(a, device, requires_grad)


def _check_range(start: Any, end: Any, step: Any) -> None:
    """torch's checks on arange's bounds and step, in torch's order and with its messages."""
    lo, hi, by = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    if by == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"unsupported range: {lo} -> {hi}")
    if not ((by > 0 and hi >= lo) or (by < 0 and hi <= lo)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")


def linspace(
    start: float,
    end: float,
    steps: int,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    _check_steps("linspace", start, end, steps)
    start, end = _bound(start, "start"), _bound(end, "end")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    return _finish(backend.linspace(start, end, steps, _dt(dtype)), device, requires_grad)


def _check_steps(name: str, start: Any, end: Any, steps: Any) -> None:
    """torch's TypeError for a ``steps`` that is no integer (a float, say)."""
    if not isinstance(steps, (int, backend.integer, Tensor)):
        got = ", ".join(type(v).__name__ for v in (start, end, steps))
        raise TypeError(
            f"{name}() received an invalid combination of arguments - got ({got}), but expected "
            "(start, end, int steps)"
        )


def _bound(v: Any, name: str) -> Any:
    """A number, or the value of a 0-d tensor (torch's linspace and logspace take either)."""
    if isinstance(v, Tensor):
        if v.ndim != 0:
            raise RuntimeError(
                f"linspace only supports 0-dimensional start and end tensors, but got {name} with "
                f"{v.ndim} dimension(s)."
            )
        return v.item()
    return v


def logspace(
    start: Any,
    end: Any,
    steps: int,
    base: float = 10.0,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """``steps`` values from ``base ** start`` to ``base ** end``, evenly spaced in exponent."""
    _check_steps("logspace", start, end, steps)
    start, end = _bound(start, "start"), _bound(end, "end")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    exps = backend.linspace(start, end, steps, dtypes.float64)
    dt = _dt(dtype)
    vals = (float(base) ** exps).astype(dt)
    return _finish(vals, device, requires_grad)


def range_(
    start: Any,
    end: Any,
    step: Any = 1,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """torch's deprecated ``range``: ``start`` to ``end`` *inclusive*, in the default float
    dtype unless given."""
    warnings.warn(
        "torch.range is deprecated and will be removed in a future release because its behavior "
        "is inconsistent with Python's range builtin. Instead, use torch.arange, which produces "
        "values in [start, end).",
        UserWarning,
        stacklevel=2,
    )
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (step > 0 and start > end + 0.0) or (step < 0 and start < end):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    n = math.floor((end - start) / step) + 1
    dt = _dt(dtype)
    vals = (backend.arange(0, n, 1, dtypes.float64) * step + start).astype(dt)
    return _finish(vals, device, requires_grad)


def empty_like(
    input: Tensor,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    memory_format: Any = None,
) -> Tensor:
    """An uninitialised tensor with ``input``'s shape, dtype and device unless given."""
    _check_layout(layout, memory_format)
    dt = input.dtype if dtype is None else dtypes.to_dtype(dtype)
    dev = input.device if device is None else Device(device)
    return _finish(backend.empty(tuple(input.shape), dt, dev), None, requires_grad)


def empty_strided(
    size: Sequence[int],
    stride: Sequence[int],
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
) -> Tensor:
    """An uninitialised tensor of ``size`` laid out with ``stride`` (in elements)."""
    sz, st = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    if len(sz) != len(st):
        raise RuntimeError(
            f"mismatch in length of strides and shape: {len(st)} strides for {len(sz)} sizes"
        )
    need = 0 if 0 in sz else 1 + sum((n - 1) * s for n, s in zip(sz, st, strict=True))
    dt = _dt(dtype)
    storage = backend.empty((need,), dt, _device(device))
    xp = backend.namespace(storage)
    out = xp.lib.stride_tricks.as_strided(storage, sz, tuple(s * dt.itemsize for s in st))
    return _finish(out, None, requires_grad)


def empty_permuted(
    size: Sequence[int],
    physical_layout: Sequence[int],
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
) -> Tensor:
    """An uninitialised tensor of ``size`` whose dims lie in memory in the order
    ``physical_layout`` (outermost first)."""
    sz, order = tuple(int(v) for v in size), tuple(int(v) for v in physical_layout)
    if sorted(order) != list(range(len(sz))):
        raise RuntimeError(
            f"Number of dimensions in size does not match the length of the physical_layout; or "
            f"physical_layout is not a permutation: {list(order)}"
        )
    a = backend.empty(tuple(sz[d] for d in order), _dt(dtype), _device(device))
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return _finish(a.transpose(inverse), None, requires_grad)


def scalar_tensor(
    s: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A 0-d tensor holding ``s``, in the default float dtype unless given."""
    return _finish(backend.asarray(s).astype(_dt(dtype)), device, requires_grad)


def asarray(
    obj: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    copy: bool | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """``obj`` as a tensor, sharing memory with a tensor or array when dtype and device allow
    (``copy=True``: always a copy; ``copy=False``: an error where one is needed)."""
    if isinstance(obj, Tensor):
        out = obj
        if device is not None and Device(device) != obj.device:
            out = to(out, Device(device))
        if dtype is not None and dtypes.to_dtype(dtype) != out.dtype:
            out = to(out, dtypes.to_dtype(dtype))
        if copy is False and out is not obj:
            raise ValueError("can't alias tensor: a copy is needed for this dtype or device")
        if copy:
            out = wrap(out._array.copy())
        if requires_grad:
            out.requires_grad_(True)
        return out
    if backend.is_array(obj) or hasattr(obj, "__array_interface__"):
        a = backend.asarray(obj)
        shared = dtype is None or dtypes.to_dtype(dtype) == a.dtype
        if copy is False and not shared:
            raise ValueError("can't alias the array: a copy is needed for this dtype")
        if dtype is not None:
            a = a.astype(dtypes.to_dtype(dtype), copy=bool(copy))
        elif copy:
            a = a.copy()
        return _finish(a, device, requires_grad)
    if copy is False:
        raise ValueError(f"can't alias a {type(obj).__name__}: it is not an array")
    return _finish(as_array(obj, dtype), device, requires_grad)


def frombuffer(
    buffer: Any,
    *,
    dtype: Any,
    count: int = -1,
    offset: int = 0,
    requires_grad: bool = False,
) -> Tensor:
    """A 1-d tensor sharing the memory of ``buffer`` (an object with the buffer protocol):
    ``count`` elements of ``dtype`` from byte ``offset`` (all that fit: ``count=-1``)."""
    raw = backend.asarray(memoryview(buffer).cast("B"))
    dt = dtypes.to_dtype(dtype)
    n = raw.shape[0]
    if n <= 0:
        raise ValueError(f"both buffer length ({n}) and count ({count}) must not be 0")
    if not 0 <= offset < n:
        raise ValueError(
            f"offset ({offset} bytes) must be non-negative and no greater than buffer length "
            f"({n} bytes) minus 1"
        )
    if count < 0:
        if (n - offset) % dt.itemsize:
            raise ValueError(
                f"buffer length ({n - offset} bytes) after offset ({offset} bytes) must be a "
                f"multiple of element size ({dt.itemsize})"
            )
        count = (n - offset) // dt.itemsize
    elif count == 0 or offset + count * dt.itemsize > n:
        raise ValueError(
            f"requested buffer length ({count} * {dt.itemsize} bytes) after offset ({offset} "
            f"bytes) must not be greater than actual buffer length ({n} bytes)"
        )
    out = raw[offset : offset + count * dt.itemsize].view(dt)
    return _finish(out, None, requires_grad)


# ----- tensor facts at torch level -----
def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def is_storage(obj: Any) -> bool:
    """False: asyncgrad has no storage objects."""
    return False


def is_floating_point(input: Tensor) -> bool:
    return input.is_floating_point()


def is_nonzero(input: Tensor) -> bool:
    """The truth of ``input``'s single element."""
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item())


def is_same_size(input: Tensor, other: Tensor) -> bool:
    return tuple(input.shape) == tuple(other.shape)


def numel(input: Tensor) -> int:
    return input.numel()


def eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m is not None and m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    return _finish(backend.eye(n, m, _dt(dtype)), device, requires_grad)


def rand(
    *size: Any,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
) -> Tensor:
    _check_layout(layout, None)
    rng = (generator or default_generator).state(_device(device))
    return _finish(rng.random(_size(size), _dt(dtype)), device, requires_grad)


def randn(
    *size: Any,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    layout: Any = None,
    pin_memory: bool = False,
) -> Tensor:
    _check_layout(layout, None)
    rng = (generator or default_generator).state(_device(device))
    return _finish(rng.normal(_size(size), _dt(dtype)), device, requires_grad)


def randint(
    *args: Any,
    size: Sequence[int] | None = None,
    low: int | None = None,
    high: int | None = None,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """Integers drawn uniformly from ``[low, high)``, torch's two forms: ``randint(high, size)``
    and ``randint(low, high, size)`` (each argument also by name; ``low`` defaults to 0)."""
    pos = list(args)
    if pos and not isinstance(pos[-1], (int, backend.integer)):
        if size is not None:
            raise TypeError("randint() got multiple values for argument 'size'")
        size = pos.pop()
    if len(pos) > 2 or (len(pos) == 2 and (low is not None or high is not None)):
        raise TypeError(f"randint() takes high or low, high, then size; got {args!r}")
    if len(pos) == 2:
        low, high = pos
    elif len(pos) == 1:
        if high is None:
            high = pos[0]
        elif low is None:
            low = pos[0]
        else:
            raise TypeError("randint() got multiple values for argument 'low'")
    if high is None:
        raise TypeError("randint() missing required argument 'high'")
    if size is None:
        raise TypeError("randint() missing required argument 'size' (a tuple of ints)")
    if isinstance(size, (int, backend.integer)):
        raise TypeError(
            f"randint(): argument 'size' must be tuple of ints, not int (got {size}); "
            "write randint(high, (n,)) or randint(low, high, (n,))"
        )
    lo = 0 if low is None else int(low)
    if lo >= int(high):
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={int(high)}"
        )
    rng = (generator or default_generator).state(_device(device))
    a = rng.integers(lo, int(high), tuple(size))
    if dtype is not None:
        a = a.astype(dtypes.to_dtype(dtype), copy=False)
    return _finish(a, device, requires_grad)


# ----- randperm, multinomial -----
# NOTE [Permutations and samples from uniform draws]
# randperm and multinomial draw uniform floats from the generator (so they follow its seed on
# every device) and turn them into the result with array ops: a permutation is the order of n
# uniform keys; sampling without replacement takes the categories with the smallest exponential
# keys -log(u) / p (each next pick then has probability proportional to p among those left);
# sampling with replacement inverts the cumulative distribution.
def randperm(
    n: int,
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    n = int(n)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    rng = (generator or default_generator).state(_device(device))
    keys = rng.random((n,), dtypes.float64)
    perm = backend.namespace(keys).argsort(keys)
    return _finish(perm.astype(_dt(dtype, dtypes.int64), copy=False), device, requires_grad)


@silent_fp  # See NOTE [Silent floating point]
def multinomial(
    input: Tensor,
    num_samples: int,
    replacement: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """``num_samples`` category indices per row of ``input`` (1-D or 2-D, non-negative weights
    that need not sum to 1), drawn from ``generator``: int64, on input's device."""
    pa = input._array
    if pa.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not dtypes.is_floating(pa.dtype):
        raise RuntimeError(
            f"multinomial only supports floating-point dtypes for input, got: "
            f"{scalar_name(pa.dtype)}"
        )
    num_samples = int(num_samples)
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n = pa.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
        )
    xp = backend.namespace(pa)
    p = pa.astype(dtypes.float64).reshape(-1, n)
    if not bool(xp.isfinite(p).all()) or bool((p < 0).any()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    total = p.sum(axis=1, keepdims=True)
    if bool((total <= 0).any()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    rng = (generator or default_generator).state(backend.device_of(pa))
    rows = p.shape[0]
    if replacement:
        cdf = xp.cumsum(p / total, axis=1)
        u = rng.random((rows, num_samples), dtypes.float64)
        picks = (cdf[:, None, :] <= u[:, :, None]).sum(axis=2)
        out = xp.minimum(picks, n - 1)
    else:
        u = rng.random((rows, n), dtypes.float64)
        keys = -xp.log1p(-u) / p  # exponential(1) / p; inf where p == 0
        out = xp.argsort(keys, axis=1)[:, :num_samples]
    out = out.astype(dtypes.int64, copy=False)
    return wrap(out.reshape(num_samples) if pa.ndim == 1 else out)


_SCALAR_NAMES: Final = {
    "float16": "Half",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "uint8": "Byte",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "bool": "Bool",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}


def scalar_name(dt: Any) -> str:
    """torch's name of a dtype in its messages ("Float", "Long")."""
    return _SCALAR_NAMES.get(str(dt), str(dt))
