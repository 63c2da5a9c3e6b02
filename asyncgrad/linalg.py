"""``ag.linalg``: torch.linalg's norms, inverse, solve, determinants and decompositions, each
batched over leading dimensions and differentiable with torch's gradients (See NOTE [linalg
results] in asyncgrad/ops/decomp.py).

Example:
    >>> import asyncgrad as ag
    >>> A = ag.tensor([[2.0, 0.0], [0.0, 4.0]], requires_grad=True)
    >>> ag.linalg.det(A).item(), ag.linalg.inv(A).tolist()
    (8.0, [[0.5, 0.0], [0.0, 0.25]])
"""

from __future__ import annotations

from .ops.decomp import (
    EighResult,
    LinAlgError,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    det,
    eigh,
    eigvalsh,
    inv,
    matrix_norm,
    norm,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
    vector_norm,
)

__all__ = [
    "EighResult",
    "LinAlgError",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "det",
    "eigh",
    "eigvalsh",
    "inv",
    "matrix_norm",
    "norm",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "vector_norm",
]

# See NOTE [Ops run on their operands' device] in asyncgrad/ops/device_guard.py.
from .ops.device_guard import guard_module as _guard_module

_guard_module(__name__)
