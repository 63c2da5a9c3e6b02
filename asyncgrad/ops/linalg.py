"""Linear algebra: matmul and its spellings, and ``linear`` (the hot op of an MLP)."""

from __future__ import annotations

import collections
import string
from typing import Any, Final

from .. import backend
from .._tensor import Tensor
from ..backend import silent_fp
from ..rules.formulas import einsum_call
from ._record import NO_PARAMS, OPS, arr, grad_enabled, make, record_ternary, wrap


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
    return make(OPS["matmul"], backend.mm(xa, ya), (input, other), NO_PARAMS, (xa, ya))


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
    # Each array is read once, here (See NOTE [Ops save what they read]).
    ba = None if bias is None else bias._array
    out: Any = backend.mm(xa, wa.T)  # See NOTE [Small-array fast paths]
    if bias is None:
        return make(_LINEAR, out, (input, weight, None), NO_PARAMS, (xa, wa, None))
    out += ba
    t = wrap(out)
    if grad_enabled():
        record_ternary(_LINEAR, t, input, weight, bias, (xa, wa, ba))
    return t


_LINEAR: Final = OPS["linear"]


# ----- dot, outer, einsum -----
def _dtype_name(dt: Any) -> str:
    return {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long"}.get(
        str(dt), str(dt)
    )


@silent_fp  # See NOTE [Silent floating point]
def dot(input: Tensor, other: Tensor) -> Tensor:
    """The inner product of two 1-D tensors of the same size and dtype."""
    xa, ya = input._array, other._array
    if xa.ndim != 1 or ya.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {xa.ndim}D and {ya.ndim}D tensors")
    if xa.shape[0] != ya.shape[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{xa.shape[0]}] and src [{ya.shape[0]}] "
            f"to have the same number of elements, but got {xa.shape[0]} and {ya.shape[0]} "
            "elements respectively"
        )
    if xa.dtype != ya.dtype:
        raise RuntimeError(
            "dot : expected both vectors to have same dtype, but found "
            f"{_dtype_name(xa.dtype)} and {_dtype_name(ya.dtype)}"
        )
    return make(OPS["dot"], backend.namespace(xa).dot(xa, ya), (input, other), NO_PARAMS, (xa, ya))


@silent_fp  # See NOTE [Silent floating point]
def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product ``input[:, None] * vec2[None, :]`` of two 1-D tensors."""
    xa, ya = input._array, vec2._array
    for name, a in (("self", xa), ("vec2", ya)):
        if a.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {a.ndim}-D")
    return make(OPS["outer"], xa[:, None] * ya, (input, vec2), NO_PARAMS, (xa, ya))


# NOTE [einsum as pairwise contractions]
# einsum is recorded as a chain of one- and two-operand einsum nodes, contracted left to right
# (as torch does without opt_einsum): each node's rule is then one einsum of the gradient with
# the other operand, and the equations reaching the nodes are explicit (ellipses spelled out with
# unused letters, the output written out), so the rules need no parsing. An index kept by a node
# is one that a later operand or the output still needs.
_LETTERS: Final = string.ascii_uppercase + string.ascii_lowercase


def _parse_einsum(
    equation: str, shapes: list[tuple[int, ...]]
) -> tuple[list[str], str, dict[str, int]]:
    """Explicit subscripts per operand, the output's, and each index's (broadcast) size."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) < len(shapes):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    if len(terms) > len(shapes):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    for i, c in enumerate(eq):
        if c not in _LETTERS and c not in ".,->":
            raise RuntimeError(
                f"einsum(): invalid subscript given at index {i} in the equation string, "
                "subscripts must be in [a-zA-Z]"
            )
    free = [c for c in _LETTERS if c not in eq]
    n_ell = 0
    for t, s in zip(terms, shapes, strict=True):
        if "..." in t:
            n_ell = max(n_ell, len(s) - (len(t) - 3))
    ell = "".join(free[:n_ell])
    subs: list[str] = []
    for i, (t, s) in enumerate(zip(terms, shapes, strict=True)):
        if "..." in t:
            k = len(s) - (len(t) - 3)
            if k < 0:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation ({len(t) - 3}) is more "
                    f"than the number of dimensions ({len(s)}) for operand {i}"
                )
            t = t.replace("...", ell[n_ell - k :])
        elif len(t) != len(s):
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({len(t)}) does not match "
                f"the number of dimensions ({len(s)}) for operand {i} and no ellipsis was given"
            )
        subs.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = collections.Counter("".join(subs))
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    sizes: dict[str, int] = {}
    for i, (t, s) in enumerate(zip(subs, shapes, strict=True)):
        mine: dict[str, int] = {}
        for c, n in zip(t, s, strict=True):
            if c in mine and mine[c] != n:
                raise RuntimeError(
                    f"einsum(): subscript {c} is repeated for operand {i} but the sizes don't "
                    f"match, {mine[c]} != {n}"
                )
            mine[c] = n
            seen = sizes.get(c)
            if seen is None or seen == 1:
                sizes[c] = n
            elif n != 1 and n != seen:
                raise RuntimeError(
                    f"einsum(): subscript {c} has size {n} for operand {i} which does not "
                    f"broadcast with previously seen size {seen}"
                )
    for c in out:
        if c not in sizes:
            raise RuntimeError(
                f"einsum(): output subscript {c} does not appear in the equation for any input "
                "operand"
            )
        if out.count(c) > 1:
            raise RuntimeError(
                f"einsum(): output subscript {c} appears more than once in the output"
            )
    return subs, out, sizes


def _einsum_node(
    eq_x: str, x: Tensor, eq_y: str | None, y: Tensor | None, out: str, sizes: dict[str, int]
) -> Tensor:
    xa = x._array
    ya = None if y is None else y._array
    xp = backend.namespace(xa)
    if ya is None:
        res = xp.einsum(f"{eq_x}->{out}", xa)
    else:
        res = einsum_call(f"{eq_x},{eq_y}->{out}", xa, ya)
    params = {"sx": eq_x, "sy": eq_y, "out": out, "sizes": sizes}
    return make(OPS["einsum"], res, (x, y), params, (xa, ya))


@silent_fp  # See NOTE [Silent floating point]
def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation over ``operands``, as ``torch.einsum`` (also given as one list).

    Example:
        >>> import asyncgrad as ag
        >>> ag.einsum("ij,j->i", ag.ones(2, 3), ag.arange(3.0)).tolist()
        [3.0, 3.0]
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    ts = [o if isinstance(o, Tensor) else Tensor(o) for o in operands]
    subs, out, sizes = _parse_einsum(equation, [t.shape for t in ts])
    if len(ts) == 1:
        return _einsum_node(subs[0], ts[0], None, None, out, sizes)
    acc, acc_subs = ts[0], subs[0]  # See NOTE [einsum as pairwise contractions]
    for i in range(1, len(ts)):
        if i == len(ts) - 1:
            keep = out
        else:
            later = set(out).union(*subs[i + 1 :])
            keep = "".join(dict.fromkeys(c for c in acc_subs + subs[i] if c in later))
        acc = _einsum_node(acc_subs, acc, subs[i], ts[i], keep, sizes)
        acc_subs = keep
    return acc
