"""Convolution, pooling, padding, upsampling and patch modules."""

from __future__ import annotations

__all__: list[str] = []
