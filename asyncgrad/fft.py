"""``ag.fft``: torch.fft's transforms."""

from __future__ import annotations

__all__: list[str] = []
