"""Array backends and devices: the one place that picks NumPy (and, later, CuPy) for an array.

Every other module reaches arrays through this one: ``namespace(a)`` is the array module that owns
``a`` (``numpy`` or ``cupy``), so one piece of code serves every device; allocation takes a device.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, ClassVar, Final, ParamSpec, TypeVar

import numpy as np

__all__ = [
    "CPU",
    "Device",
    "device",
    "device_of",
    "ensure_array",
    "erf",
    "namespace",
    "ndarray",
    "quiet_fp",
    "restore_fp",
    "silent_fp",
    "to_device",
    "windows",
]

# The CPU array type; ``type(a) is ndarray`` is the cheapest test on the hot path.
ndarray: Final = np.ndarray
# Scalar types that arrive as op arguments besides Python numbers.
generic: Final = np.generic
integer: Final = np.integer
bool_scalar: Final = np.bool_
newaxis: Final = None


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

    # Interned, so equal devices are one object: the identity hash (in C: a device keys the
    # engine's dicts on every backward).
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (str(self),))

    def __enter__(self) -> Device:
        """``with ag.device("cuda"):``: factories without ``device=`` make tensors here."""
        _default_stack.set((*_default_stack.get(), _default_device.get()))
        _default_device.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _default_stack.get()
        _default_device.set(stack[-1])
        _default_stack.set(stack[:-1])


# The device of new tensors whose factory names none (None: the CPU), per context, so a task
# or thread that sets it affects only itself.
_default_device: ContextVar[Device | None] = ContextVar("asyncgrad_default_device", default=None)
_default_stack: ContextVar[tuple[Device | None, ...]] = ContextVar(
    "asyncgrad_default_device_stack", default=()
)


def get_default_device() -> Device:
    return _default_device.get() or CPU


def set_default_device(device: Any) -> None:
    """Make ``device`` (None: the CPU) where factories put tensors when given no ``device=``,
    in this context (this thread, or this task and the tasks it starts)."""
    _default_device.set(None if device is None else Device(device))


device = Device
CPU: Final = Device("cpu")


# Device array types (``cupy.ndarray``, the simulator's) and their namespaces, registered when
# the CUDA runtime loads (backend/cuda.py): until then every array is a NumPy array.
_device_types: dict[type, Any] = {}


def _register_device_array(cls: type, module: Any) -> None:
    _device_types[cls] = module


def namespace(array: Any) -> Any:
    """The array namespace (``numpy``, ``cupy`` or the simulator) that owns ``array``.

    A Tensor (under ``create_graph``, see NOTE [Rules are NumPy]) and a Python number get NumPy,
    whose functions dispatch to Tensor's ``__array_ufunc__``/``__array_function__``.
    """
    if type(array) is np.ndarray:
        return np
    return _device_types.get(type(array), np)


def is_device_array(value: Any) -> bool:
    return type(value) in _device_types


def ensure_array(value: Any) -> Any:
    """``value`` as an array: NumPy arithmetic on 0-d arrays returns scalars; gradients and tensor
    data must stay arrays (See NOTE [0-d gradients])."""
    if type(value) is np.ndarray or type(value) in _device_types:
        return value
    return np.asarray(value)


def asarray(data: Any, dtype: Any = None) -> Any:
    """An array for ``data`` (no copy when it already is one of that dtype)."""
    if type(data).__module__.startswith("cupy") and type(data) not in _device_types:
        cuda.require(None)  # a CuPy array made before asyncgrad first used CUDA
    if type(data) in _device_types:
        return data if dtype is None else data.astype(dtype, copy=False)
    return np.asarray(data, dtype=dtype)


def scalar(value: Any, dtype: Any) -> Any:
    """``value`` as a NumPy scalar of ``dtype`` (an operand every array namespace accepts)."""
    return np.dtype(dtype).type(value)


def is_array(value: Any) -> bool:
    return type(value) is np.ndarray or type(value) in _device_types


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


def shares_base(a: Any, b: Any) -> bool:
    """Whether two arrays view the same allocation."""
    ab = a if a.base is None else a.base
    bb = b if b.base is None else b.base
    return ab is bb


def writable(a: Any) -> Any:
    """``a``, or a copy of it where it is a read-only host array: a tensor's array is writable
    unless its elements overlap (See overlaps_itself), and an array unpickled out of shared
    memory (Ray's object store, pickle protocol 5's out-of-band buffers) is read-only."""
    if type(a) is np.ndarray and not a.flags.writeable:
        return a.copy()
    return a


def overlaps_itself(a: Any) -> bool:
    """Whether several elements of ``a`` share one memory location (a broadcast view): writing
    into it would be ill-defined. An empty array has none (NumPy gives it zero strides)."""
    if a.size == 0:
        return False
    if type(a) is np.ndarray:
        return not a.flags.writeable
    return any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape, strict=True))


# NOTE [Small-array fast paths]
# On a small array NumPy's Python-level wrappers cost more than the arithmetic: a backward node
# of a request-sized MLP (8 x 64 float32) spends most of its time in them. Three are replaced:
#   - ``broadcast_to`` builds an nditer to check its arguments (about 9 us to expand the
#     gradient of a full sum); a one-element array is expanded by a zero-stride view over its
#     memory instead (about 2.5 us), read-only as broadcast_to's is (See overlaps_itself);
#   - masking a gradient (``where(keep, g, 0)``): up to MASK_WHERE_MAX elements ``where`` costs
#     about a third of ``g * keep`` plus the finiteness check that makes the product exact;
#     beyond, ``where`` falls far behind (1.3 ms against 0.14 ms at 256 x 1024);
#   - the product of two 2-D arrays (``mm``) goes through ``ndarray.dot``, which calls BLAS
#     directly, rather than ``@``, whose generalized-ufunc dispatch costs more than the product
#     itself at request sizes: float32 8 x 32 by a transposed 64 x 32 weight, 1.9 against
#     2.7 us; 8 x 64 by 64 x 32, 1.2 against 2.0 us.
MASK_WHERE_MAX: Final = 2048


def mm(a: Any, b: Any) -> Any:
    """``a @ b``: through ``ndarray.dot`` for two small 2-D NumPy arrays (See NOTE [Small-array
    fast paths] and NOTE [The GIL in a product]), as the transposed product for a few float32
    rows by a transposed weight (See NOTE [A few rows by a transposed weight]); larger products,
    arrays of other ranks, CuPy arrays and Tensors (under create_graph) take ``@``."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2:
        if a.size * b.shape[1] > NT_SWAP_MIN_WORK and _swap_nt(a, b):
            return np.ascontiguousarray(np.matmul(b.T, a.T).T)
        if a.shape[0] * b.shape[1] <= DOT_MAX_OUT:
            return a.dot(b)
        if a.shape[1] == 1:  # an outer product, the same products as BLAS's
            return np.multiply(a, b)
    return a @ b


# NOTE [The GIL in a product]
# ``ndarray.dot`` zeroes its output with ``memset`` before it releases the GIL for BLAS; the
# product's own time runs without it. On a fresh allocation that memset is the first touch of
# every page, and the kernel's page faults then run with the GIL held: 39-62 ms for the 18 MB
# of a 1500 x 1500 float64 output on a 2-core VM, against 1 ms once the allocator reuses the
# memory. A compute thread's forward then held the loop that long at the start of each product
# (``await ag.run(heavy)`` with six such products: a longest gap of 21-66 ms, where NumPy's
# ``@`` in ``asyncio.to_thread`` left 3-5 ms). ``@`` (the matmul ufunc) allocates without
# touching and releases the GIL before its loop, so the pages are faulted in without it. So
# ``dot`` serves only outputs of up to DOT_MAX_OUT elements (256 kB of float64, where the
# first touch is a fraction of a millisecond and ``dot``'s cheaper dispatch still counts).
# One shape ``@`` serves badly: an inner dimension of 1 (an outer product, a one-row weight
# gradient) takes its loop without BLAS, 315 against 46 us for 256 x 1 by 1 x 784 float32;
# there the broadcast product ``a * b``, a ufunc that releases the GIL too, computes the same
# products (52 us).
DOT_MAX_OUT: Final = 1 << 15


# NOTE [A few rows by a transposed weight]
# A linear layer's forward is ``x @ w.T``: a C-ordered batch of rows by a transposed weight (so
# is the input gradient of a matmul, ``g @ y.T``). NumPy hands that to BLAS as it is, and the
# OpenBLAS that NumPy's wheels bundle is slow on it for float32 with a few rows: from about
# 64**3 multiply-adds on, it leaves its small-matrix path for a general one that takes 1.5-2.8
# times as long as the same product written the other way round, ``(w @ x.T).T`` (single BLAS
# thread, 2-core VM): 8 x 256 by 256 x 256, 52 against 28 us; 32 x 1024 by 1024 x 1024, 1.27
# against 0.82 ms (PyTorch's linear: 1.13 ms), with the result copied back to C order (a few
# percent of the product). For that case, then, mm computes the transposed product: float32,
# 2 to NT_SWAP_MAX_ROWS rows, at least NT_SWAP_MIN_COLS output columns, over NT_SWAP_MIN_WORK
# multiply-adds. Beyond 32 rows the two orders draw level (64 rows) and then the usual one wins
# (up to 2.6 times at 512 rows); with fewer columns (a 10-class head) or for float64, the swap
# gains little or loses. The two orders round differently in the last bits, as any two BLAS
# kernels do, but the choice depends on the shapes alone, so a computation repeats exactly.
NT_SWAP_MIN_WORK: Final = 64**3
NT_SWAP_MAX_ROWS: Final = 32
NT_SWAP_MIN_COLS: Final = 64
_F32: Final = np.dtype(np.float32)


def _swap_nt(a: Any, b: Any) -> bool:
    """Whether ``a @ b`` is the case of NOTE [A few rows by a transposed weight]."""
    return (
        2 <= a.shape[0] <= NT_SWAP_MAX_ROWS
        and b.shape[1] >= NT_SWAP_MIN_COLS
        and a.dtype is _F32
        and b.dtype is _F32
        and a.flags.c_contiguous
        and b.T.flags.c_contiguous
    )


def broadcast_to(a: Any, shape: tuple[int, ...]) -> Any:
    """A read-only view of ``a`` broadcast to ``shape`` (See NOTE [Small-array fast paths])."""
    if type(a) is np.ndarray and a.size == 1 and a.ndim <= len(shape):
        v = np.ndarray(shape, a.dtype, buffer=a, strides=(0,) * len(shape))
        v.flags.writeable = False
        return v
    return np.broadcast_to(a, shape)


def masked(g: Any, keep: Any) -> Any:
    """``g`` where boolean ``keep``, else 0, as torch's ``where(keep, g, 0)``: 0 also where ``g``
    is inf or NaN. For arrays and Tensors (create_graph) alike (See NOTE [Small-array fast
    paths])."""
    if type(g) is np.ndarray:
        if g.size > MASK_WHERE_MAX:
            r = g * keep
            if np.isfinite(r).all():
                return r
        dt = g.dtype
        z = _zeros_by_num.get(dt.num)
        return np.where(keep, g, _zero_of(dt) if z is None else z)
    return np.where(keep, g, 0.0)


# A read-only 0-d zero per floating dtype, which ``where`` takes as it is: given the Python
# float 0.0 it first works out what array that is (about 3,000 machine instructions, a sixth of a
# small masking). Keyed by the dtype's number, as hashing a dtype costs NumPy more than that
# lookup saves; the two byte orders of a dtype share a number and so a zero, and ``where`` gives
# the same result with either (tests/backend/test_fast_paths.py).
_zeros_by_num: dict[int, Any] = {}


def _zero_of(dt: Any) -> Any:
    """The 0 that masking a ``dt`` gradient puts where ``keep`` is False: a cached 0-d array
    for a floating dtype; the Python float 0.0 otherwise (it promotes integers to float, as
    ``where(keep, g, 0.0)`` always has)."""
    if dt.kind not in "fc":
        return 0.0
    z = np.zeros((), dt)
    z.flags.writeable = False
    _zeros_by_num[dt.num] = z
    return z


# NumPy 2.1 added reshape(..., copy=False), which raises where a view cannot be had; NumPy 2.5
# deprecates setting .shape, the way to ask that before.
_RESHAPE_HAS_COPY: Final = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 1)


def reshape_view(a: Any, shape: tuple[int, ...]) -> Any:
    """A view of ``a`` with ``shape``, or None when that needs a copy."""
    if type(a) is np.ndarray:
        if _RESHAPE_HAS_COPY:
            try:
                return a.reshape(shape, copy=False)
            except ValueError:
                return None
        out = a.view()
        try:
            out.shape = shape  # raises instead of copying
        except AttributeError:
            return None
        return out
    out = a.reshape(shape)
    return out if shares_base(out, a) else None


def can_cast(src: Any, dst: Any) -> bool:
    return bool(np.can_cast(src, dst, "same_kind"))


def copy_into(dst: Any, src: Any) -> None:
    namespace(dst).copyto(dst, src, casting="unsafe")


# NOTE [Arrays stay on their device]
# CuPy makes arrays and runs kernels on the current device, not on their operands' (See NOTE
# [Kernels run on the current device] in sim.py), so a copy, a ``*_like`` or an in-place write of
# an array of another device would land on, or fail on, the wrong one. The three below make and
# write arrays on the given array's own device, whatever device is current; on NumPy arrays, and
# with one device in use, they are the plain calls.
def copy(a: Any) -> Any:
    """A copy of ``a`` on its device."""
    return cuda.copy(a) if type(a) in _device_types else a.copy()


def full_like(a: Any, value: Any) -> Any:
    """An array of ``value`` with ``a``'s shape and dtype, on its device."""
    if type(a) in _device_types:
        return full(a.shape, value, a.dtype, device_of(a))
    return np.full_like(a, value)


def assign(dst: Any, src: Any) -> None:
    """``dst[...] = src`` on ``dst``'s device; ``src`` is a scalar, host values, or an array on
    any device (copied to ``dst``'s first)."""
    if type(src) in _device_types and device_of(src) is not device_of(dst):
        src = to_device(src, device_of(dst))
    prev = cuda.use_device_of(dst)
    dst[...] = src
    if prev >= 0:
        cuda.use_device(prev)


def allclose(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    return bool(namespace(a).allclose(a, b, rtol=rtol, atol=atol))


# DLPack's device type of CUDA memory.
DLPACK_CUDA: Final = 2


def from_dlpack(x: Any) -> Any:
    """An array viewing the memory of ``x`` (any DLPack exporter: a NumPy, CuPy or PyTorch
    array or tensor) without a copy: host memory becomes a NumPy array, CUDA memory a CuPy one."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None and dev()[0] == DLPACK_CUDA:
        rt = cuda.require(None)
        if cuda.simulated():
            raise RuntimeError("simulated CUDA devices cannot exchange memory through DLPack")
        return rt.from_dlpack(x)
    return np.from_dlpack(x)


# ----------------------------------------------------------------------------- allocation
def on_device(array: Any, device: Device | None) -> Any:
    """``array`` (made on the CPU) moved to ``device`` (None: left where it is)."""
    if device is None or device is CPU:
        return array
    return to_device(array, device)


def _alloc(fn: str, device: Device | None, *args: Any, **kwargs: Any) -> Any:
    """``numpy.<fn>(*args)`` made on ``device`` (on a CUDA device, allocated there directly)."""
    if device is None or device.type == "cpu":
        return getattr(np, fn)(*args, **kwargs)
    rt = cuda.require(device.index)
    with rt.cuda.Device(device.index):
        return getattr(rt, fn)(*args, **kwargs)


def zeros(shape: tuple[int, ...], dtype: Any, device: Device | None = None) -> Any:
    return _alloc("zeros", device, shape, dtype=dtype)


def ones(shape: tuple[int, ...], dtype: Any, device: Device | None = None) -> Any:
    return _alloc("ones", device, shape, dtype=dtype)


def empty(shape: tuple[int, ...], dtype: Any, device: Device | None = None) -> Any:
    return _alloc("empty", device, shape, dtype=dtype)


def full(shape: tuple[int, ...], value: Any, dtype: Any, device: Device | None = None) -> Any:
    return _alloc("full", device, shape, value, dtype=dtype)


def arange(start: Any, end: Any, step: Any, dtype: Any, device: Device | None = None) -> Any:
    return on_device(np.arange(start, end, step).astype(dtype), device)


@functools.lru_cache(maxsize=64)
def gauss_legendre(n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The ``n`` Gauss-Legendre nodes on [-1, 1] and their weights, as Python floats (kept:
    NumPy's ``leggauss`` takes about 1 ms for 50 nodes, more than a request's other work on
    the loop)."""
    nodes, weights = np.polynomial.legendre.leggauss(n)
    return tuple(float(a) for a in nodes), tuple(float(w) for w in weights)


def linspace(start: Any, end: Any, steps: int, dtype: Any, device: Device | None = None) -> Any:
    return on_device(np.linspace(start, end, steps).astype(dtype), device)


def eye(n: int, m: int | None, dtype: Any, device: Device | None = None) -> Any:
    return on_device(np.eye(n, m, dtype=dtype), device)


class RandomState:
    """A device's random number generator: NumPy's ``Generator`` on the CPU, the CUDA runtime's
    (CuPy's ``Generator``, drawing on the GPU) on a CUDA device.

    ``get_state()`` and ``set_state()`` save and restore where it is in its sequence. CuPy's
    generator cannot be deep-copied (its bit generator holds a lock) and keeps its state on the
    device, in ``bit_generator._state``, which each draw advances in place: its snapshot is a
    device copy of that array, queued on the current stream after the draws before it, and a
    restore puts a copy of the snapshot in its place (so one snapshot restores any number of
    times). On the CPU the snapshot is the bit generator's ``state``.
    """

    __slots__ = ("_rng", "device")

    def __init__(self, seed: int | None = None, device: Device = CPU) -> None:
        self.device = device
        if device.type == "cpu":
            self._rng = np.random.default_rng(seed)
        else:
            rt = cuda.require(device.index)
            with rt.cuda.Device(device.index):
                self._rng = rt.random.default_rng(seed)

    def _draw(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        if self.device.type == "cpu":
            return getattr(self._rng, fn)(*args, **kwargs)
        with cuda.rt.cuda.Device(self.device.index):
            return getattr(self._rng, fn)(*args, **kwargs)

    def random(self, shape: tuple[int, ...], dtype: Any) -> Any:
        dt = dtype if dtype in (np.float32, np.float64) else np.float64
        return self._draw("random", shape, dtype=dt).astype(dtype, copy=False)

    def normal(self, shape: tuple[int, ...], dtype: Any) -> Any:
        dt = dtype if dtype in (np.float32, np.float64) else np.float64
        return self._draw("standard_normal", shape, dtype=dt).astype(dtype, copy=False)

    def uniform(self, low: float, high: float, shape: tuple[int, ...], dtype: Any) -> Any:
        return self._draw("uniform", low, high, shape).astype(dtype, copy=False)

    def integers(self, low: int, high: int, shape: tuple[int, ...]) -> Any:
        return self._draw("integers", low, high, size=shape, dtype=np.int64)

    def get_state(self) -> Any:
        """Where the generator is in its sequence, for ``set_state``."""
        if self.device.type == "cpu":
            return self._rng.bit_generator.state
        with cuda.rt.cuda.Device(self.device.index):
            return self._rng.bit_generator._state.copy()  # type: ignore[attr-defined]

    def set_state(self, state: Any) -> None:
        """Go back to ``state`` (from ``get_state``): the next draws repeat those made after it."""
        if self.device.type == "cpu":
            self._rng.bit_generator.state = state
            return
        with cuda.rt.cuda.Device(self.device.index):
            self._rng.bit_generator._state = state.copy()  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- special functions
_erf_impl: Any = None


def erf(a: Any) -> Any:
    """The error function of an array, computed in its dtype.

    SciPy's is exact and fast; it is imported on first use (not with asyncgrad), and without
    SciPy each element goes through ``math.erf``.
    """
    global _erf_impl
    if _erf_impl is None:
        try:
            from scipy.special import erf as scipy_erf
        except ImportError:  # pragma: no cover - depends on the environment
            import math

            vec = np.vectorize(math.erf, otypes=[np.float64])

            def scipy_erf(x: Any) -> Any:
                return vec(x)

        _erf_impl = scipy_erf
    xp = namespace(a)
    if xp is not np:
        if xp.__name__ != "cupy":  # the simulator
            return xp.erf(a)
        import cupyx.scipy.special

        return cupyx.scipy.special.erf(a)
    out = _erf_impl(a)
    return out.astype(a.dtype, copy=False) if hasattr(a, "dtype") else out


class _CudaDevices(dict[int, Device]):
    """index -> ``Device("cuda", index)``, made on first use: a lookup without a call."""

    def __missing__(self, index: int) -> Device:
        dev = self[index] = Device("cuda", index)
        return dev


_CUDA_DEVICES: Final = _CudaDevices()


def device_of(array: Any) -> Device:
    if type(array) is np.ndarray or type(array) not in _device_types:
        return CPU
    return _CUDA_DEVICES[int(array.device.id)]


def runtime_files() -> tuple[str, ...]:
    """The source files of the device runtimes (the simulator, and CuPy's package where it is
    installed): what ``asyncgrad.testing.count_python_calls`` leaves out."""
    import os

    from . import sim

    files = [os.path.abspath(sim.__file__)]
    try:
        import cupy
    except ImportError:
        pass
    else:
        files.append(os.path.dirname(os.path.abspath(cupy.__file__)) + os.sep)
    return tuple(files)


def device_and_stream(array: Any) -> tuple[Device, Any]:
    """The device of a device array and this thread's current stream there, in one call (the
    recorders call it for every op on a CUDA device)."""
    index = int(array.device.id)
    return _CUDA_DEVICES[index], cuda.rt.cuda.get_current_stream(index)


def current_stream(dev: Device) -> Any:
    """The current stream of ``dev`` on this thread (None on the CPU)."""
    if dev.type == "cpu":
        return None
    return cuda.rt.cuda.get_current_stream(dev.index)  # cuda.current_stream, one call less


def to_device(array: Any, dev: Device) -> Any:
    """``array`` on ``dev`` (itself when it is there already). A copy to the host waits for the
    source device's current stream; a copy to a CUDA device is queued on its current stream."""
    if dev.type == "cpu":
        if type(array) not in _device_types:
            return array
        return cuda.to_host(array)
    assert dev.index is not None
    return cuda.to_device(array, dev.index)


# ----------------------------------------------------------------------------- gradient buffers
def add_into(dst: Any, src: Any) -> None:
    """``dst += src`` in place (``src`` broadcast to ``dst``), casting to ``dst``'s dtype."""
    namespace(dst).add(dst, src, out=dst, casting="unsafe")


def _refcount(a: Any) -> int:
    return sys.getrefcount(a)


def _calibrate_sole_refcount() -> int:
    box: list[Any] = [np.empty(1)]
    g = box[0]
    box[0] = None
    return _refcount(g)


# The reference count an array has inside can_steal() when the caller's local is the only other
# reference (measured with the same call shape, so it holds across Python versions).
_SOLE_REFCOUNT: Final = _calibrate_sole_refcount()


def _count_in(grads: list[Any], i: int) -> int:
    g = grads[i]
    return sys.getrefcount(g)


# The reference count an array has inside sole_in() when the list's slot is its only reference
# (measured with the same call shape).
_SOLE_IN_LIST: Final = _count_in([np.empty(1)], 0)


def sole_in(grads: list[Any], i: int) -> bool:
    """Whether the array in ``grads[i]`` may be overwritten (See NOTE [Gradients overwritten in
    place] in asyncgrad/rules/registry.py): the list holds its only reference (the caller has
    taken none of its own), and it owns its memory, contiguous and writable."""
    g = grads[i]
    return (
        ((type(g) is np.ndarray and g.flags.writeable) or type(g) in _device_types)
        and g.base is None
        and g.flags.c_contiguous
        and sys.getrefcount(g) <= _SOLE_IN_LIST
    )


# NOTE [Reused blocks]
# A batch of requests that each get their own large result (their parameter gradients, See
# NOTE [Per-request gradients in one allocation] in asyncgrad/per_sample.py) writes it into a
# new block of memory, and on the CPU most of that cost is the kernel's page faults, not the
# writing: 64 one-sample requests of an MLP 784-256-256-10 write 51 MB of first-layer weight
# gradients, 10.3 ms into a new array against 5.4 ms into one written before (2-core VM): an
# array that large is its own mapping, which the allocator gives back to the kernel when it is
# freed, so every page is faulted in again. A Blocks keeps the blocks it hands out, and once
# nothing else refers to one (the requests have dropped every view of it: its reference count
# is the pool's own, the test ``sole_in`` makes) it gives it out again for the next result of
# its shape and dtype, to be overwritten whole. A block anyone still holds, through a view, a
# Tensor or an exported buffer, is never reused. What it keeps is bounded by ``max_bytes``:
# beyond, the oldest unheld blocks are dropped, and a block that does not fit is handed out
# unpooled. Device arrays come from CuPy's own memory pool, so only host blocks are kept.
class Blocks:
    """Host arrays for results handed out as views, reused once nothing refers to them (See
    NOTE [Reused blocks]). Safe to use from several threads."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.reused = 0  # blocks given out again
        self._blocks: list[Any] = []  # oldest first
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The bytes of the blocks kept, held by someone or not."""
        with self._lock:
            return sum(b.nbytes for b in self._blocks)

    def empty(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        """An array of ``shape`` and ``dtype`` on ``like``'s device whose values are to be
        overwritten whole: a kept block nothing refers to any more, or a new one."""
        if type(like) is not np.ndarray:
            return namespace(like).empty(shape, dtype)
        dtype = np.dtype(dtype)
        with self._lock:
            blocks = self._blocks
            for i in range(len(blocks)):
                if (
                    _count_in(blocks, i) <= _SOLE_IN_LIST
                    and blocks[i].shape == shape
                    and blocks[i].dtype == dtype
                ):
                    block = blocks.pop(i)
                    blocks.append(block)  # the newest now
                    self.reused += 1
                    return block
            block = np.empty(shape, dtype)
            room = self.max_bytes - block.nbytes - sum(b.nbytes for b in blocks)
            i = 0
            while room < 0 and i < len(blocks):
                if _count_in(blocks, i) <= _SOLE_IN_LIST:  # the oldest unheld one goes
                    room += blocks.pop(i).nbytes
                else:
                    i += 1
            if room >= 0:
                blocks.append(block)
            return block

    def clear(self) -> None:
        """Forget every block kept (those still held stay valid for their holders)."""
        with self._lock:
            self._blocks.clear()


def outer_into(a: Any, b: Any, out: Any) -> Any:
    """``out[r] = outer(a[r], b[r])`` for 2-D ``a`` and ``b`` of the same rows, silently as the
    ops compute. On the CPU through ``einsum``, which writes it in about 0.65 of the time of the
    broadcast product (63 x 256 by 63 x 784 float32: 3.8 against 5.8 ms, 9.4 with ``a`` a
    transposed view)."""
    token = quiet_fp()
    try:
        if type(out) is np.ndarray:
            return np.einsum("ri,rj->rij", a, b, out=out)
        return namespace(out).multiply(a[:, :, None], b[:, None, :], out=out)
    finally:
        restore_fp(token)


def matmul_into(a: Any, b: Any, out: Any) -> Any:
    """``out = a @ b`` (stacked products), silently as the ops compute."""
    token = quiet_fp()
    try:
        return namespace(out).matmul(a, b, out=out)
    finally:
        restore_fp(token)


def masked_nonzero_into(g: Any, a: Any) -> Any:
    """``masked(g, a != 0)`` written into ``g``: 0 where ``a`` is 0, also where ``g`` is inf or
    NaN. On the CPU a multiplication in place (a masked copy is five times slower), with the
    zeros put back where ``g`` was not finite; on a device one masked copy."""
    if type(g) is np.ndarray:
        keep = a != 0
        np.multiply(g, keep, out=g)
        if not np.isfinite(g).all():  # inf or NaN times 0 is NaN where torch gives 0
            np.copyto(g, 0, where=~keep)
        return g
    namespace(g).copyto(g, 0, where=a == 0)
    return g


def can_steal(g: Any) -> bool:
    """Whether array ``g`` (NumPy's or a device's) may become a tensor's storage without a copy:
    it owns its memory, is contiguous, and nobody but the caller's one local refers to it."""
    return (
        (type(g) is np.ndarray or type(g) in _device_types)
        and g.base is None
        and g.flags.c_contiguous
        and sys.getrefcount(g) <= _SOLE_REFCOUNT
    )


def index_add_zeros(g: Any, index: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """Zeros of ``shape`` with ``g`` added at ``index`` (repeated advanced indices add up)."""
    xp = namespace(g)
    z = xp.zeros(shape, dtype=g.dtype)
    if is_basic_index(index):
        z[index] = g
    elif not (type(g) is np.ndarray and _add_slices_at(z, index, g)):
        xp.add.at(z, index, g)  # CuPy 14 deprecates cupyx.scatter_add for this
    return z


# NOTE [Adding slices at repeated indices]
# NumPy's ufunc.at is fast only for one 1-D index into a 1-D array; for an index array picking
# whole slices (an embedding's rows, the columns of an unfold) it is an element at a time, about
# 1 us per row. _add_slices_at does the same adding with fancy-index "+=" instead: that loses
# repeats within one assignment, so the index is split into rounds in which each position
# occurs once, the k-th occurrence of each position in round k. Every position still gets its
# values added in their order in the index, from zero, as ufunc.at adds them (the same bits).
_AT_MAX_ROUNDS: Final = 16
_FULL: Final = slice(None)


def _one_array_index(index: tuple[Any, ...], ndim: int) -> tuple[int, Any] | None:
    """(position, array) for an ``index`` of full slices (and an Ellipsis) around one integer
    NumPy array; None for any other index."""
    if any(ix is Ellipsis for ix in index):
        at = next(i for i, ix in enumerate(index) if ix is Ellipsis)
        full = (_FULL,) * (ndim - len(index) + 1)
        index = (*index[:at], *full, *index[at + 1 :])
    if len(index) > ndim:
        return None
    pos = -1
    for i, ix in enumerate(index):
        if type(ix) is np.ndarray and ix.dtype.kind in "iu" and pos < 0:
            pos = i
        elif not (type(ix) is slice and ix == _FULL):
            return None
    return None if pos < 0 else (pos, index[pos])


_MAX_RUNS: Final = 8


def _runs(flat: Any) -> list[tuple[int, int, slice]] | None:
    """``flat`` (1-D, in range, not negative) cut into at most _MAX_RUNS runs of consecutive
    values (step 1 or -1): (first position, end position, the values as a slice); None if it
    takes more."""
    m = flat.shape[0]
    if m == 0:
        return None
    d = np.diff(flat)
    cut = np.abs(d) != 1
    cut[1:] |= d[1:] != d[:-1]
    ends = np.flatnonzero(cut)
    if ends.shape[0] >= _MAX_RUNS:
        return None
    out = []
    start = 0
    for e in [*(int(i) + 1 for i in ends), m]:
        v0, v1 = int(flat[start]), int(flat[e - 1])
        if v1 >= v0:
            vs = slice(v0, v1 + 1)
        else:
            vs = slice(v0, v1 - 1 if v1 > 0 else None, -1)
        out.append((start, e, vs))
        start = e
    return out


def take_runs(xa: Any, index: tuple[Any, ...]) -> Any:
    """``xa[index]`` (a new array) where the index is full slices around one integer array:
    by slices where that array is 1-D and a few runs of consecutive values (reflect and
    replicate padding, flip, roll), as NumPy's advanced indexing along a later axis goes an
    element at a time; by ``np.take`` where it is the first (rows of an embedding). None for
    any other index, or an index out of range (which indexing reports)."""
    if type(xa) is not np.ndarray or xa.size < 4096:
        return None
    got = _one_array_index(index, xa.ndim)
    if got is None:
        return None
    pos, ia = got
    n = xa.shape[pos]
    if ia.size == 0 or int(ia.min()) < 0 or int(ia.max()) >= n:
        return None
    runs = _runs(ia) if ia.ndim == 1 else None
    if runs is None:
        return np.take(xa, ia, axis=0) if pos == 0 else None
    pre = (slice(None),) * pos
    return np.concatenate([xa[(*pre, vs)] for _, _, vs in runs], axis=pos)


def _add_slices_at(z: Any, index: tuple[Any, ...], g: Any) -> bool:
    """``np.add.at(z, index, g)`` for an ``index`` of full slices (and an Ellipsis) around one
    integer array that picks slices of at least 8 elements, 4096 or more in all; False (nothing
    done) for any other index, or when a position repeats more than _AT_MAX_ROUNDS times."""
    got = _one_array_index(index, z.ndim)
    if got is None or g.dtype.kind not in "fc":
        return False
    pos, ia = got
    n = z.shape[pos]
    lead, rest = z.shape[:pos], z.shape[pos + 1 :]
    if g.shape != (*lead, *ia.shape, *rest) or g.size < 8 * ia.size or g.size < 4096:
        return False
    flat = ia.reshape(-1)
    lo, hi = int(flat.min()), int(flat.max())
    if lo < -n or hi >= n:
        return False  # ufunc.at raises the IndexError
    if lo < 0:
        flat = flat + n * (flat < 0)
    g = g.reshape((*lead, flat.size, *rest))
    pre = (slice(None),) * pos
    runs = _runs(flat)
    if runs is not None:  # a few runs of distinct positions, added in their order
        for p0, p1, vs in runs:
            z[(*pre, vs)] += g[(*pre, slice(p0, p1))]
        return True
    m = flat.size
    order = np.argsort(flat, kind="stable")
    srt = flat[order]
    first = np.empty(m, dtype=bool)
    first[0] = True
    np.not_equal(srt[1:], srt[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    rank = np.arange(m) - starts[np.cumsum(first) - 1]  # occurrence number, in sorted order
    rounds = int(rank.max()) + 1
    if rounds > _AT_MAX_ROUNDS:
        return False
    for k in range(rounds):
        sel = order[rank == k] if rounds > 1 else order
        if k == 0:  # z is zero there: 0 + v is v (but +0.0 for -0.0)
            z[(*pre, flat[sel])] = g[(*pre, sel)] + 0.0
        else:
            z[(*pre, flat[sel])] += g[(*pre, sel)]
    return True


def is_basic_index(index: tuple[Any, ...]) -> bool:
    """Whether ``index`` holds only ints, slices, None and Ellipsis (a view, no repeats)."""
    return not any(is_array(i) or isinstance(i, (bool, np.bool_)) for i in index)


# ----------------------------------------------------------------------------- sliding windows
def windows(
    a: Any, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]
) -> Any:
    """The sliding windows of the last two axes of ``a`` (..., H, W): a view of shape
    (..., kh, kw, OH, OW) whose [..., i, j, oh, ow] is a[..., oh*sh + i*dh, ow*sw + j*dw].

    A strided view (no copy: im2col is this view and one reshape), made by the array module's
    ``lib.stride_tricks.as_strided``; NumPy's is made read-only, as the windows overlap. CuPy's
    takes only ``(x, shape, strides)`` and has no read-only arrays.
    """
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    *lead, h, w = a.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    *lead_st, st_h, st_w = a.strides
    shape = (*lead, kh, kw, oh, ow)
    strides = (*lead_st, dh * st_h, dw * st_w, sh * st_h, sw * st_w)
    mod = namespace(a)
    if mod is np:
        return np.lib.stride_tricks.as_strided(a, shape, strides, writeable=False)
    return mod.lib.stride_tricks.as_strided(a, shape, strides)


# The CPU namespace, for code that has already checked ``type(a) is ndarray``.
np_namespace: Final = np
# NumPy's functions as the derivative rules call them: they run on NumPy arrays and hand CuPy
# arrays and Tensors on through NumPy's dispatch protocols (See NOTE [Rules are NumPy]).
xp: Final = np
number: Final = np.number


# NOTE [Silent floating point]
# torch computes with infinities and NaNs silently (log(0) is -inf, 0/0 is NaN, exp(800) is inf);
# NumPy warns about them ("divide by zero", "invalid value", "overflow"). So the forward ops run
# with NumPy's floating-point errors ignored, between ``token = quiet_fp()`` and
# ``restore_fp(token)`` (in a ``finally``), or decorated with ``silent_fp`` where one more call
# does not matter; and a device worker sets the same state once for each slice it drains, which
# covers the rules, the sums of gradients and whatever a hook or custom backward computes.
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


from . import cuda  # noqa: E402  (imports nothing heavy: the runtime loads on first use)


# ----- diagonal views and linear algebra (ag.linalg) -----
class LinAlgError(RuntimeError):
    """A factorisation that the input does not allow (a singular or not positive-definite
    matrix): NumPy's LinAlgError as a RuntimeError, which torch raises."""


def diagonal_view(a: Any, offset: int, dim1: int, dim2: int) -> Any:
    """The diagonal of ``a`` over axes ``dim1`` and ``dim2`` (last axis of the result) as a view
    that writes through to ``a`` where ``a`` is writable (NumPy's own is read-only)."""
    if type(a) is not np.ndarray:
        # A strided view (the simulator's ``diagonal`` is read-only, as NumPy's)
        n1, n2 = a.shape[dim1], a.shape[dim2]
        r0, c0 = max(-offset, 0), max(offset, 0)
        k = max(0, min(n1 - r0, n2 - c0))
        start = [slice(None)] * a.ndim
        start[dim1] = slice(min(r0, n1), None)
        start[dim2] = slice(min(c0, n2), None)
        b = a[tuple(start)]
        rest = [i for i in range(a.ndim) if i not in (dim1, dim2)]
        shape = (*(b.shape[i] for i in rest), k)
        strides = (*(b.strides[i] for i in rest), b.strides[dim1] + b.strides[dim2])
        return namespace(a).lib.stride_tricks.as_strided(b, shape, strides)
    d = np.diagonal(a, offset, dim1, dim2)
    if a.flags.writeable:
        d.flags.writeable = True
    return d


def linalg_of(a: Any) -> Any:
    """The ``linalg`` module for ``a``: NumPy's, CuPy's or the simulator's (a Tensor under
    create_graph gets NumPy's, whose functions dispatch to Tensor's ``__array_function__``)."""
    return namespace(a).linalg


def linalg_call(name: str, *args: Any, **kwargs: Any) -> Any:
    """``linalg.<name>(*args)`` in the arrays' namespace; NumPy's LinAlgError as ours."""
    try:
        return getattr(namespace(args[0]).linalg, name)(*args, **kwargs)
    except np.linalg.LinAlgError as e:
        raise LinAlgError(str(e)) from None


def unique(a: Any, axis: int | None) -> tuple[Any, Any, Any]:
    """The sorted distinct elements of ``a`` (slices along ``axis``), the inverse indices and
    the counts (data-dependent: a host synchronisation on a device)."""
    vals, inv, counts = namespace(a).unique(a, return_inverse=True, return_counts=True, axis=axis)
    return vals, inv, counts


def data_ptr(a: Any) -> int:
    """The address of ``a``'s first element (device memory for a CUDA array)."""
    if type(a) is np.ndarray:
        return int(a.__array_interface__["data"][0])
    return int(a.data.ptr)


# ----- special functions (pointwise_math) -----
def special(name: str, *args: Any) -> Any:
    """``scipy.special.<name>(*args)`` for NumPy arrays (``cupyx.scipy.special``'s on CuPy
    arrays), imported on first use. The simulated device's arrays go through the host, as do
    CuPy's for a function cupyx does not have."""
    arrays = [a for a in args if hasattr(a, "shape")]
    xp = namespace(arrays[0]) if arrays else np
    token = quiet_fp()  # See NOTE [Silent floating point]
    try:
        if xp is np:
            return np.asarray(getattr(_scipy_special(name), name)(*args))
        if xp.__name__ == "cupy":
            import cupyx.scipy.special

            f = getattr(cupyx.scipy.special, name, None)
            if f is not None:
                return f(*args)
        # The simulator's arrays, and CuPy's for a function cupyx lacks: through the host.
        host = [xp.asnumpy(a) if hasattr(a, "shape") else a for a in args]
        return xp.asarray(getattr(_scipy_special(name), name)(*host))
    finally:
        restore_fp(token)


def _scipy_special(name: str) -> Any:
    try:
        import scipy.special
    except ImportError:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(
            f"asyncgrad computes {name} with SciPy, which is not installed (pip install scipy)"
        ) from None
    return scipy.special
