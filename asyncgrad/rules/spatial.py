"""The derivative rules of the convolution, pooling, padding and upsampling ops."""

from __future__ import annotations

__all__: list[str] = []
