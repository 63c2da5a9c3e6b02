"""The derivative rules of ops/statistics.py."""

from __future__ import annotations

__all__: list[str] = []
