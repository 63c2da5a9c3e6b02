"""The derivative rules: THE table of vector-Jacobian products (``table.py``), its registry
(``registry.py``) and the named formulas (``formulas.py``)."""

from __future__ import annotations

from . import table
from .formulas import pow_scalar
from .registry import OPS, FunctionNode, OpDef, defvjp, sum_to

__all__ = ["OPS", "FunctionNode", "OpDef", "defvjp", "pow_scalar", "sum_to", "table"]
