"""Loss modules."""

from __future__ import annotations

__all__: list[str] = []
