"""The derivative rules of ops/matrix.py and ops/fft.py."""

from __future__ import annotations

__all__: list[str] = []
