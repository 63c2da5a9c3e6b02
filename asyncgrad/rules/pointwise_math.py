"""The derivative rules of ops/pointwise_math.py."""

from __future__ import annotations

__all__: list[str] = []
