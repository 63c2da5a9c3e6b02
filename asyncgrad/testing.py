"""ag.testing: ``assert_close`` with torch's default tolerances and mismatch report, and
``count_python_calls``, the Python work of a block of code."""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

from . import backend, dtypes
from ._tensor import Tensor
from .backend import silent_fp

__all__ = ["PythonCalls", "assert_close", "count_python_calls"]

# torch's defaults: (rtol, atol) by dtype; integers and bools compare exactly.
_TOLERANCES = {
    dtypes.float16: (1e-3, 1e-5),
    dtypes.float32: (1.3e-6, 1e-5),
    dtypes.float64: (1e-7, 1e-7),
}


def _fail(generated: str, msg: str | Callable[[str], str] | None) -> None:
    if msg is None:
        raise AssertionError(generated)
    raise AssertionError(msg(generated) if callable(msg) else msg)


def _num(x: Any, integral: bool) -> str:
    return repr(int(x)) if integral else repr(float(x))


def _as_array(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach()._array
    if backend.is_array(x):
        return x
    return backend.asarray(x)


@silent_fp  # See NOTE [Silent floating point]
def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_device: bool = True,
    check_dtype: bool = True,
    msg: str | Callable[[str], str] | None = None,
) -> None:
    """Raise ``AssertionError`` unless ``|actual - expected| <= atol + rtol * |expected|``
    elementwise (infinities must be equal; NaNs only with ``equal_nan``).

    Without ``rtol``/``atol`` the tolerances are torch's for the dtype (float16 1e-3/1e-5,
    float32 1.3e-6/1e-5, float64 1e-7/1e-7, exact for integers and bools; Python floats as
    float64). The message names the number of mismatching elements and the greatest absolute
    and relative differences with their indices; ``msg`` replaces it (a callable gets it)."""
    if (rtol is None) != (atol is None):
        missing = "atol" if atol is None else "rtol"
        raise ValueError(
            f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {missing}."
        )
    scalar = isinstance(actual, (int, float, bool)) and isinstance(expected, (int, float, bool))
    if scalar:
        a, e = backend.asarray(actual), backend.asarray(expected)
        if isinstance(actual, float) or isinstance(expected, float):
            a, e = a.astype(dtypes.float64), e.astype(dtypes.float64)
    else:
        if check_device and isinstance(actual, Tensor) and isinstance(expected, Tensor):
            if actual.device != expected.device:
                _fail(
                    f"The values for attribute 'device' do not match: {actual.device} != "
                    f"{expected.device}.",
                    msg,
                )
        a, e = _as_array(actual), _as_array(expected)
        if tuple(a.shape) != tuple(e.shape):
            _fail(
                f"The values for attribute 'shape' do not match: {tuple(a.shape)} != "
                f"{tuple(e.shape)}.",
                msg,
            )
        if check_dtype and a.dtype != e.dtype:
            _fail(
                f"The values for attribute 'dtype' do not match: asyncgrad.{a.dtype} != "
                f"asyncgrad.{e.dtype}.",
                msg,
            )
        if backend.device_of(a) != backend.device_of(e):
            a = backend.to_device(a, backend.device_of(e))
    if rtol is None or atol is None:
        rtol, atol = max(
            (_TOLERANCES.get(dtypes.to_dtype(d), (0.0, 0.0)) for d in (a.dtype, e.dtype)),
            key=lambda t: t[0],
        )
    xp = backend.namespace(e)
    integral = a.dtype.kind in "iub" and e.dtype.kind in "iub"
    work: Any = a.dtype if a.dtype.kind == "f" else dtypes.float32
    if a.dtype == dtypes.float64 or e.dtype == dtypes.float64:
        work = dtypes.float64
    af, ef = a.astype(work), e.astype(work)
    abs_diff = xp.abs(af - ef)
    within = abs_diff <= atol + rtol * xp.abs(ef)
    close = (af == ef) | (xp.isfinite(af) & xp.isfinite(ef) & within)
    if equal_nan:
        close |= xp.isnan(af) & xp.isnan(ef)
    if bool(close.all()):
        return
    abs_diff = xp.where(close, 0, abs_diff)
    rel_diff = xp.where(close, 0, abs_diff / xp.abs(ef))
    exact = rtol == 0 and atol == 0
    what = "equal" if exact else "close"
    if integral:
        abs_diff = xp.abs(a.astype(dtypes.int64) - e.astype(dtypes.int64))
        abs_diff = xp.where(close, 0, abs_diff)
    up_abs = "" if exact else f" (up to {atol!r} allowed)"
    up_rel = "" if exact else f" (up to {rtol!r} allowed)"
    if a.ndim == 0:
        generated = (
            f"Scalars are not {what}!\n\n"
            f"Expected {e.reshape(()).item()!r} but got {a.reshape(()).item()!r}.\n"
            f"Absolute difference: {_num(abs_diff.reshape(()).item(), integral)}{up_abs}\n"
            f"Relative difference: {float(rel_diff.reshape(()).item())!r}{up_rel}"
        )
        _fail(generated, msg)
    n_bad = int((~close).sum())
    i_abs = _argmax_nan(xp, abs_diff)
    i_rel = _argmax_nan(xp, rel_diff)
    idx_abs = tuple(int(i) for i in xp.unravel_index(i_abs, a.shape))
    idx_rel = tuple(int(i) for i in xp.unravel_index(i_rel, a.shape))
    generated = (
        f"Tensor-likes are not {what}!\n\n"
        f"Mismatched elements: {n_bad} / {a.size} ({n_bad / a.size:.1%})\n"
        f"Greatest absolute difference: {_num(abs_diff.reshape(-1)[i_abs].item(), integral)} "
        f"at index {idx_abs}{up_abs}\n"
        f"Greatest relative difference: {float(rel_diff.reshape(-1)[i_rel].item())!r} "
        f"at index {idx_rel}{up_rel}"
    )
    _fail(generated, msg)


def _argmax_nan(xp: Any, values: Any) -> int:
    """Index of the greatest value, a NaN winning (as torch.max does)."""
    flat = values.reshape(-1)
    nan = xp.isnan(flat)
    if bool(nan.any()):
        return int(xp.argmax(nan))
    return int(xp.argmax(flat))


# NOTE [Counting Python calls]
# On a GPU the host's Python work between launches is what bounds a small kernel's rate, and on
# the CPU it is what a small op costs beyond NumPy's. ``count_python_calls()`` counts the Python
# function calls (frames entered, a coroutine's or generator's resumption included) of every
# thread while it is open, by function, through the interpreter's profiling hook. Calls into the
# device runtime (CuPy or the simulator that stands in for it, ``asyncgrad/backend/sim.py``) are
# not counted, nor is anything they call in turn: they stand for CuPy's compiled code. Modules
# compiled to C (asyncgrad's compiled build) make no frames: count the pure build. Threads that
# were running before the block began are counted from Python 3.12 on (``threading.
# setprofile_all_threads``); before it, only the calling thread and threads started inside.
class PythonCalls:
    """The Python calls counted by ``count_python_calls()``: ``total`` and ``by_function``
    (``"path:line name"`` -> calls)."""

    __slots__ = ("_codes", "_lock")

    def __init__(self) -> None:
        self._codes: collections.Counter[CodeType] = collections.Counter()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        return sum(self._codes.values())

    @property
    def by_function(self) -> collections.Counter[str]:
        out: collections.Counter[str] = collections.Counter()
        for code, n in self._codes.items():
            path = code.co_filename
            cut = path.rfind("asyncgrad" + os.sep)
            short = path[cut:] if cut >= 0 else os.path.basename(path)
            out[f"{short}:{code.co_firstlineno} {code.co_qualname}"] += n
        return out

    def __repr__(self) -> str:
        return f"PythonCalls(total={self.total})"


@contextlib.contextmanager
def count_python_calls() -> Iterator[PythonCalls]:
    """Count the Python function calls of every thread while the block runs, leaving out the
    device runtime's (See NOTE [Counting Python calls]). Not reentrant: it takes the
    interpreter's profiling hook, and gives back the one set before."""
    calls = PythonCalls()
    codes, lock = calls._codes, calls._lock
    runtime = backend.runtime_files()
    state = threading.local()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            inside = getattr(state, "inside", 0)
            if inside:
                state.inside = inside + 1
                return
            code = frame.f_code
            if code.co_filename.startswith(runtime):
                state.inside = 1
                return
            with lock:
                codes[code] += 1
        elif event == "return":
            inside = getattr(state, "inside", 0)
            if inside:
                state.inside = inside - 1

    every = getattr(threading, "setprofile_all_threads", None)
    before = sys.getprofile()
    before_threads = threading.getprofile()
    if every is not None:
        every(profile)
    else:
        threading.setprofile(profile)
        sys.setprofile(profile)
    try:
        yield calls
    finally:
        if every is not None:
            every(None)
            threading.setprofile(before_threads)
            sys.setprofile(before)
        else:
            sys.setprofile(before)
            threading.setprofile(before_threads)
