"""``ag.backends.openmp``: asyncgrad does not use OpenMP, so ``is_available()`` is False, as
torch's on a machine without it."""

from __future__ import annotations

__all__ = ["is_available"]


def is_available() -> bool:
    return False
