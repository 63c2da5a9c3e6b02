"""The derivative rules of the activation, loss and layer ops of ag.nn.functional."""

from __future__ import annotations

__all__: list[str] = []
