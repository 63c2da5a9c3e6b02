"""Elementwise math beyond pointwise.py: inverse trig, hyperbolic, rounding, bitwise, logical,
and the special functions."""

from __future__ import annotations

__all__: list[str] = []
