"""torch's other shape, view, join and scatter functions."""

from __future__ import annotations

__all__: list[str] = []
