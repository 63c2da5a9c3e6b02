"""The derivative rules: THE table of vector-Jacobian products (``table.py``), its registry
(``registry.py``) and the named formulas (``formulas.py``)."""

from __future__ import annotations

# Each rule module registers its ops' rules when imported.
from . import matrix, nn_ops, pointwise_math, shape_index, spatial, statistics, table  # noqa: F401
from .formulas import pow_scalar
from .registry import OPS, SAVES_NO_TENSOR, FunctionNode, OpDef, defvjp, keeps_for_backward, sum_to

__all__ = [
    "OPS",
    "SAVES_NO_TENSOR",
    "FunctionNode",
    "OpDef",
    "defvjp",
    "keeps_for_backward",
    "pow_scalar",
    "sum_to",
    "table",
]
