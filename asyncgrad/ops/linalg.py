"""Linear algebra: matmul and its spellings, and ``linear`` (the hot op of an MLP)."""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import silent_fp
from ._record import OPS, arr, make


def _shape_str(s: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in s)


# ----- dtype checks of the matmul family -----
# NOTE [Matmul dtypes]
# torch promotes dtypes in elementwise ops but not in matmul, mm, bmm and linear: operands of
# different dtypes raise (``int64 @ float32``, or a float64 batch into a float32 Linear), where
# NumPy would promote silently. The message depends on the kernel torch dispatches to, which
# follows from the operands' dimensions; we raise the same message for the same case.
# Per dtype: torch's ScalarType name and the C++ type name its BLAS checks print.
_TORCH_NAMES: dict[str, tuple[str, str]] = {
    "float16": ("Half", "c10::Half"),
    "float32": ("Float", "float"),
    "float64": ("Double", "double"),
    "complex64": ("ComplexFloat", "c10::complex<float>"),
    "complex128": ("ComplexDouble", "c10::complex<double>"),
    "int8": ("Char", "signed char"),
    "int16": ("Short", "short int"),
    "int32": ("Int", "int"),
    "int64": ("Long", "long int"),
    "uint8": ("Byte", "unsigned char"),
    "bool": ("Bool", "bool"),
}


def _scalar_type(dt: Any) -> str:
    return _TORCH_NAMES.get(str(dt), (str(dt), ""))[0]


def _c_type(dt: Any) -> str:
    return _TORCH_NAMES.get(str(dt), ("", str(dt)))[1]


def _mm_dtype_error(dx: Any, dy: Any) -> RuntimeError:
    return RuntimeError(
        f"expected m1 and m2 to have the same dtype, but got: {_c_type(dx)} != {_c_type(dy)}"
    )


def _check_matmul_dtypes(xa: Any, ya: Any) -> None:
    """Raise torch's error for ``matmul`` of operands of two dtypes (See NOTE [Matmul dtypes])."""
    dx, dy = xa.dtype, ya.dtype
    if dx == dy:
        return
    nx, ny = xa.ndim, ya.ndim
    if nx == 1 and ny == 1:  # dot
        raise RuntimeError(
            "dot : expected both vectors to have same dtype, but found "
            f"{_scalar_type(dx)} and {_scalar_type(dy)}"
        )
    if ny == 1:  # matrix (or batch of them) times vector: addmv
        x, y = _scalar_type(dx), _scalar_type(dy)
        raise RuntimeError(
            f"addmv input tensors must have the same dtype, but got {y}, {x}, and {y}"
        )
    if ny == 2:  # x folded into one matrix: mm
        raise _mm_dtype_error(dx, dy)
    raise RuntimeError(  # batched: bmm
        f"expected scalar type {_scalar_type(dx)} but found {_scalar_type(dy)}"
    )


def _check_linear_dtypes(xa: Any, wa: Any, ba: Any) -> None:
    """Raise torch's error for ``linear`` of operands of several dtypes."""
    dw = wa.dtype
    if ba is None:
        if xa.dtype != dw:
            raise _mm_dtype_error(xa.dtype, dw)
        return
    if ba.dtype != dw:
        raise RuntimeError(
            "self and mat2 must have the same dtype, but got "
            f"{_scalar_type(ba.dtype)} and {_scalar_type(dw)}"
        )
    if xa.dtype != dw:
        raise RuntimeError(
            "mat1 and mat2 must have the same dtype, but got "
            f"{_scalar_type(xa.dtype)} and {_scalar_type(dw)}"
        )


# ----- end of the dtype checks -----


@silent_fp  # See NOTE [Silent floating point]
def matmul(input: Tensor, other: Tensor) -> Tensor:
    xa, ya = arr(input), arr(other)
    if getattr(xa, "ndim", 0) == 0 or getattr(ya, "ndim", 0) == 0:
        raise RuntimeError(
            "both arguments to matmul need to be at least 1D, but they are "
            f"{getattr(xa, 'ndim', 0)}D and {getattr(ya, 'ndim', 0)}D"
        )
    if xa.dtype != ya.dtype:
        _check_matmul_dtypes(xa, ya)
    if xa.shape[-1] != ya.shape[-2 if ya.ndim > 1 else 0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(xa.shape)} and "
            f"{_shape_str(ya.shape)})"
        )
    return make(OPS["matmul"], backend.namespace(xa).matmul(xa, ya), (input, other))


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    if input.dtype != mat2.dtype:
        raise _mm_dtype_error(input.dtype, mat2.dtype)
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {input.shape[0]} and {mat2.shape[0]}")
    if input.dtype != mat2.dtype:
        raise RuntimeError(
            f"expected scalar type {_scalar_type(input.dtype)} but found {_scalar_type(mat2.dtype)}"
        )
    return matmul(input, mat2)


@silent_fp  # See NOTE [Silent floating point]
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` as one node."""
    xa, wa = input._array, weight._array
    if xa.dtype != wa.dtype or (bias is not None and bias._array.dtype != wa.dtype):
        _check_linear_dtypes(xa, wa, None if bias is None else bias._array)
    if xa.ndim < 2 or wa.ndim != 2:
        res = matmul(input, weight.t())
        return res if bias is None else res + bias
    if xa.shape[-1] != wa.shape[1]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(xa.shape)} and "
            f"{_shape_str(wa.shape[::-1])})"
        )
    out: Any = xa @ wa.T
    if bias is not None:
        out += bias._array
    return make(OPS["linear"], out, (input, weight, bias))
