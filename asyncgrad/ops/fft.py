"""The discrete Fourier transforms of ``ag.fft``."""

from __future__ import annotations

__all__: list[str] = []
