"""The derivative rules of the shape, view and indexing ops added in ops/views.py."""

from __future__ import annotations

__all__: list[str] = []
