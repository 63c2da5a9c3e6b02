"""The derivative rules: THE table of vector-Jacobian products (``table.py``), its registry
(``registry.py``) and the named formulas (``formulas.py``)."""

from __future__ import annotations

from . import table
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
