"""``ag.backends.mps``: asyncgrad does not use MPS (Apple's Metal), so
``is_available()`` is False, as torch's on a machine without it."""

from __future__ import annotations

__all__ = ["is_available"]


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False


__all__ += ["is_built"]
