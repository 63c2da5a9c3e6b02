"""Linear algebra: matmul and its spellings, and ``linear`` (the hot op of an MLP)."""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import silent_fp
from ._record import OPS, arr, make


def _shape_str(s: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in s)


@silent_fp  # See NOTE [Silent floating point]
def matmul(input: Tensor, other: Tensor) -> Tensor:
    xa, ya = arr(input), arr(other)
    if getattr(xa, "ndim", 0) == 0 or getattr(ya, "ndim", 0) == 0:
        raise RuntimeError(
            "both arguments to matmul need to be at least 1D, but they are "
            f"{getattr(xa, 'ndim', 0)}D and {getattr(ya, 'ndim', 0)}D"
        )
    if xa.shape[-1] != ya.shape[-2 if ya.ndim > 1 else 0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(xa.shape)} and "
            f"{_shape_str(ya.shape)})"
        )
    return make(OPS["matmul"], backend.namespace(xa).matmul(xa, ya), (input, other))


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {input.shape[0]} and {mat2.shape[0]}")
    return matmul(input, mat2)


@silent_fp  # See NOTE [Silent floating point]
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` as one node."""
    xa, wa = input._array, weight._array
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
