"""``ag.utils``: tools above the model layer."""

from __future__ import annotations

from .checkpoint import checkpoint

__all__ = ["checkpoint"]
