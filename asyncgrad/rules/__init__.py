"""The derivative rules: THE table of vector-Jacobian products, its registry and formulas."""

from __future__ import annotations

from .derivatives import OPS, FunctionNode, OpDef, defvjp, pow_scalar, sum_to

__all__ = ["OPS", "FunctionNode", "OpDef", "defvjp", "pow_scalar", "sum_to"]
