"""Matrix and vector products beyond matmul (addmm, baddbmm, mv, kron, tensordot, cross, ...),
torch's top-level names of the decompositions (det, inverse, svd, lu, ...) and the window
functions.

Most are composites of differentiable ops (their gradients are those ops'), as torch's own
CompositeImplicitAutograd functions are; the ``beta``/``alpha`` family follows torch in ignoring
``input`` when ``beta == 0`` (a NaN there does not reach the result, and its gradient is 0).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from . import decomp
from .creation import scalar_name, zeros
from .linalg import _c_type, dot, matmul, outer
from .pointwise import where
from .shape import stack

__all__ = [
    "addbmm",
    "addmm",
    "addmv",
    "addmv_",
    "addr",
    "baddbmm",
    "bartlett_window",
    "blackman_window",
    "chain_matmul",
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "cross",
    "det",
    "geqrf",
    "ger",
    "hamming_window",
    "hann_window",
    "inner",
    "inverse",
    "kaiser_window",
    "kron",
    "logdet",
    "lu",
    "lu_solve",
    "lu_unpack",
    "matrix_exp",
    "matrix_power",
    "mv",
    "orgqr",
    "ormqr",
    "pinverse",
    "qr",
    "slogdet",
    "svd",
    "tensordot",
    "triangular_solve",
    "vander",
    "vdot",
]


# torch's deprecation warnings for its older names, each given once per process as torch's
# TORCH_WARN_ONCE does; tests clear ``WARNED`` to see one again
_DEPRECATED: dict[str, str] = {
    "cholesky": "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be "
    "removed in a future PyTorch release.\nL = torch.cholesky(A)\nshould be replaced with\nL = "
    "torch.linalg.cholesky(A)\nand\nU = torch.cholesky(A, upper=True)\nshould be replaced "
    "with\nU = torch.linalg.cholesky(A).mH\nThis transform will produce equivalent results for "
    "all valid (symmetric positive definite) inputs.",
    "qr": "torch.qr is deprecated in favor of torch.linalg.qr and will be removed in a future "
    "PyTorch release.\nThe boolean parameter 'some' has been replaced with a string parameter "
    "'mode'.\nQ, R = torch.qr(A, some)\nshould be replaced with\nQ, R = torch.linalg.qr(A, "
    "'reduced' if some else 'complete')",
    "lu": "torch.lu is deprecated in favor of torch.linalg.lu_factor / torch.linalg.lu_factor_ex "
    "and will be removed in a future PyTorch release.\nLU, pivots = torch.lu(A, "
    "compute_pivots)\nshould be replaced with\nLU, pivots = torch.linalg.lu_factor(A, "
    "compute_pivots)\nand\nLU, pivots, info = torch.lu(A, compute_pivots, "
    "get_infos=True)\nshould be replaced with\nLU, pivots, info = "
    "torch.linalg.lu_factor_ex(A, compute_pivots)",
    "lu_solve": "torch.lu_solve is deprecated in favor of torch.linalg.lu_solveand will be "
    "removed in a future PyTorch release.\nNote that torch.linalg.lu_solve has its arguments "
    "reversed.\nX = torch.lu_solve(B, LU, pivots)\nshould be replaced with\nX = "
    "torch.linalg.lu_solve(LU, pivots, B)",
    "triangular_solve": "torch.triangular_solve is deprecated in favor of "
    "torch.linalg.solve_triangularand will be removed in a future PyTorch "
    "release.\ntorch.linalg.solve_triangular has its arguments reversed and does not return a "
    "copy of one of the inputs.\nX = torch.triangular_solve(B, A).solution\nshould be replaced "
    "with\nX = torch.linalg.solve_triangular(A, B).",
    "chain_matmul": "torch.chain_matmul is deprecated and will be removed in a future PyTorch "
    "release. Use torch.linalg.multi_dot instead, which accepts a list of two or more tensors "
    "rather than multiple parameters.",
    "cross": "Using torch.cross without specifying the dim arg is deprecated.\nPlease either "
    "pass the dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will "
    "change to agree with that of linalg.cross in a future release.",
}
WARNED: set[str] = set()


def _deprecated(name: str) -> None:
    if name not in WARNED:
        WARNED.add(name)
        warnings.warn(_DEPRECATED[name], UserWarning, stacklevel=3)


def _dims_str(t: Tensor) -> str:
    return "x".join(str(d) for d in t.shape)


def _scaled_sum(input: Tensor, prod: Tensor, beta: Any, alpha: Any) -> Tensor:
    """``beta * input + alpha * prod``, ``input`` broadcast to ``prod``'s shape; with
    ``beta == 0`` ``input`` is ignored (its gradient is 0), as torch does."""
    if not isinstance(input, Tensor):
        input = Tensor(input)
    _check_expands(input, tuple(prod.shape))
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        # selected, not multiplied: NaN and inf in input stay out of the result
        return prod + where(backend.scalar(False, dtypes.bool_), input, 0).to(prod.dtype)
    return prod + (input if beta == 1 else input * beta)


def _check_expands(input: Tensor, target: tuple[int, ...]) -> None:
    """torch's error where ``input`` does not broadcast to the product's shape."""
    shape = tuple(input.shape)
    if len(shape) > len(target):
        raise RuntimeError(
            f"The expanded size of the tensor ({len(target)}) must be greater or equal to the "
            f"number of dimensions in the tensor ({len(shape)})"
        )
    lead = len(target) - len(shape)
    for i in reversed(range(len(shape))):  # torch reports the last mismatch first
        s, t = shape[i], target[lead + i]
        if s != t and s != 1:
            raise RuntimeError(
                f"The expanded size of the tensor ({t}) must match the existing size ({s}) at "
                f"non-singleton dimension {i + lead}.  Target sizes: {list(target)}.  Tensor "
                f"sizes: {list(shape)}"
            )


def _same_dtype(input: Tensor, mat2: Tensor) -> None:
    if input.dtype != mat2.dtype:
        raise RuntimeError(
            "self and mat2 must have the same dtype, but got "
            f"{scalar_name(input.dtype)} and {scalar_name(mat2.dtype)}"
        )


# ----- addmm, addbmm, baddbmm, addmv, addr, mv, ger -----
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)`` for matrices ``mat1`` (n x m), ``mat2`` (m x p).

    Example:
        >>> import asyncgrad as ag
        >>> ag.addmm(ag.ones(2, 2), ag.eye(2), ag.eye(2), beta=2.0).tolist()
        [[3.0, 2.0], [2.0, 3.0]]
    """
    for name, m in (("mat1", mat1), ("mat2", mat2)):
        if m.ndim != 2:
            raise RuntimeError(f"{name} must be a matrix, got {m.ndim}-D tensor")
    if mat1.dtype != mat2.dtype:
        raise RuntimeError(
            "mat1 and mat2 must have the same dtype, but got "
            f"{scalar_name(mat1.dtype)} and {scalar_name(mat2.dtype)}"
        )
    _same_dtype(input, mat2)
    if mat1.shape[1] != mat2.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_dims_str(mat1)} and {_dims_str(mat2)})"
        )
    return _scaled_sum(input, matmul(mat1, mat2), beta, alpha)


def _check_batches(input: Tensor, b1: Tensor, b2: Tensor) -> None:
    for name, t in (("batch1", b1), ("batch2", b2)):
        if t.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if b1.shape[0] != b2.shape[0]:
        raise RuntimeError(
            f"batch1 and batch2 must have same number of batches, got {b1.shape[0]} and "
            f"{b2.shape[0]}"
        )
    if b1.shape[2] != b2.shape[1]:
        raise RuntimeError(
            "Expected size for first two dimensions of batch2 tensor to be: "
            f"[{b1.shape[0]}, {b1.shape[2]}] but got: [{b2.shape[0]}, {b2.shape[1]}]."
        )
    if not input.dtype == b1.dtype == b2.dtype:
        raise RuntimeError(
            f"Input dtypes must be the same, got: input {_c_type(input.dtype)}, batch1: "
            f"{_c_type(b1.dtype)}, batch2: {_c_type(b2.dtype)}"
        )


def baddbmm(
    input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1
) -> Tensor:
    """``beta * input + alpha * bmm(batch1, batch2)``."""
    _check_batches(input, batch1, batch2)
    return _scaled_sum(input, matmul(batch1, batch2), beta, alpha)


def addbmm(
    input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1
) -> Tensor:
    """``beta * input + alpha * sum_i batch1[i] @ batch2[i]``."""
    _check_batches(input, batch1, batch2)
    return _scaled_sum(input, matmul(batch1, batch2).sum(0), beta, alpha)


def mv(input: Tensor, vec: Tensor) -> Tensor:
    """The product of matrix ``input`` (n x m) and vector ``vec`` (m)."""
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {input.ndim}, {vec.ndim}")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({input.shape[0]}), mat ({_dims_str(input)}), "
            f"vec ({vec.shape[0]})"
        )
    if input.dtype != vec.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_name(input.dtype)} but found {scalar_name(vec.dtype)}"
        )
    return matmul(input, vec)


def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * (mat @ vec)``."""
    if mat.ndim != 2 or vec.ndim != 1 or input.ndim > 1:
        raise RuntimeError(
            f"vector + matrix @ vector expected, got {input.ndim}, {mat.ndim}, {vec.ndim}"
        )
    bad_input = input.ndim == 1 and input.shape[0] not in (1, mat.shape[0])
    if mat.shape[1] != vec.shape[0] or bad_input:
        raise RuntimeError(
            f"size mismatch, got input ({input.shape[0] if input.ndim else 1}), mat "
            f"({_dims_str(mat)}), vec ({vec.shape[0]})"
        )
    if not input.dtype == mat.dtype == vec.dtype:
        raise RuntimeError(
            "addmv input tensors must have the same dtype, but got "
            f"{scalar_name(input.dtype)}, {scalar_name(mat.dtype)}, and {scalar_name(vec.dtype)}"
        )
    return _scaled_sum(input, mv(mat, vec), beta, alpha)


def addmv_(input: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return inplace_composite(input, lambda s: addmv(s, mat, vec, beta=beta, alpha=alpha))


def ger(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two vectors (``outer``'s old name)."""
    return outer(input, vec2)


def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * outer(vec1, vec2)``."""
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.ndim}-D")
    return _scaled_sum(input, outer(vec1, vec2), beta, alpha)


def inplace_composite(self: Tensor, compute: Any) -> Tensor:
    """The in-place form of a composite, as ``self.copy_(compute(self.clone()))``: the copy's
    backward routes the gradient of the new value through the composite to self's old value
    (also for a view, through CopySlices, whose op must read self first)."""
    from ..graph.grad_mode import _grad_enabled
    from .inplace import check_inplace, copy_

    if _grad_enabled.get():
        check_inplace(self)  # a leaf that requires grad: refused before any work, as torch
    return copy_(self, compute(self.clone()))


# ----- inner, vdot, kron, tensordot, chain_matmul, cross -----
def inner(input: Tensor, other: Tensor) -> Tensor:
    """The sums of products over the last dimensions: shape ``input.shape[:-1] +
    other.shape[:-1]`` (a product with a 0-d tensor is elementwise)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.dtype != other.dtype:
        raise RuntimeError("both inputs should have same dtype")
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(
            "inner() the last dimension must match on both input tensors but got shapes "
            f"{list(input.shape)} and {list(other.shape)}"
        )
    return tensordot(input, other, ([-1], [-1]))


def vdot(input: Tensor, other: Tensor) -> Tensor:
    """The dot product of two 1-D tensors (real tensors: ``dot``)."""
    return dot(input, other)


def kron(input: Tensor, other: Tensor) -> Tensor:
    """The Kronecker product: block ``(i, j, ...)`` of the result is ``input[i, j, ...] *
    other``."""
    nd = max(input.ndim, other.ndim)
    a = input.reshape((1,) * (nd - input.ndim) + tuple(input.shape))
    b = other.reshape((1,) * (nd - other.ndim) + tuple(other.shape))
    sa: list[int] = []
    sb: list[int] = []
    for x, y in zip(a.shape, b.shape, strict=True):
        sa += [x, 1]
        sb += [1, y]
    out = a.reshape(sa) * b.reshape(sb)
    return out.reshape([x * y for x, y in zip(a.shape, b.shape, strict=True)])


def _as_dims(d: Any) -> list[int]:
    if isinstance(d, Tensor):
        d = d.tolist()
    if isinstance(d, (int, backend.integer)):
        return [int(d)]
    return [int(x) for x in d]


def tensordot(a: Tensor, b: Tensor, dims: Any = 2, out: Any = None) -> Tensor:
    """The sum of products over ``dims``: an int n (a's last n dims with b's first n) or two
    lists of dims (``([1, 0], [0, 1])``)."""
    if out is not None:
        raise NotImplementedError("tensordot: out= is not supported")
    if isinstance(dims, Tensor) and dims.ndim == 0:
        dims = int(dims.item())
    if isinstance(dims, (int, backend.integer)):
        n = int(dims)
        if n < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={n}")
        if n > a.ndim or n > b.ndim:
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={n}")
        da, db = list(range(-n, 0)), list(range(n))
    else:
        if len(dims) != 2:
            raise RuntimeError("tensordot expects dims to be a pair of lists of dims")
        da, db = _as_dims(dims[0]), _as_dims(dims[1])
        if len(da) != len(db):
            raise RuntimeError("both dimension lists should have same length")
    if a.dtype != b.dtype:
        raise RuntimeError("both inputs should have same dtype")
    ra = [d % a.ndim if a.ndim else d for d in da]
    rb = [d % b.ndim if b.ndim else d for d in db]
    for x, y, ox, oy in zip(ra, rb, da, db, strict=True):
        # A contracted dim of size 1 broadcasts against the other's, as torch's: the sum over
        # that dim moves to the other operand.
        if a.shape[x] == 1 and b.shape[y] != 1:
            b = b.sum(y, keepdim=True)
        elif b.shape[y] == 1 and a.shape[x] != 1:
            a = a.sum(x, keepdim=True)
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[x]} in dim "
                f"{ox} and second has size {b.shape[y]} in dim {oy}"
            )
    fa = [d for d in range(a.ndim) if d not in ra]
    fb = [d for d in range(b.ndim) if d not in rb]
    k = math.prod(a.shape[d] for d in ra)
    am = a.permute(*fa, *ra).reshape(math.prod(a.shape[d] for d in fa), k)
    bm = b.permute(*rb, *fb).reshape(k, math.prod(b.shape[d] for d in fb))
    res = matmul(am, bm)
    return res.reshape([a.shape[d] for d in fa] + [b.shape[d] for d in fb])


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """The product of the matrices ``tensors`` (the first may be 1-D, a row, and the last, a
    column), multiplied in the order of fewest multiplications, as torch does."""
    ts = list(tensors)
    n = len(ts)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if ts[0].ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {ts[0].ndim}D")
    if ts[-1].ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {ts[-1].ndim}D")
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(-1)
    for i in range(1, n - 1):
        if ts[i].ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {ts[i].ndim}D")
    for i in range(n):
        if ts[i].dtype != ts[0].dtype:
            raise RuntimeError(
                f"multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                f"{_c_type(ts[0].dtype)} and tensor {i} {_c_type(ts[i].dtype)}"
            )
    for i in range(n - 1):
        if ts[i].shape[1] != ts[i + 1].shape[0]:
            raise RuntimeError(
                f"multi_dot(): tensors {i} and {i + 1} with shapes {list(ts[i].shape)} and "
                f"{list(ts[i + 1].shape)} cannot be multiplied"
            )
    res = _chain(ts)
    if first_vec:
        res = res.squeeze(0)
    if last_vec:
        res = res.squeeze(-1)
    return res


def _chain(ts: list[Tensor]) -> Tensor:
    """The matrix chain product in the order of fewest multiplications (the textbook dynamic
    programme over split points: a loop over the few matrices, not elements)."""
    n = len(ts)
    p = [ts[0].shape[0]] + [t.shape[1] for t in ts]
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            best = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1]
                if best is None or c < best:
                    best, split[i][j] = c, k
            cost[i][j] = best if best is not None else 0

    def go(i: int, j: int) -> Tensor:
        if i == j:
            return ts[i]
        k = split[i][j]
        return matmul(go(i, k), go(k + 1, j))

    return go(0, n - 1)


def chain_matmul(*matrices: Tensor, out: Any = None) -> Tensor:
    """The product of two-dimensional ``matrices`` (``linalg.multi_dot`` of 2-D tensors)."""
    if out is not None:
        raise NotImplementedError("chain_matmul: out= is not supported")
    _deprecated("chain_matmul")
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for t in matrices:
        if t.ndim != 2:
            raise RuntimeError(f"Tensor dimension is {t.ndim}, expected 2 instead.")
    if len(matrices) == 1:
        return matrices[0].clone()
    return multi_dot(matrices)


def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``dim``, the two inputs broadcast."""
    if input.ndim != other.ndim:
        raise RuntimeError(
            f"linalg.cross: inputs must have the same number of dimensions. Got {input.ndim} "
            f"and {other.ndim}"
        )
    nd = input.ndim
    if not -nd <= dim < nd:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})"
        )
    if input.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got "
            f"{input.shape[dim]} and {other.shape[dim]}"
        )
    if input.dtype != other.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_name(input.dtype)} but found {scalar_name(other.dtype)}"
        )
    d = dim % nd
    for i, (x, y) in enumerate(zip(input.shape, other.shape, strict=True)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(
                f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                f"non-singleton dimension {i}"
            )
    shape = backend.broadcast_shapes(
        tuple(s for i, s in enumerate(input.shape) if i != d),
        tuple(s for i, s in enumerate(other.shape) if i != d),
    )
    full = (*shape[:d], 3, *shape[d:])
    a0, a1, a2 = input.expand(full).unbind(d)
    b0, b1, b2 = other.expand(full).unbind(d)
    return stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


def cross(input: Tensor, other: Tensor, dim: int | None = None, *, out: Any = None) -> Tensor:
    """``linalg.cross`` along ``dim``; without ``dim`` (deprecated, as torch warns) the first
    dimension of size 3."""
    if out is not None:
        raise NotImplementedError("cross: out= is not supported")
    if dim is None:
        _deprecated("cross")
        shape = backend.broadcast_shapes(tuple(input.shape), tuple(other.shape))
        found = [i for i, s in enumerate(shape) if s == 3]
        if not found:
            raise RuntimeError("no dimension of size 3 in input")
        dim = found[0]
    return linalg_cross(input, other, dim=dim)


# ----- torch's top-level names of ag.linalg's functions -----
def det(input: Tensor) -> Tensor:
    """``linalg.det``."""
    return decomp.det(input)


def slogdet(input: Tensor) -> decomp.SlogdetResult:
    """``linalg.slogdet``: ``(sign, logabsdet)``."""
    return decomp.slogdet(input)


def logdet(input: Tensor) -> Tensor:
    """``log(det(input))``: NaN where the determinant is negative, -inf where it is 0."""
    sign, logabs = decomp.slogdet(input)
    return where(sign < 0, math.nan, logabs)


def inverse(input: Tensor) -> Tensor:
    """``linalg.inv``."""
    return decomp.inv(input)


def pinverse(input: Tensor, rcond: float = 1e-15) -> Tensor:
    """``linalg.pinv`` with singular values below ``rcond * s_max`` taken as zero."""
    return decomp.pinv(input, rtol=rcond)


def matrix_power(input: Tensor, n: int) -> Tensor:
    """``linalg.matrix_power``."""
    return decomp.matrix_power(input, n)


def matrix_exp(input: Tensor) -> Tensor:
    """``linalg.matrix_exp``."""
    return decomp.matrix_exp(input)


def cholesky(input: Tensor, upper: bool = False) -> Tensor:
    """``linalg.cholesky`` (torch's older name; ``upper`` is positional here)."""
    _deprecated("cholesky")
    return decomp.cholesky(input, upper=upper)


def cholesky_solve(B: Tensor, L: Tensor, upper: bool = False) -> Tensor:
    """The solution of ``A X = B`` from A's Cholesky factor ``L`` (``A = L L^T``; ``A = U^T
    U`` with ``upper``)."""
    if B.ndim < 2 or L.ndim < 2:
        raise RuntimeError(
            f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead"
            if B.ndim < 2
            else f"u should have at least 2 dimensions, but has {L.ndim} dimensions instead"
        )
    if L.dtype.kind != "f":
        raise NotImplementedError(
            f"\"cholesky_solve_cpu\" not implemented for '{scalar_name(L.dtype)}'"
        )
    if B.dtype != L.dtype:
        raise RuntimeError(
            f"Expected b and A to have the same dtype, but found b of type "
            f"{scalar_name(B.dtype)} and A of type {scalar_name(L.dtype)} instead."
        )
    # The value reads L's triangle only, but torch's gradient is that of (L L^T)^-1 B for the
    # whole of L (cholesky_solve_backward): the other triangle joins with its value detached.
    tri = L.triu() if upper else L.tril()
    factor = L - (L - tri).detach()
    if upper:  # A = U^T U: X = U^-1 U^-T B
        return decomp._solve_matrix(factor, decomp._solve_matrix(factor.mT, B))
    return decomp._solve_matrix(factor.mT, decomp._solve_matrix(factor, B))


def cholesky_inverse(L: Tensor, upper: bool = False) -> Tensor:
    """The inverse of ``A = L L^T`` (``U^T U`` with ``upper``) from its Cholesky factor."""
    if L.ndim < 2 or L.shape[-1] != L.shape[-2]:
        raise RuntimeError(
            "cholesky_inverse: The input tensor A must have at least 2 dimensions."
            if L.ndim < 2
            else "cholesky_inverse: A must be batches of square matrices, but they are "
            f"{L.shape[-2]} by {L.shape[-1]} matrices"
        )
    if L.dtype.kind != "f":
        raise NotImplementedError(
            f"\"cholesky_inverse_out_cpu\" not implemented for '{scalar_name(L.dtype)}'"
        )
    n = L.shape[-1]
    ident = Tensor._wrap(backend.eye(n, None, L.dtype, L.device)).expand(*L.shape[:-2], n, n)
    return cholesky_solve(ident, L, upper)


class QR(NamedTuple):
    Q: Tensor
    R: Tensor


def qr(input: Tensor, some: bool = True) -> QR:
    """``linalg.qr`` in mode "reduced" (``some``) or "complete"."""
    _deprecated("qr")
    q, r = decomp.qr(input, "reduced" if some else "complete")
    return QR(q, r)


class SVD(NamedTuple):
    U: Tensor
    S: Tensor
    V: Tensor


def svd(input: Tensor, some: bool = True, compute_uv: bool = True) -> SVD:
    """``(U, S, V)`` with ``input = U diag(S) V^T`` (V, not Vh); reduced where ``some``;
    without ``compute_uv``, U and V are zeros (m x m, n x n) and S is still differentiable."""
    if not compute_uv:
        m, n = input.shape[-2], input.shape[-1]
        batch = tuple(input.shape[:-2])
        s = decomp.svdvals(input)
        u = zeros(*batch, m, m, dtype=input.dtype, device=input.device)
        v = zeros(*batch, n, n, dtype=input.dtype, device=input.device)
        return SVD(u, s, v)
    u, s, vh = decomp.svd(input, full_matrices=not some)
    return SVD(u, s, vh.mT)


class TriangularSolve(NamedTuple):
    solution: Tensor
    cloned_coefficient: Tensor


def triangular_solve(
    b: Tensor, A: Tensor, upper: bool = True, transpose: bool = False, unitriangular: bool = False
) -> TriangularSolve:
    """``(X, A)`` with ``X`` solving ``A X = b`` (``A^T X = b`` with ``transpose``) for
    triangular ``A``; both broadcast to their common batch shape."""
    _deprecated("triangular_solve")
    if b.ndim < 2 or A.ndim < 2:
        raise RuntimeError(
            "torch.triangular_solve: Expected b to have at least 2 dimensions, but it has "
            f"{b.ndim} dimensions instead"
            if b.ndim < 2
            else "torch.triangular_solve: Expected A to have at least 2 dimensions, but it has "
            f"{A.ndim} dimensions instead"
        )
    batch = backend.broadcast_shapes(tuple(b.shape[:-2]), tuple(A.shape[:-2]))
    Ab = A.expand(*batch, *A.shape[-2:])
    bb = b.expand(*batch, *b.shape[-2:])
    coef = Ab.mT if transpose else Ab
    x = decomp.solve_triangular(coef, bb, upper=upper != transpose, unitriangular=unitriangular)
    return TriangularSolve(x, Ab.clone())


class LU(NamedTuple):
    LU: Tensor
    pivots: Tensor


class LUInfos(NamedTuple):
    LU: Tensor
    pivots: Tensor
    infos: Tensor


def lu(A: Tensor, pivot: bool = True, get_infos: bool = False) -> Any:
    """``(A_LU, pivots)`` (and ``infos`` with ``get_infos``): ``linalg.lu_factor_ex``."""
    _deprecated("lu")
    res = decomp.lu_factor_ex(A, pivot=pivot)
    if get_infos:
        return LUInfos(res.LU, res.pivots, res.info)
    return LU(res.LU, res.pivots)


def lu_solve(b: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:
    """``linalg.lu_solve(LU_data, LU_pivots, b)``."""
    _deprecated("lu_solve")
    return decomp.lu_solve(LU_data, LU_pivots, b)


def lu_unpack(
    LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True, unpack_pivots: bool = True
) -> decomp.LUResult:
    """``(P, L, U)`` from the packed factorisation of ``lu``."""
    return decomp.lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


class Geqrf(NamedTuple):
    a: Tensor
    tau: Tensor


def geqrf(input: Tensor) -> Geqrf:
    """LAPACK's geqrf: R on and above the diagonal of ``a``, the Householder vectors below it,
    and their scales ``tau`` (not differentiable, as torch's)."""
    a = input._array
    if a.ndim < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if a.dtype.kind != "f" or a.dtype == dtypes.float16:
        raise RuntimeError(f"\"geqrf_cpu\" not implemented for '{scalar_name(a.dtype)}'")
    xp = backend.namespace(a)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if a.size == 0:
        h_all = xp.zeros(a.shape, a.dtype)
        t_all = xp.zeros((*a.shape[:-2], k), a.dtype)
    else:
        flat = a.reshape(math.prod(a.shape[:-2]), m, n)
        try:  # NumPy's raw QR (LAPACK's geqrf) takes a batch; Fortran order: h transposed
            h, tau = xp.linalg.qr(flat, mode="raw")
            hs = xp.swapaxes(h, -1, -2)
        except (ValueError, TypeError, NotImplementedError):  # one matrix at a time
            pairs = [xp.linalg.qr(flat[i], mode="raw") for i in range(flat.shape[0])]
            hs = xp.stack([p[0].T for p in pairs])
            tau = xp.stack([p[1] for p in pairs])
        h_all = hs.reshape(a.shape).astype(a.dtype)
        t_all = tau.reshape(*a.shape[:-2], k).astype(a.dtype)
    return Geqrf(Tensor._wrap(xp.ascontiguousarray(h_all)), Tensor._wrap(t_all))


def orgqr(input: Tensor, tau: Tensor) -> Tensor:
    """``linalg.householder_product``."""
    return decomp.householder_product(input, tau)


def ormqr(
    input: Tensor, tau: Tensor, other: Tensor, left: bool = True, transpose: bool = False
) -> Tensor:
    """``Q other`` (``Q^T other`` with ``transpose``; ``other Q`` with ``left=False``) for the
    Q of geqrf's Householder vectors ``input`` and scales ``tau``."""
    if input.ndim < 2 or other.ndim < 2:
        raise RuntimeError("torch.ormqr: input and other must have at least 2 dimensions.")
    size = other.shape[-2] if left else other.shape[-1]
    if input.shape[-2] != size:
        raise RuntimeError(
            f"torch.ormqr: other.shape[{-2 if left else -1}] must be equal to input.shape[-2]"
        )
    if tau.shape[-1] > min(size, input.shape[-1]):
        raise RuntimeError(
            "torch.ormqr: tau.shape[-1] must be equal to min(other.shape[-2], input.shape[-1])"
        )
    return decomp.apply_reflectors(input, tau, other, left=left, transpose=transpose)


def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:
    """The Vandermonde matrix of the 1-D ``x``: columns ``x**(N-1), ..., x**0`` (increasing
    powers with ``increasing``)."""
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    if N is not None and N < 0:
        raise RuntimeError("N must be non-negative.")
    if x.dtype == dtypes.bool_:
        x = x.to(dtypes.int64)
    v = decomp.powers(x, N if N is not None else x.shape[0])
    return v if increasing else v.flip(-1)


# ----- window functions -----
def _window(
    name: str,
    window_length: int,
    periodic: bool,
    dtype: Any,
    device: Any,
    requires_grad: bool,
    fn: Any,
) -> Tensor:
    """A window of ``window_length`` points from ``fn(n, N)`` (the sample positions n and the
    denominator N: N - 1 points, or N for a periodic window)."""
    from .creation import _finish

    dt = dtypes.get_default_dtype() if dtype is None else dtypes.to_dtype(dtype)
    if dt.kind != "f":
        raise RuntimeError(f"{name} expects floating point dtypes, got: {scalar_name(dt)}")
    if window_length < 0:
        raise RuntimeError(
            f"{name} requires non-negative window_length, got window_length={window_length}"
        )
    if window_length == 0:
        return _finish(backend.empty((0,), dt), device, requires_grad)
    if window_length == 1:
        return _finish(backend.ones((1,), dt), device, requires_grad)
    # computed on the host in float64 (a window is small), then moved and cast
    length = window_length + 1 if periodic else window_length
    pos = backend.arange(0, length, 1, dtypes.float64)
    out = fn(backend.namespace(pos), pos, length - 1)[:window_length]
    return _finish(out.astype(dt), device, requires_grad)


def _cosine_window(*coeffs: float) -> Any:
    def fn(xp: Any, n: Any, big_n: int) -> Any:
        out = xp.zeros_like(n)
        for k, c in enumerate(coeffs):
            out = out + ((-1) ** k) * c * xp.cos(2 * math.pi * k * n / big_n)
        return out

    return fn


def hann_window(
    window_length: int,
    periodic: bool = True,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The Hann window ``0.5 - 0.5 cos(2 pi n / (N - 1))``."""
    return _window(
        "hann_window",
        window_length,
        periodic,
        dtype,
        device,
        requires_grad,
        _cosine_window(0.5, 0.5),
    )


def hamming_window(
    window_length: int,
    periodic: bool = True,
    alpha: float = 0.54,
    beta: float = 0.46,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The Hamming window ``alpha - beta cos(2 pi n / (N - 1))``."""
    return _window(
        "hamming_window",
        window_length,
        periodic,
        dtype,
        device,
        requires_grad,
        _cosine_window(alpha, beta),
    )


def blackman_window(
    window_length: int,
    periodic: bool = True,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The Blackman window ``0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1))``."""
    return _window(
        "blackman_window",
        window_length,
        periodic,
        dtype,
        device,
        requires_grad,
        _cosine_window(0.42, 0.5, 0.08),
    )


def bartlett_window(
    window_length: int,
    periodic: bool = True,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The triangular Bartlett window ``1 - |2 n / (N - 1) - 1|``."""
    return _window(
        "bartlett_window",
        window_length,
        periodic,
        dtype,
        device,
        requires_grad,
        lambda xp, n, big_n: 1 - xp.abs(2 * n / big_n - 1),
    )


def kaiser_window(
    window_length: int,
    periodic: bool = True,
    beta: float = 12.0,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The Kaiser window ``I0(beta sqrt(1 - (2 n / (N - 1) - 1)^2)) / I0(beta)``."""
    return _window(
        "kaiser_window",
        window_length,
        periodic,
        dtype,
        device,
        requires_grad,
        lambda xp, n, big_n: (
            xp.i0(beta * xp.sqrt(xp.clip(1 - (2 * n / big_n - 1) ** 2, 0, None)))
            / xp.i0(xp.asarray(beta, dtype=n.dtype))
        ),
    )


# ----- the in-place forms (Tensor methods only, as torch has no torch.addmm_) -----
def addmm_(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return inplace_composite(input, lambda s: addmm(s, mat1, mat2, beta=beta, alpha=alpha))


def addbmm_(
    input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1
) -> Tensor:
    return inplace_composite(input, lambda s: addbmm(s, batch1, batch2, beta=beta, alpha=alpha))


def baddbmm_(
    input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1
) -> Tensor:
    return inplace_composite(input, lambda s: baddbmm(s, batch1, batch2, beta=beta, alpha=alpha))


def addr_(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return inplace_composite(input, lambda s: addr(s, vec1, vec2, beta=beta, alpha=alpha))


# torch keeps these Tensor methods to say where their replacements are
_REMOVED = "This function was deprecated since version 1.9 and is now removed. "
REMOVED_MESSAGES = {
    "lstsq": _REMOVED
    + "`torch.lstsq` is deprecated in favor of `torch.linalg.lstsq`.\n`torch.linalg.lstsq` has "
    "reversed arguments and does not return the QR decomposition in the returned tuple "
    "(although it returns other information about the problem).\n\nTo get the QR "
    "decomposition consider using `torch.linalg.qr`.\n\nThe returned solution in "
    "`torch.lstsq` stored the residuals of the solution in the last m - n columns of the "
    "returned value whenever m > n. In torch.linalg.lstsq, the residuals are in the field "
    "'residuals' of the returned named tuple.\n\nThe unpacking of the solution, as in\nX, _ = "
    "torch.lstsq(B, A).solution[:A.size(1)]\nshould be replaced with:\nX = "
    "torch.linalg.lstsq(A, B).solution",
    "eig": _REMOVED
    + "`torch.linalg.eig` returns complex tensors of dtype `cfloat` or `cdouble` rather than "
    "real tensors mimicking complex tensors.\n\nL, _ = torch.eig(A) should be replaced "
    "with:\nL_complex = torch.linalg.eigvals(A)\n\nand\n\nL, V = torch.eig(A, "
    "eigenvectors=True) should be replaced with:\nL_complex, V_complex = torch.linalg.eig(A)",
    "symeig": _REMOVED
    + "The default behavior has changed from using the upper triangular portion of the matrix "
    "by default to using the lower triangular portion.\n\nL, _ = torch.symeig(A, upper=upper) "
    "should be replaced with:\nL = torch.linalg.eigvalsh(A, UPLO='U' if upper else "
    "'L')\n\nand\n\nL, V = torch.symeig(A, eigenvectors=True) should be replaced with:\nL, V = "
    "torch.linalg.eigh(A, UPLO='U' if upper else 'L')",
    "solve": _REMOVED
    + "`torch.solve` is deprecated in favor of `torch.linalg.solve`. `torch.linalg.solve` has "
    "its arguments reversed and does not return the LU factorization.\n\nTo get the LU "
    "factorization see `torch.lu`, which can be used with `torch.lu_solve` or "
    "`torch.lu_unpack`.\nX = torch.solve(B, A).solution should be replaced with:\nX = "
    "torch.linalg.solve(A, B)",
}


def removed(name: str) -> RuntimeError:
    return RuntimeError(REMOVED_MESSAGES[name])
