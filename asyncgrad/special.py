"""``ag.special``: torch.special's functions."""

from __future__ import annotations

__all__: list[str] = []
