"""Activation functions of ``ag.nn.functional``."""

from __future__ import annotations

__all__: list[str] = []
