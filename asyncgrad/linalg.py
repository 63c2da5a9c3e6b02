"""``ag.linalg``: torch.linalg's functions on real tensors (norms, inverse, solves,
determinants, the decompositions with LU, LDL^T and Householder, pinv, matrix_exp, lstsq, ...),
each batched over leading dimensions and differentiable with torch's gradients where torch's
are (See NOTE [linalg results] in asyncgrad/ops/decomp.py). ``eig`` and ``eigvals`` raise
NotImplementedError: their results are complex.

Example:
    >>> import asyncgrad as ag
    >>> A = ag.tensor([[2.0, 0.0], [0.0, 4.0]], requires_grad=True)
    >>> ag.linalg.det(A).item(), ag.linalg.inv(A).tolist()
    (8.0, [[0.5, 0.0], [0.0, 0.25]])
"""

from __future__ import annotations

from .ops.decomp import (
    CholeskyExResult,
    EighResult,
    InvExResult,
    LDLFactorExResult,
    LDLFactorResult,
    LinAlgError,
    LstsqResult,
    LUFactorExResult,
    LUFactorResult,
    LUResult,
    QRResult,
    SlogdetResult,
    SolveExResult,
    SVDResult,
    cholesky,
    cholesky_ex,
    cond,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    householder_product,
    inv,
    inv_ex,
    ldl_factor,
    ldl_factor_ex,
    ldl_solve,
    lstsq,
    lu,
    lu_factor,
    lu_factor_ex,
    lu_solve,
    matrix_exp,
    matrix_norm,
    matrix_power,
    matrix_rank,
    norm,
    pinv,
    qr,
    slogdet,
    solve,
    solve_ex,
    solve_triangular,
    svd,
    svdvals,
    tensorinv,
    tensorsolve,
    vecdot,
    vector_norm,
)
from .ops.decomp import linalg_diagonal as diagonal
from .ops.decomp import linalg_vander as vander
from .ops.linalg import matmul
from .ops.matrix import linalg_cross as cross
from .ops.matrix import multi_dot

__all__ = [
    "CholeskyExResult",
    "EighResult",
    "InvExResult",
    "LDLFactorExResult",
    "LDLFactorResult",
    "LUFactorExResult",
    "LUFactorResult",
    "LUResult",
    "LinAlgError",
    "LstsqResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "SolveExResult",
    "cholesky",
    "cholesky_ex",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "householder_product",
    "inv",
    "inv_ex",
    "ldl_factor",
    "ldl_factor_ex",
    "ldl_solve",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "matmul",
    "matrix_exp",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_ex",
    "solve_triangular",
    "svd",
    "svdvals",
    "tensorinv",
    "tensorsolve",
    "vander",
    "vecdot",
    "vector_norm",
]

# See NOTE [Ops run on their operands' device] in asyncgrad/ops/device_guard.py.
from .ops.device_guard import guard_module as _guard_module

_guard_module(__name__)
