"""Other layers: bilinear, embedding bags, distances, lazy modules, ..."""

from __future__ import annotations

__all__: list[str] = []
