"""Functions of ``ag.nn.functional`` behind the recurrent, transformer, normalization and
other layers."""

from __future__ import annotations

__all__: list[str] = []
