"""ag.testing: ``assert_close`` with torch's default tolerances and mismatch report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import backend, dtypes
from ._tensor import Tensor
from .backend import silent_fp

__all__ = ["assert_close"]

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
